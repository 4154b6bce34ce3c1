"""Bulk rollback (`Engine.rollback_many`): every matching session under one batch, dry runs,
failures that never stop the rest, races with single rollbacks and with agents stepping; on every
store."""

from __future__ import annotations

import contextlib
import threading

import pytest

from engine import (
    Actor,
    BulkRollbackItem,
    Engine,
    LoopDetected,
    LoopWaiting,
    PermissionDenied,
    RollbackConflict,
)

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
