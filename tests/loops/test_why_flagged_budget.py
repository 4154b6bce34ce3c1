"""A stop by the hard step budget, explained: the budget counts
per task, so "Why flagged" names the task that used it (its first step and what began it: a user
message, the session's start, the agent's runtime) and the smallest change is the budget itself,
found by replays that start a new task where the user spoke, as the live session did."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest
from support.paths import ROOT

from dashboard.signin.access import SESSION_KEY, User
from dashboard.signin.passwords import hash_password
from dashboard.views.session import why_flagged as why
from engine import Engine, LoopDetected
from engine.fleet.queries import session_history
from engine.loops.replay import first_flag, smallest_change

SID = "budget-tasks"


def run_tasks(s, sizes: list[int], user: bool = True) -> None:
    """One task per size, each of that many distinct successful searches; a user message begins
    each (else the runtime does: `Session.new_task`)."""
    for t, size in enumerate(sizes):
        if user:
            s.append_message("user", f"task {t}: find   the\nreport {t}")
        elif t:
            s.new_task()
        for i in range(size):
            try:
                with s.step("search", {"q": f"task {t} item {i}"}) as call:
                    call.ok({"hits": i})
            except LoopDetected as stop:  # the hard budget stops a task under every policy
                assert stop.verdict.rule == "step_budget"


def budget_store(tmp_path, sizes: list[int], user: bool = True, sid: str = SID) -> Engine:
    engine = Engine.open(f"sqlite:///{tmp_path}/rewind.db", detector_settings={"max_steps": 8})
    run_tasks(engine.session(sid, on_loop="flag"), sizes, user)
    return engine


def page_task(engine: Engine, sid: str = SID) -> why.BudgetTask | None:
    s = engine.get_session(sid)
    return why.budget_task(s.info().last_verdict, s.steps(), s.messages())


def test_the_verdict_starts_where_the_task_that_used_the_budget_began(tmp_path):
    with budget_store(tmp_path, [5, 5, 12]) as engine:
        verdict = engine.get_session(SID).info().last_verdict
        assert verdict["rule"] == "step_budget"
        assert verdict["evidence_steps"] == [11, 18]
        assert verdict["details"]["steps"] == verdict["details"]["budget"] == 8
        task = page_task(engine)
    assert task == why.BudgetTask(11, 18, 8, 8, "user", "task 2: find the report 2")
    assert why.budget_sentence(task).startswith(
        "The task that began at step 11, when the user wrote “task 2: find the report 2”, used "
        "8 steps of a budget of 8 (steps 11–18).")


def test_the_smallest_change_of_a_budget_stop_is_the_budget(tmp_path):
    with budget_store(tmp_path, [5, 5, 12]) as engine:
        found = engine.fleet.why_flagged(SID)
        assert found is not None and found.flag.step == 18
        change = found.change
        assert (change.field, change.before, change.after) == ("max_steps", 8, 9)
        assert change.flag is not None and change.flag.step == 19
        assert why.change_sentence(found) == (
            "max_steps 8 → 9: the first flag would move to step 19 (step_budget)")
        assert why.replay_command(found) == "rewind replay --set max_steps=9"
        # replay counts per task too: with the budget counted per session, step 8 would be first
        assert engine.replay({"max_steps": 8}, where={"session": SID}).sessions[0].after.step == 18


def test_smallest_change_replays_tasks_as_the_session_counted_them(tmp_path):
    with budget_store(tmp_path, [5, 5, 12]) as engine:
        history = session_history(engine._runtime, SID)
    assert first_flag(history, {"max_steps": 8}).step == 18
    change = smallest_change(history, {"max_steps": 8}, 18)
    assert change is not None and (change.field, change.after) == ("max_steps", 9)


def test_a_task_the_runtime_began_and_the_sessions_first_task(tmp_path):
    with budget_store(tmp_path, [5, 5, 12], user=False) as engine:
        task = page_task(engine)
        assert task == why.BudgetTask(11, 18, 8, 8, "runtime")
        assert "when the agent's runtime started a new task" in why.budget_sentence(task)
        run_tasks(engine.session("one-task", on_loop="flag"), [9], user=False)
        first = page_task(engine, "one-task")
    assert first == why.BudgetTask(1, 8, 8, 8, "start")
    assert "began at step 1, when the session started" in why.budget_sentence(first)


def test_other_verdicts_name_no_task():
    verdict = {"rule": "exact_repeat", "evidence_steps": [3, 4, 5], "details": {}}
    assert why.budget_task(verdict, [], []) is None
    assert why.budget_task(None, [], []) is None
    assert why.budget_task({"rule": "step_budget", "evidence_steps": []}, [], []) is None


def test_a_long_message_is_quoted_short():
    long = "retry " * 100
    assert len(why._quoted(long)) == why.QUOTE_CHARS
    assert why._quoted(long).endswith("…")
    assert why._quoted(None) == ""


def session_page(tmp_path, tab: str | None = None) -> AppTest:
    """The session page of `SID` on the store in `tmp_path`, run as an operator."""
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"),
                           default_timeout=90)
    at.secrets["rewind"] = {"store": f"sqlite:///{tmp_path}/rewind.db", "users": {
        "olivia": {"role": "operator", "password_hash": hash_password("pw")}}}
    at.session_state[SESSION_KEY] = User("olivia", "operator", "local")
    at.switch_page("screens/session/session.py")
    at.query_params["session"] = SID
    if tab is not None:
        at.query_params["tab"] = tab
    return at.run()


def test_the_session_page_names_the_task_that_used_the_budget(tmp_path):
    with budget_store(tmp_path, [5, 5, 12]):
        pass
    at = session_page(tmp_path, tab="Why flagged")
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Task began at step"] == "11"
    assert metrics["Steps in the task"] == "8 steps"
    assert "Loop began at step" not in metrics and "Steps in evidence" not in metrics
    shown = "\n".join(str(m.value) for m in at.markdown)
    assert "**Which task used the budget:** The task that began at step 11" in shown
    assert "Argument differences between near-duplicates" not in shown


def test_the_cost_row_of_a_budget_stop_speaks_of_the_task_not_a_loop(tmp_path):
    with budget_store(tmp_path, [5, 5, 12]):
        pass
    at = session_page(tmp_path)
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert "Task began" in metrics and metrics["Steps used"] == "8"
    assert not {"Loop began", "Looping for", "Loop lasted", "Steps wasted"} & set(metrics)
