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
