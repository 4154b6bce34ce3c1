"""Store conformance: the same behaviour on every backend, through the public engine API."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from engine import (
    PAUSED_TEMPLATES,
    TEMPLATES,
    Actor,
    Engine,
    InvalidSessionId,
    LoopDetected,
    LoopWaiting,
    NothingToRollBack,
    PermissionDenied,
    RollbackConflict,
    SnapshotNotRestorable,
    UnknownSession,
    UnknownSnapshot,
)
from engine.store import Retention, RollbackRequest, SessionCursor, SessionFilter
from engine.types import SessionStatus


def _fail_three_times(s, tool="image_crop", args=None):
    with pytest.raises(LoopDetected) as info:
        for _ in range(10):
            with s.step(tool, args or {"x": 10, "y": 20}) as call:
                call.fail("invalid slice")
            s.append_message("tool", "invalid slice")
    return info.value


# -- sessions ---------------------------------------------------------------------------------
def test_session_is_created_once_and_meta_merges(engine):
    s = engine.session("sess-1", meta={"tenant": "acme", "scenario": "refund"})
    engine.session("sess-1", meta={"prompt_version": "v7"})
    info = s.info()
    assert info.meta == {"tenant": "acme", "scenario": "refund", "prompt_version": "v7"}
    assert info.status == "healthy" and info.head is None and info.epoch == 0
    assert [i.id for i in engine.sessions()] == ["sess-1"]


@pytest.mark.parametrize("bad", ["", "x" * 201, "a\nb", "tab\there", "nul\x00", 42, None])
def test_invalid_session_ids_are_rejected_and_create_nothing(engine, bad):
    with pytest.raises(InvalidSessionId):
        engine.session(bad)
    assert engine.sessions() == []


def test_odd_but_valid_session_ids_work(engine):
    ids = ["{tag}:x", "a:b:c", "*?[]", "会话-42", "x" * 200, "sp ace"]
    for sid in ids:
        engine.session(sid).append_message("user", sid)
    for sid in ids:
        assert engine.get_session(sid).state().messages == [{"role": "user", "content": sid}]


def test_unknown_session_is_a_clear_error(engine):
    with pytest.raises(UnknownSession, match="nope"):
        engine.get_session("nope")
    with pytest.raises(UnknownSession):
        engine.rollback("nope", actor="alice", reason="x")


def test_sessions_filter_by_meta_and_status(engine):
    engine.session("a", meta={"tenant": "t1", "scenario": "refund", "prompt_version": "v1"})
    engine.session("b", meta={"tenant": "t2", "scenario": "crop", "prompt_version": "v2"})
    assert [i.id for i in engine.sessions(tenant="t1")] == ["a"]
    assert [i.id for i in engine.sessions(scenario="crop")] == ["b"]
    assert [i.id for i in engine.sessions(prompt_version="v2")] == ["b"]
    assert {i.id for i in engine.sessions(status="healthy")} == {"a", "b"}
    assert engine.sessions(status="looping") == []


def test_sessions_are_counted_by_the_same_filter_they_are_listed_by(engine):
    engine.session("a", meta={"tenant": "t1", "scenario": "refund"})
    engine.session("b", meta={"tenant": "t1", "scenario": "crop"})
    engine.session("c", meta={"tenant": "t2", "scenario": "crop"})
    engine.store.set_status("c", SessionStatus.STOPPED, None, engine.clock())
    filters = [
        SessionFilter(),
        SessionFilter(tenant="t1"),
        SessionFilter(tenant="t1", scenario="crop"),
        SessionFilter(status=SessionStatus.HEALTHY, scenario="crop"),
        SessionFilter(status=SessionStatus.STOPPED),
        SessionFilter(tenant="nobody"),
        SessionFilter(updated_since=engine.clock() + 3600),
    ]
    expected = [3, 2, 1, 1, 1, 0, 0]
    for where, count in zip(filters, expected, strict=True):
        assert engine.store.count_sessions(where) == count, where
        assert len(engine.store.list_sessions(where)) == count, where
    assert [i.id for i in engine.store.list_sessions(SessionFilter(tenant="t1", scenario="crop"))] \
        == ["b"]


def test_sessions_page_by_cursor_without_gaps_or_repeats(store_url):
    now = [1000.0]
    engine = Engine.open(store_url, clock=lambda: now[0])
    for i in range(23):
        if i % 3 == 0:
            now[0] += 1.0  # three sessions share each activity time: the id breaks the tie
        engine.session(f"s-{i:02d}", meta={"tenant": "acme" if i % 2 else "other"})
    listed = [i.id for i in engine.sessions(limit=100)]
    assert listed[:4] == ["s-22", "s-21", "s-20", "s-19"]  # newest first, greater id first
    for filters in ({}, {"tenant": "acme"}, {"status": "healthy"}):
        expected = [i.id for i in engine.sessions(limit=100, **filters)]
        pages: list[list[str]] = []
        after = None
        while True:
            page = engine.sessions(limit=4, after=after, **filters)
            pages.append([i.id for i in page])
            if len(page) < 4:
                break
            after = SessionCursor.after(page[-1]).encode() if len(pages) % 2 else page[-1]
        assert [sid for p in pages for sid in p] == expected, filters
        assert all(len(p) == 4 for p in pages[:-1])
    assert engine.sessions(after=SessionCursor(0.0, "")) == []
    with pytest.raises(ValueError, match="cursor"):
        engine.sessions(after="not a cursor")


# -- history and state ------------------------------------------------------------------------
def test_messages_and_variables_round_trip(engine):
    s = engine.session("s")
    s.append_message("user", "I want a refund")
    s.append_message("assistant", None, tool_calls=[{"name": "refund_api", "args": {"o": 1}}])
    s.set_var("order_id", "A-1")
    s.set_vars({"amount": 12.5, "tags": ["x", "y"]})
    s.del_var("tags")
    st = s.state()
    assert st.messages == [
        {"role": "user", "content": "I want a refund"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"name": "refund_api", "args": {"o": 1}}]},
    ]
    assert st.variables == {"order_id": "A-1", "amount": 12.5}


def test_the_live_tail_is_the_summary_the_values_and_the_newest_messages_at_once(engine):
    s = engine.session("tail")
    s.append_messages([{"role": "user", "content": f"m{i}"} for i in range(6)])
    s.set_vars({"a": 1, "b": [1, 2]})
    read = engine.documents.live_tail
    epoch, count, values, tail = read("tail", "var", 3)
    assert (epoch, count) == (s.info().epoch, 6) and values == {"a": 1, "b": [1, 2]}
    assert tail == engine.documents.live_messages("tail", since=3)
    assert read("tail", "var", 10)[3] == engine.documents.live_messages("tail")
    assert read("tail", "var", 0)[3] == [] and read("tail", "other", 1)[2] == {}
    snap = s.snapshot("six")
    s.append_message("user", "m6")
    s.rollback(to=snap, actor="test", reason="r", notice=False)
    epoch, count, _, tail = read("tail", "var", 2)
    assert (epoch, count) == (s.info().epoch, 6) and [m["content"] for m in tail] == ["m4", "m5"]
    assert read("nobody", "var", 2) is None
    for bad in (-1, 1.5, "2", True):
        with pytest.raises(ValueError, match="last"):
            read("tail", "var", bad)
    with pytest.raises(ValueError, match="namespace"):
        read("tail", "not an identifier", 1)


def test_values_that_json_cannot_hold_are_rejected_and_nothing_is_written(engine):
    s = engine.session("s")
    with pytest.raises(TypeError, match="object"):
        s.set_var("bad", object())
    with pytest.raises(TypeError):
        s.append_message("user", {"f": lambda: 1})
    with pytest.raises(TypeError):
        s.step("tool", {"when": float("nan")})
    with pytest.raises(ValueError):
        s.append_message("", "no role")
    assert s.state().messages == [] and s.state().variables == {}
    assert s.steps() == []


def test_args_are_canonicalized_deterministically(engine):
    s = engine.session("s")
    args = {"b": (1, 2), "a": {3, 1, 2}, "t": dt.datetime(2026, 1, 2, 3, 4, 5),
            "d": decimal.Decimal("1.10"), "raw": b"\x00\xff"}
    with s.step("tool", args) as call:
        call.ok("fine")
    with s.step("tool", dict(reversed(list(args.items())))) as call:
        call.ok("fine")
    first, second = s.steps()
    assert first.args == {"a": [1, 2, 3], "b": [1, 2], "d": "1.10",
                          "raw": {"$bytes": "AP8="}, "t": "2026-01-02T03:04:05"}
    assert first.fingerprint == second.fingerprint


# -- snapshots and rollback -------------------------------------------------------------------
def test_rollback_restores_state_and_keeps_the_abandoned_branch(engine):
    s = engine.session("s", meta={"locale": "en"})
    s.append_message("user", "hello")
    s.set_var("v", 1)
    snap = s.snapshot("start")
    s.append_message("assistant", "wrong 1")
    s.set_var("v", 2)
    s.set_var("w", 3)
    s.snapshot("later")
    s.append_message("assistant", "wrong 2")

    r = s.rollback(to=snap, actor="alice", reason="bad answers", notice=False)
    st = s.state()
    assert st.messages == [{"role": "user", "content": "hello"}]
    assert st.variables == {"v": 1}
    assert st.head == snap and st.status == "rolled_back"
    assert r.abandoned_messages == 2 and r.abandoned_snapshots == 1 and r.epoch == 1

    abandoned = [m.message["content"] for m in s.messages() if m.branch == r.branch]
    assert abandoned == ["wrong 1", "wrong 2"]
    nodes = {n.label: n for n in s.tree()}
    assert nodes["start"].on_live_line and nodes["start"].is_head
    assert not nodes["later"].on_live_line and not nodes["later"].restorable
    assert "alice" in nodes["later"].abandoned_reason
    assert "bad answers" in nodes["later"].abandoned_reason
    [branch] = s.branches()
    assert (branch.actor, branch.reason, branch.from_snapshot) == ("alice", "bad answers", snap)

    # the line continues from the snapshot
    s.append_message("assistant", "right")
    assert [m["content"] for m in s.state().messages] == ["hello", "right"]


def test_rollback_to_unknown_or_abandoned_snapshot_changes_nothing(engine):
    s = engine.session("s")
    first = s.snapshot("a")
    s.append_message("user", "x")
    second = s.snapshot("b")
    s.rollback(to=first, actor="alice", reason="r", notice=False)
    before = (s.state(), len(s.tree()), len(engine.audit()))
    with pytest.raises(UnknownSnapshot, match="snap-999"):
        s.rollback(to="snap-999", actor="alice", reason="r")
    with pytest.raises(SnapshotNotRestorable, match="abandoned"):
        s.rollback(to=second, actor="alice", reason="r")
    assert (s.state(), len(s.tree()), len(engine.audit())) == before


def test_notice_uses_the_session_locale_and_custom_text(engine):
    zh = engine.session("zh", meta={"locale": "zh-CN"})
    snap = zh.snapshot()
    zh.append_message("user", "x")
    r = zh.rollback(to=snap, actor="op", reason="r")
    assert r.notice == TEMPLATES["zh"]
    last = zh.state().messages[-1]
    assert last["role"] == "assistant" and last["content"] == TEMPLATES["zh"]
    assert last["rewind_notice"] is True

    en = engine.session("en")  # never rolled back: the notice claims no reset
    assert en.inject_notice(actor="op") == PAUSED_TEMPLATES["en"]
    assert en.inject_notice("Custom words", actor="op") == "Custom words"
    assert [m["content"] for m in en.state().messages] == [PAUSED_TEMPLATES["en"],
                                                          "Custom words"]
    assert zh.inject_notice(actor="op") == TEMPLATES["zh"]  # stands rolled back
    actions = [(e.action, e.actor, e.session) for e in engine.audit(action="notice")]
    assert ("notice", "op", "en") in actions and ("notice", "op", "zh") in actions


def test_viewers_cannot_act(engine):
    s = engine.session("s")
    s.snapshot()
    with pytest.raises(PermissionDenied):
        engine.rollback("s", actor=Actor("vic", "viewer"), reason="x")
    with pytest.raises(PermissionDenied):
        engine.get_session("s").inject_notice(actor=Actor("vic", "viewer"))
    assert engine.audit() == [] and s.state().messages == []


def test_retention_window_retires_old_named_snapshots(store_url):
    engine = Engine.open(store_url, retention=Retention(keep_snapshots=2, keep_step_snapshots=3))
    s = engine.session("s")
    ids = [s.snapshot(f"n{i}") for i in range(4)]
    restorable = {n.id for n in s.tree() if n.restorable}
    assert restorable == set(ids[-2:])
    with pytest.raises(SnapshotNotRestorable, match="retired"):
        s.rollback(to=ids[0], actor="a", reason="r")
    for i in range(6):
        with s.step("tool", {"i": i}) as call:
            call.ok(i)
    step_snaps = [n for n in s.tree() if n.kind == "step"]
    assert [n.restorable for n in step_snaps] == [False] * 3 + [True] * 3


def test_purge_removes_old_abandoned_branches_and_records_it(store_url):
    now = [1_000_000.0]
    engine = Engine.open(store_url, clock=lambda: now[0])
    s = engine.session("s")
    snap = s.snapshot()
    s.append_message("user", "gone later")
    s.rollback(to=snap, actor="a", reason="r", notice=False)
    assert engine.fleet.purge_abandoned(older_than_s=3600)["branches"] == 0
    now[0] += 7200
    removed = engine.fleet.purge_abandoned(older_than_s=3600)
    assert removed["branches"] == 1 and removed["messages"] == 1
    assert s.messages() == [] and s.branches() == []
    assert engine.audit(action="retention")[0].detail["messages"] == 1


# -- steps and loops --------------------------------------------------------------------------
def test_step_records_outcomes_and_exceptions(engine):
    s = engine.session("s")
    with s.step("search", {"q": "rates"}) as call:
        call.ok({"hits": 3})
    with pytest.raises(RuntimeError):
        with s.step("fetch", {"url": "u"}):
            raise RuntimeError("HTTP 500")
    ok, failed = s.steps()
    assert (ok.n, ok.tool, ok.status, ok.on_live_line) == (1, "search", "ok", True)
    assert '"hits":3' in ok.result_preview and ok.result_digest
    assert failed.status == "error" and failed.error == "RuntimeError: HTTP 500"
    assert ok.snapshot is not None and ok.ended_at >= ok.started_at


def test_loop_rolls_back_to_before_the_loop_and_injects_notice(engine):
    s = engine.session("s", meta={"locale": "en"})
    s.append_message("user", "crop the image")
    with s.step("load_image", {"id": 7}) as call:
        call.ok("loaded")
    s.append_message("tool", "loaded")
    exc = _fail_three_times(s)
    assert exc.verdict.looping and exc.rollback is not None
    st = s.state()
    assert [m["content"] for m in st.messages] == ["crop the image", "loaded", TEMPLATES["en"]]
    live_tools = [x.tool for x in s.steps(live_only=True)]
    assert live_tools == ["load_image"]
    info = s.info()
    assert info.status == "rolled_back" and info.loops == 1 and info.rollbacks == 1
    verdict = info.last_verdict
    assert verdict["loop_start_step"] == 2 and verdict["evidence_steps"][-1] == 4
    assert verdict["explanation"]
    rollback = engine.audit(action="rollback")[0]
    assert rollback.actor == "rewind" and "loop detected" in rollback.reason


def test_flag_policy_leaves_the_session_looping_for_an_operator(engine):
    s = engine.session("s", on_loop="flag")
    s.snapshot("start")
    with pytest.raises(LoopWaiting):  # flagged: the session waits for on-call
        for _ in range(3):
            with s.step("image_crop", {"x": 1}) as call:
                call.fail("invalid slice")
    assert s.info().status == "looping" and s.info().waiting
    target = s.suggested_target()
    preview = s.preview_rollback()
    assert preview.target == target and [x.n for x in preview.steps] == [1, 2, 3]
    r = engine.rollback("s", actor=Actor("alice"), reason="loop on image_crop")
    assert r.target == target and r.abandoned_steps == 3
    assert s.info().status == "rolled_back"


def test_nudge_then_rollback_policy(engine):
    s = engine.session("s", on_loop="nudge_then_rollback")
    s.snapshot("start")
    for _ in range(3):
        with s.step("image_crop", {"x": 1}) as call:
            call.fail("invalid slice")
    nudge = s.state().messages[-1]
    assert nudge["role"] == "system" and nudge.get("rewind_nudge") is True
    with pytest.raises(LoopDetected) as info:
        for _ in range(5):
            with s.step("image_crop", {"x": 1}) as call:
                call.fail("invalid slice")
    assert info.value.rollback is not None


def test_step_in_flight_during_a_rollback_lands_late_on_the_branch(engine):
    agent = engine.session("s")
    snap = agent.snapshot("safe")
    agent.append_message("user", "go")
    operator = Engine(engine.store)  # another handle, as the console would hold
    with agent.step("slow_tool", {"n": 1}) as call:
        operator.rollback("s", to=snap, actor="alice", reason="looping", notice=False)
        call.ok("too late")
    assert call.late
    [rec] = agent.steps()
    assert rec.late and not rec.on_live_line and rec.branch is not None
    assert agent.steps(live_only=True) == []
    # the same handle continues from the rolled-back state
    agent.append_message("assistant", "again")
    assert [m["content"] for m in agent.state().messages] == ["again"]
    with agent.step("next_tool", {}) as call:
        call.ok(1)
    assert [x.tool for x in agent.steps(live_only=True)] == ["next_tool"]


# -- saga -------------------------------------------------------------------------------------
def test_compensations_run_newest_first_exactly_once(engine):
    s = engine.session("s")
    snap = s.snapshot()
    for i, name in enumerate(["points.deduct", "inventory.reserve"]):
        with s.step(name, {"i": i}, side_effect=True, compensation=(f"{name}.undo", {"i": i})) as c:
            c.ok("done")
    with s.step("no_effect", {}) as c:
        c.ok("x")
    with s.step("points.deduct", {"i": 9}, side_effect=True,
                compensation=("points.deduct.undo", {"i": 9})) as c:
        c.fail("declined")  # failed side effects have nothing to undo
    r = s.rollback(to=snap, actor="alice", reason="loop", notice=False)
    assert [c.name for c in r.compensations] == ["inventory.reserve.undo", "points.deduct.undo"]
    assert all(c.status == "pending" for c in engine.compensations(session="s"))

    calls = []
    worker = Engine(engine.store)
    worker.compensations.register("points.deduct.undo", lambda a, k: calls.append(("p", a, k)))
    worker.compensations.register("inventory.reserve.undo", lambda a, k: calls.append(("i", a, k)))
    done = worker.compensations.run()
    assert [c.status for c in done] == ["done", "done"]
    assert [c[:2] for c in calls] == [("i", {"i": 1}), ("p", {"i": 0})]
    assert [c[2].split("@")[0] for c in calls] == ["s#2", "s#1"]
    assert calls[0][2] == r.compensations[0].idempotency_key
    assert worker.compensations.run() == []  # nothing twice
    assert {c.status for c in engine.compensations(session="s")} == {"done"}
    outcomes = [e.detail["status"] for e in engine.audit(action="compensation")]
    assert outcomes == ["done", "done"]


def test_failing_compensation_is_retried_then_stays_failed(store_url):
    now = [1000.0]
    engine = Engine.open(store_url, compensation_attempts=3, clock=lambda: now[0])
    s = engine.session("s")
    snap = s.snapshot()
    with s.step("pay", {}, side_effect=True, compensation=("pay.undo", {"id": 1})) as c:
        c.ok("paid")
    attempts = []

    def broken(args, key):
        attempts.append(key)
        raise RuntimeError("refund service down")

    engine.compensations.register("pay.undo", broken)
    s.rollback(to=snap, actor="alice", reason="r", notice=False)  # runs it once right away
    [comp] = engine.compensations(session="s")
    # A blip needs no person: the next try waits (2 s, then 8 s), it does not run back to back.
    assert comp.status == "pending" and comp.next_attempt_at == 1002.0
    assert engine.compensations.run() == [] and len(attempts) == 1  # not due yet
    now[0] = 1002.0
    engine.compensations.run()
    assert engine.compensations(session="s")[0].next_attempt_at == 1010.0
    now[0] = 1010.0
    engine.compensations.run()
    [comp] = engine.compensations(session="s")
    assert comp.status == "failed" and comp.attempts == 3 and "refund service down" in comp.error
    assert comp.next_attempt_at is None
    assert len(attempts) == 3 and attempts[0] == attempts[2] == comp.idempotency_key
    assert comp.idempotency_key.startswith("s#1@")
    assert engine.compensations(status="failed")[0].id == comp.id


def test_expired_lease_is_taken_over_with_the_same_key(store_url):
    now = [1000.0]
    engine = Engine.open(store_url, clock=lambda: now[0])
    s = engine.session("s")
    snap = s.snapshot()
    with s.step("pay", {}, side_effect=True, compensation=("pay.undo", {})) as c:
        c.ok("paid")
    s.rollback(to=snap, actor="a", reason="r", notice=False)
    crashed = engine.store.claim_compensation(["pay.undo"], "crashed-worker", 30, now[0])
    assert crashed is not None
    assert engine.store.claim_compensation(["pay.undo"], "other", 30, now[0]) is None
    now[0] += 31
    keys = []
    engine.compensations.register("pay.undo", lambda a, k: keys.append(k))
    engine.compensations.run()
    assert keys == [crashed.idempotency_key]
    engine.store.finish_compensation(crashed.id, "crashed-worker", True, None, now[0], True)
    [comp] = engine.compensations()
    assert comp.status == "done" and comp.attempts == 2


# -- feed and audit ---------------------------------------------------------------------------
def test_event_feed_is_readable_from_a_cursor(engine):
    cursor = engine.store.last_event_id()
    s = engine.session("s")
    s.append_message("user", "hi")
    snap = s.snapshot()
    events = engine.events(since=cursor)
    assert [e.type for e in events] == ["session", "message", "snapshot"]
    assert all(e.session == "s" for e in events)
    assert engine.events(since=events[-1].id) == []
    s.append_message("assistant", "to be rolled back")  # a rollback needs something to abandon
    s.rollback(to=snap, actor="alice", reason="r", notice=False)
    msg, rb = engine.events(since=events[-1].id)
    assert msg.type == "message" and rb.type == "rollback" and rb.data["target"] == snap
    assert [e.id for e in engine.events(since=0, session="s")] == [
        e.id for e in events
    ] + [msg.id, rb.id]


def test_fleet_stats(engine):
    s = engine.session("s", on_loop="flag")
    s.snapshot()
    with pytest.raises(LoopWaiting):
        for _ in range(3):
            with s.step("t", {}) as c:
                c.fail("boom")
    stats = engine.fleet.stats()
    assert stats["sessions"] == 1 and stats["looping"] == 1 and stats["active"] == 1
    engine.rollback("s", actor="alice", reason="r")
    stats = engine.fleet.stats()
    assert stats["looping"] == 0 and stats["rollbacks_window"] == 1


def test_token_breakdown_is_kept_with_its_step(engine):
    s = engine.session("s")
    breakdown = {"system": 12, "dialogue": 300, "memories": 40, "reserve": 100, "dropped": 7}
    with s.step("search", {"q": 1}, context=breakdown) as call:
        call.ok("r")
    s.agent_turn("thinking", context={**breakdown, "dialogue": 350})
    first, second = s.steps()
    assert first.budget == breakdown
    assert second.budget["dialogue"] == 350 and second.tool is None
    with pytest.raises(TypeError):
        s.step("x", {}, context="not a context")


def test_the_turn_is_kept_with_its_step_live_and_after_a_rollback(engine):
    s = engine.session("s")
    with s.step("search", {"q": 1}, turn="resp_1") as call:
        call.ok("r")
    snap = s.snapshot("after the search")
    with s.step("fetch", {"id": 2}, turn="resp_2", side_effect=True) as call:
        call.fail("HTTP 500")
    s.agent_turn("done", turn="resp_3")
    assert [(r.tool, r.turn) for r in s.steps()] == [
        ("search", "resp_1"), ("fetch", "resp_2"), (None, "resp_3")]
    s.rollback(to=snap, actor="alice", reason="test", notice=False)
    assert [(r.turn, r.on_live_line) for r in s.steps()] == [
        ("resp_1", True), ("resp_2", False), ("resp_3", False)]


# -- documents and deletion -------------------------------------------------------------------
def test_documents_are_not_touched_by_rollbacks(engine):
    s = engine.session("s")
    snap = s.snapshot()
    store = engine.store
    store.doc_put("s", "lg", {"ckpt:0002": {"v": 2}, "ckpt:0001": {"v": 1}, "blob:x": [1]}, 1.0)
    s.append_message("user", "x")  # documents alone are nothing to roll back
    s.rollback(to=snap, actor="a", reason="r", notice=False)
    assert store.doc_get("s", "lg", ["ckpt:0001", "nope"]) == {"ckpt:0001": {"v": 1}}
    assert list(store.doc_scan("s", "lg", "ckpt:")) == ["ckpt:0001", "ckpt:0002"]
    store.doc_put("s", "lg", {"ckpt:0001": None}, 2.0)
    assert list(store.doc_scan("s", "lg")) == ["blob:x", "ckpt:0002"]
    assert store.doc_scan("s", "other") == {}
    with pytest.raises(UnknownSession):
        store.doc_put("missing", "lg", {"k": 1}, 1.0)



def test_a_page_of_documents_is_the_last_ones_below_a_key(engine):
    """`scan_documents(below=…, last=…)`: a page of the newest documents, in key order, the
    way a checkpointer lists a thread's latest checkpoints without reading the rest."""
    engine.session("p")
    engine.documents.put("p", "lg", {f"c/{i:03d}": {"i": i} for i in range(12)} | {"w/x": 1})
    assert list(engine.documents.scan("p", "lg", "c/", last=3)) == ["c/009", "c/010", "c/011"]
    assert list(engine.documents.scan("p", "lg", "c/", below="c/005", last=2)) == [
        "c/003", "c/004"]
    assert list(engine.documents.scan("p", "lg", "c/", below="c/002")) == ["c/000", "c/001"]
    assert engine.documents.scan("p", "lg", "c/", below="c/000", last=5) == {}
    assert engine.documents.scan("p", "lg", "c/", last=0) == {}
    assert len(engine.documents.scan("p", "lg", "c/", last=50)) == 12
    with pytest.raises(ValueError, match="last must be a count"):
        engine.documents.scan("p", "lg", "c/", last=-1)


def test_documents_by_key_and_under_a_prefix_in_one_read(engine):
    """`documents.get(keys, prefix=…)`: the keys that exist and every document under the prefix
    (what `scan` gives for it), bytes and JSON alike; a key under the prefix comes back once."""
    engine.session("r")
    engine.documents.put("r", "lg", {"c/1": {"id": 1}, "c/2": {"id": 2}, "w/1/a": {"i": 0},
                                     "w/1/b": b"\x00raw", "w/10/a": {"i": 9}, "w/2/a": {"i": 2}})
    assert engine.documents.get("r", "lg", ["c/1", "nope"], prefix="w/1/") == {
        "c/1": {"id": 1}, "w/1/a": {"i": 0}, "w/1/b": b"\x00raw"}
    assert engine.documents.get("r", "lg", [], prefix="w/1/") == engine.documents.scan(
        "r", "lg", "w/1/")
    assert engine.documents.get("r", "lg", ["w/2/a"], prefix="w/2/") == {"w/2/a": {"i": 2}}
    assert engine.documents.get("r", "lg", ["c/2"], prefix="x/") == {"c/2": {"id": 2}}
    assert engine.documents.get("missing", "lg", ["c/1"], prefix="w/") == {}
    many = [f"k/{i:04d}" for i in range(1_200)]  # past one statement's worth of keys
    engine.documents.put("r", "lg", {k: {"k": k} for k in many[::2]})
    assert engine.documents.get("r", "lg", many, prefix="w/1/") == {
        **{k: {"k": k} for k in many[::2]}, "w/1/a": {"i": 0}, "w/1/b": b"\x00raw"}


def test_a_session_and_its_values_in_one_read(engine):
    """`documents.session_values`: the summary `session_info` gives and the values `values`
    gives, together; None and {} for an unknown session, {} for a namespace never written."""
    assert engine.documents.session_values("nobody", "head") == (None, {})
    s = engine.session("v", meta={"tenant": "acme"})
    assert engine.documents.session_values("v", "head") == (engine.session_info("v"), {})
    engine.documents.put_values("v", "head", {"root": "c1", "fence": {"base": None, "until": "x"}})
    engine.documents.put_values("v", "other", {"root": "elsewhere"})
    s.append_message("user", "hi")
    info, values = engine.documents.session_values("v", "head")
    assert info == engine.session_info("v") and info.messages == 1
    assert values == engine.documents.values("v", "head") == {
        "root": "c1", "fence": {"base": None, "until": "x"}}


def test_a_write_that_creates_its_session(engine):
    """`write_session(create=meta)` creates a missing session (one transaction on SQLite), and
    merges the meta into an existing one; a bad meta writes nothing."""
    epoch, node = engine.documents.write_session(
        "fresh", messages=[{"role": "user", "content": "hi"}], values={"head": {"root": "c1"}},
        snapshot="first", documents={"lg": {"c/1": {"id": "1"}}}, stamp=("lg", "c/1"),
        create={"integration": "langgraph"})
    info = engine.session_info("fresh")
    assert info is not None and info.meta == {"integration": "langgraph"}
    assert info.messages == 1 and info.head == node.id and epoch == 0
    assert engine.documents.get("fresh", "lg", ["c/1"])["c/1"]["snap"] == node.id
    assert [e.type for e in engine.events(session="fresh")] == [
        "session", "message", "head", "snapshot"]
    engine.session("old", meta={"tenant": "acme"})
    engine.documents.write_session("old", documents={"lg": {"k": 1}},
                                   create={"integration": "langgraph"})
    assert engine.session_info("old").meta == {"tenant": "acme", "integration": "langgraph"}
    with pytest.raises(TypeError, match="meta tenant must be a string"):
        engine.documents.write_session("never", documents={"lg": {"k": 1}}, create={"tenant": 7})
    assert engine.session_info("never") is None
    with pytest.raises(UnknownSession):
        engine.documents.write_session("never", documents={"lg": {"k": 1}})


def test_a_write_that_expects_a_snapshot_and_epoch_writes_only_there(engine):
    """`write_session(expect=(snapshot, epoch))` writes when the session is at that epoch with
    that newest manual snapshot (step snapshots since are no matter), and writes nothing once a
    manual snapshot or a rollback moved it; a session it creates is at (None, 0)."""
    with pytest.raises(RollbackConflict):
        engine.documents.write_session("cas", documents={"lg": {"k": 1}},
                                       create={"integration": "langgraph"},
                                       expect=(None, 1))
    assert engine.session_info("cas") is None
    epoch, first = engine.documents.write_session(
        "cas", values={"head": {"root": "c1"}}, snapshot="c1",
        documents={"lg": {"c/1": {"id": "1"}}}, stamp=("lg", "c/1"),
        create={"integration": "langgraph"}, expect=(None, 0))
    assert first is not None and epoch == 0
    _, second = engine.documents.write_session(
        "cas", values={"head": {"root": "c2"}}, snapshot="c2", expect=(first.id, 0))
    assert second is not None and engine.session_info("cas").head == second.id
    stale = (first.id, 0)
    before = engine.session_info("cas")
    with pytest.raises(RollbackConflict):
        engine.documents.write_session("cas", messages=[{"role": "user", "content": "x"}],
                                       values={"head": {"root": "c3"}}, snapshot="c3",
                                       documents={"lg": {"c/3": {"id": "3"}}}, expect=stale)
    assert engine.session_info("cas") == before
    assert engine.documents.values("cas", "head") == {"root": "c2"}
    assert engine.documents.get("cas", "lg", ["c/3"]) == {}
    with engine.get_session("cas").step("tool", {"x": 1}) as call:  # a step snapshot: no matter
        call.ok("fine")
    assert engine.session_info("cas").head != second.id
    _, third = engine.documents.write_session("cas", snapshot="c3", expect=(second.id, 0))
    engine.get_session("cas").append_message("user", "after c3")
    engine.get_session("cas").snapshot("an operator's")  # a manual snapshot moves it
    with pytest.raises(RollbackConflict):
        engine.documents.write_session("cas", snapshot="c4", expect=(third.id, 0))
    engine.rollback("cas", to=third.id, reason="test", notice=False)  # same newest, new epoch
    second = third
    with pytest.raises(RollbackConflict):
        engine.documents.write_session("cas", snapshot="c3", expect=(second.id, 0))
    info = engine.session_info("cas")
    engine.documents.write_session("cas", snapshot="c4", expect=(info.head, info.epoch))
    with pytest.raises(TypeError):
        engine.documents.write_session("cas", snapshot="c4", expect=("snap", "1"))


def test_documents_may_be_bytes_kept_as_they_are(engine):
    """A document given as bytes reads back as those bytes (any byte, none of them JSON), beside
    JSON documents, through every write path; deleting it works like any other."""
    s = engine.session("raw")
    blob = bytes(range(256)) * 3 + b"b64:{not json"
    engine.documents.put("raw", "lg", {"b/1": blob, "c/1": {"v": 1}, "b/empty": b"",
                                       "b/json-like": b'{"a": 1}'})
    assert engine.documents.get("raw", "lg", ["b/1", "c/1", "b/empty", "b/json-like"]) == {
        "b/1": blob, "c/1": {"v": 1}, "b/empty": b"", "b/json-like": b'{"a": 1}'}
    assert engine.documents.scan("raw", "lg", "b/") == {
        "b/1": blob, "b/empty": b"", "b/json-like": b'{"a": 1}'}
    engine.documents.write_session("raw", snapshot="with bytes",
                         documents={"lg": {"b/2": bytearray(b"\x00\xff"), "b/1": None,
                                           "c/2": {"id": "2"}}},
                         stamp=("lg", "c/2"))
    docs = engine.documents.scan("raw", "lg")
    assert docs["b/2"] == b"\x00\xff" and isinstance(docs["b/2"], bytes) and "b/1" not in docs
    assert docs["c/2"]["id"] == "2" and docs["c/2"]["snap"]
    assert s.info().head is not None


def test_a_bytes_document_is_measured_by_its_bytes(open_engine, store_url):
    from engine import Limits
    from engine.errors import SizeLimitExceeded

    engine = open_engine(store_url, limits=Limits(document_bytes=1_000))
    engine.session("raw")
    engine.documents.put("raw", "lg", {"k": b"\xff" * 990})  # as base64 it would not fit
    with pytest.raises(SizeLimitExceeded):
        engine.documents.put("raw", "lg", {"k": b"\xff" * 1_000})
    assert engine.documents.get("raw", "lg", ["k"]) == {"k": b"\xff" * 990}
    with pytest.raises(TypeError):
        engine.documents.put_fleet("lg", {"k": b"x"})

def test_delete_session_removes_everything_but_the_audit(engine):
    s = engine.session("gone")
    s.append_message("user", "x")
    s.snapshot()
    engine.store.doc_put("gone", "lg", {"k": 1}, 1.0)
    engine.session("stays").append_message("user", "y")
    assert engine.fleet.delete_session("gone", actor="alice", reason="test data")
    assert [i.id for i in engine.sessions()] == ["stays"]
    with pytest.raises(UnknownSession):
        engine.get_session("gone")
    assert engine.store.doc_scan("gone", "lg") == {}
    assert engine.audit(action="delete")[0].session == "gone"
    assert not engine.fleet.delete_session("gone", actor="alice")
    fresh = engine.session("gone")
    assert fresh.state().messages == [] and fresh.tree() == []


def test_a_late_side_effect_is_still_compensated(engine):
    s = engine.session("s")
    s.append_message("user", "hi")
    operator = Engine(engine.store)
    with s.step("charge", {"amt": 1}, side_effect=True,
                compensation=("charge.undo", {"amt": 1})) as call:
        operator.rollback("s", to=call.snapshot_id, actor="alice", reason="r", notice=False)
        call.ok("charged")
    assert call.late
    [comp] = engine.compensations(session="s")
    assert (comp.name, comp.step, comp.status) == ("charge.undo", call.n, "pending")


def test_a_recreated_session_gets_fresh_compensation_keys(engine):
    keys = []
    for _ in range(2):
        s = engine.session("again")
        snap = s.snapshot()
        with s.step("pay", {}, side_effect=True, compensation=("pay.undo", {})) as c:
            c.ok("paid")
        r = s.rollback(to=snap, actor="a", reason="r", notice=False)
        [comp] = r.compensations
        keys.append(comp.idempotency_key)
        engine.fleet.delete_session("again", actor="a")
    assert keys[0] != keys[1] and all(k.startswith("again#1@") for k in keys)
    assert len(engine.compensations(status="pending")) == 2


def test_fleet_stats_count_every_compensation(engine):
    s = engine.session("many", on_loop="off")
    start = s.snapshot("start")
    for i in range(1005):
        if i and i % 400 == 0:  # runs of the agent: the hard step budget counts per task
            s.new_task()
        with s.step("debit", {"i": i}, side_effect=True, compensation=("refund", {"i": i}),
                    snapshot=False) as c:
            c.ok(i)
    engine.rollback("many", to=start, actor="o", reason="x", notice=False)
    assert engine.fleet.stats()["compensations_pending"] == 1005


def test_a_rollback_that_expects_an_older_epoch_is_refused(engine):
    s = engine.session("s")
    snap = s.snapshot("a")
    s.append_message("user", "x")
    seen = s.info().epoch
    engine.rollback("s", to=snap, actor="bob", reason="first", notice=False)
    s.append_message("user", "y")
    with pytest.raises(RollbackConflict, match="someone else"):
        engine.rollback("s", to=snap, actor="alice", reason="late", expect_epoch=seen)
    assert [m["content"] for m in s.state().messages] == ["y"]
    r = engine.rollback("s", to=snap, actor="alice", reason="fresh", notice=False,
                        expect_epoch=s.info().epoch)
    assert r.epoch == seen + 2


def test_a_fork_moves_the_line_without_counting_as_a_recovery(engine):
    s = engine.session("s")
    snap = s.snapshot("parent")
    s.append_message("user", "first path")
    r = engine.rollback("s", to=snap, actor="langgraph", reason="fork", notice=False,
                        kind="fork")
    info = s.info()
    assert info.status == "healthy" and info.rollbacks == 0 and info.epoch == r.epoch == 1
    assert s.state().messages == [] and len(s.branches()) == 1
    assert [e.action for e in engine.audit(session="s")] == ["fork"]
    assert engine.events(session="s")[-1].type == "fork"
    with pytest.raises(ValueError):
        engine.rollback("s", to=snap, actor="a", reason="r", kind="sideways")


def test_rollbacks_in_the_window_are_counted_by_time(store_url):
    now = [1_000_000.0]
    engine = Engine.open(store_url, clock=lambda: now[0])
    s = engine.session("s")
    snap = s.snapshot()
    for _ in range(3):
        s.append_message("user", "x")
        engine.rollback("s", to=snap, actor="a", reason="r", notice=False)
        now[0] += 1000
    engine.get_session("s").inject_notice(actor="a")
    assert engine.store.count_audit("rollback", 1_000_000.0) == 3
    assert engine.store.count_audit("rollback", 1_000_500.0) == 2
    assert engine.store.count_audit("rollback", 1_010_000.0) == 0
    assert engine.fleet.stats(window_s=2500)["rollbacks_window"] == 2  # now: 1_003_000


# -- hardening ---------------------------------------------------------------------
def _everything(engine, sid):
    """What a refused operation must leave unchanged (the session, its lines, audit, feed)."""
    s = engine.get_session(sid)
    return (s.info(), s.state(), s.tree(), s.branches(), s.steps(), s.messages(),
            engine.audit(), engine.store.last_event_id(), engine.compensations())


def test_a_rollback_with_nothing_to_abandon_is_refused_and_writes_nothing(engine):
    s = engine.session("s", meta={"locale": "en"})
    s.append_message("user", "hello")
    s.set_var("v", 1)
    s.memory.add("the order is A-1")
    snap = s.snapshot("head")
    before = _everything(engine, "s")
    with pytest.raises(NothingToRollBack, match="nothing after"):
        engine.rollback("s", to=snap, actor="alice", reason="r")  # with the default notice
    with pytest.raises(NothingToRollBack):
        s.rollback(to=snap, actor="alice", reason="r", notice=False)
    assert _everything(engine, "s") == before  # no branch, no notice, no epoch, no audit row

    # a rollback leaves nothing behind either: doing it again is refused
    s.append_message("assistant", "wrong")
    s.rollback(to=snap, actor="alice", reason="r", notice=False)
    again = _everything(engine, "s")
    with pytest.raises(NothingToRollBack):
        engine.rollback("s", to=snap, actor="alice", reason="again", notice=False)
    assert _everything(engine, "s") == again
    assert s.info().epoch == 1 and len(s.branches()) == 1


@pytest.mark.parametrize("write", ["message", "variable", "deleted variable", "memory",
                                   "snapshot", "step"])
def test_any_write_after_the_target_is_something_to_roll_back(engine, write):
    s = engine.session("s")
    s.set_var("keep", 1)
    snap = s.snapshot("target")
    if write == "message":
        s.append_message("user", "x")
    elif write == "variable":
        s.set_var("v", 2)
    elif write == "deleted variable":
        s.del_var("keep")
    elif write == "memory":
        s.memory.add("a fact")
    elif write == "snapshot":
        s.snapshot("later")
    else:
        with s.step("tool", {}, snapshot=False) as call:
            call.ok(1)
    r = s.rollback(to=snap, actor="alice", reason="r", notice=False)
    assert r.epoch == 1 and s.state().variables == {"keep": 1}
    assert s.memory.recall("fact", k=5) == []


def test_rolling_back_a_stopped_session_keeps_it_stopped(engine):
    s = engine.session("s")
    snap = s.snapshot("start")
    s.append_message("user", "x")
    s.stop()
    r = engine.rollback("s", to=snap, actor="alice", reason="clean up", notice=False)
    info = s.info()
    assert info.status == "stopped" and info.rollbacks == 1 and info.epoch == r.epoch == 1
    assert s.state().messages == []
    assert engine.audit(action="rollback")[0].session == "s"


def test_purge_audits_every_branch_and_a_dry_run_removes_nothing(store_url):
    now = [1_000_000.0]
    engine = Engine.open(store_url, clock=lambda: now[0])
    s = engine.session("s")
    snap = s.snapshot()
    for i in range(120):  # more than any page or truncation of the audit detail
        s.append_message("user", f"gone {i}")
        s.set_var("v", i)
        s.rollback(to=snap, actor="a", reason="r", notice=False)
    engine.session("young").snapshot()
    now[0] += 7200
    young = engine.session("young")
    young.append_message("user", "stays")
    young.rollback(to=young.tree()[0].id, actor="a", reason="r", notice=False)
    branches = {f"s/{b.id}" for b in s.branches()}
    assert len(branches) == 120

    before = (s.branches(), s.messages(), engine.audit(), engine.store.last_event_id())
    counts = engine.store.purge_branches(now[0] - 3600, now[0], dry_run=True)
    assert counts == {"branches": 120, "messages": 120, "steps": 0, "snapshots": 0,
                      "kv_writes": 120}
    assert (s.branches(), s.messages(), engine.audit(), engine.store.last_event_id()) == before

    assert engine.store.purge_branches(now[0] - 3600, now[0]) == counts
    [audit] = engine.audit(action="retention")
    assert sorted(audit.detail["branch_ids"]) == sorted(branches)
    assert audit.detail["branches"] == 120 and audit.detail["messages"] == 120
    assert s.branches() == [] and s.messages() == []
    assert len(young.branches()) == 1  # younger than the limit
    assert engine.store.purge_branches(now[0] - 3600, now[0], dry_run=True)["branches"] == 0


def test_idle_sessions_are_purged_but_evidence_is_kept(store_url):
    now = [1_000_000.0]
    engine = Engine.open(store_url, clock=lambda: now[0])
    engine.session("plain").append_message("user", "nothing happened here")
    engine.session("empty")
    looped = engine.session("looped", on_loop="flag")
    looped.snapshot()
    with pytest.raises(LoopWaiting):
        for _ in range(3):
            with looped.step("crop", {"x": 1}) as call:
                call.fail("invalid slice")
    rolled = engine.session("rolled")
    snap = rolled.snapshot()
    rolled.append_message("user", "x")
    rolled.rollback(to=snap, actor="alice", reason="r", notice=False)
    engine.session("noticed").inject_notice(actor="alice")
    audited = engine.session("audited")
    engine.store.add_audit("alice", "note", "audited", None, "looked at it", {}, now[0])
    # a deleted session's audit rows do not make its successor under the same id evidence
    engine.session("reborn").append_message("user", "first life")
    engine.fleet.delete_session("reborn", actor="alice", reason="test data")
    now[0] += 10
    engine.session("reborn").append_message("user", "second life")
    now[0] += 7200
    engine.session("fresh").append_message("user", "still talking")
    assert audited.info() is not None

    def everything():
        return {i.id for i in engine.sessions()}, engine.audit(), engine.store.last_event_id()

    before = everything()
    counts = engine.store.purge_sessions(now[0] - 3600, now[0], dry_run=True)
    assert counts == {"sessions": 3, "evidence": 4}
    assert everything() == before

    assert engine.store.purge_sessions(now[0] - 3600, now[0]) == counts
    kept = {"looped", "rolled", "noticed", "audited", "fresh"}
    assert {i.id for i in engine.sessions()} == kept
    [audit] = engine.audit(action="retention")
    assert sorted(audit.detail["session_ids"]) == ["empty", "plain", "reborn"]
    for sid in ("plain", "empty", "reborn"):
        with pytest.raises(UnknownSession):
            engine.get_session(sid)
    assert engine.store.purge_sessions(now[0] - 3600, now[0]) == {"sessions": 0, "evidence": 4}


# -- fleet documents and bulk rollback batches ------------------------------------------
def test_fleet_documents_are_set_read_and_deleted_atomically(engine):
    store = engine.store
    assert store.fleet_docs("quarantine") == {}
    store.fleet_doc_put("quarantine", {"q-b": {"tool": "crop", "until": None}, "q-a": [1, 2.5]},
                        1.0)
    store.fleet_doc_put("alerts", {"cursor": 7}, 1.0)
    assert store.fleet_docs("quarantine") == {"q-a": [1, 2.5], "q-b": {"tool": "crop",
                                                                         "until": None}}
    assert list(store.fleet_docs("quarantine")) == ["q-a", "q-b"]  # key order
    store.fleet_doc_put("quarantine", {"q-a": None, "q-c": "會話 {x}:y"}, 2.0)
    assert store.fleet_docs("quarantine") == {"q-b": {"tool": "crop", "until": None},
                                              "q-c": "會話 {x}:y"}
    store.fleet_doc_put("quarantine", {"missing": None}, 3.0)  # deleting nothing is fine
    assert store.fleet_docs("alerts") == {"cursor": 7}


def test_fleet_documents_compare_and_set_writes_only_when_every_expectation_holds(engine):
    from engine.store.base import AuditEntry

    store = engine.store
    doc = {"tool": "refund_api", "sessions": {"s-1": {"tenant": "acme"}}, "n": 1.5}
    assert store.fleet_doc_swap("incidents", {"open:a": None}, {"open:a": doc}, 1.0)
    assert store.fleet_doc_get("incidents", ["open:a", "missing"]) == {"open:a": doc}
    # Someone else's value is there now: nothing written, the caller is told.
    assert not store.fleet_doc_swap("incidents", {"open:a": None}, {"open:a": {"x": 1}}, 2.0)
    assert not store.fleet_doc_swap("incidents", {"open:a": {**doc, "n": 2}},
                                    {"open:a": None, "closed:a": doc}, 2.0)
    assert store.fleet_docs("incidents") == {"open:a": doc}
    # The value as read back matches, whatever key order it was written in.
    read = store.fleet_doc_get("incidents", ["open:a"])["open:a"]
    assert store.fleet_doc_swap("incidents", {"open:a": read, "closed:a": None},
                                {"open:a": None, "closed:a": {**read, "status": "closed"}}, 3.0,
                                AuditEntry("alice", "incident_close", "fixed", {"id": "a"}))
    assert store.fleet_docs("incidents") == {"closed:a": {**doc, "status": "closed"}}
    [event] = engine.audit(action="incident_close")
    assert event.actor == "alice" and event.detail == {"id": "a"} and event.session is None
    assert [e.data for e in engine.events() if e.type == "incident_close"] == [
        {"actor": "alice", "id": "a"}]
    assert store.fleet_doc_get("incidents", []) == {}
    # A feed event without an audit row: the engine's own bookkeeping.
    assert store.fleet_doc_swap("incidents", {"open:b": None}, {"open:b": 1}, 4.0,
                                AuditEntry("rewind", "incident_open", "", {"id": "b"}),
                                feed_only=True)
    assert [e.action for e in engine.audit()] == ["incident_close"]
    assert [e.data for e in engine.events() if e.type == "incident_open"] == [
        {"actor": "rewind", "id": "b"}]


def test_fleet_documents_outlive_sessions_and_retention(engine):
    s = engine.session("s")
    s.append_message("user", "x")
    engine.store.fleet_doc_put("alerts", {"cursor": 3}, 1.0)
    engine.fleet.delete_session("s", actor="alice", reason="gdpr")
    engine.fleet.purge_abandoned(older_than_s=0)
    assert engine.store.fleet_docs("alerts") == {"cursor": 3}


def test_a_rollback_in_a_batch_keeps_the_batch_id_in_its_audit_and_feed(engine):
    s = engine.session("s")
    s.snapshot("start")
    s.append_message("user", "one")
    request = RollbackRequest(target=s.tree()[0].id, actor="alice", reason="bulk", notice=None,
                              now=engine.clock(), batch="batch-1")
    r = engine.store.rollback("s", request)
    assert r.epoch == 1
    (event,) = engine.audit(action="rollback")
    assert event.detail["batch"] == "batch-1" and event.detail["branch"] == r.branch
    feed = [e for e in engine.events() if e.type == "rollback"]
    assert feed[-1].data["batch"] == "batch-1"
    s.append_message("user", "two")
    engine.rollback("s", actor="alice", reason="single", notice=False)
    assert "batch" not in engine.audit(action="rollback")[0].detail


def test_a_notice_sent_by_a_bulk_rollback_carries_the_batch_id_in_its_audit(engine):
    s = engine.session("s")
    s.snapshot("start")
    s.append_message("user", "one")
    request = RollbackRequest(target=s.tree()[0].id, actor="alice", reason="bulk",
                              notice={"role": "assistant", "content": "we reset"},
                              now=engine.clock(), batch="batch-7")
    engine.store.rollback("s", request)
    (said,) = engine.audit(action="notice")
    assert said.detail == {"text": "we reset", "batch": "batch-7"}
    s.append_message("user", "two")
    engine.rollback("s", actor="alice", reason="single")
    assert "batch" not in engine.audit(action="notice")[0].detail


# -- housekeeping ---------------------------------------------------------------------------------
def test_every_step_left_running_is_found_however_old_its_session_or_deep_its_step(engine):
    """`rewind doctor` once looked at the last 50 steps of the 200 most recent sessions and
    missed stuck steps in older sessions and under newer steps; the store finds all of them."""
    stuck = []
    for k in range(3):  # sessions the 200 most recent leave out (older, and smaller ids)
        sid = f"a-{k}"
        engine.session(sid).step("fetch", {"k": k}).__enter__()  # its process "died"
        stuck.append((sid, 1))
    deep = engine.session("b-deep")
    deep.step("fetch", {"first": True}).__enter__()
    stuck.append(("b-deep", 1))
    later = engine.session("b-deep")  # another worker carries on with the session
    for n in range(60):
        with later.step("read", {"n": n}) as call:
            call.ok(n)
    for k in range(205):
        with engine.session(f"z-{k:03d}").step("read", {}) as call:
            call.ok("done")
    found = engine.fleet.running_steps(0.0)
    assert sorted((sid, step.n) for sid, step in found) == sorted(stuck)
    assert all(step.tool == "fetch" for _, step in found)
    assert engine.fleet.running_steps(3600.0) == []  # none has run that long


def test_replay_histories_are_the_steps_and_user_messages_in_the_order_they_happened(engine):
    from engine.fleet.queries import session_history
    from engine.records import ReplayStep, StepRecord

    s = engine.session("looped", meta={"locale": "en"})
    s.append_message("user", "crop the image")
    with s.step("load_image", {"id": 7}) as call:
        call.ok("loaded")
    s.append_message("tool", "loaded")
    _fail_three_times(s)  # rolled back: its steps move to an abandoned branch
    s.append_message("user", "try again")
    with s.step("image_crop", {"x": 1}) as call:
        call.ok("cropped")
    quiet = engine.session("quiet")
    with quiet.step("search", {"q": "x"}) as call:
        call.ok("found")
    store = engine.store
    got = store.replay_histories(["looped", "quiet", "looped", "never-created"])
    assert list(got) == ["looped", "quiet", "never-created"]
    assert got["never-created"] == []
    for sid in ("looped", "quiet"):
        expected = [ReplayStep.of(r) if isinstance(r, StepRecord) else None
                    for r in session_history(engine._runtime, sid)]
        assert got[sid] == expected
    looped = got["looped"]
    assert looped[0] is None and looped.count(None) == 2  # the two user messages, not the tool's
    tools = [r.tool for r in looped if r is not None]
    assert tools[0] == "load_image" and set(tools[1:]) == {"image_crop"} and len(tools) > 4
    assert any(not r.on_live_line for r in s.steps())  # the abandoned branch is in there


def test_session_values_and_documents_in_one_read(engine):
    """`Documents.session_documents` gives what `session_values` and `get` (keys and a
    prefix) give, and None, {}, {} for an unknown session."""
    engine.session("both")
    engine.documents.put_values("both", "head", {"root": "c1"})
    engine.documents.put("both", "lg", {"c/1": {"id": "1"}, "w/1/a": b"\x00raw", "w/1/b": [1],
                                        "w/2/a": {"other": True}, "c/2": {"id": "2"}})
    engine.get_session("both").append_message("user", "hi")
    snap = engine.get_session("both").snapshot("s")
    at, values, docs = engine.documents.session_documents("both", "head", "lg", ["c/1"],
                                                          prefix="w/1/")
    info = engine.session_info("both")
    assert at == (info.head, info.epoch, info.messages) == (snap, 0, 1)
    assert values == engine.documents.values("both", "head")
    assert docs == engine.documents.get("both", "lg", ["c/1"], prefix="w/1/") == {
        "c/1": {"id": "1"}, "w/1/a": b"\x00raw", "w/1/b": [1]}
    assert engine.documents.session_documents("both", "none", "lg", [])[1:] == ({}, {})
    assert engine.documents.session_documents("nobody", "head", "lg", ["c/1"]) == (None, {}, {})


def test_the_newest_snapshots_with_a_label_prefix_on_the_live_line(engine):
    """`Documents.newest_snapshots` finds the newest live snapshots of a kind whose label starts
    with a prefix, newest first, past newer snapshots of other labels or kinds; a rollback
    leaves those at or before its target."""
    newest = engine.documents.newest_snapshots
    s = engine.session("labels")
    assert newest("labels", "checkpoint ") == []
    s.append_message("user", "a")
    a = s.snapshot("checkpoint a (loop)")
    s.append_message("user", "b")
    s.snapshot("mine")
    with s.step("tool", {"x": 1}) as call:  # a write-ahead step snapshot
        call.ok("fine")
    assert newest("labels", "checkpoint ") == [(a, "checkpoint a (loop)")]
    s.append_message("user", "c")
    c = s.snapshot("checkpoint c (input)")
    assert newest("labels", "checkpoint ") == [(c, "checkpoint c (input)")]
    assert newest("labels", "checkpoint ", limit=5) == [(c, "checkpoint c (input)"),
                                                        (a, "checkpoint a (loop)")]
    assert [label for _id, label in newest("labels", "mi")] == ["mine"]
    assert newest("labels", "checkpoint z") == [] and newest("labels", "", limit=0) == []
    engine.rollback("labels", to=a, reason="test", notice=False)
    assert newest("labels", "checkpoint ", limit=5) == [(a, "checkpoint a (loop)")]
    assert newest("labels", "mi") == []  # abandoned
    assert newest("nobody", "checkpoint ") == []
