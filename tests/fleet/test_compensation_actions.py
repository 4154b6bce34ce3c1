"""Operators retry or resolve compensations, and see which handlers a live process has; on every
store (the conformance fixtures: SQLite in memory and on file, Redis, Redis Cluster)."""

from __future__ import annotations

import sqlite3

import pytest

from engine import (
    Actor,
    CompensationConflict,
    Engine,
    PermissionDenied,
    Role,
    UnknownCompensation,
)

VIEWER = Actor("victor", Role.VIEWER)


class Clock:
    """An engine clock the test moves by hand."""

    def __init__(self, t: float = 1_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

NO_WAIT = (0.0, 1.0, 0.0)
"""No backoff between tries: these tests want a compensation that failed for good at once
(the backoff itself is tested in the conformance suite)."""


def _queue(engine: Engine, sid: str = "s", name: str = "pay.undo") -> int:
    """A session whose rollback queued one pending compensation `name`; returns its id."""
    s = engine.session(sid)
    snap = s.snapshot()
    with s.step("pay", {"order": sid}, side_effect=True, compensation=(name, {"order": sid})) as c:
        c.ok("paid")
    [comp] = s.rollback(to=snap, actor="rewind", reason="loop", notice=False).compensations
    return comp.id


def _failed(engine: Engine, sid: str = "s") -> int:
    """A compensation whose handler kept raising: failed after `compensation_attempts` runs."""
    cid = _queue(engine, sid)
    broken = Engine(engine.store, clock=engine.clock, compensation_attempts=2,
                    compensation_backoff=NO_WAIT)

    def refund_down(args, key):
        raise RuntimeError("refund service down")

    broken.compensations.register("pay.undo", refund_down)
    broken.compensations.run()  # runs it until it stays failed
    [comp] = engine.compensations(session=sid)
    assert (comp.id, comp.status, comp.attempts) == (cid, "failed", 2)
    return cid


def _one(engine: Engine, cid: int):
    [comp] = [c for c in engine.compensations() if c.id == cid]
    return comp


# -- retry --------------------------------------------------------------------------------------
def test_a_retried_failed_compensation_is_run_to_done_by_a_worker_with_the_handler(engine):
    cid = _failed(engine)
    after = engine.compensations.retry(cid, actor="olivia", reason="refund service is back")
    assert (after.id, after.status, after.attempts) == (cid, "pending", 0)
    assert "refund service down" in after.error  # the last error stays until a run succeeds
    stored = _one(engine, cid)
    assert (stored.status, stored.attempts) == ("pending", 0)

    seen = []
    worker = Engine(engine.store)
    worker.compensations.register("pay.undo", lambda args, key: seen.append((args, key)))
    [done] = worker.compensations.run()
    assert (done.id, done.status) == (cid, "done")
    assert seen == [({"order": "s"}, stored.idempotency_key)]  # same key: idempotent handlers
    assert _one(engine, cid).status == "done"

    [event] = engine.audit(action="compensation.retry")
    assert (event.actor, event.session, event.reason) == ("olivia", "s", "refund service is back")
    assert event.detail["id"] == cid and event.detail["from"] == "failed"
    assert event.detail["status"] == "pending" and event.detail["attempts"] == 2
    assert event.detail["name"] == "pay.undo"
    feed = [e for e in engine.events(session="s") if e.type == "compensation.retry"]
    assert [(e.data["id"], e.data["actor"]) for e in feed] == [(cid, "olivia")]


def test_retry_resets_the_attempts_of_a_pending_one_that_keeps_failing(engine):
    cid = _queue(engine)
    worker = Engine(engine.store, compensation_attempts=3, compensation_backoff=NO_WAIT)
    worker.compensations.register("pay.undo", lambda a, k: 1 / 0)
    worker.compensations.run(limit=1)
    assert (_one(engine, cid).status, _one(engine, cid).attempts) == ("pending", 1)
    assert engine.compensations.retry(cid, actor="olivia", reason="again").attempts == 0
    worker.compensations.run(limit=2)
    assert _one(engine, cid).status == "pending"  # 2 of 3 fresh attempts used
    worker.compensations.run(limit=1)
    assert (_one(engine, cid).status, _one(engine, cid).attempts) == ("failed", 3)


def test_done_and_unknown_compensations_are_refused_and_nothing_is_written(engine):
    cid = _queue(engine)
    worker = Engine(engine.store)
    worker.compensations.register("pay.undo", lambda a, k: None)
    worker.compensations.run()
    cursor = engine.store.last_event_id()
    with pytest.raises(CompensationConflict, match="is done"):
        engine.compensations.retry(cid, actor="olivia", reason="why not")
    with pytest.raises(CompensationConflict, match="is done"):
        engine.compensations.resolve(cid, actor="olivia", reason="why not")
    with pytest.raises(UnknownCompensation, match="no compensation 424242"):
        engine.compensations.retry(424242, actor="olivia", reason="typo")
    with pytest.raises(UnknownCompensation):
        engine.compensations.resolve(424242, actor="olivia", reason="typo")
    assert _one(engine, cid).status == "done"
    assert engine.audit(action="compensation.retry") == []
    assert engine.audit(action="compensation.resolve") == []
    assert engine.events(since=cursor) == []


def test_viewers_are_refused_and_a_reason_is_required(engine):
    cid = _failed(engine)
    with pytest.raises(PermissionDenied, match="only operators"):
        engine.compensations.retry(cid, actor=VIEWER, reason="I only read")
    with pytest.raises(PermissionDenied):
        engine.compensations.resolve(cid, actor=VIEWER, reason="I only read")
    for blank in ("", "   "):
        with pytest.raises(ValueError, match="reason"):
            engine.compensations.retry(cid, actor="olivia", reason=blank)
        with pytest.raises(ValueError, match="reason"):
            engine.compensations.resolve(cid, actor="olivia", reason=blank)
    with pytest.raises(TypeError):
        engine.compensations.retry(str(cid), actor="olivia", reason="id as text")
    assert _one(engine, cid).status == "failed"
    assert [e.action for e in engine.audit() if e.action.startswith("compensation.")] == []


# -- resolve ------------------------------------------------------------------------------------
def test_resolving_keeps_who_and_why_and_no_worker_runs_it_afterwards(engine):
    failed, pending = _failed(engine, "a"), _queue(engine, "b")
    for cid in (failed, pending):
        after = engine.compensations.resolve(cid, actor="olivia", reason="refunded by hand")
        assert (after.status, after.resolved_by, after.resolved_reason) == (
            "resolved", "olivia", "refunded by hand")
        stored = _one(engine, cid)
        assert (stored.status, stored.resolved_by, stored.resolved_reason) == (
            "resolved", "olivia", "refunded by hand")
    assert {c.id for c in engine.compensations(status="resolved")} == {failed, pending}
    assert engine.compensations(status="pending") == []
    assert engine.compensations(status="failed") == []
    assert engine.store.count_compensations("resolved") == 2

    calls = []
    worker = Engine(engine.store)
    worker.compensations.register("pay.undo", lambda a, k: calls.append(k))
    assert worker.compensations.run() == [] and calls == []
    with pytest.raises(CompensationConflict, match="resolved by hand by olivia"):
        engine.compensations.retry(pending, actor="olivia", reason="changed my mind")
    events = engine.audit(action="compensation.resolve")
    assert [(e.detail["id"], e.detail["from"]) for e in events] == [
        (pending, "pending"), (failed, "failed")]
    assert {e.session for e in events} == {"a", "b"}
    stats = engine.fleet.stats()
    assert stats["compensations_pending"] == 0 and stats["compensations_failed"] == 0


# -- a worker claiming at the same time --------------------------------------------------------
def test_a_running_compensation_under_a_live_lease_is_refused(store_url, open_engine):
    clock = Clock()
    engine = open_engine(store_url, clock=clock)
    cid = _queue(engine)
    claimed = engine.store.claim_compensation(["pay.undo"], "worker-1", 60, clock())
    assert claimed is not None and claimed.id == cid
    clock.t += 30  # the worker may still be running the handler
    for act in (engine.compensations.retry, engine.compensations.resolve):
        with pytest.raises(CompensationConflict, match="holds its lease"):
            act(cid, actor="olivia", reason="stuck?")
    assert _one(engine, cid).status == "running"
    # the worker's outcome stands
    engine.store.finish_compensation(cid, "worker-1", True, None, clock(), True)
    assert _one(engine, cid).status == "done"


def test_after_the_lease_ends_a_late_worker_cannot_undo_a_retry_or_a_resolve(
    store_url, open_engine
):
    clock = Clock()
    engine = open_engine(store_url, clock=clock)
    retried, resolved = _queue(engine, "a"), _queue(engine, "b")
    for cid in (retried, resolved):
        got = engine.store.claim_compensation(["pay.undo"], "slow-worker", 60, clock())
        assert got is not None and got.id == cid
    clock.t += 61  # the leases ended: the worker is gone, or only slow
    engine.compensations.retry(retried, actor="olivia", reason="worker died")
    engine.compensations.resolve(resolved, actor="olivia", reason="refunded by hand")
    for cid in (retried, resolved):  # the slow worker finishes late: fenced, changes nothing
        engine.store.finish_compensation(cid, "slow-worker", False, "boom", clock(), True)
    assert (_one(engine, retried).status, _one(engine, retried).attempts) == ("pending", 0)
    assert _one(engine, resolved).status == "resolved"

    keys = []
    worker = Engine(engine.store, clock=clock)
    worker.compensations.register("pay.undo", lambda a, k: keys.append(k))
    [done] = worker.compensations.run()
    assert done.id == retried and _one(engine, retried).status == "done"
    assert keys == [_one(engine, retried).idempotency_key]


def test_a_claim_after_a_retry_takes_it_once_and_a_resolve_loses_to_the_claim(
    store_url, open_engine
):
    clock = Clock()
    engine = open_engine(store_url, clock=clock)
    cid = _failed(engine)
    engine.compensations.retry(cid, actor="olivia", reason="back up")
    first = engine.store.claim_compensation(["pay.undo"], "w1", 60, clock())
    assert first is not None and (first.id, first.attempts) == (cid, 1)
    assert engine.store.claim_compensation(["pay.undo"], "w2", 60, clock()) is None
    with pytest.raises(CompensationConflict):
        engine.compensations.resolve(cid, actor="olivia", reason="too late")
    engine.store.finish_compensation(cid, "w1", True, None, clock(), True)
    stored = _one(engine, cid)
    assert (stored.status, stored.resolved_by) == ("done", None)


# -- handler liveness ---------------------------------------------------------------------------
def test_processes_that_register_handlers_are_live_for_a_while(store_url, open_engine):
    clock = Clock()
    console = open_engine(store_url, clock=clock)
    assert console.compensations.handlers() == {}
    worker = Engine(console.store, clock=clock)
    worker.compensations.register("refund_api.undo", lambda a, k: None)
    worker.compensations.register("points.undo", lambda a, k: None)
    assert console.compensations.handlers() == {"points.undo": clock.t, "refund_api.undo": clock.t}
    [w] = console.store.compensation_workers(clock.t - 1)
    assert w.id == worker.config.worker_id and w.handlers == ("points.undo", "refund_api.undo")

    other = Engine(console.store, clock=clock)
    clock.t += 100
    other.compensations.register("points.undo", lambda a, k: None)
    assert console.compensations.handlers() == {"points.undo": clock.t,
                                               "refund_api.undo": clock.t - 100}
    clock.t += 60  # the first worker fell silent 160 s ago
    assert console.compensations.handlers() == {"points.undo": clock.t - 60}
    worker.compensations.run()  # running compensations renews its heartbeat
    assert set(console.compensations.handlers()) == {"points.undo", "refund_api.undo"}
    assert console.compensations.handlers(within_s=1) == {"points.undo": clock.t,
                                                         "refund_api.undo": clock.t}


def test_heartbeats_are_throttled_and_old_workers_are_forgotten(store_url, open_engine):
    clock = Clock()
    console = open_engine(store_url, clock=clock)
    worker = Engine(console.store, clock=clock)
    worker.compensations.register("pay.undo", lambda a, k: None)
    seen = console.store.compensation_workers(0)[0].seen_at
    clock.t += 10
    worker.compensations.run()  # within HEARTBEAT_S: no new write
    assert console.store.compensation_workers(0)[0].seen_at == seen
    clock.t += 30
    worker.compensations.run()
    assert console.store.compensation_workers(0)[0].seen_at == clock.t
    for i in range(5):  # short-lived processes, long gone
        console.store.heartbeat_worker(f"gone-{i}", ["pay.undo"], clock.t - 7200, 0)
    assert len(console.store.compensation_workers(0)) == 6
    clock.t += 30
    worker.compensations.run()  # its heartbeat forgets the ones older than an hour
    assert [w.id for w in console.store.compensation_workers(0)] == [worker.config.worker_id]
    # no handlers: forgotten
    console.store.heartbeat_worker(worker.config.worker_id, [], clock.t, 0)
    assert console.store.compensation_workers(0) == []


def test_a_schema_2_file_gets_the_new_columns(tmp_path, monkeypatch):
    import os

    from engine.store.sqlite import tx

    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    with Engine.open(url) as engine:
        cid = _failed(engine)
    with sqlite3.connect(path) as conn:  # what the previous release left behind
        conn.execute("ALTER TABLE compensations DROP COLUMN resolved_by")
        conn.execute("ALTER TABLE compensations DROP COLUMN resolved_reason")
        conn.execute("DROP TABLE workers")
        conn.execute("UPDATE rewind_meta SET value = '2' WHERE key = 'schema_version'")
    with monkeypatch.context() as m:  # a reader that may not upgrade the file still reads it
        # (tests may run as root, whom file modes do not stop)
        m.setattr(tx.os, "access", lambda p, mode: mode != os.W_OK and os.path.exists(p))
        with Engine.open(url) as reader:
            assert reader.store._db.read_only
            assert _one(reader, cid).status == "failed"
            assert reader.compensations.handlers() == {}
    with Engine.open(url) as engine:
        after = engine.compensations.resolve(cid, actor="olivia", reason="by hand")
        assert _one(engine, cid).resolved_by == "olivia" == after.resolved_by
    with sqlite3.connect(path) as conn:
        (version,) = conn.execute(
            "SELECT value FROM rewind_meta WHERE key = 'schema_version'").fetchone()
    from engine.store.sqlite.schema import SCHEMA_VERSION

    assert version == str(SCHEMA_VERSION)
