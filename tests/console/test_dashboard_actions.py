"""Operator actions (dashboard.actions): through the engine, with the operator as actor, and
refused for viewers by the engine itself, whatever the console shows."""

from __future__ import annotations

import pytest
from support.fleet import LOOPING, seed_looping

from dashboard import actions
from dashboard.signin.access import User
from engine import Engine, PermissionDenied
from engine.recovery.notices import TEMPLATES

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
    worker.compensations.register("points_refund", lambda args, key: None)
    with pytest.raises(actions.ActionRefused, match="say why"):
        actions.retry_compensations(engine, OPERATOR, [comp], "   ")
    with pytest.raises(actions.ActionRefused, match="select"):
        actions.resolve_compensations(engine, OPERATOR, [], "by hand")
    with pytest.raises(PermissionDenied):
        actions.retry_compensations(engine, VIEWER, [comp], "I only read")

    [retried] = actions.retry_compensations(engine, OPERATOR, [comp], " service back ")
    assert retried.ok and engine.audit(action="compensation.retry")[0].reason == "service back"
    worker.compensations.run()
    # done now: the engine refuses, and the page says so next to the ones that went through
    outcomes = actions.resolve_compensations(engine, OPERATOR, [comp], "by hand")
    assert [(o.id, o.ok) for o in outcomes] == [(comp.id, False)] and "is done" in outcomes[0].error
    kind, lines = views.compensation_outcomes_text("resolve", outcomes)
    assert kind == "error" and lines == [f"#{comp.id}: {outcomes[0].error}"]
    kind, lines = views.compensation_outcomes_text("retry", [retried])
    assert kind == "success" and lines[0].startswith(f"Retried 1: #{comp.id} points_refund")


# -- fleet controls --------------------------------------------------------------------
@pytest.fixture
def fleet(tmp_path):
    """Looping sessions under two prompt versions (v9: three, v8: two, plus refund-42)."""
    from support.fleet import seed_prompt_loops

    url = f"sqlite:///{tmp_path}/rewind.db"
    with Engine.open(url) as eng:
        seed_looping(eng)
    v9 = seed_prompt_loops(url, "v9", 3)
    v8 = seed_prompt_loops(url, "v8", 2)
    eng = Engine.open(url)
    yield eng, v9, [LOOPING, *v8]
    eng.close()


def _statuses(engine, sids):
    return {sid: engine.get_session(sid).info().status for sid in sids}


def test_bulk_preview_writes_nothing_and_lists_each_session(fleet):
    engine, v9, others = fleet
    where = {"status": "looping", "prompt_version": "v9"}
    items = actions.preview_many(engine, OPERATOR, where)
    assert sorted(i.session for i in items) == sorted(v9)
    assert all(i.ok and i.preview is not None and i.rollback is None for i in items)
    assert engine.audit() == []
    assert set(_statuses(engine, v9).values()) == {"looping"}


def test_operator_bulk_rollback_takes_only_the_filter_and_audits_one_batch(fleet):
    engine, v9, others = fleet
    where = {"status": "looping", "prompt_version": "v9"}
    items = actions.roll_back_many(engine, OPERATOR, where, "  v9 deadlocks the model  ")
    assert sorted(i.session for i in items) == sorted(v9) and all(i.ok for i in items)
    assert set(_statuses(engine, v9).values()) == {"rolled_back"}
    assert set(_statuses(engine, others).values()) == {"looping"}
    batch = items[0].batch
    rollbacks = engine.audit(action="rollback")
    assert {(e.actor, e.reason, e.detail["batch"]) for e in rollbacks} == {
        ("olivia", "v9 deadlocks the model", batch)}
    text = actions.describe_bulk(items)
    assert text.startswith(f"Rolled back 3 of 3 sessions (batch {batch})")
    assert "refund_api.undo ×6" in text  # two refund loopers, three duplicate refunds each


def test_bulk_rollback_of_listed_sessions_keeps_to_the_list_and_the_filters(fleet):
    engine, v9, others = fleet
    where = {"status": "looping", "session": [v9[0], others[0]], "prompt_version": "v9"}
    items = actions.roll_back_many(engine, OPERATOR, where, "checked these")
    assert [i.session for i in items] == [v9[0]]
    assert _statuses(engine, [v9[1], others[0]]) == {v9[1]: "looping", others[0]: "looping"}


def test_bulk_rollback_refuses_without_reason_filter_or_beyond_the_cap(fleet, monkeypatch):
    engine, v9, others = fleet
    with pytest.raises(actions.ActionRefused, match="reason"):
        actions.roll_back_many(engine, OPERATOR, {"prompt_version": "v9"}, "  ")
    with pytest.raises(actions.ActionRefused, match="whole fleet"):
        actions.preview_many(engine, OPERATOR, {})
    monkeypatch.setattr(actions, "BULK_CAP", 2)
    with pytest.raises(actions.ActionRefused, match="more than 2 sessions match.*at most 2"):
        actions.preview_many(engine, OPERATOR, {"status": "looping"})
    with pytest.raises(actions.ActionRefused, match="^3 sessions match"):
        actions.roll_back_many(engine, OPERATOR, {"session": v9}, "too many at once")
    assert actions.bulk_size(engine, {"session": [v9[0], v9[0]]}) == 1
    assert engine.audit() == [] and set(_statuses(engine, v9).values()) == {"looping"}


def test_a_viewer_cannot_bulk_roll_back_or_even_preview(fleet):
    engine, v9, others = fleet
    with pytest.raises(PermissionDenied):
        actions.preview_many(engine, VIEWER, {"prompt_version": "v9"})
    with pytest.raises(PermissionDenied):
        actions.roll_back_many(engine, VIEWER, {"prompt_version": "v9"}, "curious")
    assert engine.audit() == [] and set(_statuses(engine, v9).values()) == {"looping"}


def test_describe_bulk_names_the_failures_without_hiding_the_rest():
    from engine.records import BulkRollbackItem

    items = [BulkRollbackItem("a", True, batch="batch-1"),
             BulkRollbackItem("b", False, "RollbackConflict: someone was first", batch="batch-1")]
    assert actions.describe_bulk(items) == "Rolled back 1 of 2 sessions (batch batch-1); " \
                                           "1 failed: b."
    assert actions.describe_bulk([]).startswith("No session matched")


def test_operator_quarantines_and_lifts_a_tool_through_the_engine(engine):
    q = actions.quarantine_tool(engine, OPERATOR, "refund_api", " HTTP 500 for everyone ",
                                scope={"tenant": "globex", "scenario": None,
                                       "prompt_version": ""})
    assert (q.tool, q.actor, q.reason, q.scope, q.until) == (
        "refund_api", "olivia", "HTTP 500 for everyone", {"tenant": "globex"}, None)
    assert [x.id for x in engine.quarantines()] == [q.id]
    assert engine.audit(action="quarantine")[0].actor == "olivia"
    with pytest.raises(actions.ActionRefused, match="reason"):
        actions.lift_quarantine(engine, OPERATOR, q.id, " ")
    lifted = actions.lift_quarantine(engine, OPERATOR, q.id, "fixed upstream")
    assert lifted.id == q.id and engine.quarantines() == []
    event = engine.audit(action="quarantine_lift")[0]
    assert (event.actor, event.reason) == ("olivia", "fixed upstream")


def test_quarantine_needs_a_tool_and_a_reason_and_an_operator(engine):
    import datetime as dt

    with pytest.raises(actions.ActionRefused, match="name the tool"):
        actions.quarantine_tool(engine, OPERATOR, "  ", "broken")
    with pytest.raises(actions.ActionRefused, match="reason"):
        actions.quarantine_tool(engine, OPERATOR, "refund_api", "")
    with pytest.raises(PermissionDenied):
        actions.quarantine_tool(engine, VIEWER, "refund_api", "broken")
    q = actions.quarantine_tool(engine, OPERATOR, "refund_api", "broken",
                                until=dt.timedelta(hours=1))
    with pytest.raises(PermissionDenied):
        actions.lift_quarantine(engine, VIEWER, q.id, "curious")
    assert q.until is not None and [x.id for x in engine.quarantines()] == [q.id]
    assert [e.action for e in engine.audit()] == ["quarantine"]
