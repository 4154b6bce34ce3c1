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
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["handle_lock", "off_loop"]

T = TypeVar("T")

WORKERS = min(32, (os.cpu_count() or 1) + 4)
"""Worker threads of the integrations (as many as asyncio's default executor has)."""

_EXECUTORS: list[ThreadPoolExecutor] = []
_NEXT = itertools.count()
_PLACES: weakref.WeakKeyDictionary[Any, tuple[threading.RLock, int]] = (
    weakref.WeakKeyDictionary())
_GUARD = threading.Lock()


def _place(handle: Any) -> tuple[threading.RLock, ThreadPoolExecutor]:
    """`handle`'s lock and its worker (both made on first use, dropped with the handle)."""
    with _GUARD:
        found = _PLACES.get(handle)
        if found is None:
            found = _PLACES[handle] = (threading.RLock(), next(_NEXT) % WORKERS)
        if not _EXECUTORS:
            _EXECUTORS.extend(ThreadPoolExecutor(1, thread_name_prefix=f"rewind-io-{i}")
                              for i in range(WORKERS))
        return found[0], _EXECUTORS[found[1]]


def _forget_after_fork() -> None:
    # a forked child has none of the parent's threads, and a lock held in one stays held
    global _PLACES
    _EXECUTORS.clear()
    _PLACES = weakref.WeakKeyDictionary()


os.register_at_fork(after_in_child=_forget_after_fork)


def handle_lock(handle: Any) -> threading.RLock:
    """The lock serialising the thread work on `handle`."""
    return _place(handle)[0]


async def off_loop(handle: Any, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on `handle`'s worker thread, holding `handle`'s lock; its result or its
    exception. A handle keeps one worker (handles are spread over `WORKERS` threads): its
    calls reuse that thread's store connection and, on SQLite, its page cache, which a thread
    picked at random per call would read again.

    Raises:
        asyncio.CancelledError: the caller was cancelled (raised once the thread finished).
    """
    lock, executor = _place(handle)

    def locked() -> T:
        with lock:
            return fn(*args)

    running = executor.submit(contextvars.copy_context().run, locked)
    try:
        return await asyncio.wrap_future(running)
    except asyncio.CancelledError:
        while not running.done():  # it began: let it finish before the cancellation goes on
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wrap_future(running)
        raise
