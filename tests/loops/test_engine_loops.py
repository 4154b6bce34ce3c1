"""How the engine acts on the detector's verdicts (policies, budgets, rebuilds)."""

from __future__ import annotations

import pytest

from engine import Engine, LoopDetected, LoopDetector


@pytest.fixture
def engine():
    eng = Engine.open("sqlite:///:memory:")
    yield eng
    eng.close()


def test_new_ticket_each_time_is_caught_although_ids_differ(engine):
    s = engine.session("cs", meta={"locale": "en"})
    s.append_message("user", "raise the priority of my ticket")
    with pytest.raises(LoopDetected) as info:
        for i in range(6):
            with s.step("create_ticket", {"subject": "printer broken"}, side_effect=True,
                        compensation=("close_ticket", {"n": i})) as call:
                call.ok({"ticket_id": f"T-{1000 + i}", "status": "open"})
    assert info.value.verdict.looping
    assert [c.name for c in engine.compensations(session="cs")] == ["close_ticket"] * len(
        info.value.verdict.evidence)


def test_repeated_context_overflow_is_caught(engine):
    s = engine.session("ov")
    with pytest.raises(LoopDetected) as info:
        for i in range(6):
            with s.step("read_file", {"path": f"logs/part-{i}.log"}) as call:
                call.ok(f"part {i}: " + "x" * 5000)
            s.agent_turn(None, error="context_length_exceeded: 9000 > 8192 tokens")
            with s.step("condense", {"keep": 10}) as call:
                call.ok("condensed")
    assert info.value.verdict.rule == "context_overflow"


def test_step_budget_stops_the_session_instead_of_rolling_back():
    engine = Engine.open("sqlite:///:memory:",
                         detector_factory=lambda: LoopDetector(max_steps=5))
    s = engine.session("long")
    with pytest.raises(LoopDetected) as info:
        for i in range(10):
            with s.step("read_page", {"page": i}) as call:
                call.ok(f"page {i}")
    assert info.value.verdict.rule == "step_budget" and info.value.rollback is None
    assert s.info().status == "stopped"


def test_the_step_budget_counts_per_task_not_per_session():
    """A long healthy session where the user asks something new every 20 steps is never
    stopped; a task that runs away without the user is, and the verdict says where it began."""
    engine = Engine.open("sqlite:///:memory:",
                         detector_factory=lambda: LoopDetector(max_steps=30))
    s = engine.session("day-long-chat")
    for i in range(300):  # ten times the budget
        if i % 20 == 0:
            s.append_message("user", f"next question {i}")
        with s.step("read_page", {"page": i}) as call:
            call.ok(f"page {i}")
    assert s.info().status == "healthy"

    s.append_message("user", "one more thing")
    first = None
    with pytest.raises(LoopDetected) as info:
        for i in range(300, 400):
            with s.step("read_page", {"page": i}) as call:
                call.ok(f"page {i}")
            first = first or call.n
    verdict = info.value.verdict
    assert verdict.rule == "step_budget" and verdict.details["steps"] == 30
    stored = s.info().last_verdict
    assert stored is not None and stored["evidence_steps"][0] == first  # where the task began


def test_a_new_task_starts_the_budget_again_without_a_user_message():
    """A new run or graph invocation, or an MCP client back after an idle gap, calls
    `Session.new_task`."""
    engine = Engine.open("sqlite:///:memory:",
                         detector_factory=lambda: LoopDetector(max_steps=10))
    s = engine.session("runs")
    for run in range(5):
        s.new_task()
        for i in range(9):
            with s.step("read_page", {"run": run, "page": i}) as call:
                call.ok(f"{run}/{i}")
    assert s.info().status == "healthy"


def test_a_rebuilt_detector_sees_what_the_live_one_saw(engine):
    """After a rollback from elsewhere, the handle replays stored steps: equal results must
    still look equal (the stored digest is the detector's own)."""
    s = engine.session("poll")
    snap = s.snapshot("start")
    with s.step("warmup", {}) as call:
        call.ok("x")
    for _ in range(2):
        with s.step("job_status", {"id": 7}) as call:
            call.ok({"state": "running", "progress": 40, "checked_at": "2026-11-30T05:00:00Z"})
    Engine(engine.store).rollback("poll", to=s.steps()[1].snapshot, actor="op", reason="r",
                                  notice=False)
    # live now: warmup only; replayed into a fresh detector on the next call
    with pytest.raises(LoopDetected):
        for _ in range(3):
            with s.step("job_status", {"id": 7}) as call:
                call.ok({"state": "running", "progress": 40,
                         "checked_at": "2026-11-30T05:00:09Z"})
    assert snap in {n.id for n in s.tree()}


def test_answering_the_user_is_not_talking_instead_of_acting(tmp_path):
    """In a tool-using session, message turns that each answer a new user message are healthy;
    the same turns with no user between them are an agent that stopped acting."""
    from engine import Engine, LoopWaiting

    with Engine.open(f"sqlite:///{tmp_path}/r.db") as engine:
        chat = engine.session("chat", on_loop="flag")
        with chat.step("search", {"q": "refund policy"}) as call:
            call.ok({"hits": 3})
        for question in ("What is the window?", "And for gifts?", "Who pays shipping?", "Ok?"):
            chat.append_message("user", question)
            assert not chat.agent_turn(f"Here is the answer to: {question}").looping

        idle = engine.session("idle", on_loop="flag")
        with idle.step("search", {"q": "refund policy"}) as call:
            call.ok({"hits": 3})
        with pytest.raises(LoopWaiting) as caught:  # under flag the session waits for on-call
            for i in range(4):
                idle.agent_turn(f"I will now think about part {i} of the plan.")
        assert caught.value.verdict.rule == "idle_turns"
