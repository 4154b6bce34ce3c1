"""SQLite store: the embedded default. WAL mode, safe for several processes on one host.

Writes run in `BEGIN IMMEDIATE` transactions (`engine.store.sqlite.tx`), so two processes never
interleave half-done changes; readers see the last committed state. Each thread gets its own
connection. `SQLiteStore` holds the parts that own a concern each, all on its one `SQLiteDB`,
and hands their methods on:

- `engine.store.sqlite.branches.BranchLine`: rollbacks, abandoned branches and their retention;
- `engine.store.sqlite.snapshots.SnapshotReads`: the snapshot tree (and, as functions, taking a
  snapshot and retiring what falls out of the window);
- `engine.store.sqlite.saga.SagaOutbox`: the compensation outbox;
- `engine.store.sqlite.docs.DocumentRows`: a session's documents and the fleet's;
- `engine.store.sqlite.writes.SessionWrites`: an integration's multi-part write
  (`write_session`).

Beside them: `engine.store.sqlite.schema` (the tables and the schema-version check) and
`engine.store.sqlite.rows` (rows to records, the WHERE builder, audit and feed writes). This
module owns sessions, history, steps and the feed.
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs, urlparse

from engine.errors import StoreNotFound, StoreUnavailable, UnknownSession
from engine.records import (
    AuditEvent,
    BranchInfo,
    Compensation,
    CompensationWorker,
    Event,
    MessageRecord,
    ReplayHistory,
    ReplayStep,
    RollbackResult,
    SessionInfo,
    SnapshotNode,
    StepRecord,
    replay_history,
)
from engine.store.base import (
    ALL_SESSIONS,
    AuditEntry,
    DecisionRequest,
    Retention,
    RollbackRequest,
    SessionCursor,
    SessionFilter,
    SessionWrite,
    StepOutcome,
    StepStart,
    StepTicket,
    refuse_undecidable,
)
from engine.store.sqlite.branches import BranchLine
from engine.store.sqlite.docs import DocumentRows, doc_get_read, doc_value
from engine.store.sqlite.rows import (
    AUDIT_COLS,
    COMPENSATION,
    EVENT,
    MESSAGE,
    REPLAY_STEP,
    RESOLUTION_COLUMNS,
    SESSION,
    SESSION_COLS,
    STEP,
    STEP_COLS,
    add_audit,
    add_event,
    add_retention,
    append_live,
    create_session,
    detach_snapshot,
    dumps,
    put_value,
    session_row,
    set_meta,
    to_audit,
    to_session,
    to_step,
)
from engine.store.sqlite.rows import where as rows_where  # `where` names session filters here
from engine.store.sqlite.saga import SagaOutbox, queue_compensations
from engine.store.sqlite.schema import (
    SCHEMA_VERSION,
    check_schema,
    init_schema,
    loops_from,
    missing_columns,
    up_to_date,
)
from engine.store.sqlite.snapshots import SnapshotReads, insert_snapshot
from engine.store.sqlite.tx import SQLiteDB, path_from_url
from engine.store.sqlite.writes import ACTIVITY_GRAIN_S, SessionWrites
from engine.store.urls import redact
from engine.types import (
    CompensationStatus,
    SessionStatus,
    SnapshotKind,
    StepStatus,
    StoredVerdict,
)

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

# The Redis store imports this name to store JSON exactly as SQLite does.
_dumps = dumps


_BEGIN_SNAP = (
    "INSERT INTO steps(session, n, seq, epoch, tool, args, fingerprint, status, started_at, "
    "side_effect, compensation, text, task, turn, snapshot, snap_label, snap_parent, snap_msgs) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
"""A step's row with its write-ahead snapshot (sequence number ``seq + 1``, the step
``seq + 2``), from the session's row as `_BEGIN_SESSION` read it."""
_BEGIN_PLAIN = (
    "INSERT INTO steps(session, n, seq, epoch, tool, args, fingerprint, status, started_at, "
    "side_effect, compensation, text, task, turn) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?)"
)
"""A step's row without a snapshot."""

_BEGIN_SESSION = (
    "SELECT seq, epoch, msg_count, step_count, head, updated_at FROM sessions WHERE id = ?"
)
_END_SESSION = "SELECT epoch, status, updated_at FROM sessions WHERE id = ?"
"""What a step reads of its session's row, inside its write transaction (the write lock held,
so no other process moves it meanwhile). A read and plain writes, not one ``INSERT … SELECT …
RETURNING``: SQLite runs ``RETURNING`` as a trigger program over a temporary table, which cost
more than the read it saves (measured on SQLite 3.40: a step's start as a read and two writes
takes 30% less than as ``INSERT … RETURNING`` and a write, its end 35% less)."""

_BEGIN_SNAP_SESSION = (
    "UPDATE sessions SET seq = ?, step_count = ?, head = ?, snap_floor = max(snap_floor, ?) "
    "WHERE id = ?"
)
_BEGIN_SNAP_TOUCH = _BEGIN_SNAP_SESSION.replace(" WHERE", ", updated_at = ? WHERE")
_BEGIN_PLAIN_SESSION = "UPDATE sessions SET seq = ?, step_count = ? WHERE id = ?"
_BEGIN_PLAIN_TOUCH = _BEGIN_PLAIN_SESSION.replace(" WHERE", ", updated_at = ? WHERE")

_STEP_EVENT = '{"late":%s,"looping":%s,"n":%d,"status":%s}'
_LOOP_EVENT = '{"n":%d}'
_VERDICT_EVENTS = (
    "INSERT INTO events(at, session, type, data) SELECT ?, ?, 'step', ? "
    "UNION ALL SELECT ?, ?, 'loop', ? FROM sessions WHERE id = ? AND loop_open = 0"
)
"""A flagged step's feed event, followed by a ``loop`` event when the step starts a loop
episode (the session was not inside one): one statement, as for any step."""

_END_STEP = (
    "UPDATE steps SET status = ?, error = ?, result_digest = ?, result_preview = ?, "
    "ended_at = ?, verdict = ?, budget = ? WHERE session = ? AND n = ?"
)
"""A step's outcome, written once `_END_SESSION` found the session at the ticket's epoch (else
the step is late, or the session is gone)."""
_JSON_BOOL = {False: "false", True: "true"}
_JSON_STATUS = {str(status): dumps(str(status)) for status in StepStatus}
"""The JSON text of each step status, for the step's feed event (once per step)."""

_SESSION_TABLES = ("messages", "kv_writes", "kv", "docs", "snapshots", "steps", "branches")
"""Tables of what a session owns (its audit rows and compensations outlive it)."""

_EVIDENCE = (
    "(s.loops > 0 OR s.last_verdict IS NOT NULL OR s.rollbacks > 0"
    " OR EXISTS (SELECT 1 FROM audit a WHERE a.session = s.id AND a.at >= s.created_at)"
    " OR EXISTS (SELECT 1 FROM compensations c WHERE c.session = s.id"
    " AND c.created_at >= s.created_at))"
)
"""SQL truth of "session `s` is evidence": it has a loop verdict, a rollback, or an audit row
(rollbacks, forks, notices, operator actions) or a compensation of its own incarnation (rows left
by an earlier session of the same id do not count)."""


_SESSION = f"SELECT {SESSION_COLS} FROM sessions WHERE id = ?"
"""`SQLiteStore.get_session`: one session's row."""
_SESSION_VALUES = (
    f"SELECT {SESSION_COLS}, kv.key AS kv_key, kv.value AS kv_value FROM sessions "
    "LEFT JOIN kv ON kv.session = sessions.id AND kv.ns = ? WHERE sessions.id = ?"
)
"""`SQLiteStore.get_session_values`: a session's row with its values of one namespace."""
_SESSION_AT = (
    "SELECT head, epoch, msg_count, kv.key, kv.value FROM sessions "
    "LEFT JOIN kv ON kv.session = sessions.id AND kv.ns = ? WHERE sessions.id = ?"
)
"""Where a session is, with its values of one namespace (`SQLiteStore.get_session_docs`)."""


def _session_where(where: SessionFilter) -> tuple[str, list[object]]:
    # The facets are columns of their own (kept with the meta), so each filter is one index.
    return rows_where(
        {"status": where.status, **where.facets()}, ("updated_at", where.updated_since)
    )


def _delete_session(conn: sqlite3.Connection, sid: str) -> bool:
    found = conn.execute("DELETE FROM sessions WHERE id = ?", (sid,)).rowcount > 0
    for table in _SESSION_TABLES:
        conn.execute(f"DELETE FROM {table} WHERE session = ?", (sid,))
    return found


_BATCH = 500
"""Sessions per query of `SQLiteStore.replay_histories` (within SQLite's parameter limit)."""


class SQLiteStore:
    """Store on one SQLite file (or `:memory:` for tests and demos in one process).

    Args:
        url: ``sqlite:///relative/path``, ``sqlite:////absolute/path`` or
            ``sqlite:///:memory:``; ``?synchronous=FULL`` (OFF, NORMAL, FULL, EXTRA) sets the
            durability level (default NORMAL: WAL keeps the file consistent, a power cut may
            lose the last commits).

    Raises:
        ValueError: the URL names no path or an unknown synchronous level.
        StoreUnavailable: the file or its folder cannot be opened or created.
        SchemaMismatch: the file was written by a newer release.
    """

    def __init__(self, url: str, *, create: bool = True):
        parsed = urlparse(url)  # once: an engine opened per request opens its store each time
        if parsed.username is not None or parsed.password is not None:
            # A SQLite file takes no credentials: refuse the URL instead of creating a folder
            # named after them, and never repeat the password.
            raise ValueError(f"{redact(url)}: a SQLite URL takes no user or password; use "
                             "sqlite:///path/to/file.db")
        path = path_from_url(url)
        if not path:
            raise ValueError(
                f"{url!r}: a SQLite URL needs a path, e.g. sqlite:///.rewind/rewind.db"
            )
        if not create and path != ":memory:" and not os.path.exists(path):
            raise StoreNotFound(
                f"no Rewind store at {os.path.abspath(path)} (from {url}): the file does not "
                "exist. Check --store or $REWIND_STORE, or run the command from the folder "
                "that holds .rewind/"
            )
        options = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        synchronous = options.get("synchronous", "NORMAL").upper()
        self.url = url
        """The store's URL (a SQLite URL carries no password)."""
        self.path = path
        """The database file, or ``:memory:``."""
        self.memory = path == ":memory:"
        """True for an in-memory database (one process, gone when closed)."""
        self._db = db = SQLiteDB(path, name=f"the SQLite store {url}", synchronous=synchronous)
        saga_shape: dict[str, Any] = {}
        if db.read_only:
            check_schema(db.conn, url)
            missing = missing_columns(db.conn)  # an older file this user may not upgrade
            if "compensations" in missing:
                saga_shape = {"comp_cols": COMPENSATION.select(absent=RESOLUTION_COLUMNS),
                              "has_workers": False}
            if "steps" in missing:
                lacking = frozenset(c.split()[0] for c in missing["steps"])
                if "snap_msgs" in lacking:
                    self._embedded = False
                self._step_cols = STEP.select(absent=lacking)  # read as None (no task, no turn)
                self._replay_cols = REPLAY_STEP.select(absent=lacking)
            if "sessions" in missing:  # no loop events either
                self._loops_from = math.inf
        elif not up_to_date(db.conn):
            with db.write() as conn:
                init_schema(conn, url)
        # The parts that own a concern each, on the one database: the methods below that only
        # hand a call on are theirs.
        self._branches = BranchLine(db)
        self._snapshots = SnapshotReads(db, embedded=self._embedded)
        self._saga = SagaOutbox(db, url, **saga_shape)
        self._docs = DocumentRows(db)
        self._writes = SessionWrites(db)

    _loops_from: float | None = None
    """`loops` answers for times after this one: the time of the last event an older release
    wrote to this file (-inf: every event came from a release that writes ``loop`` events);
    None until `loops` first needs it (an agent process never does)."""

    _step_cols = STEP_COLS
    """The step columns this file holds (an older file read-only lacks the newer ones)."""

    _replay_cols = REPLAY_STEP.select()
    """The columns a replay reads of a step, as this file holds them."""

    _embedded = True
    """False on a read-only file of an older schema: its step snapshots are all rows of
    ``snapshots`` (no step row holds one, no ``snap_floor``)."""

    def _read(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> list[Any]:
        return self._db.read(sql, params)

    def _named(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> list[sqlite3.Row]:
        return self._db.read_named(sql, params)

    def close(self) -> None:
        """Close this thread's connection (and the shared in-memory one)."""
        self._db.close()

    # -- sessions ---------------------------------------------------------------------------
    def ensure_session(self, sid: str, meta: dict[str, Any] | None, now: float) -> SessionInfo:
        """Create the session if missing; merge `meta` keys into an existing one."""
        with self._db.write() as conn:
            row = conn.execute("SELECT meta FROM sessions WHERE id = ?", (sid,)).fetchone()
            if row is None:
                merged = dict(meta or {})
                create_session(conn, sid, merged, now)
                add_event(conn, now, sid, "session", {"meta": merged})
            elif meta:
                current = json.loads(row[0])
                if {**current, **meta} != current:
                    set_meta(conn, sid, {**current, **meta})
        info = self.get_session(sid)
        if info is None:  # deleted by another process right after the write
            raise UnknownSession(f"session {sid!r} was deleted while it was being opened")
        return info

    def get_session(self, sid: str) -> SessionInfo | None:
        """The session summary, or None when no such session exists."""
        rows = self._read(_SESSION, (sid,))
        return SESSION.decode_selected(rows[0]) if rows else None

    def list_sessions(
        self,
        where: SessionFilter = ALL_SESSIONS,
        *,
        limit: int = 200,
        offset: int = 0,
        after: SessionCursor | None = None,
    ) -> list[SessionInfo]:
        """Sessions matching every field `where` gives, most recently active first."""
        clause, params = _session_where(where)
        if after is not None:
            # A row-value comparison: the index on (updated_at, id) starts right at the cursor.
            clause += f"{' AND' if clause else ' WHERE'} (updated_at, id) < (?, ?)"
            params += [after.updated_at, after.id]
        rows = self._named(
            f"SELECT {SESSION_COLS} FROM sessions{clause} "
            "ORDER BY updated_at DESC, id DESC LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [to_session(r) for r in rows]

    def count_sessions(self, where: SessionFilter = ALL_SESSIONS) -> int:
        """How many sessions match every field `where` gives."""
        clause, params = _session_where(where)
        return int(self._read(f"SELECT COUNT(*) FROM sessions{clause}", params)[0][0])

    def set_status(
        self, sid: str, status: SessionStatus, verdict: StoredVerdict | None, now: float
    ) -> None:
        """Set the session status; a verdict is stored as the last verdict and counted."""
        with self._db.write() as conn:
            session_row(conn, sid)
            if verdict is not None:
                conn.execute(
                    "UPDATE sessions SET status = ?, last_verdict = ?, loops = loops + 1, "
                    "updated_at = ? WHERE id = ?",
                    (status, dumps(verdict), now, sid),
                )
            else:
                conn.execute(
                    "UPDATE sessions SET status = ?, updated_at = ? WHERE id = ?",
                    (status, now, sid),
                )
            add_event(conn, now, sid, "status", {"status": status})

    def decide(self, sid: str, request: DecisionRequest) -> StoredVerdict:
        """An operator's decision on a waiting session, its note, status and audit row, in one
        transaction."""
        with self._db.write() as conn:
            session_row(conn, sid)
            status, text = conn.execute(
                "SELECT status, last_verdict FROM sessions WHERE id = ?", (sid,)).fetchone()
            verdict = json.loads(text) if text else None
            refuse_undecidable(sid, status, verdict)
            assert verdict is not None  # refuse_undecidable refuses a session without one
            decided = {**verdict, "decision": request.record()}
            if request.note is not None:
                self._append(conn, sid, [request.note], request.now)
            new_status = (SessionStatus.STOPPED if request.kind == "stopped"
                          else SessionStatus.HEALTHY)
            conn.execute("UPDATE sessions SET status = ?, last_verdict = ?, updated_at = ? "
                         "WHERE id = ?", (new_status, dumps(decided), request.now, sid))
            if new_status != status:
                add_event(conn, request.now, sid, "status", {"status": new_status})
            detail = {"note": decided["decision"]["note"]}
            add_audit(conn, request.now, request.actor, request.action, sid, None,
                      request.reason, detail)
            add_event(conn, request.now, sid, request.action, {"actor": request.actor, **detail})
        return decided  # type: ignore[return-value]  # the stored verdict, with its decision

    # -- history ----------------------------------------------------------------------------
    def append_messages(self, sid: str, messages: list[dict[str, Any]], now: float) -> int:
        """Append chat messages to the live line; returns the epoch."""
        with self._db.write() as conn:
            return self._append(conn, sid, messages, now)

    @staticmethod
    def _append(conn: sqlite3.Connection, sid: str, messages: list[dict[str, Any]],
                now: float) -> int:
        epoch, pos = append_live(conn, sid, messages, now)
        roles = [m["role"] for m in messages]
        add_event(conn, now, sid, "message", {"count": len(messages), "pos": pos, "roles": roles})
        return epoch

    def put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> int:
        """Set keys of namespace `ns` (None deletes), versioned; returns the epoch."""
        with self._db.write() as conn:
            return self._put(conn, sid, ns, items, now)

    @staticmethod
    def _put(conn: sqlite3.Connection, sid: str, ns: str, items: dict[str, Any],
             now: float) -> int:
        seq, epoch, *_ = session_row(conn, sid)
        seq += 1
        for key, value in items.items():
            text = None if value is None else dumps(value)
            conn.execute(
                "INSERT INTO kv_writes(session, seq, ns, key, value) VALUES (?, ?, ?, ?, ?)",
                (sid, seq, ns, key, text),
            )
            put_value(conn, "kv", sid, ns, key, text)
        conn.execute("UPDATE sessions SET seq = ?, updated_at = ? WHERE id = ?", (seq, now, sid))
        add_event(conn, now, sid, ns, {"keys": sorted(items)[:20], "count": len(items)})
        return epoch

    def get_all(self, sid: str, ns: str) -> dict[str, Any]:
        """Current values of namespace `ns` on the live line."""
        rows = self._read("SELECT key, value FROM kv WHERE session = ? AND ns = ?", (sid, ns))
        return {k: json.loads(v) for k, v in rows}

    def get_session_values(self, sid: str, ns: str) -> tuple[SessionInfo | None, dict[str, Any]]:
        """The session summary and the current values of namespace `ns`: one statement (the
        session's row, joined with its values, one row per key)."""
        rows = self._read(_SESSION_VALUES, (ns, sid))
        if not rows:
            return None, {}
        return SESSION.decode_selected(rows[0]), {r[-2]: json.loads(r[-1]) for r in rows
                                                  if r[-2] is not None}

    def get_session_docs(self, sid: str, ns: str, doc_ns: str, keys: list[str], *,
                         prefix: str | None = None
                         ) -> tuple[tuple[str | None, int, int] | None, dict[str, Any],
                                    dict[str, Any]]:
        """Where the session is and its values of `ns`, then the documents' rows (no epoch:
        what tells them apart), in one statement."""
        if len(keys) > 500 or (not keys and prefix is None):  # a read each, or no documents
            info, values = self.get_session_values(sid, ns)
            if info is None:
                return None, {}, {}
            return ((info.head, info.epoch, info.messages), values,
                    self.doc_get(sid, doc_ns, keys, prefix=prefix))
        sql, params = doc_get_read(sid, doc_ns, keys, prefix)
        rows = self._read(f"{_SESSION_AT} UNION ALL SELECT NULL, NULL, NULL, key, value "
                          f"FROM ({sql})", [ns, sid, *params])
        session = [r for r in rows if r[1] is not None]
        if not session:
            return None, {}, {}
        head, epoch, messages = session[0][:3]
        return ((head, epoch, messages),
                {r[3]: json.loads(r[4]) for r in session if r[3] is not None},
                {r[3]: doc_value(r[4]) for r in rows if r[1] is None})

    def live_messages(self, sid: str, *, since: int = 0,
                      until: int | None = None) -> list[dict[str, Any]]:
        """Messages on the live line from position `since` on (before `until`), oldest first."""
        rows = self._read(
            "SELECT body FROM messages WHERE session = ? AND branch IS NULL AND pos >= ? "
            "AND pos < ? ORDER BY pos",
            (sid, since, _END if until is None else until),
        )
        # One decode of the whole span (each body is JSON text this store wrote): a full read
        # of a long history pays the decoder's setup once, not once per message.
        return json.loads("[" + ",".join([r[0] for r in rows]) + "]") if rows else []

    def live_tail(self, sid: str, ns: str, last: int
                  ) -> tuple[int, int, dict[str, Any], list[dict[str, Any]]] | None:
        """Epoch, live message count, values of `ns` and the last `last` live messages, read
        in one transaction."""
        with self._db.reading() as conn:
            row = conn.execute("SELECT epoch, msg_count FROM sessions WHERE id = ?",
                               (sid,)).fetchone()
            if row is None:
                return None
            values = conn.execute("SELECT key, value FROM kv WHERE session = ? AND ns = ?",
                                  (sid, ns)).fetchall()
            rows = conn.execute(
                "SELECT body FROM messages WHERE session = ? AND branch IS NULL AND pos >= ? "
                "AND pos < ? ORDER BY pos", (sid, max(row[1] - last, 0), _END),
            ).fetchall() if last > 0 else []
        return (row[0], row[1], {k: json.loads(v) for k, v in values},
                json.loads("[" + ",".join([r[0] for r in rows]) + "]") if rows else [])

    def all_messages(self, sid: str) -> list[MessageRecord]:
        """Every message, live and abandoned, in write order."""
        rows = self._db.read(
            f"SELECT {MESSAGE.select()} FROM messages WHERE session = ? ORDER BY seq", (sid,)
        )
        decode = MESSAGE.decode_selected
        return [decode(r) for r in rows]

    # -- snapshots --------------------------------------------------------------------------
    def take_snapshot(
        self, sid: str, label: str | None, kind: SnapshotKind, now: float, retention: Retention
    ) -> SnapshotNode:
        """Take a snapshot of the live line and make it the head."""
        with self._db.write() as conn:
            row = session_row(conn, sid)
            node = insert_snapshot(conn, sid, row, label, kind, now, retention)
            conn.execute(
                "UPDATE sessions SET seq = ?, head = ?, updated_at = ? WHERE id = ?",
                (row[0] + 1, node.id, now, sid),
            )
            add_event(conn, now, sid, "snapshot", {"id": node.id, "label": label, "kind": kind})
        return node

    # -- steps ------------------------------------------------------------------------------
    def begin_step(
        self,
        sid: str,
        step: StepStart,
        snapshot_label: str | None,
        now: float,
        retention: Retention,
    ) -> StepTicket:
        """Record the start of a step, after a write-ahead snapshot when a label is given.

        The snapshot is kept in the step's own row (``snap_label``, ``snap_parent``,
        ``snap_msgs``; its id in ``snapshot``, its sequence number the step's minus one): the
        session's row read, then two writes, each page written once, instead of a snapshot row
        with its two indexes and a retiring update. Step snapshots retire by the session's
        ``snap_floor``."""
        snap = snapshot_label is not None
        with self._db.write() as conn:
            row = conn.execute(_BEGIN_SESSION, (sid,)).fetchone()
            if row is None:
                raise UnknownSession(f"no session {sid!r} in this store")
            seq, epoch, msg_count, step_count, head, updated_at = row
            n = step_count + 1
            # updated_at keys two indexes: moved once per ACTIVITY_GRAIN_S, not every step
            touch = now - updated_at >= ACTIVITY_GRAIN_S
            if snap:
                snap_id = f"snap-{seq + 1}"
                seq += 2
                conn.execute(_BEGIN_SNAP, (
                    sid, n, seq, epoch, step["tool"], step["args"], step["fingerprint"], now,
                    int(bool(step.get("side_effect"))), step.get("compensation"),
                    step.get("text"), 1 if step.get("task") else None, step.get("turn"),
                    snap_id,
                    snapshot_label, head, msg_count,
                ))
                conn.execute(
                    _BEGIN_SNAP_TOUCH if touch else _BEGIN_SNAP_SESSION,
                    (seq, n, snap_id, n - retention.keep_step_snapshots,
                     *((now,) if touch else ()), sid),
                )
            else:
                snap_id = None
                seq += 1
                conn.execute(_BEGIN_PLAIN, (
                    sid, n, seq, epoch, step["tool"], step["args"], step["fingerprint"], now,
                    int(bool(step.get("side_effect"))), step.get("compensation"),
                    step.get("text"), 1 if step.get("task") else None, step.get("turn"),
                ))
                conn.execute(
                    _BEGIN_PLAIN_TOUCH if touch else _BEGIN_PLAIN_SESSION,
                    (seq, n, *((now,) if touch else ()), sid),
                )
        return StepTicket(n=n, epoch=epoch, snapshot=snap_id, seq=seq)

    def end_step(self, sid: str, ticket: StepTicket, outcome: StepOutcome, now: float) -> bool:
        """Record a step's outcome; returns True when the step was late."""
        verdict = outcome.get("verdict")
        budget = outcome.get("budget")
        status = outcome["status"]
        with self._db.write() as conn:
            # The common case first: the session at the ticket's epoch (else the step is late,
            # or the session is gone), its status and last activity, so its row is written only
            # when they move; then the outcome.
            row = conn.execute(_END_SESSION, (sid,)).fetchone()
            late = (row is None or row[0] != ticket.epoch or not conn.execute(_END_STEP, (
                status, outcome.get("error"), outcome.get("result_digest"),
                outcome.get("result_preview"), now, None if verdict is None else dumps(verdict),
                None if budget is None else dumps(budget), sid, ticket.n,
            )).rowcount)
            if not late:
                _epoch, current, updated_at = row
                if verdict is not None:  # the step's event, and "loop" when an episode starts
                    conn.execute(_VERDICT_EVENTS, (
                        now, sid, _STEP_EVENT % ("false", "true", ticket.n, dumps(status)),
                        now, sid, _LOOP_EVENT % ticket.n, sid,
                    ))
                    conn.execute(
                        "UPDATE sessions SET status = 'looping', last_verdict = ?, "
                        "loops = loops + 1, loop_open = 1, updated_at = ? WHERE id = ?",
                        (dumps(verdict), now, sid),
                    )
                elif status == "ok" and current not in ("healthy", "stopped"):
                    conn.execute(
                        "UPDATE sessions SET status = 'healthy', loop_open = 0, updated_at = ? "
                        "WHERE id = ?",
                        (now, sid),
                    )
                elif status == "ok" and current == "stopped":  # its loop ends, it stays stopped
                    conn.execute(
                        "UPDATE sessions SET loop_open = 0, updated_at = ? WHERE id = ? "
                        "AND (loop_open = 1 OR ? - updated_at >= ?)",
                        (now, sid, now, ACTIVITY_GRAIN_S),
                    )
                elif now - updated_at >= ACTIVITY_GRAIN_S:
                    conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, sid))
            else:
                session_row(conn, sid)  # raises UnknownSession when it is gone
                # a step the rollback left on the live line (it went back to a later snapshot)
                # leaves it now; its write-ahead snapshot stays
                detach_snapshot(conn, sid, ticket.n, now)
                row = conn.execute(
                    "SELECT id FROM branches WHERE session = ? AND epoch > ? ORDER BY seq LIMIT 1",
                    (sid, ticket.epoch),
                ).fetchone()
                branch = row[0] if row else None
                conn.execute(
                    "UPDATE steps SET status = ?, error = ?, result_digest = ?, "
                    "result_preview = ?, ended_at = ?, verdict = ?, late = 1, "
                    "branch = COALESCE(branch, ?), budget = ? WHERE session = ? AND n = ?",
                    (
                        status,
                        outcome.get("error"),
                        outcome.get("result_digest"),
                        outcome.get("result_preview"),
                        now,
                        None if verdict is None else dumps(verdict),
                        branch,
                        None if budget is None else dumps(budget),
                        sid,
                        ticket.n,
                    ),
                )
                conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, sid))
                if status == "ok":  # its side effect happened off the live line
                    rows = conn.execute(
                        "SELECT n, compensation FROM steps WHERE session = ? AND n = ? "
                        "AND side_effect = 1 AND compensation IS NOT NULL",
                        (sid, ticket.n),
                    ).fetchall()
                    queue_compensations(conn, sid, rows, branch, now)
            if late or verdict is None:
                # the canonical JSON of {"n", "status", "late", "looping"}, written out
                conn.execute(
                    "INSERT INTO events(at, session, type, data) VALUES (?, ?, 'step', ?)",
                    (now, sid, _STEP_EVENT % (
                        _JSON_BOOL[late], _JSON_BOOL[verdict is not None], ticket.n,
                        _JSON_STATUS.get(status) or dumps(status),
                    )),
                )
        return late

    def record_steps(
        self,
        sid: str,
        steps: list[tuple[StepStart, StepOutcome]],
        expect: tuple[int, int],
        now: float,
        documents: tuple[str, dict[str, Any]] | None = None,
    ) -> int | None:
        """Record steps that already ended, in order, and `documents`, in one transaction (see
        the protocol)."""
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT seq, epoch, step_count, status, loops, loop_open FROM sessions "
                "WHERE id = ?", (sid,)
            ).fetchone()
            if row is None:
                raise UnknownSession(f"no session {sid!r} in this store")
            seq, epoch, step_count, status, loops, loop_open = row
            if (step_count, epoch) != tuple(expect):
                return None
            rows, events = [], []
            last_verdict = None
            for i, (step, outcome) in enumerate(steps):
                n = step_count + 1 + i
                get = outcome.get
                verdict, budget, state = get("verdict"), get("budget"), outcome["status"]
                verdict_text = None if verdict is None else dumps(verdict)
                # as end_step moves the status, one step after the other
                if verdict_text is not None:
                    status, last_verdict, loops = "looping", verdict_text, loops + 1
                elif state == "ok" and status != "stopped":
                    status = "healthy"
                rows.append((
                    sid, n, seq + 1 + i, epoch, step["tool"], step["args"], step["fingerprint"],
                    state, get("error"), get("result_digest"), get("result_preview"), now, now,
                    int(bool(step.get("side_effect"))), step.get("compensation"), verdict_text,
                    step.get("text"), None if budget is None else dumps(budget),
                    1 if step.get("task") else None, step.get("turn"),
                ))
                # dumps({"n": n, "status": state, "late": False, "looping": …}), written out
                events.append((now, sid, "step", f'{{"late":false,"looping":'
                               f'{"false" if verdict is None else "true"},"n":{n},'
                               f'"status":{dumps(state)}}}'))
                if verdict is not None and not loop_open:  # as end_step: an episode starts
                    events.append((now, sid, "loop", _LOOP_EVENT % n))
                loop_open = verdict is not None or (loop_open and state != "ok")
            if documents is not None:
                ns, items = documents
                for key, value in items.items():
                    put_value(conn, "docs", sid, ns, key, None if value is None else dumps(value))
                if not rows:
                    conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, sid))
            if not rows:
                return step_count + 1
            conn.executemany(
                "INSERT INTO steps(session, n, seq, epoch, tool, args, fingerprint, status, "
                "error, result_digest, result_preview, started_at, ended_at, side_effect, "
                "compensation, verdict, text, budget, task, turn) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            conn.execute(
                "UPDATE sessions SET seq = ?, step_count = ?, status = ?, loops = ?, "
                "last_verdict = COALESCE(?, last_verdict), loop_open = ?, updated_at = ? "
                "WHERE id = ?",
                (seq + len(rows), step_count + len(rows), status, loops, last_verdict,
                 int(loop_open), now, sid),
            )
            conn.executemany(
                "INSERT INTO events(at, session, type, data) VALUES (?, ?, ?, ?)", events
            )
        return step_count + 1

    def steps(
        self, sid: str, *, live_only: bool = False, last: int | None = None
    ) -> list[StepRecord]:
        """Steps in step order; `last` keeps only the newest N."""
        live = " AND branch IS NULL" if live_only else ""
        cols = self._step_cols
        # plain rows of `cols`, decoded by position: a long session's steps are read whole
        if last is not None:
            rows = self._db.read(
                f"SELECT {cols} FROM steps WHERE session = ?{live} ORDER BY n DESC LIMIT ?",
                (sid, last),
            )
            rows.reverse()
        else:
            rows = self._db.read(
                f"SELECT {cols} FROM steps WHERE session = ?{live} ORDER BY n", (sid,)
            )
        decode = STEP.decode_selected
        return [decode(r) for r in rows]

    def replay_histories(self, sids: Sequence[str]) -> dict[str, ReplayHistory]:
        """Each session's steps and user messages in two queries for the whole batch, in one
        read transaction: only the columns a replay reads, and the messages' roles looked at
        by SQLite (``json_extract``), not decoded here."""
        ids = list(dict.fromkeys(sids))
        steps: dict[str, list[ReplayStep]] = {sid: [] for sid in ids}
        spoke: dict[str, list[tuple[float, int]]] = {sid: [] for sid in ids}
        decode = REPLAY_STEP.decode_selected
        with self._db.reading() as conn:
            for start in range(0, len(ids), _BATCH):
                chunk = ids[start : start + _BATCH]
                marks = ", ".join("?" * len(chunk))
                rows = conn.execute(
                    f"SELECT {self._replay_cols}, session FROM steps "
                    f"WHERE session IN ({marks}) ORDER BY session, n", chunk
                ).fetchall()
                for row in rows:
                    steps[row[-1]].append(decode(row))
                for sid, at, seq in conn.execute(
                    f"SELECT session, created_at, seq FROM messages WHERE session IN ({marks}) "
                    "AND json_extract(body, '$.role') = 'user' ORDER BY session, seq", chunk
                ):
                    spoke[sid].append((at, seq))
        return {sid: replay_history(steps[sid], spoke[sid]) for sid in ids}

    def add_notice(self, sid: str, message: dict[str, Any], actor: str, now: float) -> None:
        """Append a recovery notice to the live line and audit it."""
        with self._db.write() as conn:
            append_live(conn, sid, [message], now)
            add_audit(conn, now, actor, "notice", sid, None, None, {"text": message.get("content")})
            add_event(conn, now, sid, "notice", {"actor": actor})

    # -- audit and feed ---------------------------------------------------------------------
    def audit(
        self,
        *,
        session: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        since: float | None = None,
        limit: int = 1000,
    ) -> list[AuditEvent]:
        """Audit events matching every given filter, newest first."""
        clause, params = rows_where(
            {"session": session, "actor": actor, "action": action}, ("at", since)
        )
        rows = self._named(
            f"SELECT {AUDIT_COLS} FROM audit{clause} ORDER BY id DESC LIMIT ?", (*params, limit)
        )
        return [to_audit(r) for r in rows]

    def count_audit(self, action: str, since: float) -> int:
        """How many audit events of `action` happened at or after `since`."""
        clause, params = rows_where({"action": action}, ("at", since))
        return int(self._read(f"SELECT COUNT(*) FROM audit{clause}", params)[0][0])

    def add_audit(
        self,
        actor: str,
        action: str,
        session: str | None,
        snapshot: str | None,
        reason: str | None,
        detail: dict[str, Any],
        now: float,
    ) -> None:
        """Append an audit event (and a feed event)."""
        with self._db.write() as conn:
            add_audit(conn, now, actor, action, session, snapshot, reason, detail)
            add_event(conn, now, session, action, {"actor": actor, **detail})

    def events(self, since: int = 0, limit: int = 1000, session: str | None = None) -> list[Event]:
        """Feed events with cursor greater than `since`, oldest first."""
        clause, params = rows_where({"session": session})
        rows = self._named(
            f"SELECT {EVENT.select()} FROM events{clause}"
            f"{' AND' if clause else ' WHERE'} id > ? ORDER BY id LIMIT ?",
            (*params, since, limit),
        )
        return [EVENT.decode(r) for r in rows]

    def last_event_id(self) -> int:
        """Cursor of the newest event (0 when none)."""
        return int(self._read("SELECT COALESCE(MAX(id), 0) FROM events")[0][0])

    def loops(self, since: float, after: int = 0, limit: int = 1000) -> list[Event] | None:
        """``loop`` events after (`since`, `after`) by (time, cursor), through ``events_loop``;
        None for a time an older release may have written steps at."""
        if self._loops_from is None:
            self._loops_from = loops_from(self._db.conn)
        if since <= self._loops_from:
            return None
        rows = self._named(
            f"SELECT {EVENT.select()} FROM events INDEXED BY events_loop WHERE type = 'loop' "
            "AND (at, id) > (?, ?) ORDER BY at, id LIMIT ?",
            (since, after, limit),
        )
        return [EVENT.decode(r) for r in rows]

    def delete_session(self, sid: str, now: float, audit: AuditEntry | None = None) -> bool:
        """Delete a session and everything it owns (audit events stay), with its audit row in
        the same transaction."""
        with self._db.write() as conn:
            found = _delete_session(conn, sid)
            if found:
                add_event(conn, now, sid, "deleted", {})
                if audit is not None:
                    add_audit(conn, now, audit.actor, audit.action, sid, None, audit.reason,
                              audit.detail)
        return found

    def purge_sessions(self, before: float, now: float, *, dry_run: bool = False) -> dict[str, int]:
        """Delete sessions idle since before `before` that are not evidence; returns how many
        went (``sessions``) and how many idle ones were kept as evidence (``evidence``)."""
        with self._db.write() as conn:
            rows = conn.execute(
                f"SELECT id, {_EVIDENCE} FROM sessions s WHERE updated_at < ? "
                "ORDER BY updated_at, id",
                (before,),
            ).fetchall()
            doomed = [sid for sid, evidence in rows if not evidence]
            counts = {"sessions": len(doomed), "evidence": len(rows) - len(doomed)}
            if dry_run or not doomed:
                return counts
            for sid in doomed:
                _delete_session(conn, sid)
                add_event(conn, now, sid, "deleted", {})
            reason = "idle sessions past their time limit (evidence kept)"
            add_retention(conn, now, reason, counts, ("session_ids", doomed))
        return counts

    # -- maintenance ------------------------------------------------------------------------
    def running_steps(self, started_before: float) -> list[tuple[str, StepRecord]]:
        """Every running step started at or before `started_before`, oldest first."""
        rows = self._named(
            f"SELECT session AS owner, {STEP_COLS} FROM steps WHERE status = 'running' "
            "AND started_at <= ? ORDER BY started_at, session, n", (started_before,))
        return [(row["owner"], to_step(row)) for row in rows]

    def rebuild_indexes(self) -> dict[str, int]:
        """SQLite's indexes are part of its tables; nothing drifts. Checks integrity instead."""
        (result,) = self._read("PRAGMA quick_check")[0]
        if result != "ok":
            raise StoreUnavailable(f"{self.url} failed its integrity check: {result}")
        return {}


    # The parts' methods, handed on (each documented where it is implemented).
    # -- rollbacks and abandoned branches: BranchLine (branches.py) ----------------------------
    def branches(self, sid: str) -> list[BranchInfo]:
        return self._branches.branches(sid)

    def rollback(self, sid: str, request: RollbackRequest) -> RollbackResult:
        return self._branches.rollback(sid, request)

    def purge_branches(self, before: float, now: float, *, dry_run: bool = False) -> dict[str, int]:
        return self._branches.purge_branches(before, now, dry_run=dry_run)

    # -- snapshot reads: SnapshotReads (snapshots.py) ------------------------------------------
    def snapshots(self, sid: str) -> list[SnapshotNode]:
        return self._snapshots.snapshots(sid)

    def newest_snapshots(self, sid: str, kind: SnapshotKind, label_prefix: str, limit: int
                         ) -> list[tuple[str, str]]:
        """Walked back from the newest by sequence number (``snapshots_seq``): it costs the
        snapshots taken since the ones it returns."""
        rows = self._read(
            "SELECT id, label FROM snapshots INDEXED BY snapshots_seq WHERE session = ? "
            "AND kind = ? AND branch IS NULL AND substr(label, 1, ?) = ? ORDER BY seq DESC "
            "LIMIT ?", (sid, kind, len(label_prefix), label_prefix, max(0, limit)))
        return [(r[0], r[1]) for r in rows]

    def snapshot(self, sid: str, snapshot_id: str) -> SnapshotNode | None:
        return self._snapshots.snapshot(sid, snapshot_id)

    def restorable_snapshot(self, sid: str, before_step: int | None) -> str | None:
        return self._snapshots.restorable_snapshot(sid, before_step)

    # -- the compensation outbox: SagaOutbox (saga.py) -----------------------------------------
    def compensations(
        self,
        *,
        session: str | None = None,
        status: CompensationStatus | None = None,
        limit: int = 1000,
    ) -> list[Compensation]:
        return self._saga.compensations(session=session, status=status, limit=limit)

    def count_compensations(self, status: CompensationStatus) -> int:
        return self._saga.count_compensations(status)

    def claim_compensation(
        self, names: list[str], owner: str, lease_s: float, now: float
    ) -> Compensation | None:
        return self._saga.claim_compensation(names, owner, lease_s, now)

    def finish_compensation(
        self, cid: int, owner: str, ok: bool, error: str | None, now: float, final: bool,
        retry_at: float | None = None,
    ) -> None:
        self._saga.finish_compensation(cid, owner, ok, error, now, final, retry_at)

    def retry_compensation(self, cid: int, actor: str, reason: str, now: float) -> Compensation:
        return self._saga.retry_compensation(cid, actor, reason, now)

    def resolve_compensation(self, cid: int, actor: str, reason: str, now: float) -> Compensation:
        return self._saga.resolve_compensation(cid, actor, reason, now)

    def heartbeat_worker(
        self, worker: str, handlers: list[str], now: float, expire_before: float
    ) -> None:
        self._saga.heartbeat_worker(worker, handlers, now, expire_before)

    def compensation_workers(self, since: float) -> list[CompensationWorker]:
        return self._saga.compensation_workers(since)

    # -- documents: DocumentRows (docs.py) -----------------------------------------------------
    def doc_put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> None:
        self._docs.doc_put(sid, ns, items, now)

    def doc_get(self, sid: str, ns: str, keys: list[str], *,
                prefix: str | None = None) -> dict[str, Any]:
        return self._docs.doc_get(sid, ns, keys, prefix=prefix)

    def doc_scan(self, sid: str, ns: str, prefix: str = "", *, below: str | None = None,
                 last: int | None = None) -> dict[str, Any]:
        return self._docs.doc_scan(sid, ns, prefix, below=below, last=last)

    def fleet_docs(self, ns: str) -> dict[str, Any]:
        return self._docs.fleet_docs(ns)

    def fleet_doc_put(self, ns: str, values: dict[str, Any | None], now: float,
                      audit: AuditEntry | None = None) -> None:
        self._docs.fleet_doc_put(ns, values, now, audit)

    def fleet_doc_get(self, ns: str, keys: list[str]) -> dict[str, Any]:
        return self._docs.fleet_doc_get(ns, keys)

    def fleet_doc_swap(self, ns: str, expect: dict[str, Any | None],
                       values: dict[str, Any | None], now: float,
                       audit: AuditEntry | None = None, feed_only: bool = False) -> bool:
        return self._docs.fleet_doc_swap(ns, expect, values, now, audit, feed_only)

    # -- an integration's multi-part write: SessionWrites (writes.py) --------------------------
    def write_session(
        self, sid: str, write: SessionWrite, now: float, retention: Retention
    ) -> tuple[int, SnapshotNode | None]:
        return self._writes.write_session(sid, write, now, retention)


_END = 2**63 - 1
"""A live-line position past every message (`live_messages` without `until`)."""
