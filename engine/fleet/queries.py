"""Fleet queries: the KPIs of the fleet view and loop episodes over time.

A *loop episode* runs from a session's first loop verdict until the session is healthy again (a
step ends ok) or rolled back, as the session status does: under the "flag" policy the detector may
repeat its verdict while the agent keeps failing, and that is still one loop. The console's
"loops over time" charts and the CLI count episodes, not verdicts.

`LoopTally` builds episodes from the public change feed (`Engine.events`, cursor-ordered) and
session metadata (`Engine.get_session`). One tally per store lives in a long-running process; each
refresh reads only the events written since the last one, so a refresh costs what changed, not the
store size.

The first read costs the episodes of the window, not its steps: every store writes a ``loop``
event where an episode starts (`EventType.LOOP`) and reads them back by time through an index
(`Store.loops`); the tally reads those, then follows the feed from the cursor it read them at,
counting ``loop`` events. A store that cannot answer for the window (a file an older release
wrote steps to within it), or a source without a store, is scanned instead: every event from the
window's beginning (found by binary search over cursors), episodes rebuilt from the ``step`` and
``rollback`` events by the same rule the stores follow.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, Protocol

from engine.loops.detector import DetectorConfig
from engine.loops.replay import Label, SessionReplay, Summary, WhyFlagged, compare, detector_config
from engine.loops.replay import why_flagged as explain
from engine.records import Event, MessageRecord, ReplayHistory, SessionInfo, StepRecord
from engine.runtime import Runtime
from engine.store import SessionFilter
from engine.types import FACETS, CompensationStatus, EventType, SessionStatus, StepStatus


class EventSource(Protocol):
    """What a tally reads: the change feed and session handles (an `Engine` is one)."""

    def events(
        self, since: int = 0, limit: int = 1000, session: str | None = None
    ) -> list[Event]: ...

    def get_session(self, sid: str) -> Any: ...


class LoopEpisode(NamedTuple):
    """One loop episode: when it began, in which session, and that session's labels."""

    at: float
    """Unix time of the first loop verdict of the episode."""
    session: str
    tenant: str | None
    scenario: str | None
    prompt_version: str | None


def stats(rt: Runtime, window_s: float = 3600.0, active_s: float = 300.0) -> dict[str, int]:
    """KPIs for the fleet view: sessions, active in the last `active_s`, looping now, rollbacks in
    the last `window_s`, compensations pending and failed. Each is one counted store query."""
    now = rt.clock()
    store = rt.store
    return {
        "sessions": store.count_sessions(),
        "active": store.count_sessions(SessionFilter(updated_since=now - active_s)),
        "looping": store.count_sessions(SessionFilter(status=SessionStatus.LOOPING)),
        "rollbacks_window": store.count_audit("rollback", now - window_s),
        "compensations_pending": store.count_compensations(CompensationStatus.PENDING),
        "compensations_failed": store.count_compensations(CompensationStatus.FAILED),
    }


PAGE = 5000
"""Events read per call to `Engine.events`."""
META_KEYS = FACETS


def first_cursor_at(engine: EventSource, t: float) -> int:
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

    def __init__(
        self,
        engine: EventSource,
        horizon_s: float = 86400.0,
        clock: Callable[[], float] = time.time,
        page: int = PAGE,
    ):
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
        self._episodes: list[tuple[float, int, str]] = []  # (at, event id, session), sorted
        self._looping: set[str] = set()  # sessions inside a loop episode (when scanning)
        self.indexed = False
        """True when the tally started from the store's ``loop`` events (no scan of steps)."""
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
            read = 0
            if self._cursor is None:
                self._start = now - self.horizon_s
                read = self._start_from_index()
                if not self.indexed:
                    self._cursor = first_cursor_at(self.engine, self._start)
            assert self._cursor is not None
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

    def _start_from_index(self) -> int:
        """Read the window's episodes from the store's ``loop`` events, if it can answer;
        returns how many were read (`indexed` says whether it could)."""
        store = getattr(self.engine, "store", None)
        if store is None or not hasattr(store, "loops"):
            return 0
        cursor = store.last_event_id()  # later ones are followed on the feed
        since, after, found = self._start, 0, []
        while True:
            page = store.loops(since, after, limit=self.page)
            if page is None:
                return 0
            found += [(ev.at, ev.id, ev.session) for ev in page if ev.id <= cursor and ev.session]
            if len(page) < self.page:
                break
            since, after = page[-1].at, page[-1].id
        self._episodes, self._cursor, self.indexed = found, cursor, True
        return len(found)

    def _observe(self, ev: Event) -> None:
        sid = ev.session
        if sid is None:
            return
        if self.indexed:
            if ev.type == EventType.LOOP:
                # oldest first by time: the feed's order is not time order when steps are
                # recorded after the fact (`record_steps`) or arrive through Cluster outboxes
                bisect.insort(self._episodes, (ev.at, ev.id, sid))
            return
        if ev.type == EventType.STEP:
            data = ev.data or {}
            if data.get("late"):
                return
            if data.get("looping"):
                if sid not in self._looping:
                    bisect.insort(self._episodes, (ev.at, ev.id, sid))
                    self._looping.add(sid)
            elif data.get("status") == StepStatus.OK:  # healthy again: the loop is over
                self._looping.discard(sid)
        elif ev.type == EventType.ROLLBACK:
            self._looping.discard(sid)

    def episodes(self, since: float | None = None) -> list[LoopEpisode]:
        """Episodes since unix time `since` (None: the whole horizon), oldest first."""
        with self._lock:
            found = [e for e in self._episodes if since is None or e[0] >= since]
        out = []
        for at, _id, sid in found:
            meta = self._meta_of(sid)
            out.append(LoopEpisode(at, sid, *(meta.get(k) for k in META_KEYS)))
        return out

    def _meta_of(self, sid: str) -> dict:
        meta = self._meta.get(sid)
        if meta is None:
            try:
                meta = dict(self.engine.get_session(sid).info().meta)
            except KeyError:  # UnknownSession: purged since
                meta = {}
            self._meta[sid] = meta
        return meta


# -- replay and labels --------------------------------------------------------------------------
LABEL_ACTION = "label"
"""Audit action of an operator's label: the label is the audit row itself (one atomic write,
audited by construction); a session's label is its newest one."""


def labels(rt: Runtime, limit: int = 100_000) -> dict[str, Label]:
    """Session id -> the newest operator label ("loop" / "not_loop")."""
    found: dict[str, Label] = {}
    for event in rt.store.audit(action=LABEL_ACTION, limit=limit):  # newest first
        value = event.detail.get("label")
        if event.session and event.session not in found and value in ("loop", "not_loop"):
            found[event.session] = value
    return found


def session_history(rt: Runtime, sid: str) -> list[StepRecord | MessageRecord]:
    """Every step (all branches) and every user message of `sid`, in the order they happened
    (a message before a step that started in the same instant)."""
    steps = rt.store.steps(sid)
    messages = [m for m in rt.store.all_messages(sid) if m.message.get("role") == "user"]
    timed: list[tuple[float, int, int, StepRecord | MessageRecord]] = [
        (m.created_at, 0, m.seq, m) for m in messages]
    timed += [(s.started_at, 1, s.n, s) for s in steps]
    timed.sort(key=lambda item: item[:3])
    return [item[3] for item in timed]


def replay(rt: Runtime, config: DetectorConfig | Mapping[str, Any] | None,
           sessions: list[SessionInfo]) -> tuple[list[SessionReplay], Summary]:
    """Replay `sessions` under the detector this runtime runs now and under `config` (see
    `engine.loops.replay.compare`); reads the store, writes nothing.

    Histories are read a batch of sessions at a time (`Store.replay_histories`: two queries
    on SQLite, not two a session), each batch about `REPLAY_BATCH_STEPS` steps, and replayed
    and dropped before the next is read: a fleet's million steps held at once cost a gigabyte,
    and every garbage collection walked them."""
    before = rt.new_detector()[0].config
    return compare(_histories(rt, sessions), config, before=before, labels=labels(rt))


REPLAY_BATCH_STEPS = 20_000
"""Steps (by the sessions' step counts) a replay reads in one batch: enough sessions that a
query's cost is spread over thousands of rows, few enough steps that a batch holds megabytes."""
REPLAY_BATCH_SESSIONS = 500
"""At most this many sessions in one batch."""


def _histories(rt: Runtime, sessions: list[SessionInfo]
               ) -> Iterator[tuple[str, ReplayHistory]]:
    """(session id, history) of each of `sessions` in turn, read in batches."""
    start = 0
    while start < len(sessions):
        end, steps = start, 0
        while end < len(sessions) and end - start < REPLAY_BATCH_SESSIONS and (
                end == start or steps + sessions[end].steps <= REPLAY_BATCH_STEPS):
            steps += sessions[end].steps
            end += 1
        batch = [info.id for info in sessions[start:end]]
        read = rt.store.replay_histories(batch)
        for sid in batch:
            yield sid, read[sid]
        start = end


WHY_FLAGGED_CACHED = 256
"""Explanations this process keeps (the least recently asked go first)."""
_EXPLAINED_LOCK = threading.Lock()


def why_flagged(rt: Runtime, sid: str, step: int | None) -> WhyFlagged | None:
    """`Engine.fleet.why_flagged`: the replay (`engine.loops.replay.why_flagged`), remembered per
    (session, flagged step, settings) in `rt.explained`. An explanation depends only on the
    steps up to the flag, which later steps (spans still arriving) do not change, so asking
    again costs nothing; the session's first flag is remembered too, so a repeated question
    about it reads no history."""
    info = rt.require_session(sid)
    verdict = info.last_verdict
    if verdict is None:
        detector, recorded = rt.new_detector()
        base = detector.config
    else:
        recorded = dict(verdict.get("detector") or {})
        base = detector_config(recorded, rt.detector_factory().config)
    settings = repr(base)
    first_key = ("first", info.id, info.created_at, settings)
    with _EXPLAINED_LOCK:
        if step is None:
            step = rt.explained.get(first_key)
        key = ("why", info.id, info.created_at, step, settings)
        if step is not None and key in rt.explained:
            rt.explained.move_to_end(key)
            known: WhyFlagged = rt.explained[key]
            return known
    found = explain(info.id, session_history(rt, info.id), base, step=step, detector=recorded)
    if found is not None:
        with _EXPLAINED_LOCK:
            if step is None:
                rt.explained[first_key] = found.flag.step
            rt.explained[("why", info.id, info.created_at, found.flag.step, settings)] = found
            while len(rt.explained) > WHY_FLAGGED_CACHED:
                rt.explained.popitem(last=False)
    return found
