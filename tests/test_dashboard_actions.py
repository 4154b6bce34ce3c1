"""Operator actions (dashboard.actions): through the engine, with the operator as actor, and
refused for viewers by the engine itself, whatever the console shows."""

from __future__ import annotations

import pytest
from support.fleet import LOOPING, seed_looping

from dashboard import actions
from dashboard.access import User
from engine import Engine, PermissionDenied
from engine.sessions.notices import TEMPLATES

OPERATOR = User("olivia", "operator", "local")
VIEWER = User("victor", "viewer", "local")


@pytest.fixture
def engine():
    eng = Engine.open("sqlite:///:memory:")
    seed_looping(eng)
    yield eng
    eng.close()


def test_operator_rollback_goes_through_the_engine_with_the_operator_as_actor(engine):
    s = engine.get_session(LOOPING)
    start = next(n.id for n in s.tree() if n.label == "start")
    result = actions.roll_back(engine, OPERATOR, LOOPING, start, "  refund loop  ")
    assert result.target == start and result.actor == "olivia"
    assert [c.name for c in result.compensations] == ["points_refund"]
    assert s.state().messages[-1]["content"] == TEMPLATES["en"]
    event = engine.audit(action="rollback", session=LOOPING)[0]
    assert (event.actor, event.reason, event.snapshot) == ("olivia", "refund loop", start)
    text = actions.describe_rollback(result)
    assert text.startswith(f"Rolled back to {start}: 8 steps") and "points_refund (step 2)" in text
    assert "notice sent" in text


def test_a_viewer_cannot_act_even_when_the_console_is_bypassed(engine):
    s = engine.get_session(LOOPING)
    before = (s.info().epoch, len(s.state().messages))
    with pytest.raises(PermissionDenied):
        actions.roll_back(engine, VIEWER, LOOPING, s.suggested_target(), "curious")
    with pytest.raises(PermissionDenied):
        actions.send_notice(engine, VIEWER, LOOPING, "hello")
    assert (s.info().epoch, len(s.state().messages)) == before
    assert engine.audit(session=LOOPING) == []


def test_actions_refuse_without_a_reason_or_text(engine):
    target = engine.get_session(LOOPING).suggested_target()
    with pytest.raises(actions.ActionRefused, match="reason"):
        actions.roll_back(engine, OPERATOR, LOOPING, target, "   ")
    with pytest.raises(actions.ActionRefused, match="empty"):
        actions.send_notice(engine, OPERATOR, LOOPING, "  ")


def test_send_notice_appends_exactly_the_text_and_audits_the_operator(engine):
    sent = actions.send_notice(engine, OPERATOR, LOOPING, TEMPLATES["zh"])
    assert sent == TEMPLATES["zh"]
    last = engine.get_session(LOOPING).state().messages[-1]
    assert last["content"] == TEMPLATES["zh"] and last["role"] == "assistant"
    assert engine.audit(action="notice")[0].actor == "olivia"


def test_compensations_are_retried_and_resolved_as_the_operator_one_refusal_at_a_time(engine):
    from dashboard import views

    s = engine.get_session(LOOPING)
    start = next(n.id for n in s.tree() if n.label == "start")
    engine.rollback(LOOPING, to=start, actor="rewind", reason="loop", notice=False)
    [comp] = engine.compensations()
    worker = Engine(engine.store)
    worker.register_compensation("points_refund", lambda args, key: None)
    with pytest.raises(actions.ActionRefused, match="say why"):
        actions.retry_compensations(engine, OPERATOR, [comp], "   ")
    with pytest.raises(actions.ActionRefused, match="select"):
        actions.resolve_compensations(engine, OPERATOR, [], "by hand")
    with pytest.raises(PermissionDenied):
        actions.retry_compensations(engine, VIEWER, [comp], "I only read")

    [retried] = actions.retry_compensations(engine, OPERATOR, [comp], " service back ")
    assert retried.ok and engine.audit(action="compensation.retry")[0].reason == "service back"
    worker.run_compensations()
    # done now: the engine refuses, and the page says so next to the ones that went through
    outcomes = actions.resolve_compensations(engine, OPERATOR, [comp], "by hand")
    assert [(o.id, o.ok) for o in outcomes] == [(comp.id, False)] and "is done" in outcomes[0].error
    kind, lines = views.compensation_outcomes_text("resolve", outcomes)
    assert kind == "error" and lines == [f"#{comp.id}: {outcomes[0].error}"]
    kind, lines = views.compensation_outcomes_text("retry", [retried])
    assert kind == "success" and lines[0].startswith(f"Retried 1: #{comp.id} points_refund")
