"""The SQLite feed's cursor: ``events.id`` is the table's rowid, without ``AUTOINCREMENT`` (no
``sqlite_sequence`` row written with every event, one page less per guarded step). Ids still only
grow, across rollbacks, purges and deleted sessions (no event is ever deleted), and a file whose
``events`` table an earlier release created with ``AUTOINCREMENT`` keeps its feed and goes on."""

from __future__ import annotations

import sqlite3

from engine.store.sqlite.schema import DDL, SCHEMA_VERSION

OLD_EVENTS = "CREATE TABLE IF NOT EXISTS events (\n    id INTEGER PRIMARY KEY AUTOINCREMENT,"
NEW_EVENTS = "CREATE TABLE IF NOT EXISTS events (\n    id INTEGER PRIMARY KEY,"


def _steps(s, tool, count):
    for i in range(count):
        with s.step(tool, {"i": i}) as call:
            call.ok({"i": i})


def _events_sql(path) -> str:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()[0]
    finally:
        conn.close()


def _counter(path) -> list[tuple]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'events'").fetchall()
    finally:
        conn.close()


def _old_file(path) -> None:
    """A file as the previous release created it: the same tables, ``events`` with
    ``AUTOINCREMENT``, at the current schema version (the id form did not change it)."""
    assert NEW_EVENTS in DDL
    conn = sqlite3.connect(path)
    for statement in DDL.replace(NEW_EVENTS, OLD_EVENTS).split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.execute("INSERT INTO rewind_meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    conn.commit()
    conn.close()


def test_a_new_file_writes_events_without_an_autoincrement_counter(tmp_path, open_engine):
    path = tmp_path / "new.db"
    engine = open_engine(f"sqlite:///{path}")
    s = engine.session("s")
    _steps(s, "search", 5)
    assert "AUTOINCREMENT" not in _events_sql(path)
    assert _counter(path) == []
    ids = [e.id for e in engine.events()]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) and len(ids) >= 6


def test_event_ids_only_grow_across_rollbacks_purges_and_deleted_sessions(tmp_path, open_engine):
    engine = open_engine(f"sqlite:///{tmp_path}/grow.db")
    s = engine.session("gone")
    _steps(s, "search", 3)
    s.rollback(to=None, actor="t", reason="test", notice=False)
    engine.fleet.purge_abandoned(older_than_s=0)
    assert engine.fleet.delete_session("gone", actor="t", reason="test")
    seen = engine.events()
    assert [e.type for e in seen if e.session == "gone"][-1] == "deleted"  # the feed stays
    cursor = seen[-1].id
    other = engine.session("other")
    _steps(other, "search", 2)
    after = engine.events(since=cursor)
    assert after and min(e.id for e in after) > cursor
    assert all(e.session == "other" for e in after)
    ids = [e.id for e in engine.events()]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_an_older_file_with_autoincrement_event_ids_keeps_its_feed(tmp_path, open_engine):
    path = tmp_path / "old.db"
    _old_file(path)
    engine = open_engine(f"sqlite:///{path}")
    s = engine.session("s")
    _steps(s, "search", 3)
    engine.close()
    before = [(e.id, e.type) for e in open_engine(f"sqlite:///{path}").events()]

    engine = open_engine(f"sqlite:///{path}")
    assert "AUTOINCREMENT" in _events_sql(path)  # left as it was, not rebuilt on open
    assert [(e.id, e.type) for e in engine.events()] == before
    _steps(engine.session("s"), "fetch", 2)
    new = engine.events(since=before[-1][0])
    assert [e.type for e in new] == ["step", "step"]
    assert min(e.id for e in new) > before[-1][0]
    assert _counter(path) == [(new[-1].id,)]  # SQLite still keeps its counter there
    assert [x.tool for x in engine.session("s").steps()] == ["search"] * 3 + ["fetch"] * 2
