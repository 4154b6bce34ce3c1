"""The SQLite step path without an index on ``steps.seq``: a step found by sequence number
through the primary key (`step_at_seq`), rollbacks reaching the abandoned steps by number, the
old index dropped on open, and the checkpointer's process id kept across a fork."""

from __future__ import annotations

import os
import sqlite3

import pytest

from engine import Engine, LoopDetector
from engine.errors import SnapshotNotRestorable, UnknownSnapshot
from engine.store.sqlite.rows import step_at_seq


def _engine(path) -> Engine:
    return Engine.open(f"sqlite:///{path}", detector_factory=lambda: LoopDetector(max_steps=None))


def _rows(path, sid: str) -> list[tuple[int, int]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(
            "SELECT n, seq FROM steps WHERE session = ? ORDER BY n", (sid,)
        ).fetchall()
    finally:
        conn.close()


def _irregular_history(engine: Engine, sid: str, steps: int) -> None:
    """Steps with and without snapshots, between messages, variables and manual snapshots,
    so sequence numbers advance by uneven amounts."""
    s = engine.session(sid)
    for i in range(steps):
        with s.step("search", {"q": i}, snapshot=i % 3 != 0) as call:
            call.ok({"hits": i})
        if i % 4 == 0:
            s.append_messages([{"role": "tool", "content": f"r{i}"}] * (1 + i % 5))
        if i % 7 == 0:
            s.set_var("turn", i)
        if i % 11 == 0:
            s.snapshot(f"manual {i}")


def test_step_at_seq_finds_each_step_and_no_other_number(tmp_path):
    path = tmp_path / "rows.db"
    engine = _engine(path)
    _irregular_history(engine, "s", 120)
    read = engine.store._db.read  # type: ignore[attr-defined]
    rows = _rows(path, "s")
    by_seq = {seq: n for n, seq in rows}
    for seq in range(0, rows[-1][1] + 3):
        assert step_at_seq(read, "s", seq) == by_seq.get(seq), seq
    assert step_at_seq(read, "nobody", 5) is None
    engine.close()


def test_step_at_seq_across_the_gaps_purged_branches_leave(tmp_path):
    path = tmp_path / "gaps.db"
    engine = _engine(path)
    s = engine.session("s")
    _irregular_history(engine, "s", 40)
    for round_ in range(3):  # three branches of steps, each abandoned by a rollback
        target = s.snapshot(f"before branch {round_}")
        for i in range(6):
            with s.step("branch", {"r": round_, "i": i}) as call:
                call.ok(i)
        s.rollback(to=target, actor="test", reason="abandon", notice=False)
        with s.step("after", {"r": round_}) as call:
            call.ok(round_)
    removed = engine.store.purge_branches(engine.clock() + 1, engine.clock())
    assert removed["steps"] == 18
    rows = _rows(path, "s")
    numbers = [n for n, _ in rows]
    assert len(numbers) < numbers[-1]  # the purge left gaps in the step numbers
    read = engine.store._db.read  # type: ignore[attr-defined]
    by_seq = {seq: n for n, seq in rows}
    for seq in range(0, rows[-1][1] + 3):
        assert step_at_seq(read, "s", seq) == by_seq.get(seq), seq
    engine.close()


def test_write_ahead_snapshots_far_back_are_read_and_judged_by_their_step_row(tmp_path):
    path = tmp_path / "far.db"
    engine = _engine(path)
    s = engine.session("s")
    ids = []
    for i in range(200):
        with s.step("search", {"q": i}) as call:
            call.ok(i)
        ids.append(call.snapshot_id)
        s.append_message("tool", f"result {i}")
    first = engine.store.snapshot("s", ids[0])
    assert first is not None and first.id == ids[0] and first.next_step == 1
    assert first.restorable is False  # retired by the retention window
    with pytest.raises(SnapshotNotRestorable):
        s.rollback(to=ids[0], actor="test", reason="too far", notice=False)
    unknown = f"snap-{int(ids[5].split('-')[1]) + 1}"  # the step's own number, not a snapshot
    assert engine.store.snapshot("s", unknown) is None
    with pytest.raises(UnknownSnapshot):
        s.rollback(to=unknown, actor="test", reason="no such", notice=False)
    # a recent one restores: the steps from it on leave the live line, the earlier stay
    target = ids[-10]
    result = s.rollback(to=target, actor="test", reason="back", notice=False)
    assert result.abandoned_steps == 10
    live = [rec.n for rec in s.steps(live_only=True)]
    assert live == list(range(1, 191))
    node = engine.store.snapshot("s", target)
    assert node is not None and node.on_live_line and node.next_step == 191
    engine.close()


def test_rollback_queues_compensations_of_the_abandoned_steps_only(tmp_path):
    engine = _engine(tmp_path / "saga.db")
    s = engine.session("s")
    for i in range(30):
        with s.step("charge", {"i": i}, side_effect=True,
                    compensation=("refund", {"i": i})) as call:
            call.ok(i)
        if i == 19:
            target = call.snapshot_id  # taken before step 20 began
    result = s.rollback(to=target, actor="test", reason="undo", notice=False)
    assert result.abandoned_steps == 11
    assert [c.step for c in result.compensations] == list(range(30, 19, -1))
    engine.close()


def test_the_old_seq_index_is_dropped_on_open(tmp_path):
    path = tmp_path / "old.db"
    engine = _engine(path)
    _irregular_history(engine, "s", 10)
    engine.close()
    conn = sqlite3.connect(path)
    conn.execute("CREATE INDEX steps_seq ON steps(session, seq)")  # as an older release made it
    conn.commit()
    conn.close()
    engine = _engine(path)
    names = [row[0] for row in engine.store._db.read(  # type: ignore[attr-defined]
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'steps'")]
    assert "steps_seq" not in names
    s = engine.session("s")
    with s.step("search", {"q": "again"}) as call:
        call.ok(1)
    assert s.rollback(to=call.snapshot_id, actor="test", reason="r", notice=False).abandoned_steps
    engine.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_its_own_checkpointer(tmp_path):
    engine = _engine(tmp_path / "fork.db")
    s = engine.session("s")
    with s.step("search", {"q": 1}) as call:  # the parent's checkpointer runs
        call.ok(1)
    checkpointer = engine.store._db._checkpointer  # type: ignore[attr-defined]
    parent_run = checkpointer._run
    assert parent_run is not None and parent_run.pid == os.getpid()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            checkpointer.poke()
            run = checkpointer._run
            ok = run is not parent_run and run.pid == os.getpid()
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"1"
    assert checkpointer._run is parent_run  # the parent's stays
    engine.close()
