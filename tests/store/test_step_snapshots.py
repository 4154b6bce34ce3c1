"""Write-ahead step snapshots behave the same on every store, wherever a store keeps them (the
SQLite store keeps one in its step's row): a rollback to one keeps it on the live line while its
step leaves it, a late step keeps its snapshot, purging branches keeps live snapshots, the
retention window retires the oldest, and an older SQLite file's step snapshots (rows of their
own) still restore after the file is migrated."""

from __future__ import annotations

import itertools
import sqlite3

import pytest

from engine.errors import LoopWaiting, SnapshotNotRestorable


def _clocked(open_engine, url):
    ticks = itertools.count(1_800_000_000)
    return open_engine(url, clock=lambda: float(next(ticks)))


def _step(s, tool, i=0):
    with s.step(tool, {"i": i}) as call:
        call.ok({"i": i})
    return call


def _node(s, sid):
    return next(n for n in s.tree() if n.id == sid)


def test_rollback_to_a_step_snapshot_keeps_it_live(store_url, open_engine):
    engine = _clocked(open_engine, store_url)
    s = engine.session("a")
    _step(s, "first")
    b = _step(s, "second")
    c = _step(s, "third")
    r = s.rollback(to=b.snapshot_id, actor="t", reason="back", notice=False)
    assert (r.abandoned_steps, r.abandoned_snapshots) == (2, 1)
    node = _node(s, b.snapshot_id)
    assert (node.on_live_line, node.restorable, node.is_head) == (True, True, True)
    assert node.next_step == b.n and node.kind == "step"
    assert not _node(s, c.snapshot_id).on_live_line
    assert [x.n for x in s.steps(live_only=True)] == [1]
    with pytest.raises(SnapshotNotRestorable):
        s.rollback(to=c.snapshot_id, actor="t", reason="abandoned", notice=False)
    d = _step(s, "fourth")
    r2 = s.rollback(to=b.snapshot_id, actor="t", reason="again", notice=False)
    assert (r2.abandoned_steps, r2.abandoned_snapshots) == (1, 1)
    assert not _node(s, d.snapshot_id).on_live_line
    assert _node(s, b.snapshot_id).restorable
    # purging the branches keeps the snapshot that stayed live, and its parent links
    removed = engine.fleet.purge_abandoned(older_than_s=0)
    assert (removed["steps"], removed["snapshots"]) == (3, 2)
    tree = s.tree()
    assert [n.id for n in tree] == [s.steps()[0].snapshot, b.snapshot_id]
    assert tree[1].parent == tree[0].id and tree[1].is_head and tree[1].restorable
    _step(s, "fifth")
    s.rollback(to=b.snapshot_id, actor="t", reason="after the purge", notice=False)
    assert [x.n for x in s.steps(live_only=True)] == [1]


def test_a_late_step_keeps_its_snapshot_on_the_live_line(store_url, open_engine):
    engine = _clocked(open_engine, store_url)
    s = engine.session("late")
    _step(s, "first")
    with s.step("slow", {"i": 1}) as call:
        marker = s.snapshot("taken while the step ran")
        s.append_message("user", "meanwhile")
        engine.session("late").rollback(to=marker, actor="op", reason="r", notice=False)
        call.ok("done")
    assert call.late
    step = s.steps()[-1]
    assert step.n == call.n and step.late and not step.on_live_line
    node = _node(s, call.snapshot_id)
    assert node.on_live_line and node.kind == "step"
    assert node.restorable
    _step(s, "next")
    r = s.rollback(to=call.snapshot_id, actor="op", reason="before the slow step", notice=False)
    assert r.abandoned_snapshots >= 1


def test_the_retention_window_retires_the_oldest_step_snapshots(store_url, open_engine):
    engine = _clocked(open_engine, store_url)
    keep = engine.config.retention.keep_step_snapshots
    s = engine.session("window")
    calls = [_step(s, "search", i) for i in range(keep + 7)]
    restorable = [n.id for n in s.tree() if n.restorable]
    assert restorable == [c.snapshot_id for c in calls[-keep:]]
    assert engine.store.restorable_snapshot("window", calls[3].n) is None
    assert engine.store.restorable_snapshot("window", calls[-1].n) == calls[-1].snapshot_id
    assert engine.store.restorable_snapshot("window", None) == calls[-1].snapshot_id
    with pytest.raises(SnapshotNotRestorable):
        s.rollback(to=calls[0].snapshot_id, actor="t", reason="too old", notice=False)
    # a rollback inside the window, then more steps: the window counts on
    s.rollback(to=calls[-3].snapshot_id, actor="t", reason="back", notice=False)
    assert _node(s, calls[-3].snapshot_id).restorable
    more = [_step(s, "search", 100 + i) for i in range(keep)]
    assert not _node(s, calls[-3].snapshot_id).restorable
    assert [n.id for n in s.tree() if n.restorable] == [c.snapshot_id for c in more]


def _schema_3_file(path):
    """A file as the previous release left it: two steps, each with its snapshot row."""
    from engine.store.sqlite.schema import DDL

    old_ddl = (DDL.replace(",\n    snap_floor INTEGER NOT NULL DEFAULT 0", "")
               .replace("    snap_label TEXT, snap_parent TEXT, snap_msgs INTEGER,\n", ""))
    assert "snap_" not in old_ddl
    conn = sqlite3.connect(path)
    for statement in old_ddl.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute("INSERT INTO rewind_meta VALUES ('schema_version', '3')")
    conn.execute("INSERT INTO sessions(id, meta, head, seq, step_count, created_at, updated_at) "
                 "VALUES ('old', '{}', 'snap-3', 4, 2, 1.0, 2.0)")
    for n, seq, parent in ((1, 1, None), (2, 3, "snap-1")):
        conn.execute("INSERT INTO snapshots(session, id, parent, label, kind, seq, msg_count, "
                      "next_step, created_at) VALUES ('old', ?, ?, 'before t', 'step', ?, 0, ?, ?)",
                      (f"snap-{seq}", parent, seq, n, float(n)))
        conn.execute("INSERT INTO steps(session, n, seq, epoch, tool, args, fingerprint, status, "
                     "started_at, ended_at, snapshot) "
                     "VALUES ('old', ?, ?, 0, 't', '{}', 'f', 'ok', ?, ?, ?)",
                     (n, seq + 1, float(n), float(n), f"snap-{seq}"))
    conn.commit()
    conn.close()


def test_an_older_file_keeps_its_step_snapshots(tmp_path, open_engine):
    """A schema-3 file keeps each step snapshot as a row of ``snapshots``: migrated on open,
    those rows stay in the tree, restore, and retire as new steps come."""
    path = tmp_path / "old.db"
    _schema_3_file(path)
    engine = _clocked(open_engine, f"sqlite:///{path}")
    s = engine.session("old")
    assert [(n.id, n.restorable) for n in s.tree()] == [("snap-1", True), ("snap-3", True)]
    new = _step(s, "new")
    assert new.snapshot_id == "snap-5" and _node(s, "snap-5").parent == "snap-3"
    r = s.rollback(to="snap-3", actor="t", reason="to an old row", notice=False)
    assert (r.abandoned_steps, r.abandoned_snapshots) == (2, 1)
    assert [x.n for x in s.steps(live_only=True)] == [1]
    for i in range(engine.config.retention.keep_step_snapshots):
        _step(s, "more", i)
    assert not _node(s, "snap-3").restorable and not _node(s, "snap-1").restorable
    with pytest.raises(SnapshotNotRestorable):
        s.rollback(to="snap-1", actor="t", reason="retired", notice=False)
    engine.close()
    conn = sqlite3.connect(path)
    from engine.store.sqlite.schema import SCHEMA_VERSION

    assert conn.execute("SELECT value FROM rewind_meta WHERE key = 'schema_version'"
                        ).fetchone()[0] == str(SCHEMA_VERSION)
    conn.close()



def test_an_older_file_read_only_lists_its_step_snapshots(tmp_path, monkeypatch, open_engine):
    """A reader that may not upgrade a schema-3 file still lists and picks its snapshots."""
    import os

    from engine.store.sqlite import tx

    path = tmp_path / "old.db"
    _schema_3_file(path)
    # tests may run as root, whom file modes do not stop
    monkeypatch.setattr(tx.os, "access", lambda p, mode: mode != os.W_OK and os.path.exists(p))
    reader = open_engine(f"sqlite:///{path}")
    assert reader.store._db.read_only
    assert [(n.id, n.restorable, n.is_head) for n in reader.store.snapshots("old")] == [
        ("snap-1", True, False), ("snap-3", True, True)]
    assert reader.store.restorable_snapshot("old", None) == "snap-3"
    assert reader.store.restorable_snapshot("old", 1) == "snap-1"


def test_last_activity_is_exact_to_a_second_and_status_changes_show_at_once(store_url,
                                                                            open_engine):
    """`updated_at` keys the fleet's paging indexes, so a busy session's steps move it at most
    once a second on SQLite; the fleet still sees a session's last activity to within a second,
    and a status change (a loop, healthy again, a rollback) at its own instant."""
    now = [1_800_000_000.0]
    engine = open_engine(store_url, clock=lambda: now[0], on_loop="flag")
    s = engine.session("busy")
    for i in range(40):  # 40 steps in 2 s of the session's clock
        now[0] += 0.05
        _step(s, "search", i)
        assert now[0] - 1.0 <= s.info().updated_at <= now[0]
    assert s.info().status == "healthy"
    now[0] += 0.01
    with s.step("flaky", {"x": 1}) as call:
        call.fail("boom")
    assert now[0] - 1.0 <= s.info().updated_at <= now[0]
    snap = s.snapshot("before the loop")
    for _ in range(10):  # the same failing call until the detector flags it
        now[0] += 0.01
        try:
            with s.step("flaky", {"x": 1}) as call:
                call.fail("boom")
        except LoopWaiting:  # flagged: the session waits for on-call
            break
    info = s.info()
    assert info.status == "looping" and info.updated_at == now[0]
    now[0] += 0.01
    s.rollback(snap, actor="oncall", reason="test")
    assert s.info().updated_at == now[0]
    now[0] += 0.01
    _step(s, "search", 99)
    info = s.info()
    assert info.status == "healthy" and info.updated_at == now[0]


def test_one_snapshot_by_id_reads_as_the_tree_lists_it(store_url, open_engine):
    """`store.snapshot(sid, id)` is what a rollback's preview and checks read: the same node as
    the whole tree gives, for live, retired, abandoned and step snapshots alike, and None for
    ids the session does not have (hostile spellings included)."""
    engine = _clocked(open_engine, store_url)
    s = engine.session("tree")
    s.append_message("user", "hi")
    first = s.snapshot("first")
    for i in range(4):
        _step(s, "lookup", i)
    middle = s.snapshot("middle")
    for i in range(3):
        _step(s, "write", i)
    s.rollback(middle, actor="oncall", reason="test")
    for i in range(60):  # past the step-snapshot retention window
        _step(s, "lookup", 10 + i)
    store = engine.store
    tree = s.tree()
    assert {n.kind for n in tree} == {"manual", "step"}
    assert any(not n.on_live_line for n in tree) and any(not n.restorable for n in tree)
    for node in tree:
        assert store.snapshot("tree", node.id) == node
    assert store.snapshot("tree", first) == next(n for n in tree if n.id == first)
    last = max(int(n.id.split("-")[1]) for n in tree)
    for bogus in ("snap-0" + first.split("-")[1], f"snap-{last + 1}", "snap-", "snap-x",
                  "first", "", "snap-" + "9" * 40, "snap-１"):
        assert store.snapshot("tree", bogus) is None
    assert store.snapshot("no-such-session", first) is None


def test_a_rollback_to_a_hostile_snapshot_id_says_there_is_none(store_url, open_engine):
    """Ids are exact: a snapshot id of 40 digits crashed the SQLite rollback with an integer
    overflow before snapshot ids were parsed in one place."""
    from engine.errors import UnknownSnapshot

    engine = _clocked(open_engine, store_url)
    s = engine.session("hostile")
    s.append_message("user", "hi")
    s.snapshot("a")
    _step(s, "lookup")
    for bogus in ("snap-" + "9" * 40, "snap-07", "snap-x", "snap-"):
        with pytest.raises(UnknownSnapshot):
            s.rollback(to=bogus, actor="oncall", reason="test")
    assert s.info().rollbacks == 0
