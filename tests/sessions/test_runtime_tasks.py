"""A task the agent's runtime begins (`Session.new_task`: a new run, a graph invocation, an MCP
client back after an idle gap) is written with the step after it, so replay, the smallest
change and the console count the step budget as the live session did; a replay that counted one
budget across such tasks would flag a healthy session the live detector let run."""

from __future__ import annotations

import sqlite3

from engine import Engine, LoopDetected
from engine.fleet.queries import session_history
from engine.loops.replay import first_flag, smallest_change

BUDGET = {"max_steps": 8}


def runtime_tasks(s, sizes: list[int]) -> None:
    """One task per size, each of that many distinct successful searches; the runtime begins
    every task after the first (no user message anywhere)."""
    for t, size in enumerate(sizes):
        if t:
            s.new_task()
        for i in range(size):
            try:
                with s.step("search", {"q": f"task {t} item {i}"}) as call:
                    call.ok({"hits": i})
            except LoopDetected as stop:  # the hard budget stops a task under every policy
                assert stop.verdict.rule == "step_budget"


def test_the_step_after_new_task_is_marked_and_replay_restarts_the_budget(store_url, open_engine):
    engine = open_engine(store_url, detector_settings=BUDGET)
    s = engine.session("long-run", on_loop="flag")
    runtime_tasks(s, [6, 6, 6, 6, 6])  # 30 steps, each task under its budget of 8
    assert s.info().status != "looping" and s.info().last_verdict is None
    marked = [r.n for r in s.steps() if r.task]
    assert marked == [7, 13, 19, 25]
    history = session_history(engine._runtime, "long-run")
    assert first_flag(history, BUDGET) is None
    assert first_flag(history, {"max_steps": 5}).step == 5  # each task still has its budget
    result = engine.replay(BUDGET, where={"session": "long-run"})
    assert result.sessions[0].before is None and result.sessions[0].after is None


def test_a_runaway_runtime_task_is_flagged_where_the_live_detector_flagged_it(store_url,
                                                                             open_engine):
    engine = open_engine(store_url, detector_settings=BUDGET)
    s = engine.session("runaway", on_loop="flag")
    runtime_tasks(s, [5, 5, 12])
    verdict = s.info().last_verdict
    assert verdict["rule"] == "step_budget" and verdict["evidence_steps"] == [11, 18]
    history = session_history(engine._runtime, "runaway")
    assert first_flag(history, BUDGET).step == 18  # counted per session, it was step 8
    change = smallest_change(history, BUDGET, 18)
    assert change is not None and (change.field, change.after) == ("max_steps", 9)
    found = engine.fleet.why_flagged("runaway")
    assert found is not None and found.flag.step == 18


def test_one_mark_per_call_and_none_without_a_step(store_url, open_engine):
    engine = open_engine(store_url, detector_settings=BUDGET)
    s = engine.session("twice", on_loop="flag")
    s.new_task()
    s.new_task()  # two calls before a step begin one task
    with s.step("search", {"q": "a"}) as call:
        call.ok(1)
    with s.step("search", {"q": "b"}) as call:
        call.ok(2)
    assert [r.task for r in s.steps()] == [True, False]
    # another handle of the same session knows nothing of this handle's pending task
    s.new_task()
    other = engine.session("twice", on_loop="flag")
    with other.step("search", {"q": "c"}) as call:
        call.ok(3)
    assert [r.task for r in other.steps()] == [True, False, False]


def test_an_older_file_gets_the_column_and_reads_its_steps_as_unmarked(tmp_path):
    url = f"sqlite:///{tmp_path}/rewind.db"
    with Engine.open(url) as engine:
        s = engine.session("old")
        with s.step("search", {"q": "a"}) as call:
            call.ok(1)
    conn = sqlite3.connect(tmp_path / "rewind.db")
    conn.execute("ALTER TABLE steps DROP COLUMN task")  # the file as a release before wrote it
    conn.commit()
    conn.close()
    with Engine.open(url) as engine:
        s = engine.session("old")
        s.new_task()
        with s.step("search", {"q": "b"}) as call:
            call.ok(2)
        assert [r.task for r in s.steps()] == [False, True]
