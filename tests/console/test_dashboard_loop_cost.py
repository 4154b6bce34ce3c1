"""The console tells the truth about a long loop: since when it loops, how many steps it spent
and how often this loop was flagged, from its first step (not its latest flag); "needs you"
lists the costliest loop first."""

from __future__ import annotations

import time

from support.loop_steps import HEALTHY, REPEAT, _record, _watched

from dashboard import views
from dashboard.views import fleet as fleet_views


def _long_and_short(engine):
    long = _watched(engine, "long")
    _record(long, HEALTHY)
    for _ in range(20):  # 100 failures: past the detector's window
        _record(long, [REPEAT] * 5, budget=50)
    short = _watched(engine, "short")  # flagged after the long one, three steps in
    _record(short, [("lookup", {"id": 1}, False)] * 3)
    return long, short


def test_the_fleet_says_since_when_a_long_loop_runs_and_lists_it_first(engine):
    long, short = _long_and_short(engine)
    frame = views.sessions_frame(engine.sessions(limit=10)).set_index("session")
    assert frame.loc["long", "loop_steps"] == 100 and frame.loc["short", "loop_steps"] == 3
    first = long.steps()[3]
    assert abs(frame.loc["long", "loop_began"].timestamp() - first.started_at) < 1e-3
    assert frame.loc["long", "flagged_at"] > frame.loc["long", "loop_began"]
    looping = frame.reset_index()
    items = views.needs_you(looping[looping["status"] == "looping"], [], time.time())
    assert [i.session for i in items] == ["long", "short"]  # the running cost ranks
    assert "100 steps in the loop" in items[0].text and "loop began" in items[0].text
    shown = views.select_sessions(views.sessions_frame(engine.sessions(limit=10)),
                                  sort=views.DEFAULT_SORT)
    assert shown["session"].tolist()[:2] == ["long", "short"]


def test_the_session_page_counts_the_loop_from_its_first_step(engine):
    long, _ = _long_and_short(engine)
    info = long.info()
    # the page holds the newest steps only: they no longer reach the loop's first step
    steps = long.steps(last=30)
    cost = views.loop_cost(steps, info.last_verdict, looping=True, now=time.time())
    assert cost.start_step == 4 and cost.steps == 100 and cost.partial
    assert cost.started_at == long.steps()[3].started_at
    assert cost.flags == info.loops and cost.tokens is not None and cost.tokens >= 50 * 90
    line = views.loop_cost_line(cost)
    assert "at step 4" in line and "100 steps wasted" in line
    assert f"flagged {info.loops} times" in line
    every = views.loop_cost(long.steps(), info.last_verdict, looping=True, now=time.time())
    assert (every.start_step, every.steps, every.flags) == (4, 100, info.loops)


def test_loops_text_tells_this_loops_flags_from_every_verdict():
    assert views.loops_text(1351, 1351) == "flagged 1,351 times in this loop"
    assert views.loops_text(40, 12) == "flagged 12 times in this loop (40 verdicts in all)"
    assert views.loops_text(3) == "flagged as looping 3 times"
    assert views.loops_text(0) == "never flagged as looping"


def test_loop_steps_count_from_the_loops_first_step():
    verdict = {"loop_start_step": 90, "episode": {"start_step": 4, "started_at": 1.0,
                                                  "flags": 30, "tokens": None, "snapshots": 0,
                                                  "through_step": 101}}
    assert fleet_views.loop_steps(103, verdict) == 100
    assert fleet_views.loop_began(verdict) == 1.0
