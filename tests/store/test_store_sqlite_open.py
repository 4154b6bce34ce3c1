"""Opening a SQLite store that is already up to date is a connection and a read: no schema
script, no committed write, no checkpointer thread until the first write. A file whose layout
another release changed, or that a newer release wrote, is still upgraded or refused on open."""

from __future__ import annotations

import sqlite3
import threading

import pytest

from engine import Engine
from engine.errors import SchemaMismatch
from engine.store.sqlite.schema import LAYOUT, SCHEMA_VERSION
from engine.store.sqlite.tx import IDLE, IDLE_PER_FILE


def _url(path) -> str:
    return f"sqlite:///{path}"


def _traced_open(url: str) -> tuple[Engine, list[str]]:
    """Open an engine on `url` on a new connection (not one an earlier engine left idle),
    returning it and every statement its connection ran."""
    IDLE.close_all()
    statements: list[str] = []
    connect = sqlite3.connect

    def tracing(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    sqlite3.connect = tracing  # type: ignore[assignment]
    try:
        engine = Engine.open(url)
        engine.store.get_session("s")
    finally:
        sqlite3.connect = connect  # type: ignore[assignment]
    return engine, statements


class Commits:
    """Whether anyone committed to a file: SQLite moves a connection's ``data_version`` when
    another connection commits (the value means nothing across connections)."""

    def __init__(self, path) -> None:
        self.conn = sqlite3.connect(path)
        self.seen = self._version()

    def _version(self) -> int:
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def since(self) -> bool:
        """True when a commit happened since the last call (or since made)."""
        now = self._version()
        moved, self.seen = now != self.seen, now
        return moved


@pytest.fixture
def store_file(tmp_path):
    path = tmp_path / "rewind.db"
    with Engine.open(_url(path)) as engine:
        engine.session("s").append_message("user", "hello")
    return path


def test_reopening_an_up_to_date_file_writes_nothing_and_starts_no_thread(store_file):
    commits = Commits(store_file)
    engine, statements = _traced_open(_url(store_file))
    try:
        assert not [s for s in statements if s.split()[0].upper() in
                    ("CREATE", "DROP", "ALTER", "INSERT", "UPDATE", "BEGIN", "COMMIT")]
        assert not commits.since()
        assert engine.store._db._checkpointer._run is None  # type: ignore[attr-defined]
        # the engine works as before, and its first write starts the checkpointer
        engine.session("s").append_message("assistant", "hi")
        assert engine.store._db._checkpointer._run is not None  # type: ignore[attr-defined]
        assert [m["content"] for m in engine.session("s").state().messages] == ["hello", "hi"]
    finally:
        engine.close()
        commits.conn.close()


def test_a_new_file_gets_the_schema_and_the_next_open_reads_it_only(tmp_path):
    path = tmp_path / "new.db"
    engine, statements = _traced_open(_url(path))
    engine.close()
    assert any(s.startswith("CREATE TABLE IF NOT EXISTS sessions") for s in
               (" ".join(s.split()) for s in statements))
    engine, statements = _traced_open(_url(path))
    engine.close()
    assert not [s for s in statements if s.lstrip().upper().startswith("CREATE")]


def test_a_layout_changed_by_another_release_is_upgraded_again(store_file):
    conn = sqlite3.connect(store_file)
    conn.execute("DROP INDEX sessions_page")  # as a release without that index would leave it
    conn.commit()
    conn.close()
    with Engine.open(_url(store_file)) as engine:
        assert engine.session("s").state().messages[0]["content"] == "hello"
    conn = sqlite3.connect(store_file)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    conn.close()
    assert "sessions_page" in names
    commits = Commits(store_file)
    Engine.open(_url(store_file)).close()  # up to date again: nothing written
    assert not commits.since()


def test_a_file_stamped_with_another_release_layout_is_upgraded(store_file):
    conn = sqlite3.connect(store_file)
    conn.execute("UPDATE rewind_meta SET value = 'elsewhere:' || "
                 "(SELECT schema_version FROM pragma_schema_version) WHERE key = 'layout'")
    conn.commit()
    conn.close()
    commits = Commits(store_file)
    Engine.open(_url(store_file)).close()
    assert commits.since()  # the upgrade ran and stamped this layout
    conn = sqlite3.connect(store_file)
    (layout,) = conn.execute("SELECT value FROM rewind_meta WHERE key = 'layout'").fetchone()
    conn.close()
    assert layout.startswith(f"{LAYOUT}:")


def test_a_file_of_a_newer_release_is_still_refused(store_file):
    conn = sqlite3.connect(store_file)
    conn.execute("UPDATE rewind_meta SET value = ? WHERE key = 'schema_version'",
                 (str(SCHEMA_VERSION + 1),))
    conn.commit()
    conn.close()
    commits = Commits(store_file)
    with pytest.raises(SchemaMismatch, match="newer Rewind"):
        Engine.open(_url(store_file))
    assert not commits.since()


# -- idle connections ---------------------------------------------------------------------------
def _connects(monkeypatch) -> list[str]:
    """Counts the connections engines open from now on (their targets); not those of the WAL
    checkpoint threads, which connect on their own schedule (a thread started by an earlier
    write may connect at any moment of a loaded machine)."""
    opened: list[str] = []
    connect = sqlite3.connect

    def counting(target, *args, **kwargs):
        if threading.current_thread().name != "rewind-checkpoint":
            opened.append(str(target))
        return connect(target, *args, **kwargs)

    monkeypatch.setattr(sqlite3, "connect", counting)
    return opened


def test_an_engine_opened_after_another_closed_takes_its_connection(store_file, monkeypatch):
    """Per request: the connection a closed engine left (schema parsed, statements prepared)
    serves the next engine on the file, which reads and writes as a new one would."""
    IDLE.close_all()
    Engine.open(_url(store_file)).close()
    opened = _connects(monkeypatch)
    with Engine.open(_url(store_file)) as engine:
        assert [m["content"] for m in engine.session("s").state().messages] == ["hello"]
        assert opened == []
        engine.session("s").append_message("assistant", "again")  # (starts the checkpointer)
        assert [m["content"] for m in engine.session("s").state().messages] == ["hello", "again"]
    opened.clear()
    with Engine.open(_url(store_file) + "?synchronous=FULL") as engine:  # other settings
        assert engine.session_info("s") is not None
    assert opened == [str(store_file)]


def test_a_file_replaced_at_its_path_is_never_read_through_an_old_connection(tmp_path):
    path = tmp_path / "replaced.db"
    with Engine.open(_url(path)) as engine:
        engine.session("old").append_message("user", "from the first file")
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"replaced.db{suffix}").unlink(missing_ok=True)
    with Engine.open(_url(path)) as engine:
        assert engine.session_info("old") is None
        engine.session("new")
    with Engine.open(_url(path)) as engine:
        assert [i.id for i in engine.sessions()] == ["new"]


def test_idle_connections_are_few_and_keep_nothing_of_their_last_user(store_file):
    IDLE.close_all()
    engines = [Engine.open(_url(store_file)) for _ in range(IDLE_PER_FILE + 2)]
    seen: list[str] = []
    for engine in engines:
        engine.session_info("s")  # each handle opens its own connection
        engine.store._db.conn.set_trace_callback(seen.append)  # type: ignore[attr-defined]
    for engine in engines:
        engine.close()
    assert sum(len(kept) for kept in IDLE._conns.values()) == IDLE_PER_FILE  # type: ignore
    seen.clear()
    with Engine.open(_url(store_file)) as engine:
        engine.session_info("s")
    assert seen == []  # the trace callback stayed with the engine that set it
