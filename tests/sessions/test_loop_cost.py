"""The cost of a loop, truthfully: steps, time, tokens and snapshots since the loop BEGAN (its
first flag's first step), not since its latest flag; the suggested rollback target lies before
the loop's first step; a repeated failing call takes no write-ahead snapshot of its own."""

from __future__ import annotations

import pytest
from support.loop_steps import HEALTHY, REPEAT, _record, _watched

from engine import LoopDetected


def test_the_cost_runs_from_the_loops_first_step_not_its_latest_flag(engine):
    s = _watched(engine, "w")
    _record(s, HEALTHY)
    # 100 identical failures, five per batch, flagged again every few steps: longer than the
    # detector's window (64 steps), so its own verdicts no longer reach the loop's first step
    for _ in range(20):
        _record(s, [REPEAT] * 5, budget=100)
    info = s.info()
    assert info.steps == 103 and info.status == "looping"
    first = s.steps()[3]
    assert first.n == 4 and first.tool == "image_crop"
    cost = engine.fleet.loop_cost("w")
    assert cost is not None and cost.ongoing
    assert cost.start_step == 4 and cost.started_at == first.started_at
    assert cost.steps == 100 and cost.last_step == 103
    flagged_last = info.last_verdict["episode"]["through_step"]
    assert flagged_last > 100
    # every step of the loop through its latest flag, not those of the latest window
    assert cost.tokens == (flagged_last - 4 + 1) * 100
    assert cost.flags == info.loops > 30  # this loop's flags: every one of them
    assert cost.snapshots == 0
    verdict = info.last_verdict
    assert verdict["loop_start_step"] > 30  # the detector's own window slid along …
    assert verdict["episode"]["start_step"] == 4  # … the loop's first step stays


def test_a_new_loop_after_a_healthy_step_starts_its_own_count(engine):
    s = _watched(engine, "w")
    _record(s, HEALTHY)
    _record(s, [REPEAT] * 6, budget=10)
    _record(s, [("search", {"q": "again"}, True)])  # the loop ends
    assert engine.fleet.loop_cost("w").ongoing is False
    _record(s, [("image_crop", {"x": 99}, False)] * 4, budget=10)
    cost = engine.fleet.loop_cost("w")
    assert cost.start_step == 11 and cost.steps == 4 and cost.flags >= 1
    through = engine.session_info("w").last_verdict["episode"]["through_step"]
    assert cost.tokens == 10 * (through - 11 + 1)


def test_a_second_handle_continues_the_loop_another_began(engine, open_engine, store_url):
    if store_url == "sqlite:///:memory:":
        pytest.skip("n/a: one process's in-memory store cannot be opened twice")
    s = _watched(engine, "w")
    _record(s, HEALTHY)
    _record(s, [REPEAT] * 6)
    other = open_engine(store_url)
    again = _watched(other, "w")
    for _ in range(20):
        _record(again, [REPEAT] * 5)
    cost = other.fleet.loop_cost("w")
    assert cost.start_step == 4 and cost.steps == 106
    assert cost.flags == engine.session_info("w").loops


def test_the_suggested_target_lies_before_the_loops_first_step(engine):
    s = _watched(engine, "w")
    s.append_message("user", "crop the photo")
    s.snapshot("start")
    _record(s, HEALTHY)
    before = s.snapshot("before the crops")  # next step: 4, the loop's first
    _record(s, [REPEAT] * 5)
    s.snapshot("in the loop")
    for _ in range(20):
        _record(s, [REPEAT] * 5)
    assert s.info().last_verdict["loop_start_step"] > 10  # the detector's window slid on
    assert s.suggested_target() == before
    preview = s.preview_rollback()
    assert min(step.n for step in preview.steps) == 4 and len(preview.steps) == 105


def test_a_loop_whose_first_step_has_no_snapshot_left_suggests_none_inside_it(engine):
    s = _watched(engine, "w")
    _record(s, [REPEAT] * 5)
    s.snapshot("in the loop")
    _record(s, [REPEAT] * 5)
    assert s.suggested_target() is None  # never a target inside the loop


def test_a_repeated_failing_call_takes_no_snapshot_of_its_own(store_url, open_engine):
    engine = open_engine(store_url, on_loop="off")
    s = engine.session("s")
    s.append_message("user", "crop it")
    with s.step("search", {"q": 1}) as call:
        call.ok("found")
    for _ in range(6):
        with s.step("image_crop", {"x": 10}) as call:
            call.fail("invalid slice")
    with s.step("image_crop", {"x": 11}) as call:  # another call: its own snapshot
        call.fail("invalid slice")
    for _ in range(2):
        with s.step("search", {"q": 2}) as call:  # repeated successes keep theirs
            call.ok("found")
    taken = [rec.snapshot is not None for rec in s.steps()]
    assert taken == [True, True, False, False, False, False, False, True, True, True]
    snaps = [n for n in s.tree() if n.label and n.label.startswith("before")]
    assert len(snaps) == 5


def test_a_flagged_loop_counts_the_snapshots_taken_since_it_began(store_url, open_engine):
    engine = open_engine(store_url, on_loop="flag")
    s = engine.session("s")
    with s.step("search", {"q": 1}) as call:
        call.ok("found")
    for i in range(3):  # three different failing calls, then a repeat: flagged
        try:
            with s.step("image_crop", {"x": 10 + (i if i < 2 else 1)}) as call:
                call.fail("invalid slice")
        except LoopDetected:
            break
    for _ in range(3):
        try:
            with s.step("image_crop", {"x": 11}) as call:
                call.fail("invalid slice")
        except LoopDetected:
            break
    info = s.info()
    assert info.status == "looping", "three identical failures under the defaults are a loop"
    cost = engine.fleet.loop_cost("s")
    inside = [r for r in s.steps() if r.n >= cost.start_step and r.n <= cost.last_step]
    assert cost.snapshots == sum(r.snapshot is not None for r in inside)


def test_a_repeat_after_a_write_takes_its_snapshot(store_url, open_engine):
    engine = open_engine(store_url, on_loop="off")
    s = engine.session("s")
    for _ in range(3):
        with s.step("image_crop", {"x": 10}) as call:
            call.fail("invalid slice")
        s.append_message("assistant", "The crop failed, retrying.")  # the state moved
    assert all(rec.snapshot is not None for rec in s.steps())


def test_the_cli_shows_the_loop_from_its_first_step(engine, store_url, tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    if store_url == "sqlite:///:memory:":
        pytest.skip("n/a: another process cannot read this process's in-memory store")
    s = _watched(engine, "w")
    _record(s, HEALTHY)
    for _ in range(20):
        _record(s, [REPEAT] * 5, budget=10)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}

    def rewind(*args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "engine.cli", "--store", store_url, *args],
                              cwd=tmp_path, env=env, text=True, capture_output=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout

    loops = engine.session_info("w").loops
    shown = rewind("show", "w")
    assert "loop: began at step 4" in shown and "100 step(s)" in shown
    assert f"flagged {loops} time(s)" in shown
    listed = rewind("sessions")
    assert "IN LOOP" in listed and "100 steps" in listed
    (row,) = json.loads(rewind("sessions", "--json"))
    assert row["loop_cost"]["start_step"] == 4 and row["loop_cost"]["steps"] == 100
