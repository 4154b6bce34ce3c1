"""Fleet controls for a freeze: bulk rollback and tool quarantine, on every store."""

from __future__ import annotations

import contextlib
import datetime as dt
import multiprocessing
import threading

import pytest

from engine import (
    Actor,
    BulkRollbackItem,
    Engine,
    LoopDetected,
    LoopWaiting,
    PermissionDenied,
    Quarantine,
    RollbackConflict,
    StepStatus,
    ToolQuarantined,
    UnknownQuarantine,
)
from engine.fleet.quarantine import REFUSAL_PREFIX

VIEWER = Actor("vera", "viewer")


def _looping(engine: Engine, sid: str, prompt_version: str = "v8", tenant: str = "acme",
             tool: str = "image_crop", side_effect: bool = False, hold: bool = True):
    """A session left looping (policy flag): a healthy snapshot, one ok step, three failures;
    it waits for on-call unless not `hold` (its agent then carries on stepping)."""
    s = engine.session(sid, meta={"prompt_version": prompt_version, "tenant": tenant},
                       on_loop="flag")
    s.holds_on_loops = hold
    s.append_message("user", f"help {sid}")
    s.snapshot("start")
    with s.step("charge", {"sid": sid}, side_effect=side_effect,
                compensation=("charge.undo", {"sid": sid}) if side_effect else None) as call:
        call.ok("charged")
    for _ in range(3):
        with contextlib.suppress(LoopWaiting):  # the third is flagged: the session waits
            with s.step(tool, {"x": 10}) as call:
                call.fail("invalid slice")
        s.append_message("tool", "invalid slice")
    assert s.info().status == "looping" and s.info().waiting == hold
    return s


def _feed_size(engine: Engine) -> int:
    return engine.store.last_event_id()


# -- bulk rollback ---------------------------------------------------------------------------------
def test_bulk_rollback_rolls_back_every_matching_session_under_one_batch(engine):
    for sid in ("a", "b", "c"):
        _looping(engine, sid)
    _looping(engine, "other-version", prompt_version="v7")
    healthy = engine.session("healthy", meta={"prompt_version": "v8"})
    healthy.append_message("user", "fine")

    items = engine.rollback_many({"status": "looping", "prompt_version": "v8"}, actor="alice",
                                 reason="v8 deadlocks the model")
    assert all(isinstance(i, BulkRollbackItem) for i in items)
    assert sorted(i.session for i in items) == ["a", "b", "c"]
    assert all(i.ok and i.error is None and i.rollback is not None for i in items)
    batch = items[0].batch
    assert batch and all(i.batch == batch for i in items)
    for sid in ("a", "b", "c"):
        info = engine.get_session(sid).info()
        assert info.status == "rolled_back" and info.epoch == 1
        assert engine.get_session(sid).state().messages[0]["content"] == f"help {sid}"
    assert engine.get_session("other-version").info().status == "looping"
    assert engine.get_session("healthy").info().epoch == 0

    audited = engine.audit(action="rollback")
    assert sorted(e.session for e in audited) == ["a", "b", "c"]
    assert {e.detail["batch"] for e in audited} == {batch}
    assert {e.actor for e in audited} == {"alice"}
    (summary,) = engine.audit(action="rollback_many")
    assert summary.detail["batch"] == batch and summary.detail["rolled_back"] == 3
    assert summary.detail["where"] == {"status": "looping", "prompt_version": "v8"}


def test_bulk_dry_run_previews_and_writes_nothing(engine):
    _looping(engine, "a", side_effect=True)
    _looping(engine, "b")
    before = _feed_size(engine)
    items = engine.rollback_many({"status": "looping"}, actor="alice", reason="look first",
                                 dry_run=True)
    assert _feed_size(engine) == before
    assert engine.audit(action="rollback") == [] and engine.audit(action="rollback_many") == []
    by_sid = {i.session: i for i in items}
    assert set(by_sid) == {"a", "b"}
    for item in items:
        assert item.ok and item.rollback is None and item.preview is not None
        assert [s.tool for s in item.preview.steps] == ["image_crop"] * 3
        assert len(item.preview.messages) == 3
    # the charge step is before the loop: its compensation would not run
    assert by_sid["a"].preview.compensations == []
    assert all(engine.get_session(s).info().status == "looping" for s in ("a", "b"))


def test_dry_run_names_the_compensations_that_would_run(engine):
    s = engine.session("pay", meta={"tenant": "acme"}, on_loop="flag")
    s.snapshot("start")
    with s.step("charge", {"n": 1}, side_effect=True, compensation=("charge.undo", {"n": 1})) as c:
        c.ok("charged")  # the last step, ok: the default target is the snapshot right before it
    (item,) = engine.rollback_many({"tenant": "acme"}, actor="alice", reason="x", dry_run=True)
    assert item.preview.compensations == [(1, "charge.undo", {"n": 1})]


def test_one_failure_never_stops_the_rest(engine):
    _looping(engine, "a")
    bare = engine.session("bare", meta={"prompt_version": "v8"})  # nothing to roll back to
    bare.append_message("user", "no snapshot here")
    _looping(engine, "z")
    items = engine.rollback_many({"prompt_version": "v8"}, actor="alice", reason="freeze")
    by_sid = {i.session: i for i in items}
    assert set(by_sid) == {"a", "bare", "z"}
    assert not by_sid["bare"].ok and by_sid["bare"].rollback is None
    assert "NothingToRollBack" in by_sid["bare"].error
    assert by_sid["a"].ok and by_sid["z"].ok
    (summary,) = engine.audit(action="rollback_many")
    assert set(summary.detail["failed"]) == {"bare"}


def test_bulk_rollback_filters_by_tool(engine):
    _looping(engine, "crop", tool="image_crop")
    _looping(engine, "ocr", tool="ocr")
    items = engine.rollback_many({"tool": "ocr"}, actor="alice", reason="ocr is broken")
    assert [i.session for i in items] == ["ocr"]


def test_bulk_rollback_needs_a_filter_and_known_keys(engine):
    _looping(engine, "a")
    with pytest.raises(ValueError, match="at least one filter"):
        engine.rollback_many({}, actor="alice", reason="everything")
    with pytest.raises(ValueError, match="unknown filter"):
        engine.rollback_many({"colour": "red"}, actor="alice", reason="x")
    with pytest.raises(ValueError, match="status"):
        engine.rollback_many({"status": "sad"}, actor="alice", reason="x")
    assert engine.get_session("a").info().status == "looping"


def test_viewers_cannot_bulk_roll_back_even_as_a_dry_run(engine):
    _looping(engine, "a")
    before = _feed_size(engine)
    for dry_run in (True, False):
        with pytest.raises(PermissionDenied):
            engine.rollback_many({"status": "looping"}, actor=VIEWER, reason="x",
                                 dry_run=dry_run)
    assert _feed_size(engine) == before
    assert engine.get_session("a").info().status == "looping"


def test_a_concurrent_single_rollback_wins_and_the_bulk_one_is_refused(engine):
    _looping(engine, "a")
    _looping(engine, "b")
    store = engine.store
    real = store.rollback
    raced = []

    def rollback(sid, request):
        if sid == "a" and not raced:  # the operator's click lands after the bulk read the epoch
            raced.append(sid)
            Engine(store).rollback("a", actor="bob", reason="by hand", notice=False)
        return real(sid, request)

    store.rollback = rollback  # type: ignore[method-assign]
    try:
        items = engine.rollback_many({"status": "looping"}, actor="alice", reason="bulk")
    finally:
        del store.rollback
    by_sid = {i.session: i for i in items}
    assert not by_sid["a"].ok and "RollbackConflict" in by_sid["a"].error
    assert by_sid["b"].ok
    a = engine.get_session("a").info()
    assert a.epoch == 1 and a.rollbacks == 1  # rolled back once, by bob
    assert [e.actor for e in engine.audit(session="a", action="rollback")] == ["bob"]
    with pytest.raises(RollbackConflict):
        engine.rollback("a", actor="alice", reason="stale", expect_epoch=0)


def test_a_step_in_flight_during_a_bulk_rollback_lands_late(engine):
    s = _looping(engine, "a", hold=False)  # an agent that carries on after the flag
    agent = Engine(engine.store).get_session("a")
    with agent.step("image_crop", {"x": 11}) as call:
        (item,) = engine.rollback_many({"status": "looping"}, actor="alice", reason="bulk")
        call.ok("cropped")
    assert item.ok and call.late
    assert s.info().status == "rolled_back"
    late = [r for r in s.steps() if r.late]
    assert [r.args for r in late] == [{"x": 11}]
    with agent.step("image_crop", {"x": 12}) as call:  # the agent carries on from the rollback
        call.ok("cropped")
    assert not call.late and s.steps(live_only=True)[-1].args == {"x": 12}


def test_a_target_retired_while_the_rollback_starts_is_picked_again(store_url, open_engine):
    """An agent still stepping moves the retention window on: the healthy snapshot a rollback
    picked for itself can retire before the store applies it. The rollback picks the newest
    healthy one again instead of failing; a target the operator named is still refused."""
    from engine import Retention, SnapshotNotRestorable

    engine = open_engine(store_url, retention=Retention(keep_step_snapshots=2), on_loop="flag")
    s = engine.session("racing", meta={"tenant": "acme"})
    for i in range(3):
        with s.step("lookup", {"i": i}) as call:
            call.ok(i)
    picked = s.suggested_target()
    store_rollback = engine.store.rollback
    raced = []

    def rollback_after_the_agent_stepped(sid, request):
        if not raced:  # the agent's next steps land first and retire the picked target
            raced.append(request.target)
            for i in range(3, 6):
                with s.step("lookup", {"i": i}) as call:
                    call.ok(i)
        return store_rollback(sid, request)

    engine.store.rollback = rollback_after_the_agent_stepped
    (item,) = engine.rollback_many({"tenant": "acme"}, actor="alice", reason="bulk")
    assert raced == [picked]
    assert item.ok, item.error
    assert item.rollback.target != picked
    with pytest.raises(SnapshotNotRestorable):
        s.rollback(picked, actor="alice", reason="the operator named a retired snapshot")


def test_agents_stepping_in_threads_while_bulk_rollbacks_run(engine):
    for sid in ("t1", "t2"):
        _looping(engine, sid)
    stop = threading.Event()
    errors: list[BaseException] = []

    def agent(sid: str) -> None:
        s = Engine(engine.store, on_loop="flag").get_session(sid)
        i = 0
        while not stop.is_set() and i < 200:
            try:
                with s.step("image_crop", {"x": i % 3}) as call:
                    call.fail("invalid slice") if i % 2 else call.ok(i)
            except LoopDetected:
                pass
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return
            i += 1

    threads = [threading.Thread(target=agent, args=(sid,)) for sid in ("t1", "t2")]
    for t in threads:
        t.start()
    results = []
    for _ in range(5):
        results += engine.rollback_many({"tenant": "acme"}, actor="alice", reason="bulk")
    stop.set()
    for t in threads:
        t.join(60)
    assert not errors
    for item in results:  # every item says what happened; failures only as engine errors
        assert item.ok or item.error.split(":")[0] in ("NothingToRollBack", "RollbackConflict")
    # ...and the bulk rollbacks did happen: five rounds over two looping sessions that cannot
    # all be refused (a run where every rollback failed would otherwise pass).
    assert {item.session for item in results if item.ok} == {"t1", "t2"}
    for sid in ("t1", "t2"):
        s = engine.get_session(sid)
        info = s.info()
        assert info.rollbacks == len(engine.audit(session=sid, action="rollback"))
        branches = {b.id for b in s.branches()}
        assert all(r.on_live_line or r.branch in branches for r in s.steps())


# -- quarantine ------------------------------------------------------------------------------------
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


def test_a_second_bulk_run_does_not_take_the_notices_away(engine):
    _looping(engine, "a")
    _looping(engine, "b")
    first = engine.rollback_many({"prompt_version": "v8"}, actor="alice", reason="freeze")
    assert all(i.ok for i in first)
    notices = {sid: engine.get_session(sid).state().messages[-1] for sid in ("a", "b")}
    for dry_run in (True, False):
        again = engine.rollback_many({"prompt_version": "v8"}, actor="alice", reason="again",
                                     dry_run=dry_run)
        assert [i.ok for i in again] == [False, False]
        assert all("NothingToRollBack" in i.error for i in again)
    assert len(engine.audit(action="rollback")) == 2
    for sid, notice in notices.items():
        assert engine.get_session(sid).state().messages[-1] == notice
        assert engine.get_session(sid).info().epoch == 1


def test_bulk_rollbacks_while_agent_processes_step(store_url):
    if store_url.endswith(":memory:"):
        pytest.skip("n/a: agent processes need a shared store")
    import time

    from support.agents import assert_consistent, spawn_agent

    engine = Engine.open(store_url)
    agents = [spawn_agent(store_url, f"agent-{i}", 150) for i in range(2)]
    results: list[BulkRollbackItem] = []
    try:
        deadline = time.monotonic() + 120
        while any(a.poll() is None for a in agents) and time.monotonic() < deadline:
            if engine.sessions(scenario="stress"):
                results += engine.rollback_many({"scenario": "stress"}, actor="alice",
                                                reason="bulk under load", notice=False)
            time.sleep(0.05)
        for a in agents:
            out, err = a.communicate(timeout=120)
            assert a.returncode == 0, err
        for i in range(2):
            assert_consistent(engine, f"agent-{i}")
            info = engine.get_session(f"agent-{i}").info()
            assert info.rollbacks == len(engine.audit(session=f"agent-{i}", action="rollback"))
        assert any(item.ok for item in results)
        for item in results:
            assert item.ok or item.error.split(":")[0] in (
                "NothingToRollBack", "RollbackConflict", "SnapshotNotRestorable")
    finally:
        for a in agents:
            if a.poll() is None:
                a.kill()
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


def test_bulk_rollback_takes_exactly_the_listed_sessions(engine):
    """What the console sends: the rows an operator selected, or the sessions its preview
    showed, with the filters still applying; unknown ids match nothing."""
    for sid in ("a", "b", "c"):
        _looping(engine, sid)
    _looping(engine, "v7-one", prompt_version="v7")
    items = engine.rollback_many(
        {"session": ["a", "c", "v7-one", "gone", "a"], "prompt_version": "v8"},
        actor="alice", reason="the two I checked")
    assert sorted(i.session for i in items) == ["a", "c"] and all(i.ok for i in items)
    assert engine.get_session("b").info().status == "looping"
    assert engine.get_session("v7-one").info().status == "looping"
    (one,) = engine.rollback_many({"session": "b"}, actor="alice", reason="just b", dry_run=True)
    assert one.session == "b" and one.preview is not None
    with pytest.raises(ValueError, match="at least one session id"):
        engine.rollback_many({"session": []}, actor="alice", reason="none")


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


def test_a_bulk_rollback_is_on_record_before_its_first_rollback(engine, monkeypatch):
    """A run killed midway leaves the batch's start row (what was planned) and each done
    session's own rollback row."""
    from engine.recovery import bulk

    ids = seed_prompt_loops_in(engine, 3)
    done = []
    real = bulk.rollback

    def dies_after_one(*args, **kwargs):
        if done:
            raise KeyboardInterrupt  # the process is killed during the second rollback
        done.append(real(*args, **kwargs))
        return done[-1]

    monkeypatch.setattr(bulk, "rollback", dies_after_one)
    with pytest.raises(KeyboardInterrupt):
        engine.rollback_many({"prompt_version": "v-bulk"}, actor="alice", reason="v-bulk loops")
    (start,) = engine.audit(action="rollback_many.start")
    assert start.detail["sessions"] == 3 and sorted(start.detail["planned"]) == sorted(ids)
    (one,) = engine.audit(action="rollback")
    assert one.detail["batch"] == start.detail["batch"]
    assert engine.audit(action="rollback_many") == []  # the summary never came


def seed_prompt_loops_in(engine, count):
    ids = []
    for n in range(count):
        s = engine.session(f"bulk-{n}", meta={"prompt_version": "v-bulk"}, on_loop="flag")
        s.snapshot("start")
        with pytest.raises(LoopWaiting):  # the third is flagged: the session waits for on-call
            for _ in range(4):
                with s.step("image_crop", {"x": n}) as call:
                    call.fail("invalid slice")
        ids.append(s.id)
    return ids


def test_deleting_a_session_writes_its_audit_row_in_the_same_write(tmp_path, open_engine,
                                                                    monkeypatch):
    import engine.store.sqlite.store as sqlite_store

    engine = open_engine(f"sqlite:///{tmp_path}/d.db")
    engine.session("gone").append_message("user", "hi")

    def broken(*args, **kwargs):
        raise RuntimeError("disk went away while writing the audit row")

    monkeypatch.setattr(sqlite_store, "add_audit", broken)
    with pytest.raises(RuntimeError):
        engine.fleet.delete_session("gone", actor="alice", reason="gdpr")
    monkeypatch.undo()
    assert engine.get_session("gone").state().messages  # not deleted without its row
    assert engine.fleet.delete_session("gone", actor="alice", reason="gdpr") is True
    (row,) = engine.audit(action="delete")
    assert row.session == "gone" and row.reason == "gdpr"
