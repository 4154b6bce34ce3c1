"""Store work of an integration's ``async`` methods, run off the event loop.

Agent platforms serve many conversations from one event loop (FastAPI, LangGraph's server, the
Agents SDK's `Runner`); a store call made inline stops every one of them for its duration. The
integrations therefore run their store work in a worker thread (`asyncio.to_thread`, as the
Agents SDK's own `SQLiteSession` does) through `off_loop`:

- one call at a time per handle: the calls on one `Session` handle (or one store object) hold its
  lock, since a handle keeps the loop detector's state of its session in memory and two steps
  ending at once in two threads must not interleave there (on the loop they could not);
- a cancelled caller waits for its thread to finish before the cancellation goes on, so nothing
  runs on a handle after its caller moved on (a begun step is never left behind unseen).
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["handle_lock", "off_loop"]

T = TypeVar("T")

_LOCKS: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def handle_lock(handle: Any) -> threading.RLock:
    """The lock serialising the thread work on `handle` (created on first use, dropped with the
    handle)."""
    with _LOCKS_GUARD:
        lock = _LOCKS.get(handle)
        if lock is None:
            lock = _LOCKS[handle] = threading.RLock()
        return lock


async def off_loop(handle: Any, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a worker thread holding `handle`'s lock; its result or its exception.

    Raises:
        asyncio.CancelledError: the caller was cancelled (raised once the thread finished).
    """
    lock = handle_lock(handle)

    def locked() -> T:
        with lock:
            return fn(*args)

    future = asyncio.ensure_future(asyncio.to_thread(locked))
    cancelled: asyncio.CancelledError | None = None
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError as exc:
            if future.cancelled():  # pragma: no cover - the shielded future is never cancelled
                raise
            cancelled = cancelled or exc
        except BaseException:  # noqa: BLE001 - fn's own error: read from the future below
            break
    if cancelled is not None:
        raise cancelled
    return future.result()
