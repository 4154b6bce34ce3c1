"""The fleet outbox of Redis Cluster: how fleet views catch up with session writes.

On Redis Cluster the fleet keys (indexes, feed, audit, compensation outbox) live in another slot
than a session's keys, so no script can change both. A session script appends the change of
fleet views to the session's own outbox list, atomically with the change, and returns the
session's backlog; `FleetOutbox.apply` runs ``fleet_apply`` on it. Applying an entry twice is a
no-op (the fleet keeps, per session, the mark of the last entry applied), so any later writer of
the session, or `engine.store.redis.doctor.rebuild_indexes`, finishes what a killed client left.

`FleetOutbox` remembers, per session, the newest entry this process applied, so the next session
script can drop it from the outbox list (the ``c<incarnation>:<acked>`` mode); `OutboxFlusher`
applies the high-frequency entries off the caller's path, in batches, on a background thread.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from engine.store.redis import keys

log = logging.getLogger("rewind.redis")

APPLY_BATCH = 200
"""Outbox entries sent in one ``fleet_apply`` call."""

OutboxRow = tuple[str, str, str]
"""What applying one entry returns: session id, ``<incarnation>:<seq>`` mark, compensation ids
(comma-separated)."""


class FleetOutbox:
    """Applies outbox entries and remembers, per session, the newest one applied."""

    def __init__(self, events_maxlen: int, session_events_maxlen: int) -> None:
        self._maxlens = [events_maxlen, session_events_maxlen]
        self._acks: dict[str, tuple[str, int]] = {}
        self._lock = threading.Lock()

    def mode(self, enc: str) -> str:
        """The session script mode: ``c<incarnation>:<acked>``, or ``c`` before any ack."""
        with self._lock:
            ack = self._acks.get(enc)
        return f"c{ack[0]}:{ack[1]}" if ack else "c"

    def apply(
        self, entries: Iterable[str], run: Callable[[list[Any]], list[str]]
    ) -> list[OutboxRow]:
        """Apply `entries` (idempotent) with `run`, which calls ``fleet_apply`` with its args."""
        unique = list(dict.fromkeys(entries))
        rows: list[OutboxRow] = []
        for start in range(0, len(unique), APPLY_BATCH):
            flat = run([*self._maxlens, *unique[start : start + APPLY_BATCH]])
            rows += [(flat[i], flat[i + 1], flat[i + 2]) for i in range(0, len(flat), 3)]
        with self._lock:
            for sid, mark, _ in rows:
                inc, _, q = mark.rpartition(":")
                enc = keys.encode(sid)
                old = self._acks.get(enc)
                if old is None or old[0] < inc or (old[0] == inc and old[1] < int(q)):
                    self._acks[enc] = (inc, int(q))
            if len(self._acks) > 100_000:
                self._acks.clear()
        return rows


class _Applier(Protocol):
    def apply_outbox(self, entries: Iterable[str]) -> list[OutboxRow]: ...


class OutboxFlusher:
    """Applies fleet-view changes of Redis Cluster writes off the caller's path, in batches.

    The changes are already durable in each session's outbox list; this thread only makes the
    fleet views (indexes, feed, audit) catch up within milliseconds. A process killed before it
    flushed leaves the entries in the outbox, applied by the session's next writer or by
    `rebuild_indexes`. The thread holds the fleet views weakly, so it never keeps a store alive.
    """

    def __init__(self, views: _Applier) -> None:
        self._views = weakref.proxy(views)
        self._cond = threading.Condition()
        self._pending: list[str] = []
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        atexit.register(self._at_exit, weakref.ref(self))

    @staticmethod
    def _at_exit(ref: weakref.ref[OutboxFlusher]) -> None:
        flusher = ref()
        if flusher is not None and not flusher._closed:
            try:
                flusher.flush(timeout=2.0)
            except Exception:  # noqa: BLE001 - exiting; the outbox keeps the entries
                pass

    def submit(self, entries: list[str]) -> None:
        """Queue entries for the background thread (started on demand, also after a fork)."""
        with self._cond:
            if os.getpid() != self._pid:  # forked: the parent's thread and queue are not ours
                self._pid, self._thread, self._pending, self._busy = os.getpid(), None, [], False
            self._pending.extend(entries)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="rewind-fleet-outbox", daemon=True
                )
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        failures = 0
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, []
                self._busy = True
            try:
                self._views.apply_outbox(batch)
                failures = 0
            except ReferenceError:
                return
            except Exception as exc:  # noqa: BLE001 - keep the batch, retry with backoff
                failures += 1
                log.warning("fleet views behind (will retry): %s", exc)
                with self._cond:
                    self._pending[:0] = batch if len(self._pending) < 100_000 else []
                time.sleep(min(0.05 * 2**failures, 5.0))
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def flush(self, timeout: float) -> None:
        """Apply what is queued now, in this thread, and wait for a batch in flight."""
        with self._cond:
            batch, self._pending = self._pending, []
        if batch:
            self._views.apply_outbox(batch)
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._busy and time.monotonic() < deadline:
                self._cond.wait(timeout=0.05)

    def close(self) -> None:
        self.flush(timeout=5.0)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
