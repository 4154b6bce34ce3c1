"""Loop episodes over time, counted from the engine's event feed.

The engine has no query for "loops per hour by prompt version" yet, so this module builds it on
the public API: `Engine.events` (cursor-ordered change feed) and `Engine.get_session` (metadata).
One `LoopTally` per store lives in the console process (`st.cache_resource`); each refresh reads
only the events written since the last one, so a fleet refresh costs what changed, not the store
size. The first read starts at the window's beginning, found by binary search over cursors.

An episode runs from a session's first loop verdict until the session is healthy again (a step
ends ok) or rolled back, as the session status does: under the "flag" policy the detector may
repeat its verdict while the agent keeps failing, and that is still one loop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pandas as pd

PAGE = 5000
"""Events read per call to `Engine.events`."""
META_KEYS = ("tenant", "scenario", "prompt_version")


def first_cursor_at(engine: Any, t: float) -> int:
    """The cursor to pass as `since` to read the events written at or after unix time `t`.

    Binary search for the smallest cursor c whose next event is at or after `t` (or absent);
    assumes event times grow with their ids, as a store writes both in one transaction. Costs
    about 2·log2(events) single-row reads.
    """
    def probe(c: int) -> tuple[bool, Any]:
        found = engine.events(since=c, limit=1)
        ev = found[0] if found else None
        return ev is None or ev.at >= t, ev

    done, ev = probe(0)
    if done:
        return 0
    lo = ev.id - 1  # the next event after lo is older than t
    hi = max(ev.id, 1)
    while True:  # grow hi until the next event after it is at or after t
        done, ev = probe(hi)
        if done:
            break
        lo = ev.id - 1
        hi = max(hi * 2, ev.id)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        done, ev = probe(mid)
        if done:
            hi = mid
        else:
            lo = max(mid, ev.id - 1)
    return hi


class LoopTally:
    """Loop episodes (time, session, tenant, scenario, prompt version) over a sliding horizon."""

    def __init__(self, engine: Any, horizon_s: float = 86400.0,
                 clock: Callable[[], float] = time.time, page: int = PAGE):
        self.engine = engine
        self.horizon_s = horizon_s
        self.clock = clock
        self.page = page
        self._lock = threading.Lock()
        self._reset(horizon_s)
        self._meta: dict[str, dict] = {}

    def _reset(self, horizon_s: float) -> None:
        self.horizon_s = horizon_s
        self._cursor: int | None = None
        self._start = 0.0
        self._episodes: list[tuple[float, str]] = []
        self._looping: set[str] = set()  # sessions inside a loop episode
        self.scanned = 0
        """Events read since the tally (re)started."""

    def refresh(self, horizon_s: float | None = None) -> int:
        """Read new events; with a longer `horizon_s` than before, start over from further back.

        Returns:
            Number of events read.
        """
        with self._lock:
            now = self.clock()
            if horizon_s is not None and horizon_s > self.horizon_s:
                self._reset(horizon_s)
            if self._cursor is None:
                self._start = now - self.horizon_s
                self._cursor = first_cursor_at(self.engine, self._start)
            read = 0
            while True:
                events = self.engine.events(since=self._cursor, limit=self.page)
                for ev in events:
                    self._observe(ev)
                read += len(events)
                if events:
                    self._cursor = events[-1].id
                if len(events) < self.page:
                    break
            self.scanned += read
            cutoff = now - self.horizon_s
            if self._episodes and self._episodes[0][0] < cutoff:
                self._episodes = [e for e in self._episodes if e[0] >= cutoff]
            return read

    def _observe(self, ev: Any) -> None:
        sid = ev.session
        if sid is None:
            return
        if ev.type == "step":
            data = ev.data or {}
            if data.get("late"):
                return
            if data.get("looping"):
                if sid not in self._looping:
                    self._episodes.append((ev.at, sid))
                    self._looping.add(sid)
            elif data.get("status") == "ok":  # the session is healthy again: the loop is over
                self._looping.discard(sid)
        elif ev.type == "rollback":
            self._looping.discard(sid)

    def frame(self, since: float | None = None) -> pd.DataFrame:
        """Episodes (at, session, tenant, scenario, prompt_version) since unix time `since`."""
        with self._lock:
            episodes = [e for e in self._episodes if since is None or e[0] >= since]
        rows = []
        for at, sid in episodes:
            meta = self._meta_of(sid)
            rows.append({"at": at, "session": sid, **{k: meta.get(k) for k in META_KEYS}})
        return pd.DataFrame(rows, columns=["at", "session", *META_KEYS])

    def _meta_of(self, sid: str) -> dict:
        meta = self._meta.get(sid)
        if meta is None:
            try:
                meta = dict(self.engine.get_session(sid).info().meta)
            except KeyError:  # UnknownSession: purged since
                meta = {}
            self._meta[sid] = meta
        return meta
