"""Loop episodes read through the stores' ``loop`` events (`Store.loops`) are the episodes a scan
of the feed's ``step`` and ``rollback`` events finds (engine.fleet.queries.LoopTally), on every
store;
stores written by an older release are scanned."""

from __future__ import annotations

import itertools
import math
import sqlite3

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Engine, LoopDetected
from engine.errors import RewindError
from engine.fleet.queries import LoopTally


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


class FeedOnly:
    """The engine seen without its store: the tally can only scan the feed."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def events(self, since=0, limit=1000, session=None):
        return self._engine.events(since=since, limit=limit, session=session)

    def get_session(self, sid):
        return self._engine.get_session(sid)


def unheld(s):
    """A handle whose agent goes on after a flag (not held for on-call): loop episodes come and
    go as the agent keeps stepping."""
    s.holds_on_loops = False
    return s


def episodes(tally: LoopTally, prefix: str = "") -> list[tuple[float, str]]:
    return [(e.at, e.session) for e in tally.episodes() if e.session.startswith(prefix)]


def both(engine: Engine, clock: Clock, horizon: float = 10 * 86400.0, page: int = 5000):
    """(indexed tally, scanning tally), refreshed."""
    indexed = LoopTally(engine, horizon_s=horizon, clock=lambda: clock.t + 1, page=page)
    scan = LoopTally(FeedOnly(engine), horizon_s=horizon, clock=lambda: clock.t + 1, page=page)
    indexed.refresh()
    scan.refresh()
    return indexed, scan


def fail(s, times: int = 1) -> None:
    for _ in range(times):
        try:
            with s.step("refund_api", {"order": "A-1"}) as call:
                call.fail("HTTP 500")
        except LoopDetected:
            pass


def ok(s) -> None:
    with s.step("lookup", {"order": "A-1"}) as call:
        call.ok("found")


@pytest.fixture
def clocked(store_url, open_engine):
    clock = Clock()
    return open_engine(store_url, clock=clock), clock


def test_one_loop_event_per_episode_and_the_tally_reads_them(clocked):
    engine, clock = clocked
    s = unheld(engine.session("a", meta={"tenant": "acme"}, on_loop="flag"))
    start = s.snapshot("start")
    fail(s, 6)  # flagged again and again: one episode
    ok(s)  # healthy again
    fail(s, 6)  # a second episode
    s.rollback(to=start, actor="alice", reason="loop", notice=False)
    fail(s, 6)  # a third, after the rollback ended the second
    stopped = unheld(engine.session("b", on_loop="flag"))
    stopped.snapshot("start")
    fail(stopped, 5)
    stopped.stop()  # stopping ends no episode: later verdicts are the same loop
    fail(stopped, 3)
    ok(stopped)  # a stopped session's ok step ends it
    fail(stopped, 5)
    loops = [e for e in engine.events(limit=10_000) if e.type == "loop"]
    assert [e.session for e in loops] == ["a", "a", "a", "b", "b"]
    steps = {(e.session, e.data["n"]): e for e in engine.events(limit=10_000) if e.type == "step"}
    for loop in loops:  # each right after its flagged step
        step = steps[(loop.session, loop.data["n"])]
        assert step.data["looping"] and step.id == loop.id - 1 and step.at == loop.at
    assert engine.store.loops(0.0) == loops
    indexed, scan = both(engine, clock)
    assert indexed.indexed and not scan.indexed
    assert episodes(indexed) == episodes(scan) == [(e.at, e.session) for e in loops]
    assert indexed.scanned == len(loops) < scan.scanned
    assert [e.tenant for e in indexed.episodes()][:1] == ["acme"]
    # later refreshes follow the feed, counting loop events
    t = unheld(engine.session("c", on_loop="flag"))
    fail(t, 6)
    indexed.refresh()
    scan.refresh()
    assert episodes(indexed) == episodes(scan)
    assert episodes(indexed)[-1][1] == "c"


def test_a_late_flagged_step_starts_no_episode(clocked):
    engine, clock = clocked
    agent = unheld(engine.session("late", on_loop="flag"))
    snap = agent.snapshot("safe")
    fail(agent, 2)
    operator = Engine(engine.store)
    with agent.step("refund_api", {"order": "A-1"}) as call:
        operator.rollback("late", to=snap, actor="alice", reason="stop it", notice=False)
        call.fail("HTTP 500")
    assert call.late
    indexed, scan = both(engine, clock)
    assert episodes(indexed) == episodes(scan)


def test_paging_through_loop_events_at_the_same_instant(store_url, open_engine):
    frozen = Clock()
    engine = open_engine(store_url, clock=lambda: frozen.t)  # every event at one time
    for i in range(7):
        s = unheld(engine.session(f"s{i}", on_loop="flag"))
        fail(s, 5)
    every = engine.store.loops(0.0)
    assert len(every) == 7 and len({e.at for e in every}) == 1
    pages, since, after = [], 0.0, 0
    while True:
        page = engine.store.loops(since, after, limit=3)
        pages += page
        if len(page) < 3:
            break
        since, after = page[-1].at, page[-1].id
    assert pages == every
    indexed, scan = both(engine, frozen, page=3)
    assert episodes(indexed) == episodes(scan)
    assert engine.store.loops(frozen.t + 1) == []


def test_recorded_steps_write_loop_events_as_guarded_steps_do(clocked):
    engine, clock = clocked
    watched = unheld(engine.session("otel", on_loop="flag"))
    calls = []
    for i in range(12):
        call = watched.step("refund_api", {"order": "A-1"}, snapshot=False)
        call.ok("done") if i == 6 else call.fail("HTTP 500")
        calls.append(call)
    watched.record_steps(calls)
    indexed, scan = both(engine, clock)
    assert len(episodes(indexed)) == 2
    assert episodes(indexed) == episodes(scan)


OPS = st.lists(
    st.tuples(st.sampled_from(["fail", "fail", "fail", "ok", "rollback", "stop", "record",
                               "late"]),
              st.integers(0, 2), st.lists(st.booleans(), min_size=1, max_size=6)),
    max_size=40,
)
_runs = itertools.count()


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_episodes_through_the_index_equal_the_scan(clocked, ops):
    engine, clock = clocked
    run = f"r{next(_runs)}-"
    handles, snaps = {}, {}
    for op, who, oks in ops:
        sid = f"{run}{who}"
        if sid not in handles:
            handles[sid] = unheld(engine.session(sid, on_loop="flag"))
            snaps[sid] = handles[sid].snapshot("start")
        s = handles[sid]
        if op == "fail":
            fail(s, 2)
        elif op == "ok":
            ok(s)
        elif op == "stop":
            s.stop()
        elif op == "rollback":
            try:
                s.rollback(to=snaps[sid], actor="alice", reason="test", notice=False)
            except RewindError:  # nothing to abandon
                pass
        elif op == "record":
            calls = []
            for good in oks:
                call = s.step("refund_api", {"order": "A-1"}, snapshot=False)
                call.ok("done") if good else call.fail("HTTP 500")
                calls.append(call)
            s.record_steps(calls)
        else:  # a step in flight during a rollback ends late
            with s.step("refund_api", {"order": "A-1"}) as call:
                try:
                    Engine(engine.store).rollback(sid, to=snaps[sid], actor="bob",
                                                  reason="test", notice=False)
                except RewindError:
                    pass
                call.fail("HTTP 500")
    indexed, scan = both(engine, clock)
    assert indexed.indexed
    assert episodes(indexed, run) == episodes(scan, run)


# -- stores written by an older release -------------------------------------------------------
def _as_written_by_release_4(path: str) -> None:
    """Make a file look as schema 4 left it: no loop events, no ``loop_open``, no index."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DELETE FROM events WHERE type = 'loop'")
        conn.execute("DROP INDEX events_loop")
        conn.execute("ALTER TABLE sessions DROP COLUMN loop_open")
        conn.execute("UPDATE rewind_meta SET value = '4' WHERE key = 'schema_version'")
    conn.close()


def test_an_older_sqlite_file_is_scanned_until_its_window_holds_only_new_steps(tmp_path):
    path = f"{tmp_path}/old.db"
    clock = Clock()
    engine = Engine.open(f"sqlite:///{path}", clock=clock)
    s = unheld(engine.session("old", on_loop="flag"))
    fail(s, 6)
    engine.close()
    _as_written_by_release_4(path)
    upgraded_at = clock.t
    engine = Engine.open(f"sqlite:///{path}", clock=clock)
    try:
        assert engine.store.loops(0.0) is None  # the older release wrote steps then
        assert engine.store.loops(upgraded_at + 0.5) == []
        old = unheld(engine.session("old", on_loop="flag"))
        fail(old, 2)  # still inside the episode it was in: no new one
        ok(old)
        fail(old, 6)
        fail(unheld(engine.session("new", on_loop="flag")), 6)
        indexed, scan = both(engine, clock)
        assert not indexed.indexed  # the window reaches back before the upgrade: scanned
        assert [e[1] for e in episodes(indexed)] == ["old", "old", "new"]
        assert episodes(indexed) == episodes(scan)
        since_upgrade = clock.t - upgraded_at - 1
        recent = LoopTally(engine, horizon_s=since_upgrade, clock=lambda: clock.t + 1)
        recent.refresh()
        assert recent.indexed
        assert episodes(recent) == episodes(indexed)[1:]
    finally:
        engine.close()


def test_a_read_only_older_file_is_scanned(tmp_path, monkeypatch):
    from engine.store.sqlite import tx
    from engine.store.sqlite.store import SQLiteStore

    path = f"{tmp_path}/old.db"
    engine = Engine.open(f"sqlite:///{path}", clock=Clock())
    fail(unheld(engine.session("old", on_loop="flag")), 6)
    engine.close()
    _as_written_by_release_4(path)
    monkeypatch.setattr(tx.os, "access", lambda p, mode: False)  # this user may not write it
    store = SQLiteStore(f"sqlite:///{path}")
    try:
        assert store._db.read_only
        assert store.loops(0.0) is None and store._loops_from == math.inf
        assert [e.type for e in store.events()].count("step") == 6
    finally:
        store.close()


@pytest.mark.redis
def test_an_older_redis_store_is_scanned_for_times_before_the_upgrade(open_engine):
    from support.redis_servers import fresh_prefix, single_server

    server = single_server()
    url = server.url(prefix=fresh_prefix())
    clock = Clock()
    engine = open_engine(url, clock=clock)
    fail(unheld(engine.session("old", on_loop="flag")), 6)
    store = engine.store
    # as an older release left it: no loop events, no marks, nothing recorded as complete
    store._r.delete(f"{store._fb}lp", f"{store._fb}lp:from")  # type: ignore[attr-defined]
    engine.close()
    upgraded_at = clock.t
    engine = open_engine(url, clock=clock)
    assert engine.store.loops(0.0) is None
    assert engine.store.loops(upgraded_at + 0.5) == []
    ok(unheld(engine.session("old", on_loop="flag")))
    fail(unheld(engine.session("new", on_loop="flag")), 6)
    indexed, scan = both(engine, clock)
    assert not indexed.indexed
    assert [e[1] for e in episodes(indexed)] == ["old", "new"] and \
        episodes(indexed) == episodes(scan)
    assert [e.session for e in engine.store.loops(upgraded_at + 0.5)] == ["new"]


def test_episodes_come_oldest_first_when_the_feed_is_not_in_time_order():
    """Steps recorded after the fact, or fleet views fed through Cluster outboxes, put a feed
    entry before an older one: the tally still lists episodes by time (found on Redis Cluster
    by the hypothesis test above)."""
    from engine.records import Event

    def step(i, at, sid):
        return Event(i, at, sid, "step", {"late": False, "looping": True, "n": 3,
                                          "status": "error"})

    def loop(i, at, sid):
        return Event(i, at, sid, "loop", {"n": 3})

    class Feed:
        def __init__(self, events, store=None):
            self.feed, self.store = events, store

        def events(self, since=0, limit=1000, session=None):
            return [e for e in self.feed if e.id > since][:limit]

        def get_session(self, sid):
            raise KeyError(sid)

    class Index:
        def last_event_id(self):
            return 0

        def loops(self, since, after=0, limit=1000):
            return []

    out_of_order = [(1, 907.0, "a"), (2, 899.0, "b"), (3, 899.0, "c"), (4, 950.0, "d")]
    scan = LoopTally(Feed([step(*e) for e in out_of_order]), horizon_s=1e9, clock=lambda: 1000.0)
    followed = LoopTally(Feed([loop(*e) for e in out_of_order], Index()), horizon_s=1e9,
                         clock=lambda: 1000.0)
    for tally in (scan, followed):
        tally.refresh()
        assert [(e.at, e.session) for e in tally.episodes()] == [
            (899.0, "b"), (899.0, "c"), (907.0, "a"), (950.0, "d")]
    assert followed.indexed and not scan.indexed
