"""Store work of an integration's ``async`` methods, run off the event loop.

Agent platforms serve many conversations from one event loop (FastAPI, LangGraph's server, the
Agents SDK's `Runner`); a store call made inline stops every one of them for its duration. The
integrations therefore run their store work in a worker thread (as the Agents SDK's own
`SQLiteSession` does with `asyncio.to_thread`) through `off_loop`:

- one call at a time per handle, on one worker thread per handle: the calls on one `Session`
  handle (or one store object) hold its lock, since a handle keeps the loop detector's state of
  its session in memory and two steps ending at once in two threads must not interleave there
  (on the loop they could not); and the same thread keeps the same store connection;
- a cancelled caller waits for its thread to finish before the cancellation goes on, so nothing
  runs on a handle after its caller moved on (a begun step is never left behind unseen).

A call is handed to its worker through a plain queue and its result back to the loop with one
``call_soon_threadsafe``: an executor's future, work item and idle semaphore, and the chaining
of a concurrent future to an asyncio one, were a quarter of the cost of a small read.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["handle_lock", "off_loop"]

T = TypeVar("T")

WORKERS = min(32, (os.cpu_count() or 1) + 4)
"""Worker threads of the integrations (as many as asyncio's default executor has)."""

_WORKERS: list[_Worker | None] = []
_NEXT = itertools.count()
_PLACES: weakref.WeakKeyDictionary[Any, tuple[threading.RLock, int]] = (
    weakref.WeakKeyDictionary())
_GUARD = threading.Lock()


class _Call(Generic[T]):
    """One call handed to a worker: run there, its outcome handed back on the caller's loop."""

    __slots__ = ("args", "context", "done", "error", "fn", "lock", "loop", "result", "waiter")

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...], lock: threading.RLock,
                 loop: asyncio.AbstractEventLoop):
        self.fn, self.args, self.lock, self.loop = fn, args, lock, loop
        self.context = contextvars.copy_context()
        self.waiter: asyncio.Future[Any] = loop.create_future()
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        """Set on the loop's thread once the call finished in its worker."""

    def run(self) -> None:
        """In the worker: the call, holding its handle's lock; then its outcome to the loop."""
        try:
            with self.lock:
                self.result = self.context.run(self.fn, *self.args)
        except BaseException as exc:  # handed to the caller, as an executor does
            self.error = exc
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            self.loop.call_soon_threadsafe(self._finished)
        del self  # an error's traceback keeps this frame: it must not hold the call (a cycle)

    def _finished(self) -> None:
        self.done = True
        waiter = self.waiter
        if waiter.done():  # the caller was cancelled and does not wait for the outcome
            return
        if self.error is not None:
            waiter.set_exception(self.error)
        else:
            waiter.set_result(self.result)


class _Worker:
    """A thread running the calls queued to it, one after the other."""

    def __init__(self, index: int):
        self.calls: queue.SimpleQueue[_Call[Any]] = queue.SimpleQueue()
        # a daemon: an idle worker must not hold the interpreter's exit (an executor's threads
        # are joined at exit instead); a store write cut by the exit is rolled back by its store
        threading.Thread(target=self._serve, name=f"rewind-io-{index}", daemon=True).start()

    def _serve(self) -> None:
        take = self.calls.get
        while True:
            call = take()
            call.run()
            del call  # drop the finished call (its result) before waiting for the next


def _place(handle: Any) -> tuple[threading.RLock, _Worker]:
    """`handle`'s lock and its worker (both made on first use, the pair dropped with the
    handle)."""
    with _GUARD:
        found = _PLACES.get(handle)
        if found is None:
            found = _PLACES[handle] = (threading.RLock(), next(_NEXT) % WORKERS)
        if not _WORKERS:
            _WORKERS.extend([None] * WORKERS)
        worker = _WORKERS[found[1]]
        if worker is None:
            worker = _WORKERS[found[1]] = _Worker(found[1])
        return found[0], worker


def _forget_after_fork() -> None:
    # a forked child has none of the parent's threads, and a lock held in one stays held
    global _PLACES
    _WORKERS.clear()
    _PLACES = weakref.WeakKeyDictionary()


os.register_at_fork(after_in_child=_forget_after_fork)


def handle_lock(handle: Any) -> threading.RLock:
    """The lock serialising the thread work on `handle`."""
    return _place(handle)[0]


async def off_loop(handle: Any, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on `handle`'s worker thread, holding `handle`'s lock, in a copy of the
    caller's context; its result or its exception. A handle keeps one worker (handles are
    spread over `WORKERS` threads): its calls reuse that thread's store connection and, on
    SQLite, its page cache, which a thread picked at random per call would read again.

    Raises:
        asyncio.CancelledError: the caller was cancelled (raised once the thread finished).
    """
    lock, worker = _place(handle)
    call = _Call(fn, args, lock, asyncio.get_running_loop())
    worker.calls.put(call)
    try:
        return await call.waiter
    except asyncio.CancelledError:
        while not call.done:  # it began or is queued: let it finish before the cancellation
            call.waiter = call.loop.create_future()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await call.waiter
        raise
