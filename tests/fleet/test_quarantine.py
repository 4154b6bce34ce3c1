"""Tool quarantine: a refused call never runs its body and is no loop evidence; scope, expiry,
lifting, rights and the audit row; seen by other engines and processes through the store."""

from __future__ import annotations

import datetime as dt
import multiprocessing

import pytest

from engine import (
    Actor,
    Engine,
    PermissionDenied,
    Quarantine,
    StepStatus,
    ToolQuarantined,
    UnknownQuarantine,
)
from engine.fleet.quarantine import REFUSAL_PREFIX

VIEWER = Actor("vera", "viewer")


def _wait_for_refusal(s, seconds: float = 30.0) -> ToolQuarantined:
    import time

    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        i += 1
        try:
            with s.step("refund_api", {"try": i}) as call:
                call.ok(i)
        except ToolQuarantined as exc:
            return exc
        time.sleep(0.05)
    raise AssertionError("the quarantine was never honoured")


def _agent_process(url: str, ready, quarantined, lifted, results) -> None:
    """Child process: steps refund_api until refused, then until allowed again."""
    import time

    engine = Engine.open(url)
    s = engine.session("child", meta={"tenant": "acme"}, on_loop="off")
    with s.step("refund_api", {}) as call:
        call.ok(1)
    ready.set()
    quarantined.wait(60)
    try:
        exc = _wait_for_refusal(s)
        results.put(("refused", exc.quarantine.id, str(exc)))
    except AssertionError as exc:
        results.put(("never refused", None, str(exc)))
        return
    lifted.wait(60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with s.step("refund_api", {}) as call:
                call.ok(2)
            results.put(("allowed", None, ""))
            return
        except ToolQuarantined:
            time.sleep(0.05)
    results.put(("never allowed", None, ""))


def test_a_quarantined_tool_is_refused_before_the_body_runs(engine):
    s = engine.session("s", meta={"tenant": "acme"})
    q = engine.quarantine("refund_api", actor="alice", reason="HTTP 500 on every call")
    assert isinstance(q, Quarantine) and q.id.startswith("q-") and q.actor == "alice"
    ran = []
    with pytest.raises(ToolQuarantined) as caught:
        with s.step("refund_api", {"order": "A-1"}) as call:
            ran.append(True)
            call.ok("refunded")
    assert ran == []
    exc = caught.value
    assert exc.tool == "refund_api" and exc.quarantine.id == q.id
    for part in ("refund_api", "HTTP 500 on every call", "alice", "until it is lifted", q.id):
        assert part in str(exc)
    (refusal,) = s.steps()
    assert refusal.tool == "refund_api" and refusal.status == StepStatus.REFUSED
    assert refusal.error.startswith(REFUSAL_PREFIX) and q.id in refusal.error
    assert refusal.snapshot is None and refusal.args == {"order": "A-1"}
    with s.step("other_tool", {}) as call:  # other tools still run
        call.ok(1)


def test_refusals_are_not_counted_as_a_loop(engine):
    s = engine.session("s")
    s.snapshot("start")
    engine.quarantine("refund_api", actor="alice", reason="broken")
    for _ in range(6):
        with pytest.raises(ToolQuarantined):
            with s.step("refund_api", {"order": "A-1"}):
                pass
    info = s.info()
    assert info.status == "healthy" and info.loops == 0 and info.rollbacks == 0
    assert len(s.steps()) == 6


def test_a_scoped_quarantine_applies_only_to_matching_sessions(engine):
    acme_v8 = engine.session("a", meta={"tenant": "acme", "prompt_version": "v8"})
    acme_v7 = engine.session("b", meta={"tenant": "acme", "prompt_version": "v7"})
    other = engine.session("c", meta={"tenant": "globex", "prompt_version": "v8"})
    engine.quarantine("refund_api", actor="alice", reason="v8 loops on it",
                      scope={"tenant": "acme", "prompt_version": "v8"})
    with pytest.raises(ToolQuarantined, match="prompt_version=v8"):
        with acme_v8.step("refund_api", {}):
            pass
    for s in (acme_v7, other):
        with s.step("refund_api", {}) as call:
            call.ok("fine")
    with pytest.raises(ValueError, match="scope"):
        engine.quarantine("x", actor="alice", reason="r", scope={"colour": "red"})


def test_an_expired_quarantine_stops_applying_by_itself(store_url):
    now = [1_000_000.0]
    engine = Engine.open(store_url, clock=lambda: now[0])
    try:
        s = engine.session("s")
        q = engine.quarantine("refund_api", actor="alice", reason="until the fix",
                              until=dt.timedelta(hours=2))
        assert q.until == now[0] + 7200
        with pytest.raises(ToolQuarantined, match="until 1970-01-12 15:46:40 UTC"):
            with s.step("refund_api", {}):
                pass
        now[0] += 7200
        with s.step("refund_api", {}) as call:
            call.ok("works again")
        assert engine.quarantines() == []
        assert [x.id for x in engine.quarantines(include_expired=True)] == [q.id]
        with pytest.raises(ValueError, match="past"):
            engine.quarantine("x", actor="alice", reason="r", until=now[0] - 1)
        stamp = dt.datetime.fromtimestamp(now[0] + 60, dt.UTC)
        q2 = engine.quarantine("x", actor="alice", reason="r", until=stamp)
        assert q2.until == pytest.approx(now[0] + 60)
        # the new quarantine pruned the expired one
        assert [x.id for x in engine.quarantines(include_expired=True)] == [q2.id]
    finally:
        engine.close()


def test_lifting_a_quarantine_and_the_audit_trail(engine):
    s = engine.session("s")
    q = engine.quarantine("refund_api", actor="alice", reason="broken",
                          scope={"tenant": "acme"}, until=dt.timedelta(minutes=30))
    assert [x.id for x in engine.quarantines()] == [q.id]
    lifted = engine.lift_quarantine(q.id, actor="bob", reason="fixed upstream")
    assert lifted.id == q.id and engine.quarantines() == []
    with s.step("refund_api", {}) as call:
        call.ok("fine")
    with pytest.raises(UnknownQuarantine, match=q.id):
        engine.lift_quarantine(q.id, actor="bob", reason="again")
    (set_event,) = engine.audit(action="quarantine")
    (lift_event,) = engine.audit(action="quarantine_lift")
    assert set_event.actor == "alice" and set_event.reason == "broken"
    assert set_event.detail["id"] == q.id and set_event.detail["tool"] == "refund_api"
    assert set_event.detail["scope"] == {"tenant": "acme"}
    assert set_event.detail["until"] == pytest.approx(q.until)
    assert lift_event.actor == "bob" and lift_event.reason == "fixed upstream"
    assert lift_event.detail["id"] == q.id


def test_viewers_cannot_set_or_lift_quarantines(engine):
    with pytest.raises(PermissionDenied):
        engine.quarantine("refund_api", actor=VIEWER, reason="x")
    assert engine.quarantines() == []
    q = engine.quarantine("refund_api", actor="alice", reason="broken")
    with pytest.raises(PermissionDenied):
        engine.lift_quarantine(q.id, actor=VIEWER, reason="x")
    assert [x.id for x in engine.quarantines()] == [q.id]
    assert [e.action for e in engine.audit()] == ["quarantine"]


def test_a_quarantine_needs_a_tool_and_a_reason(engine):
    with pytest.raises(ValueError, match="tool"):
        engine.quarantine(" ", actor="alice", reason="x")
    with pytest.raises(ValueError, match="reason"):
        engine.quarantine("refund_api", actor="alice", reason="")


def test_another_engine_in_the_same_process_sees_it_through_the_store(store_url):
    if store_url.endswith(":memory:"):
        pytest.skip("n/a: two engines on :memory: are two databases")
    a, b = Engine.open(store_url), Engine.open(store_url)
    try:
        s = b.session("s", on_loop="off")
        with s.step("refund_api", {}) as call:  # b has now cached "no quarantine"
            call.ok(1)
        q = a.quarantine("refund_api", actor="alice", reason="broken")
        caught = _wait_for_refusal(s)
        assert caught.quarantine.id == q.id
    finally:
        a.close()
        b.close()


def test_quarantine_across_two_processes(store_url):
    if store_url.endswith(":memory:"):
        pytest.skip("n/a: a :memory: store lives in one process")
    ctx = multiprocessing.get_context("spawn")
    ready, quarantined, lifted = ctx.Event(), ctx.Event(), ctx.Event()
    results = ctx.Queue()
    child = ctx.Process(target=_agent_process,
                        args=(store_url, ready, quarantined, lifted, results))
    child.start()
    engine = Engine.open(store_url)
    try:
        assert ready.wait(60)
        q = engine.quarantine("refund_api", actor="alice", reason="broken for everyone")
        quarantined.set()
        what, qid, text = results.get(timeout=90)
        assert what == "refused" and qid == q.id and "broken for everyone" in text
        engine.lift_quarantine(q.id, actor="alice", reason="fixed")
        lifted.set()
        assert results.get(timeout=90)[0] == "allowed"
        steps = engine.get_session("child").steps()
        assert any(r.error and q.id in r.error for r in steps)
        assert steps[-1].status == "ok"
    finally:
        child.join(60)
        if child.is_alive():
            child.kill()
        engine.close()


def test_a_schema_1_file_gets_fleet_documents_and_is_marked_current(tmp_path):
    import sqlite3

    from engine.store.sqlite.schema import SCHEMA_VERSION

    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    Engine.open(url).close()
    with sqlite3.connect(path) as conn:  # what the first release left behind
        conn.execute("DROP TABLE fleet_docs")
        conn.execute("UPDATE rewind_meta SET value = '1' WHERE key = 'schema_version'")
    with Engine.open(url) as engine:
        engine.quarantine("refund_api", actor="alice", reason="broken")
        assert [q.tool for q in engine.quarantines()] == ["refund_api"]
    with sqlite3.connect(path) as conn:
        (version,) = conn.execute(
            "SELECT value FROM rewind_meta WHERE key = 'schema_version'").fetchone()
    assert version == str(SCHEMA_VERSION)


@pytest.mark.parametrize("until", [float("inf"), float("nan"), 253402300800.0 + 86400,
                                   dt.datetime(9999, 12, 31, 23, 0, tzinfo=dt.UTC)])
def test_a_quarantine_end_no_calendar_shows_is_refused(engine, until):
    with pytest.raises(ValueError, match="until"):
        engine.quarantine("refund_api", actor="alice", reason="broken", until=until)
    assert engine.quarantines(include_expired=True) == []


def test_a_quarantine_and_its_audit_row_are_one_write(engine):
    q = engine.quarantine("refund_api", actor="alice", reason="broken")
    (row,) = engine.audit(action="quarantine")
    assert row.detail["id"] == q.id and row.actor == "alice" and row.reason == "broken"
    engine.lift_quarantine(q.id, actor="bob", reason="fixed upstream")
    (lift,) = engine.audit(action="quarantine_lift")
    assert lift.detail["tool"] == "refund_api" and lift.actor == "bob"
    with pytest.raises(UnknownQuarantine, match="lifted already, by bob"):
        engine.lift_quarantine(q.id, actor="bob", reason="again")


def test_a_quarantine_whose_audit_row_fails_is_not_stored(tmp_path, open_engine, monkeypatch):
    """The change and its audit row commit together: a failure writing the row leaves no
    quarantine in force that the audit log does not show."""
    import engine.store.sqlite.docs as sqlite_docs  # fleet documents and their audit rows

    engine = open_engine(f"sqlite:///{tmp_path}/r.db")

    def broken(*args, **kwargs):
        raise RuntimeError("disk went away while writing the audit row")

    monkeypatch.setattr(sqlite_docs, "add_audit", broken)
    with pytest.raises(RuntimeError):
        engine.quarantine("refund_api", actor="alice", reason="broken")
    monkeypatch.undo()
    assert engine.quarantines(include_expired=True) == []
    assert engine.audit(action="quarantine") == []
