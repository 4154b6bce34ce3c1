"""SQLite store: the embedded default. WAL mode, safe for several processes on one host.

Writes run in `BEGIN IMMEDIATE` transactions, so two processes never interleave half-done changes;
readers see the last committed state. Each thread gets its own connection.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlparse

from engine.errors import (
    RollbackConflict,
    SchemaMismatch,
    SnapshotNotRestorable,
    StoreUnavailable,
    UnknownSession,
    UnknownSnapshot,
)
from engine.records import (
    AuditEvent,
    BranchInfo,
    Compensation,
    Event,
    MessageRecord,
    RollbackResult,
    SessionInfo,
    SnapshotNode,
    StepRecord,
)
from engine.store.base import Retention, StepTicket

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS rewind_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    meta TEXT NOT NULL,
    tenant TEXT, scenario TEXT, prompt_version TEXT,
    status TEXT NOT NULL DEFAULT 'healthy',
    head TEXT,
    epoch INTEGER NOT NULL DEFAULT 0,
    seq INTEGER NOT NULL DEFAULT 0,
    step_count INTEGER NOT NULL DEFAULT 0,
    msg_count INTEGER NOT NULL DEFAULT 0,
    loops INTEGER NOT NULL DEFAULT 0,
    rollbacks INTEGER NOT NULL DEFAULT 0,
    last_verdict TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS sessions_updated ON sessions(updated_at DESC);
CREATE INDEX IF NOT EXISTS sessions_status ON sessions(status, updated_at DESC);
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
CREATE INDEX IF NOT EXISTS snapshots_restorable ON snapshots(session, kind, seq)
    WHERE branch IS NULL AND retired_at IS NULL;
CREATE TABLE IF NOT EXISTS steps (
    session TEXT NOT NULL, n INTEGER NOT NULL, seq INTEGER NOT NULL, epoch INTEGER NOT NULL,
    tool TEXT, args TEXT NOT NULL, fingerprint TEXT NOT NULL, status TEXT NOT NULL,
    error TEXT, result_digest TEXT, result_preview TEXT,
    started_at REAL NOT NULL, ended_at REAL,
    side_effect INTEGER NOT NULL DEFAULT 0, compensation TEXT, verdict TEXT,
    snapshot TEXT, text TEXT, branch TEXT, late INTEGER NOT NULL DEFAULT 0, budget TEXT,
    PRIMARY KEY (session, n)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS steps_seq ON steps(session, seq);
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
    created_at REAL NOT NULL, updated_at REAL NOT NULL
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
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, session TEXT, type TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_session ON events(session, id);
"""


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class SQLiteStore:
    """Store on one SQLite file (or `:memory:` for tests and demos in one process)."""

    def __init__(self, url: str):
        parsed = urlparse(url)
        # sqlite:///relative/path, sqlite:////absolute/path, sqlite:///:memory:
        path = parsed.path[1:] if parsed.path.startswith("/") else parsed.path
        if parsed.netloc:
            path = parsed.netloc + parsed.path
        if not path:
            raise ValueError(f"{url!r}: a SQLite URL needs a path, e.g. sqlite:///.rewind/rewind.db")
        options = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        self.url = url
        self.path = path
        self.memory = path == ":memory:"
        self._synchronous = options.get("synchronous", "NORMAL").upper()
        if self._synchronous not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ValueError(f"{url!r}: synchronous must be OFF, NORMAL, FULL or EXTRA")
        self._local = threading.local()
        self._lock = threading.RLock()
        self._shared: sqlite3.Connection | None = None
        if not self.memory:
            directory = os.path.dirname(os.path.abspath(path))
            try:
                os.makedirs(directory, exist_ok=True)
            except OSError as exc:
                raise StoreUnavailable(f"cannot create the folder for {url}: {exc}") from exc
        self._init_schema()

    # -- connections ------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path, timeout=30.0, isolation_level=None, check_same_thread=False
            )
            conn.execute("PRAGMA busy_timeout = 30000")
            if not self.memory:
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self._synchronous}")
            conn.execute("PRAGMA foreign_keys = OFF")
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"cannot open the SQLite store {self.url}: {exc}") from exc
        return conn

    @property
    def _conn(self) -> sqlite3.Connection:
        if self.memory:  # one shared connection: every thread must see the same database
            if self._shared is None:
                self._shared = self._connect()
            return self._shared
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    @contextmanager
    def _write(self):
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")

    def _read(self, sql: str, params: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        if self._shared is not None:
            self._shared.close()
            self._shared = None

    def _init_schema(self) -> None:
        with self._write() as conn:
            row = None
            try:
                row = conn.execute(
                    "SELECT value FROM rewind_meta WHERE key = 'schema_version'"
                ).fetchone()
            except sqlite3.OperationalError:
                pass
            if row is not None and int(row[0]) > SCHEMA_VERSION:
                raise SchemaMismatch(
                    f"{self.url} was written by a newer Rewind (schema {row[0]}, this release "
                    f"knows {SCHEMA_VERSION}); upgrade agent-rewind"
                )
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(
                "INSERT OR IGNORE INTO rewind_meta(key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )

    # -- helpers ----------------------------------------------------------------------------
    @staticmethod
    def _event(conn, now: float, sid: str | None, kind: str, data: dict) -> None:
        conn.execute(
            "INSERT INTO events(at, session, type, data) VALUES (?, ?, ?, ?)",
            (now, sid, kind, _dumps(data)),
        )

    @staticmethod
    def _session_row(conn, sid: str) -> tuple:
        row = conn.execute(
            "SELECT seq, epoch, msg_count, step_count, head FROM sessions WHERE id = ?", (sid,)
        ).fetchone()
        if row is None:
            raise UnknownSession(f"no session {sid!r} in this store")
        return row

    _SESSION_COLS = (
        "id, meta, status, head, epoch, created_at, updated_at, step_count, msg_count, loops, "
        "rollbacks, last_verdict"
    )

    @staticmethod
    def _to_session(row) -> SessionInfo:
        return SessionInfo(
            id=row[0], meta=json.loads(row[1]), status=row[2], head=row[3], epoch=row[4],
            created_at=row[5], updated_at=row[6], steps=row[7], messages=row[8], loops=row[9],
            rollbacks=row[10], last_verdict=_loads(row[11]),
        )

    # -- sessions ---------------------------------------------------------------------------
    def ensure_session(self, sid: str, meta: dict | None, now: float) -> SessionInfo:
        with self._write() as conn:
            row = conn.execute("SELECT meta FROM sessions WHERE id = ?", (sid,)).fetchone()
            if row is None:
                merged = dict(meta or {})
                conn.execute(
                    "INSERT INTO sessions(id, meta, tenant, scenario, prompt_version, "
                    "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (sid, _dumps(merged), merged.get("tenant"), merged.get("scenario"),
                     merged.get("prompt_version"), now, now),
                )
                self._event(conn, now, sid, "session", {"meta": merged})
            elif meta:
                merged = {**json.loads(row[0]), **meta}
                conn.execute(
                    "UPDATE sessions SET meta = ?, tenant = ?, scenario = ?, prompt_version = ? "
                    "WHERE id = ?",
                    (_dumps(merged), merged.get("tenant"), merged.get("scenario"),
                     merged.get("prompt_version"), sid),
                )
        return self.get_session(sid)

    def get_session(self, sid: str) -> SessionInfo | None:
        rows = self._read(f"SELECT {self._SESSION_COLS} FROM sessions WHERE id = ?", (sid,))
        return self._to_session(rows[0]) if rows else None

    @staticmethod
    def _filters(status, tenant, scenario, prompt_version, updated_since):
        where, params = [], []
        for column, value in (("status", status), ("tenant", tenant), ("scenario", scenario),
                              ("prompt_version", prompt_version)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if updated_since is not None:
            where.append("updated_at >= ?")
            params.append(updated_since)
        return (" WHERE " + " AND ".join(where)) if where else "", params

    def list_sessions(self, *, status=None, tenant=None, scenario=None, prompt_version=None,
                      updated_since=None, limit=200, offset=0) -> list[SessionInfo]:
        where, params = self._filters(status, tenant, scenario, prompt_version, updated_since)
        rows = self._read(
            f"SELECT {self._SESSION_COLS} FROM sessions{where} "
            "ORDER BY updated_at DESC LIMIT ? OFFSET ?",
            (*params, limit, offset),
        )
        return [self._to_session(r) for r in rows]

    def count_sessions(self, *, status=None, updated_since=None) -> int:
        where, params = self._filters(status, None, None, None, updated_since)
        return self._read(f"SELECT COUNT(*) FROM sessions{where}", tuple(params))[0][0]

    def set_status(self, sid: str, status: str, verdict: dict | None, now: float) -> None:
        with self._write() as conn:
            self._session_row(conn, sid)
            if verdict is not None:
                conn.execute(
                    "UPDATE sessions SET status = ?, last_verdict = ?, loops = loops + 1, "
                    "updated_at = ? WHERE id = ?",
                    (status, _dumps(verdict), now, sid),
                )
            else:
                conn.execute(
                    "UPDATE sessions SET status = ?, updated_at = ? WHERE id = ?",
                    (status, now, sid),
                )
            self._event(conn, now, sid, "status", {"status": status})

    # -- history ----------------------------------------------------------------------------
    def _append(self, conn, sid: str, messages: list[dict], now: float) -> tuple[int, int]:
        seq, epoch, msg_count, _, _ = self._session_row(conn, sid)
        conn.executemany(
            "INSERT INTO messages(session, seq, pos, body, created_at) VALUES (?, ?, ?, ?, ?)",
            [(sid, seq + i + 1, msg_count + i, _dumps(m), now) for i, m in enumerate(messages)],
        )
        conn.execute(
            "UPDATE sessions SET seq = ?, msg_count = ?, updated_at = ? WHERE id = ?",
            (seq + len(messages), msg_count + len(messages), now, sid),
        )
        return epoch, msg_count

    def append_messages(self, sid: str, messages: list[dict], now: float) -> int:
        with self._write() as conn:
            epoch, pos = self._append(conn, sid, messages, now)
            roles = [m["role"] for m in messages]
            self._event(conn, now, sid, "message",
                        {"count": len(messages), "pos": pos, "roles": roles})
        return epoch

    def put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> int:
        with self._write() as conn:
            seq, epoch, *_ = self._session_row(conn, sid)
            seq += 1
            for key, value in items.items():
                text = None if value is None else _dumps(value)
                conn.execute(
                    "INSERT INTO kv_writes(session, seq, ns, key, value) VALUES (?, ?, ?, ?, ?)",
                    (sid, seq, ns, key, text),
                )
                if text is None:
                    conn.execute("DELETE FROM kv WHERE session = ? AND ns = ? AND key = ?",
                                 (sid, ns, key))
                else:
                    conn.execute(
                        "INSERT OR REPLACE INTO kv(session, ns, key, value) VALUES (?, ?, ?, ?)",
                        (sid, ns, key, text),
                    )
            conn.execute("UPDATE sessions SET seq = ?, updated_at = ? WHERE id = ?",
                         (seq, now, sid))
            self._event(conn, now, sid, ns, {"keys": sorted(items)[:20], "count": len(items)})
        return epoch

    def get_all(self, sid: str, ns: str) -> dict[str, Any]:
        rows = self._read("SELECT key, value FROM kv WHERE session = ? AND ns = ?", (sid, ns))
        return {k: json.loads(v) for k, v in rows}

    def live_messages(self, sid: str) -> list[dict]:
        rows = self._read(
            "SELECT body FROM messages WHERE session = ? AND branch IS NULL ORDER BY pos", (sid,)
        )
        return [json.loads(r[0]) for r in rows]

    def all_messages(self, sid: str) -> list[MessageRecord]:
        rows = self._read(
            "SELECT seq, pos, body, branch, created_at FROM messages WHERE session = ? "
            "ORDER BY seq", (sid,),
        )
        return [MessageRecord(seq=r[0], pos=r[1], message=json.loads(r[2]), branch=r[3],
                              created_at=r[4]) for r in rows]

    # -- snapshots --------------------------------------------------------------------------
    @staticmethod
    def _queue_compensations(conn, sid: str, rows, branch: str | None, now: float):
        """Queue the compensations of (step n, compensation JSON) rows; each step at most once.

        The idempotency key names the session incarnation (its creation time), so a session
        deleted and created again under the same id never collides with the old keys."""
        (created,) = conn.execute("SELECT created_at FROM sessions WHERE id = ?", (sid,)).fetchone()
        incarnation = f"{int(created * 1e6):x}"
        queued = []
        for n, comp in rows:
            name, args = json.loads(comp)
            key = f"{sid}#{n}@{incarnation}"
            cur = conn.execute(
                "INSERT OR IGNORE INTO compensations(session, step, name, args, idem_key, status, "
                "branch, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
                (sid, n, name, _dumps(args), key, branch, now, now),
            )
            if cur.rowcount:
                queued.append(Compensation(
                    id=cur.lastrowid, session=sid, step=n, name=name, args=args,
                    idempotency_key=key, status="pending", attempts=0, error=None,
                    created_at=now, updated_at=now, branch=branch,
                ))
        return queued

    def _snapshot(self, conn, sid: str, label, kind: str, now: float, retention: Retention):
        seq, _epoch, msg_count, step_count, head = self._session_row(conn, sid)
        seq += 1
        snap_id = f"snap-{seq}"
        conn.execute(
            "INSERT INTO snapshots(session, id, parent, label, kind, seq, msg_count, next_step, "
            "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (sid, snap_id, head, label, kind, seq, msg_count, step_count + 1, now),
        )
        conn.execute("UPDATE sessions SET seq = ?, head = ?, updated_at = ? WHERE id = ?",
                     (seq, snap_id, now, sid))
        self._retire(conn, sid, kind, step_count + 1, now, retention)
        return SnapshotNode(
            id=snap_id, parent=head, label=label, created_at=now, on_live_line=True,
            abandoned_reason=None, kind=kind, restorable=True, next_step=step_count + 1,
            messages=msg_count, is_head=True,
        )

    @staticmethod
    def _retire(conn, sid: str, kind: str, next_step: int, now: float, retention: Retention):
        if kind == "step":
            conn.execute(
                "UPDATE snapshots SET retired_at = ? WHERE session = ? AND kind = 'step' "
                "AND branch IS NULL AND retired_at IS NULL AND next_step <= ?",
                (now, sid, next_step - retention.keep_step_snapshots),
            )
        else:
            conn.execute(
                "UPDATE snapshots SET retired_at = ? WHERE session = ? AND kind = ? "
                "AND branch IS NULL AND retired_at IS NULL AND seq < ("
                "  SELECT MIN(seq) FROM (SELECT seq FROM snapshots WHERE session = ? AND kind = ?"
                "  AND branch IS NULL AND retired_at IS NULL ORDER BY seq DESC LIMIT ?))",
                (now, sid, kind, sid, kind, retention.keep_snapshots),
            )

    def take_snapshot(self, sid, label, kind, now, retention) -> SnapshotNode:
        with self._write() as conn:
            node = self._snapshot(conn, sid, label, kind, now, retention)
            self._event(conn, now, sid, "snapshot", {"id": node.id, "label": label, "kind": kind})
        return node

    def snapshots(self, sid: str) -> list[SnapshotNode]:
        head_rows = self._read("SELECT head FROM sessions WHERE id = ?", (sid,))
        head = head_rows[0][0] if head_rows else None
        branches = {b.id: b for b in self.branches(sid)}
        rows = self._read(
            "SELECT id, parent, label, kind, seq, msg_count, next_step, created_at, branch, "
            "retired_at FROM snapshots WHERE session = ? ORDER BY seq", (sid,),
        )
        out = []
        for r in rows:
            branch = branches.get(r[8])
            reason = None
            if branch is not None:
                reason = f"rolled back to {branch.from_snapshot} by {branch.actor}: {branch.reason}"
            out.append(SnapshotNode(
                id=r[0], parent=r[1], label=r[2], created_at=r[7], on_live_line=r[8] is None,
                abandoned_reason=reason, kind=r[3], restorable=r[8] is None and r[9] is None,
                next_step=r[6], messages=r[5], branch=r[8], is_head=r[0] == head,
            ))
        return out

    def restorable_snapshot(self, sid: str, before_step: int | None) -> str | None:
        best = None
        for kind in ("manual", "step"):  # each kind has its own retention window
            rows = self._read(
                "SELECT id, seq FROM snapshots WHERE session = ? AND kind = ? AND branch IS NULL "
                "AND retired_at IS NULL AND next_step <= ? ORDER BY seq DESC LIMIT 1",
                (sid, kind, before_step if before_step is not None else 2**62),
            )
            if rows and (best is None or rows[0][1] > best[1]):
                best = rows[0]
        return best[0] if best else None

    def branches(self, sid: str) -> list[BranchInfo]:
        rows = self._read(
            "SELECT id, from_snapshot, actor, reason, created_at, epoch FROM branches "
            "WHERE session = ? ORDER BY seq", (sid,),
        )
        return [BranchInfo(id=r[0], from_snapshot=r[1], actor=r[2], reason=r[3], created_at=r[4],
                           epoch=r[5]) for r in rows]

    # -- steps ------------------------------------------------------------------------------
    def begin_step(self, sid, step, snapshot_label, now, retention) -> StepTicket:
        with self._write() as conn:
            snap_id = None
            if snapshot_label is not None:
                snap_id = self._snapshot(conn, sid, snapshot_label, "step", now, retention).id
            seq, epoch, _msgs, step_count, _head = self._session_row(conn, sid)
            seq += 1
            n = step_count + 1
            conn.execute(
                "INSERT INTO steps(session, n, seq, epoch, tool, args, fingerprint, status, "
                "started_at, side_effect, compensation, snapshot, text) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                (sid, n, seq, epoch, step["tool"], step["args"], step["fingerprint"], now,
                 int(bool(step.get("side_effect"))), step.get("compensation"), snap_id,
                 step.get("text")),
            )
            conn.execute(
                "UPDATE sessions SET seq = ?, step_count = ?, updated_at = ? WHERE id = ?",
                (seq, n, now, sid),
            )
        return StepTicket(n=n, epoch=epoch, snapshot=snap_id, seq=seq)

    def end_step(self, sid, ticket: StepTicket, outcome: dict, now: float) -> bool:
        verdict = outcome.get("verdict")
        with self._write() as conn:
            _seq, epoch, *_ = self._session_row(conn, sid)
            late = epoch != ticket.epoch
            branch = None
            if late:
                row = conn.execute(
                    "SELECT id FROM branches WHERE session = ? AND epoch > ? ORDER BY seq LIMIT 1",
                    (sid, ticket.epoch),
                ).fetchone()
                branch = row[0] if row else None
            conn.execute(
                "UPDATE steps SET status = ?, error = ?, result_digest = ?, result_preview = ?, "
                "ended_at = ?, verdict = ?, late = ?, branch = COALESCE(branch, ?), budget = ? "
                "WHERE session = ? AND n = ?",
                (outcome["status"], outcome.get("error"), outcome.get("result_digest"),
                 outcome.get("result_preview"), now, None if verdict is None else _dumps(verdict),
                 int(late), branch,
                 None if outcome.get("budget") is None else _dumps(outcome["budget"]),
                 sid, ticket.n),
            )
            if late:
                conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, sid))
                if outcome["status"] == "ok":  # its side effect happened off the live line
                    rows = conn.execute(
                        "SELECT n, compensation FROM steps WHERE session = ? AND n = ? "
                        "AND side_effect = 1 AND compensation IS NOT NULL", (sid, ticket.n),
                    ).fetchall()
                    self._queue_compensations(conn, sid, rows, branch, now)
            elif verdict is not None:
                conn.execute(
                    "UPDATE sessions SET status = 'looping', last_verdict = ?, loops = loops + 1, "
                    "updated_at = ? WHERE id = ?", (_dumps(verdict), now, sid),
                )
            elif outcome["status"] == "ok":
                conn.execute(
                    "UPDATE sessions SET status = CASE WHEN status = 'stopped' THEN status "
                    "ELSE 'healthy' END, updated_at = ? WHERE id = ?", (now, sid),
                )
            else:
                conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, sid))
            self._event(conn, now, sid, "step", {
                "n": ticket.n, "status": outcome["status"], "late": late,
                "looping": verdict is not None,
            })
        return late

    _STEP_COLS = (
        "n, tool, args, fingerprint, status, error, result_digest, result_preview, started_at, "
        "ended_at, side_effect, compensation, verdict, branch, late, snapshot, text, epoch, budget"
    )

    @staticmethod
    def _to_step(r) -> StepRecord:
        comp = _loads(r[11])
        return StepRecord(
            n=r[0], tool=r[1], args=json.loads(r[2]), fingerprint=r[3], status=r[4], error=r[5],
            result_digest=r[6], result_preview=r[7], started_at=r[8], ended_at=r[9],
            side_effect=bool(r[10]), compensation=tuple(comp) if comp else None,
            verdict=_loads(r[12]), on_live_line=r[13] is None, branch=r[13], late=bool(r[14]),
            snapshot=r[15], text=r[16], epoch=r[17], budget=_loads(r[18]),
        )

    def steps(self, sid: str, *, live_only: bool = False, last: int | None = None):
        where = " AND branch IS NULL" if live_only else ""
        if last is not None:
            rows = self._read(
                f"SELECT {self._STEP_COLS} FROM steps WHERE session = ?{where} "
                "ORDER BY n DESC LIMIT ?", (sid, last),
            )
            rows.reverse()
        else:
            rows = self._read(
                f"SELECT {self._STEP_COLS} FROM steps WHERE session = ?{where} ORDER BY n", (sid,)
            )
        return [self._to_step(r) for r in rows]

    # -- rollback ---------------------------------------------------------------------------
    def rollback(self, sid, target, *, actor, reason, notice, now,
                 expect_epoch=None, kind="rollback") -> RollbackResult:
        with self._write() as conn:
            seq, epoch, _msgs, _steps, _head = self._session_row(conn, sid)
            if expect_epoch is not None and epoch != expect_epoch:
                raise RollbackConflict(
                    f"session {sid!r} was rolled back by someone else (epoch is now {epoch}); "
                    "look at it again before rolling back"
                )
            snap = conn.execute(
                "SELECT seq, msg_count, branch, retired_at FROM snapshots "
                "WHERE session = ? AND id = ?", (sid, target),
            ).fetchone()
            if snap is None:
                raise UnknownSnapshot(f"session {sid!r} has no snapshot {target!r}")
            snap_seq, snap_msgs, snap_branch, retired = snap
            if snap_branch is not None:
                raise SnapshotNotRestorable(
                    f"snapshot {target!r} lies on the abandoned branch {snap_branch}; "
                    "roll back to a snapshot on the live line"
                )
            if retired is not None:
                raise SnapshotNotRestorable(
                    f"snapshot {target!r} was retired by the retention window; "
                    "pick a newer snapshot"
                )
            seq += 1
            branch = f"branch-{seq}"
            new_epoch = epoch + 1
            conn.execute(
                "INSERT INTO branches(session, id, from_snapshot, seq, epoch, actor, reason, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (sid, branch, target, seq, new_epoch, actor, reason, now),
            )
            counts = {}
            for table in ("messages", "steps", "snapshots"):
                cur = conn.execute(
                    f"UPDATE {table} SET branch = ? WHERE session = ? AND seq > ? "
                    "AND branch IS NULL", (branch, sid, snap_seq),
                )
                counts[table] = cur.rowcount
            # Versioned key-values: abandon later writes, then restore the affected keys.
            affected = conn.execute(
                "SELECT DISTINCT ns, key FROM kv_writes WHERE session = ? AND seq > ? "
                "AND branch IS NULL", (sid, snap_seq),
            ).fetchall()
            conn.execute(
                "UPDATE kv_writes SET branch = ? WHERE session = ? AND seq > ? AND branch IS NULL",
                (branch, sid, snap_seq),
            )
            abandoned_memories = 0
            for ns, key in affected:
                row = conn.execute(
                    "SELECT value FROM kv_writes WHERE session = ? AND ns = ? AND key = ? "
                    "AND seq <= ? AND branch IS NULL ORDER BY seq DESC LIMIT 1",
                    (sid, ns, key, snap_seq),
                ).fetchone()
                if row is None or row[0] is None:
                    conn.execute("DELETE FROM kv WHERE session = ? AND ns = ? AND key = ?",
                                 (sid, ns, key))
                    if ns == "mem" and row is None:
                        abandoned_memories += 1
                else:
                    conn.execute(
                        "INSERT OR REPLACE INTO kv(session, ns, key, value) VALUES (?, ?, ?, ?)",
                        (sid, ns, key, row[0]),
                    )
            # Saga: side-effecting steps that completed on the abandoned branch, newest first.
            comp_rows = conn.execute(
                "SELECT n, compensation FROM steps WHERE session = ? AND branch = ? "
                "AND side_effect = 1 AND compensation IS NOT NULL AND status = 'ok' "
                "ORDER BY n DESC", (sid, branch),
            ).fetchall()
            queued = self._queue_compensations(conn, sid, comp_rows, branch, now)
            fork = kind == "fork"  # a fork moves the line but is no recovery: status stays
            conn.execute(
                "UPDATE sessions SET seq = ?, epoch = ?, head = ?, msg_count = ?, "
                "status = CASE WHEN ? THEN status ELSE 'rolled_back' END, "
                "rollbacks = rollbacks + CASE WHEN ? THEN 0 ELSE 1 END, updated_at = ? "
                "WHERE id = ?",
                (seq, new_epoch, target, snap_msgs, fork, fork, now, sid),
            )
            notice_text = None
            if notice is not None:
                self._append(conn, sid, [notice], now)
                notice_text = notice.get("content")
            detail = {
                "branch": branch, "epoch": new_epoch, "messages": counts["messages"],
                "steps": counts["steps"], "snapshots": counts["snapshots"],
                "compensations": [c.name for c in queued], "notice": notice_text,
            }
            action = "fork" if fork else "rollback"
            conn.execute(
                "INSERT INTO audit(at, actor, action, session, snapshot, reason, detail) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (now, actor, action, sid, target, reason, _dumps(detail)),
            )
            self._event(conn, now, sid, action, {"target": target, "actor": actor, **detail})
            if notice_text is not None:
                conn.execute(
                    "INSERT INTO audit(at, actor, action, session, snapshot, reason, detail) "
                    "VALUES (?, ?, 'notice', ?, ?, ?, ?)",
                    (now, actor, sid, target, reason, _dumps({"text": notice_text})),
                )
        return RollbackResult(
            session=sid, target=target, branch=branch, epoch=new_epoch, actor=actor,
            reason=reason, at=now, abandoned_messages=counts["messages"],
            abandoned_steps=counts["steps"], abandoned_snapshots=counts["snapshots"],
            abandoned_memories=abandoned_memories, compensations=tuple(queued),
            notice=notice_text,
        )

    def add_notice(self, sid: str, message: dict, actor: str, now: float) -> None:
        with self._write() as conn:
            self._append(conn, sid, [message], now)
            conn.execute(
                "INSERT INTO audit(at, actor, action, session, snapshot, reason, detail) "
                "VALUES (?, ?, 'notice', ?, NULL, NULL, ?)",
                (now, actor, sid, _dumps({"text": message.get("content")})),
            )
            self._event(conn, now, sid, "notice", {"actor": actor})

    # -- audit and feed ---------------------------------------------------------------------
    def audit(self, *, session=None, actor=None, action=None, since=None, limit=1000):
        where, params = [], []
        for column, value in (("session", session), ("actor", actor), ("action", action)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if since is not None:
            where.append("at >= ?")
            params.append(since)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        rows = self._read(
            f"SELECT id, at, actor, action, session, snapshot, reason, detail FROM audit{clause} "
            "ORDER BY id DESC LIMIT ?", (*params, limit),
        )
        return [AuditEvent(id=r[0], at=r[1], actor=r[2], action=r[3], session=r[4],
                           snapshot=r[5], reason=r[6], detail=json.loads(r[7])) for r in rows]

    def count_audit(self, action: str, since: float) -> int:
        return self._read("SELECT COUNT(*) FROM audit WHERE action = ? AND at >= ?",
                          (action, since))[0][0]

    def add_audit(self, actor, action, session, snapshot, reason, detail, now) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO audit(at, actor, action, session, snapshot, reason, detail) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (now, actor, action, session, snapshot, reason, _dumps(detail)),
            )
            self._event(conn, now, session, action, {"actor": actor, **detail})

    def events(self, since: int = 0, limit: int = 1000, session: str | None = None):
        if session is None:
            rows = self._read(
                "SELECT id, at, session, type, data FROM events WHERE id > ? ORDER BY id LIMIT ?",
                (since, limit),
            )
        else:
            rows = self._read(
                "SELECT id, at, session, type, data FROM events WHERE session = ? AND id > ? "
                "ORDER BY id LIMIT ?", (session, since, limit),
            )
        return [Event(id=r[0], at=r[1], session=r[2], type=r[3], data=json.loads(r[4]))
                for r in rows]

    def last_event_id(self) -> int:
        return self._read("SELECT COALESCE(MAX(id), 0) FROM events")[0][0]

    # -- saga -------------------------------------------------------------------------------
    _COMP_COLS = (
        "id, session, step, name, args, idem_key, status, attempts, error, created_at, "
        "updated_at, branch"
    )

    @staticmethod
    def _to_comp(r) -> Compensation:
        return Compensation(
            id=r[0], session=r[1], step=r[2], name=r[3], args=json.loads(r[4]),
            idempotency_key=r[5], status=r[6], attempts=r[7], error=r[8], created_at=r[9],
            updated_at=r[10], branch=r[11],
        )

    def compensations(self, *, session=None, status=None, limit=1000) -> list[Compensation]:
        where, params = [], []
        if session is not None:
            where.append("session = ?")
            params.append(session)
        if status is not None:
            where.append("status = ?")
            params.append(status)
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        rows = self._read(
            f"SELECT {self._COMP_COLS} FROM compensations{clause} ORDER BY id DESC LIMIT ?",
            (*params, limit),
        )
        return [self._to_comp(r) for r in rows]

    def count_compensations(self, status: str) -> int:
        return self._read("SELECT COUNT(*) FROM compensations WHERE status = ?", (status,))[0][0]

    def claim_compensation(self, names, owner, lease_s, now) -> Compensation | None:
        if not names:
            return None
        marks = ",".join("?" * len(names))
        with self._write() as conn:
            row = conn.execute(
                f"SELECT {self._COMP_COLS} FROM compensations WHERE name IN ({marks}) AND "
                "(status = 'pending' OR (status = 'running' AND lease_until < ?)) "
                "ORDER BY id LIMIT 1", (*names, now),
            ).fetchone()
            if row is None:
                return None
            conn.execute(
                "UPDATE compensations SET status = 'running', owner = ?, lease_until = ?, "
                "attempts = attempts + 1, updated_at = ? WHERE id = ?",
                (owner, now + lease_s, now, row[0]),
            )
        comp = self._to_comp(row)
        return Compensation(**{**comp.__dict__, "status": "running",
                               "attempts": comp.attempts + 1})

    def finish_compensation(self, cid, owner, ok, error, now, final) -> None:
        status = "done" if ok else ("failed" if final else "pending")
        with self._write() as conn:
            row = conn.execute(
                "SELECT session, name, step FROM compensations WHERE id = ? AND owner = ? "
                "AND status = 'running'", (cid, owner),
            ).fetchone()
            if row is None:  # lease lost to another worker; its outcome stands
                return
            conn.execute(
                "UPDATE compensations SET status = ?, error = ?, lease_until = NULL, "
                "updated_at = ? WHERE id = ?", (status, error, now, cid),
            )
            if status != "pending":
                conn.execute(
                    "INSERT INTO audit(at, actor, action, session, snapshot, reason, detail) "
                    "VALUES (?, ?, 'compensation', ?, NULL, ?, ?)",
                    (now, owner, row[0], error,
                     _dumps({"id": cid, "name": row[1], "step": row[2], "status": status})),
                )
            self._event(conn, now, row[0], "compensation",
                        {"id": cid, "name": row[1], "status": status})

    # -- documents --------------------------------------------------------------------------
    def doc_put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> None:
        with self._write() as conn:
            self._session_row(conn, sid)
            for key, value in items.items():
                if value is None:
                    conn.execute("DELETE FROM docs WHERE session = ? AND ns = ? AND key = ?",
                                 (sid, ns, key))
                else:
                    conn.execute(
                        "INSERT OR REPLACE INTO docs(session, ns, key, value) VALUES (?, ?, ?, ?)",
                        (sid, ns, key, _dumps(value)),
                    )
            conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, sid))

    def doc_get(self, sid: str, ns: str, keys: list[str]) -> dict[str, Any]:
        out = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._read(
                f"SELECT key, value FROM docs WHERE session = ? AND ns = ? AND key IN ({marks})",
                (sid, ns, *chunk),
            )
            out.update((k, json.loads(v)) for k, v in rows)
        return out

    def doc_scan(self, sid: str, ns: str, prefix: str = "") -> dict[str, Any]:
        rows = self._read(
            "SELECT key, value FROM docs WHERE session = ? AND ns = ? AND key >= ? AND key < ? "
            "ORDER BY key", (sid, ns, prefix, prefix + "\U0010ffff"),
        )
        return {k: json.loads(v) for k, v in rows}

    def delete_session(self, sid: str, now: float) -> bool:
        with self._write() as conn:
            found = conn.execute("DELETE FROM sessions WHERE id = ?", (sid,)).rowcount > 0
            for table in ("messages", "kv_writes", "kv", "docs", "snapshots", "steps", "branches"):
                conn.execute(f"DELETE FROM {table} WHERE session = ?", (sid,))
            if found:
                self._event(conn, now, sid, "deleted", {})
        return found

    # -- maintenance ------------------------------------------------------------------------
    def rebuild_indexes(self) -> dict:
        """SQLite's indexes are part of its tables; nothing drifts. Checks integrity instead."""
        (result,) = self._read("PRAGMA quick_check")[0]
        if result != "ok":
            raise StoreUnavailable(f"{self.url} failed its integrity check: {result}")
        return {}

    # -- retention --------------------------------------------------------------------------
    def purge_branches(self, before: float, now: float) -> dict:
        removed = {"branches": 0, "messages": 0, "steps": 0, "snapshots": 0, "kv_writes": 0}
        with self._write() as conn:
            rows = conn.execute(
                "SELECT session, id FROM branches WHERE created_at < ?", (before,)
            ).fetchall()
            for sid, branch in rows:
                for table in ("messages", "steps", "snapshots", "kv_writes"):
                    cur = conn.execute(
                        f"DELETE FROM {table} WHERE session = ? AND branch = ?", (sid, branch)
                    )
                    removed[table] += cur.rowcount
                conn.execute("DELETE FROM branches WHERE session = ? AND id = ?", (sid, branch))
                removed["branches"] += 1
            if rows:
                conn.execute(
                    "INSERT INTO audit(at, actor, action, session, snapshot, reason, detail) "
                    "VALUES (?, 'retention', 'retention', NULL, NULL, ?, ?)",
                    (now, "abandoned branches past their time limit",
                     _dumps({**removed, "branch_ids": [f"{s}/{b}" for s, b in rows][:100]})),
                )
                self._event(conn, now, None, "retention", removed)
        return removed
