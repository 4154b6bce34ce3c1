"""Flat guarded steps, proven by the query plans: every statement a guarded step, a snapshot or a
rollback runs on SQLite reaches a session's rows through an index bounded by what it touches,
never by walking the session's history.

The statements are captured (`set_trace_callback`) while the engine works on a session with a
long history, then each is run through ``EXPLAIN QUERY PLAN``. A plan fails when it scans a
table, or searches a history table on the session alone (``(session=?)``) without an ORDER BY the
index already gives and a LIMIT that bounds the walk. The one partial index bounded by the
retention window (the restorable snapshots) may be searched on the session and kind.
"""

from __future__ import annotations

import re
import sqlite3

import pytest

from engine import Engine, LoopDetected, LoopDetector

HISTORY_TABLES = {"messages", "kv_writes", "kv", "docs", "snapshots", "steps", "branches"}
BOUNDED_BY_RETENTION = {"snapshots_restorable"}
"""Partial indexes holding at most a retention window of rows per session."""

PLAN_LINE = re.compile(
    r"^(?P<op>SCAN|SEARCH) (?P<table>\w+)"
    r"(?: USING (?:COVERING )?(?:INDEX (?P<index>\w+)|PRIMARY KEY|INTEGER PRIMARY KEY))?"
    r"(?: \((?P<cons>[^)]*)\))?"
)
HISTORY_STEPS = 1_200


def _problems(conn: sqlite3.Connection, sql: str) -> list[str]:
    """What is wrong with the plan of `sql` (empty when every access is bounded)."""
    plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql)]
    ordered_limit = (re.search(r"ORDER BY [\w\s,.]+ LIMIT", sql) is not None
                     and not any("TEMP B-TREE" in line for line in plan))
    out = []
    for line in plan:
        m = PLAN_LINE.match(line)
        if m is None or m["table"] in ("CONSTANT",):
            continue
        if m["op"] == "SCAN":
            out.append(f"{line!r} in {sql[:160]!r}")
        elif (m["table"] in HISTORY_TABLES and (m["cons"] or "") == "session=?"
              and m["index"] not in BOUNDED_BY_RETENTION and not ordered_limit):
            out.append(f"{line!r} walks the session's history in {sql[:160]!r}")
    return out


def _capture(engine: Engine) -> list[str]:
    statements: list[str] = []
    engine.store._db.conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
    return statements


def _checked(path: str, statements: list[str]) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        seen, problems = set(), []
        for sql in statements:
            head = sql.lstrip().split(None, 1)[0].upper()
            if head in ("BEGIN", "COMMIT", "ROLLBACK", "PRAGMA") or sql in seen:
                continue
            seen.add(sql)
            problems += _problems(conn, sql)
        return problems
    finally:
        conn.close()


@pytest.fixture(scope="module")
def long_session(tmp_path_factory):
    """An engine on a SQLite file holding one session with a long history: steps (some with
    side effects), messages, variables, manual snapshots and an earlier rollback. One for the
    module, as seeding is the slow part; each test adds to the session."""
    path = str(tmp_path_factory.mktemp("plans") / "plans.db")
    engine = Engine.open(f"sqlite:///{path}",
                         detector_factory=lambda: LoopDetector(max_steps=None))
    s = engine.session("long", meta={"tenant": "acme"})
    for i in range(HISTORY_STEPS):
        with s.step("search", {"q": i}, side_effect=i % 10 == 0,
                    compensation=("undo", {"i": i}) if i % 10 == 0 else None) as call:
            call.ok({"hits": i})
        if i % 50 == 0:
            s.append_message("user", f"task {i}")
            s.set_var("turn", i)
        if i % 300 == 0:
            s.snapshot(f"manual {i}")
    target = s.snapshot("before the tail")
    for i in range(5):
        with s.step("tail", {"i": i}) as call:
            call.ok(i)
    s.rollback(to=target, actor="test", reason="seed a branch", notice=False)
    for i in range(20):
        with s.step("search", {"q": f"after {i}"}) as call:
            call.ok(i)
    yield engine, s, path
    engine.close()


def test_guarded_step_statements_use_bounded_indexes(long_session):
    engine, s, path = long_session
    statements = _capture(engine)
    with s.step("search", {"q": "plain"}) as call:
        call.ok({"hits": 1})
    with s.step("refund_api", {"order": "A-1"}, side_effect=True,
                compensation=("refund_api.undo", {"order": "A-1"})) as call:
        call.ok({"refunded": True})
    with s.step("search", {"q": "failing"}) as call:
        call.fail("HTTP 500")
    s.agent_turn("an agent turn without a tool")
    s.append_message("user", "next task")
    assert len(statements) > 10  # the capture saw the steps
    assert _checked(path, statements) == []


def test_snapshot_and_rollback_statements_use_bounded_indexes(long_session):
    engine, s, path = long_session
    statements = _capture(engine)
    snap = s.snapshot("operator snapshot")
    s.set_var("plan", "b")
    with s.step("refund_api", {"order": "B-2"}, side_effect=True,
                compensation=("refund_api.undo", {"order": "B-2"})) as call:
        call.ok()
    s.rollback(to=snap, actor="alice", reason="wrong plan")
    with s.step("search", {"q": "resumed"}) as call:
        call.ok()
    s.rollback(to=None, actor="alice", reason="last healthy", force=True)
    assert any("UPDATE steps SET branch" in sql for sql in statements)
    assert _checked(path, statements) == []


def test_integration_reads_use_bounded_indexes(long_session):
    """A checkpointer's turn: the session with its head pointer, then a record with the
    documents filed under it (a LangGraph thread's latest checkpoint and its pending writes)."""
    engine, s, path = long_session
    engine.documents.put(s.id, "lg", {f"c/{i:05d}": {"i": i} for i in range(300)}
                         | {f"w/{i:05d}/t/0": {"i": i} for i in range(300)})
    engine.documents.put_values(s.id, "lg_head", {"root": "00299"})
    statements = _capture(engine)
    info, values = engine.documents.session_values(s.id, "lg_head")
    found = engine.documents.get(s.id, "lg", ["c/00299"], prefix="w/00299/")
    assert info is not None and values == {"root": "00299"} and len(found) == 2
    assert len(statements) == 2
    assert _checked(path, statements) == []


def test_loop_and_automatic_rollback_statements_use_bounded_indexes(long_session):
    engine, s, path = long_session
    statements = _capture(engine)
    with pytest.raises(LoopDetected):
        for _ in range(10):
            with s.step("image_crop", {"x": 10}) as call:
                call.fail("invalid slice")
    assert any("INSERT INTO branches" in sql for sql in statements)
    assert any("'loop'" in sql for sql in statements)  # the episode's start, with its step
    assert _checked(path, statements) == []


def test_loop_episode_reads_and_recorded_verdicts_use_the_loop_index(long_session):
    """Recording steps whose verdict starts an episode, and reading the episodes back by time
    (`Store.loops`, the console's first visit), reach only the ``loop`` events."""
    engine, _s, path = long_session
    watched = engine.session("watched", on_loop="flag")
    statements = _capture(engine)
    calls = []
    for _ in range(8):
        call = watched.step("image_crop", {"x": 11}, snapshot=False)
        call.fail("invalid slice")
        calls.append(call)
    watched.record_steps(calls)
    assert engine.store.loops(0.0)
    assert engine.store.loops(0.0, 1, limit=1) is not None
    reads = [sql for sql in statements if "type = 'loop'" in sql]
    assert reads and _checked(path, statements) == []
    conn = sqlite3.connect(path)
    try:
        plan = " ".join(row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + reads[0]))
    finally:
        conn.close()
    assert "USING INDEX events_loop" in plan and "TEMP B-TREE" not in plan


def test_the_check_catches_a_walk_over_the_history(long_session):
    """The checker itself: an UPDATE of snapshots that no index bounds (here: by creation time)
    walks every snapshot row of the session, and is reported."""
    _engine, _s, path = long_session
    old = ("UPDATE snapshots SET retired_at = 1.0 WHERE session = 'long' "
           "AND retired_at IS NULL AND created_at <= 10")
    assert _checked(path, [old]) != []
    assert _checked(path, ["SELECT * FROM steps WHERE session = 'long' AND branch = 'b'"]) != []


def test_an_older_file_gets_the_indexes_of_this_release(tmp_path):
    """A file written before the restorable index was ordered by next_step, and with the two
    session indexes this release dropped, is brought up to date when opened for writing; its
    retiring UPDATE is then a range search on the index."""
    from engine.store.sqlite.schema import DDL, RETIRED_INDEXES

    path = str(tmp_path / "old.db")
    conn = sqlite3.connect(path)
    old_ddl = DDL.replace("snapshots(session, kind, next_step, seq)",
                          "snapshots(session, kind, seq)")
    for name, definition in (("sessions_updated", "sessions(updated_at DESC)"),
                             ("sessions_status", "sessions(status, updated_at DESC)")):
        old_ddl += f";CREATE INDEX {name} ON {definition}"
    for statement in old_ddl.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.commit()
    conn.close()
    engine = Engine.open(f"sqlite:///{path}")
    s = engine.session("old")
    for i in range(60):
        with s.step("search", {"q": i}) as call:
            call.ok(i)
    assert sum(n.restorable for n in s.tree()) == engine.config.retention.keep_step_snapshots
    engine.close()
    conn = sqlite3.connect(path)
    indexes = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'"))
    conn.close()
    assert not set(RETIRED_INDEXES) & set(indexes)
    assert "(session, kind, next_step, seq)" in indexes["snapshots_restorable"]


def test_step_snapshot_rollback_and_late_step_statements_use_bounded_indexes(long_session):
    """A write-ahead snapshot kept in its step's row: finding it, moving it out when its step
    alone leaves the live line (a rollback to it, a late step), counting those that left. (The
    checks a rollback of a session standing rolled back makes, and a late step's branch, read
    the session's listings: not this release's statements, left out here.)"""
    engine, s, path = long_session
    statements = _capture(engine)
    with s.step("search", {"q": "kept"}) as kept:
        kept.ok()
    with s.step("search", {"q": "undone"}) as call:
        call.ok()
    s.rollback(to=kept.snapshot_id, actor="alice", reason="to a step snapshot", notice=False)
    with s.step("slow", {"q": "late"}) as late:
        marker = s.snapshot("while it ran")
        s.append_message("user", "meanwhile")
        s.rollback(to=marker, actor="bob", reason="cut", notice=False)
        late.ok()
    assert late.late
    ours = [sql for sql in statements if "snap_" in sql and "UNION ALL" not in sql]
    assert any("INSERT INTO snapshots" in sql and "FROM steps" in sql for sql in ours)
    assert _checked(path, ours) == []


def test_fleet_table_reads_are_bounded_by_the_rows_shown(tmp_path):
    """The fleet table's first screen (`dashboard.data.table_page`) and the "needs you" band read
    sessions in an order an index gives, LIMITed: never a sort of the whole fleet, never a scan
    that is not cut by its LIMIT."""
    path = str(tmp_path / "fleet.db")
    engine = Engine.open(f"sqlite:///{path}")
    for i in range(30):
        engine.session(f"s-{i:02d}", meta={"tenant": f"t{i % 3}"})
    statements = _capture(engine)
    for status in ("looping", "rolled_back", "healthy", "stopped"):
        engine.sessions(status=status, limit=100)
    engine.sessions(limit=100)
    page = engine.sessions(limit=10)
    engine.sessions(limit=10, after=page[-1])
    engine.close()
    conn = sqlite3.connect(path)
    try:
        listing = [sql for sql in statements if "FROM sessions" in sql and "LIMIT" in sql]
        assert len(listing) >= 7
        for sql in listing:
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql)]
            assert not any("TEMP B-TREE" in line for line in plan), (sql, plan)
            assert all(line.startswith("SEARCH") or "USING" in line for line in plan
                       if line.startswith(("SCAN", "SEARCH"))), (sql, plan)
            assert any("sessions_page" in line or "sessions_status_page" in line
                       for line in plan), (sql, plan)
    finally:
        conn.close()


def test_replay_reads_each_history_in_key_order_and_writes_nothing(long_session):
    """`Engine.replay` reads a session's whole history (that is its job), but each read is a
    range of the history table's primary key in its own order, a sort of nothing, and it writes
    nothing."""
    engine, _s, path = long_session
    statements = _capture(engine)
    engine.replay({"repeat_threshold": 4}, where={"tenant": "acme"})
    heads = [(sql.lstrip().split(None, 1)[0].upper(), sql) for sql in statements]
    assert [sql for head, sql in heads if head in ("INSERT", "UPDATE", "DELETE")] == []
    reads = [sql for head, sql in heads
             if head == "SELECT" and ("FROM steps" in sql or "FROM messages" in sql)]
    assert {"steps", "messages"} <= {sql.split(" FROM ")[1].split()[0] for sql in reads}
    conn = sqlite3.connect(path)
    try:
        for sql in reads:
            plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql)]
            assert plan == [f"SEARCH {sql.split(' FROM ')[1].split()[0]} USING PRIMARY KEY "
                            "(session=?)"], (sql, plan)
    finally:
        conn.close()
