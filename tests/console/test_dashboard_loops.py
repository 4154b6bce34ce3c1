"""Loop episodes over time, counted from the engine's event feed (engine.fleet.queries)."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest
from support.fleet import AUTO_ROLLED_BACK, LOOPING, seed_auto_rolled_back, seed_looping

from dashboard.views import loop_episodes_frame
from engine import Engine
from engine.fleet.queries import LoopTally, first_cursor_at


@dataclass
class Ev:
    id: int
    at: float


class FeedOnly:
    """Just `events`, over a fixed list: enough for the cursor search."""

    def __init__(self, events):
        self.evs = events
        self.calls = 0

    def events(self, since=0, limit=1000, session=None):
        self.calls += 1
        return [e for e in self.evs if e.id > since][:limit]


def test_first_cursor_at_finds_the_first_event_at_or_after_a_time():
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(0, 300)
        ids = sorted(rng.sample(range(1, 5000), n))
        times = sorted(rng.uniform(0, 100) for _ in range(n))
        feed = FeedOnly([Ev(i, t) for i, t in zip(ids, times, strict=True)])
        t = rng.uniform(-5, 105)
        cursor = first_cursor_at(feed, t)
        assert [e for e in feed.evs if e.id > cursor] == [e for e in feed.evs if e.at >= t]


def test_first_cursor_at_is_logarithmic():
    feed = FeedOnly([Ev(i, float(i)) for i in range(1, 100_001)])
    assert first_cursor_at(feed, 70_000.5) == 70_000
    assert feed.calls < 60


class Clock:
    def __init__(self, t=1_000_000.0):
        self.t = t

    def __call__(self):
        self.t += 1.0
        return self.t


@pytest.fixture
def engine():
    clock = Clock()
    eng = Engine.open("sqlite:///:memory:", clock=clock)
    eng.test_clock = clock
    yield eng
    eng.close()


def fail_times(s, n, tool="refund_api"):
    from engine import LoopDetected

    for _ in range(n):
        try:
            with s.step(tool, {"order": "A-1"}) as call:
                call.fail("HTTP 500")
        except LoopDetected:
            return


def tally_of(engine, horizon=86400.0):
    return LoopTally(engine, horizon_s=horizon, clock=lambda: engine.test_clock.t + 1)


def test_a_flagged_loop_is_one_episode_however_often_it_is_flagged(engine):
    seed_looping(engine)
    assert engine.get_session(LOOPING).info().loops >= 2
    tally = tally_of(engine)
    tally.refresh()
    frame = loop_episodes_frame(tally.episodes())
    assert frame["session"].tolist() == [LOOPING]
    assert frame.iloc[0][["tenant", "scenario", "prompt_version"]].tolist() == \
        ["globex", "refund", "v8"]


def test_an_automatic_rollback_ends_the_episode_and_a_new_loop_starts_another(engine):
    seed_auto_rolled_back(engine)
    s = engine.session("again", meta={"prompt_version": "v9"}, on_loop="flag")
    s.holds_on_loops = False  # flagged, not held: it recovers by itself, then loops again
    s.snapshot("start")
    fail_times(s, 4)
    with s.step("refund_api", {"order": "A-2"}) as call:
        call.ok("done")
    fail_times(s, 4)
    tally = tally_of(engine)
    tally.refresh()
    sessions = loop_episodes_frame(tally.episodes())["session"].tolist()
    assert sessions == [AUTO_ROLLED_BACK, "again", "again"]


def test_refresh_reads_only_new_events_and_respects_the_horizon(engine):
    s = engine.session("old", meta={"scenario": "crop"}, on_loop="flag")
    s.snapshot("s")
    fail_times(s, 3)
    engine.test_clock.t += 10_000  # the first loop is now older than the horizon
    tally = tally_of(engine, horizon=5_000)
    first = tally.refresh()
    assert first == 0 and loop_episodes_frame(tally.episodes()).empty
    s2 = engine.session("new", meta={"scenario": "refund"}, on_loop="flag")
    s2.snapshot("s")
    fail_times(s2, 3)
    read = tally.refresh()
    assert 0 < read < 20
    assert loop_episodes_frame(tally.episodes())["session"].tolist() == ["new"]
    assert tally.refresh() == 0
    tally.refresh(horizon_s=50_000)  # a longer window starts over from further back
    assert loop_episodes_frame(tally.episodes())["session"].tolist() == ["old", "new"]


def test_frame_since_filters_by_time(engine):
    seed_looping(engine)
    tally = tally_of(engine)
    tally.refresh()
    assert len(loop_episodes_frame(tally.episodes(since=0))) == 1
    assert loop_episodes_frame(tally.episodes(since=engine.test_clock.t + 100)).empty
