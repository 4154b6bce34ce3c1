"""The SQLite store's tables and the schema-version check.

One row of ``rewind_meta`` records the schema version a file was written with. Opening a file
written by a newer release refuses (`SchemaMismatch`) instead of misreading it; an older or equal
version gets the missing tables and indexes (every statement is ``IF NOT EXISTS``).

That upgrade runs only when needed: once it has run, a ``layout`` row records this release's
layout (`LAYOUT`) with SQLite's schema cookie (``PRAGMA schema_version``, which SQLite moves on
every change of a table or index). An open that finds both unchanged (`up_to_date`, one read)
knows the file holds exactly the tables and indexes the upgrade left, and writes nothing: opening
an engine per request costs a connection and a read, not the script and a commit. Any other
release that changes the layout (an older one recreating a dropped index, a newer one adding a
table) moves the cookie or writes its own layout, and the next open here runs the upgrade again.

Layout, per session (column ``session``): ``sessions`` (summary, counters, ``seq``: the
session's write sequence), ``messages``, ``kv_writes`` (every versioned put) and ``kv`` (current
values), ``docs`` (unversioned documents), ``snapshots``, ``steps``, ``branches``. Fleet-wide:
``compensations`` (the saga outbox), ``audit`` and ``events`` (the change feed), ``fleet_docs``
(fleet-wide documents: tool quarantines, the alert cursor). A guarded step's write-ahead
snapshot is kept in its step's row (``snap_*`` columns) rather than a row of ``snapshots``. A
row whose ``branch`` is NULL lies on the live line; a rollback fills ``branch`` with the
abandoned branch's id.

The feed's cursor (``events.id``) is the table's rowid, without ``AUTOINCREMENT``: an insert takes
the largest id plus one, and no event is ever deleted (rollbacks, retention and session deletion
keep the feed as evidence), so ids only grow and a cursor never meets an id twice.
``AUTOINCREMENT`` would add nothing but its counter row in ``sqlite_sequence``, written with every
event: one more page in the commit of every guarded step. A file created before keeps its
``AUTOINCREMENT`` table (``CREATE TABLE IF NOT EXISTS`` leaves it as it is, and rebuilding a feed
of millions of rows on open would hold the write lock as long); both forms are read and written
alike by every release, so the schema version stays.
"""

from __future__ import annotations

import math
import sqlite3
import zlib

from engine.errors import SchemaMismatch, StoreUnavailable

SCHEMA_VERSION = 5
"""1: the first release. 2: ``fleet_docs`` (tool quarantines every agent process must honour, so
a file that has them must not be opened by a release that would ignore them). 3: compensations
resolved by hand (status ``resolved``, ``resolved_by``, ``resolved_reason``, which an older
release cannot read) and ``workers`` (heartbeats of processes with compensation handlers).
4: a guarded step's write-ahead snapshot lives in its step's row (``steps.snap_label``,
``snap_parent``, ``snap_msgs``) and step snapshots are retired by ``sessions.snap_floor``
instead of a row update each; an older release would not see those snapshots.
5: loop episodes: ``sessions.loop_open`` (the session is inside a loop episode) and a ``loop``
feed event where an episode starts, read by time through ``events_loop``; an older release
would record steps without them, and episodes would go missing from that index."""

LOOPS_SCHEMA = 5
"""The first schema version that records loop episodes (``loop`` events)."""

DDL = """
CREATE TABLE IF NOT EXISTS rewind_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    meta TEXT NOT NULL,
    tenant TEXT, scenario TEXT, prompt_version TEXT,
    status TEXT NOT NULL DEFAULT 'healthy',
    loop_open INTEGER NOT NULL DEFAULT 0,
    head TEXT,
    epoch INTEGER NOT NULL DEFAULT 0,
    seq INTEGER NOT NULL DEFAULT 0,
    step_count INTEGER NOT NULL DEFAULT 0,
    msg_count INTEGER NOT NULL DEFAULT 0,
    loops INTEGER NOT NULL DEFAULT 0,
    rollbacks INTEGER NOT NULL DEFAULT 0,
    last_verdict TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    snap_floor INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS sessions_page ON sessions(updated_at, id);
CREATE INDEX IF NOT EXISTS sessions_status_page ON sessions(status, updated_at, id);
CREATE TABLE IF NOT EXISTS messages (
    session TEXT NOT NULL, seq INTEGER NOT NULL, pos INTEGER NOT NULL,
    body TEXT NOT NULL, branch TEXT, created_at REAL NOT NULL,
    PRIMARY KEY (session, seq)
) WITHOUT ROWID;
CREATE UNIQUE INDEX IF NOT EXISTS messages_live ON messages(session, pos) WHERE branch IS NULL;
CREATE TABLE IF NOT EXISTS kv_writes (
    session TEXT NOT NULL, seq INTEGER NOT NULL, ns TEXT NOT NULL, key TEXT NOT NULL,
    value TEXT, branch TEXT,
    PRIMARY KEY (session, seq, ns, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS kv_writes_key ON kv_writes(session, ns, key, seq);
CREATE TABLE IF NOT EXISTS kv (
    session TEXT NOT NULL, ns TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (session, ns, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS docs (
    session TEXT NOT NULL, ns TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (session, ns, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS snapshots (
    session TEXT NOT NULL, id TEXT NOT NULL, parent TEXT, label TEXT, kind TEXT NOT NULL,
    seq INTEGER NOT NULL, msg_count INTEGER NOT NULL, next_step INTEGER NOT NULL,
    created_at REAL NOT NULL, branch TEXT, retired_at REAL,
    PRIMARY KEY (session, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS snapshots_seq ON snapshots(session, seq);
CREATE INDEX IF NOT EXISTS snapshots_restorable ON snapshots(session, kind, next_step, seq)
    WHERE branch IS NULL AND retired_at IS NULL;
CREATE TABLE IF NOT EXISTS steps (
    session TEXT NOT NULL, n INTEGER NOT NULL, seq INTEGER NOT NULL, epoch INTEGER NOT NULL,
    tool TEXT, args TEXT NOT NULL, fingerprint TEXT NOT NULL, status TEXT NOT NULL,
    error TEXT, result_digest TEXT, result_preview TEXT,
    started_at REAL NOT NULL, ended_at REAL,
    side_effect INTEGER NOT NULL DEFAULT 0, compensation TEXT, verdict TEXT,
    snapshot TEXT, text TEXT, branch TEXT, late INTEGER NOT NULL DEFAULT 0, budget TEXT,
    snap_label TEXT, snap_parent TEXT, snap_msgs INTEGER,
    task INTEGER, turn TEXT,
    PRIMARY KEY (session, n)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS branches (
    session TEXT NOT NULL, id TEXT NOT NULL, from_snapshot TEXT NOT NULL, seq INTEGER NOT NULL,
    epoch INTEGER NOT NULL, actor TEXT NOT NULL, reason TEXT NOT NULL, created_at REAL NOT NULL,
    PRIMARY KEY (session, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS branches_created ON branches(created_at);
CREATE TABLE IF NOT EXISTS compensations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT NOT NULL, step INTEGER NOT NULL, name TEXT NOT NULL, args TEXT NOT NULL,
    idem_key TEXT NOT NULL UNIQUE, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
    error TEXT, owner TEXT, lease_until REAL, branch TEXT,
    created_at REAL NOT NULL, updated_at REAL NOT NULL,
    resolved_by TEXT, resolved_reason TEXT
);
CREATE INDEX IF NOT EXISTS compensations_status ON compensations(status, id);
CREATE INDEX IF NOT EXISTS compensations_session ON compensations(session, id);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, actor TEXT NOT NULL,
    action TEXT NOT NULL, session TEXT, snapshot TEXT, reason TEXT, detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_at ON audit(at);
CREATE INDEX IF NOT EXISTS audit_action ON audit(action, at);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY, at REAL NOT NULL, session TEXT, type TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_session ON events(session, id);
CREATE INDEX IF NOT EXISTS events_loop ON events(at) WHERE type = 'loop';
CREATE TABLE IF NOT EXISTS fleet_docs (
    ns TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (ns, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS workers (
    id TEXT PRIMARY KEY, handlers TEXT NOT NULL, seen_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS workers_seen ON workers(seen_at);
"""

RETIRED_INDEXES = ("sessions_updated", "sessions_status", "steps_seq")
"""Indexes of earlier releases that later ones dropped: every guarded step moves a session's
``updated_at``, so each index on it is pages written twice per step, and these two duplicate
``sessions_page`` and ``sessions_status_page`` (which a backward walk reads newest first).
``steps_seq`` (``steps(session, seq)``) was one more page written by every guarded step, for
the few reads that find a step by sequence number: step numbers grow with sequence numbers, so
those reads go through the primary key instead (`engine.store.sqlite.rows.step_at_seq`). A file
an older release opens again gets it back, and loses it on the next open by this one."""

REDEFINED_INDEXES = {
    "snapshots_restorable": (
        "next_step",
        "CREATE INDEX snapshots_restorable ON snapshots(session, kind, next_step, seq) "
        "WHERE branch IS NULL AND retired_at IS NULL",
    ),
}
"""Indexes whose definition changed: name -> (the third column of the new definition, which
the old one lacks there; the new definition). ``snapshots_restorable`` is ordered by
``next_step`` before ``seq``, so retiring the step snapshot that falls out of the window is a
range search that meets only the snapshots it retires, instead of reading one table row per
restorable snapshot (``next_step`` grows with ``seq`` on the live line)."""

ADDED_COLUMNS = {
    "compensations": ("resolved_by TEXT", "resolved_reason TEXT"),
    "sessions": (
        "snap_floor INTEGER NOT NULL DEFAULT 0", "loop_open INTEGER NOT NULL DEFAULT 0"
    ),
    "steps": ("snap_label TEXT", "snap_parent TEXT", "snap_msgs INTEGER", "task INTEGER",
              "turn TEXT"),
}
"""Columns later schema versions added to tables an older file already has (``CREATE TABLE IF
NOT EXISTS`` leaves those as they are). An older file's step snapshots stay rows of
``snapshots``; its ``snap_floor`` starts at 0, so they are retired as new steps come. Its
``loop_open`` starts from the status (see `init_schema`)."""


LAYOUT = format(
    zlib.crc32(
        repr(
            (SCHEMA_VERSION, DDL, RETIRED_INDEXES, REDEFINED_INDEXES, ADDED_COLUMNS)
        ).encode()
    ),
    "08x",
)
"""This release's layout: changes whenever the tables, indexes or upgrade steps above change,
so a file stamped by a release with another layout is upgraded again on open."""

_LAYOUT_READ = (
    "SELECT (SELECT value FROM rewind_meta WHERE key = 'schema_version'), "
    "(SELECT value FROM rewind_meta WHERE key = 'layout'), schema_version "
    "FROM pragma_schema_version"
)


def up_to_date(conn: sqlite3.Connection) -> bool:
    """True when the file holds this release's layout, unchanged since `init_schema` left it
    (then opening it needs no write). One read; False for a new file."""
    try:
        row = conn.execute(_LAYOUT_READ).fetchone()
    except sqlite3.OperationalError:  # a new file: no rewind_meta yet
        return False
    version, layout, cookie = row
    return version == str(SCHEMA_VERSION) and layout == f"{LAYOUT}:{cookie}"


def missing_columns(conn: sqlite3.Connection) -> dict[str, list[str]]:
    """Per table, the `ADDED_COLUMNS` (with their types) an older file lacks."""
    out: dict[str, list[str]] = {}
    for table, columns in ADDED_COLUMNS.items():
        have = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        lacking = [c for c in columns if c.split()[0] not in have]
        if lacking:
            out[table] = lacking
    return out


def check_schema(conn: sqlite3.Connection, name: str) -> None:
    """Check a database opened read-only: it must hold Rewind's tables at a version this
    release knows.

    Raises:
        StoreUnavailable: the file holds no Rewind store (it cannot be created read-only).
        SchemaMismatch: the database was written by a newer release.
    """
    try:
        row = conn.execute("SELECT value FROM rewind_meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.Error as exc:
        raise StoreUnavailable(
            f"{name} is read-only and holds no Rewind store ({exc}); give this user write "
            "access to create one"
        ) from exc
    if row is not None and int(row[0]) > SCHEMA_VERSION:
        raise SchemaMismatch(
            f"{name} was written by a newer Rewind (schema {row[0]}, this release "
            f"knows {SCHEMA_VERSION}); upgrade agent-rewind"
        )


def init_schema(conn: sqlite3.Connection, name: str) -> None:
    """Create missing tables and indexes and record the schema version, inside the caller's
    write transaction.

    Raises:
        SchemaMismatch: the database was written by a newer release (`name` names it).
    """
    row = None
    try:
        row = conn.execute("SELECT value FROM rewind_meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.OperationalError:  # a new file: no rewind_meta yet
        pass
    if row is not None and int(row[0]) > SCHEMA_VERSION:
        raise SchemaMismatch(
            f"{name} was written by a newer Rewind (schema {row[0]}, this release "
            f"knows {SCHEMA_VERSION}); upgrade agent-rewind"
        )
    run_script(conn, DDL)
    for name in RETIRED_INDEXES:
        conn.execute(f"DROP INDEX IF EXISTS {name}")
    for name, (column, definition) in REDEFINED_INDEXES.items():
        (sql,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?", (name,)
        ).fetchone()
        if sql.split("(", 1)[1].split(")")[0].split(", ")[2] != column:
            conn.execute(f"DROP INDEX {name}")
            conn.execute(definition)
    for table, columns in missing_columns(conn).items():
        for column in columns:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
    if row is not None and int(row[0]) < LOOPS_SCHEMA:
        # The older release wrote no ``loop`` events: episodes that started before now are
        # found by scanning the feed (`loops_from`); a session looping now is inside one.
        conn.execute("UPDATE sessions SET loop_open = 1 WHERE status = 'looping'")
        conn.execute(
            "INSERT OR IGNORE INTO rewind_meta(key, value) "
            "SELECT 'loops_from', MAX(id) FROM events HAVING COUNT(*) > 0"
        )
    # An older file now has every table of this release: record that, so an older release
    # refuses it instead of ignoring what it does not know (e.g. quarantines).
    conn.execute(
        "INSERT INTO rewind_meta(key, value) VALUES ('schema_version', ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value "
        "WHERE CAST(rewind_meta.value AS INTEGER) < CAST(excluded.value AS INTEGER)",
        (str(SCHEMA_VERSION),),
    )
    # The cookie now is the one this transaction commits (a row write leaves it as it is).
    (cookie,) = conn.execute("PRAGMA schema_version").fetchone()
    conn.execute(
        "INSERT INTO rewind_meta(key, value) VALUES ('layout', ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (f"{LAYOUT}:{cookie}",),
    )


def loops_from(conn: sqlite3.Connection) -> float:
    """The time of the last event written by a release older than `LOOPS_SCHEMA` (-inf when
    there is none): the ``loop`` events of this file are complete after it."""
    row = conn.execute(
        "SELECT value, (SELECT at FROM events WHERE id = CAST(value AS INTEGER)) "
        "FROM rewind_meta WHERE key = 'loops_from'"
    ).fetchone()
    if row is None:
        return -math.inf
    return math.inf if row[1] is None else float(row[1])  # that event is gone: never answer


def run_script(conn: sqlite3.Connection, script: str) -> None:
    """Run `;`-separated statements one by one (``executescript`` would commit the caller's
    transaction)."""
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)
