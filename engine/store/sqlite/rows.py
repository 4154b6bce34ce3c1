"""From SQLite rows to typed records and back: JSON columns, the record builders, the one WHERE
builder of the fleet queries, and the audit and feed writes every state change shares."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from typing import Any, cast

from engine.errors import UnknownSession
from engine.records import AuditEvent, Compensation, SessionInfo, StepRecord
from engine.types import (
    CompensationStatus,
    SessionStatus,
    StepStatus,
    StoredVerdict,
    TokenBreakdown,
)


def dumps(value: Any) -> str:
    """Compact, key-sorted JSON text (the form stored in every JSON column)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def loads(text: str | None) -> Any:
    """The value of a nullable JSON column."""
    return None if text is None else json.loads(text)


def where(
    equals: Mapping[str, object], since: tuple[str, float | None] | None = None
) -> tuple[str, list[object]]:
    """`` WHERE …`` ('' when no filter is given) and its parameters.

    Args:
        equals: column -> value it must equal; None values are no filter.
        since: (column, time): the column must be at or after the time; None time, no filter.
    """
    clauses: list[str] = []
    params: list[object] = []
    for column, value in equals.items():
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    if since is not None and since[1] is not None:
        clauses.append(f"{since[0]} >= ?")
        params.append(since[1])
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def add_audit(
    conn: sqlite3.Connection,
    now: float,
    actor: str,
    action: str,
    session: str | None,
    snapshot: str | None,
    reason: str | None,
    detail: Mapping[str, Any],
) -> None:
    """Append one audit row inside the caller's transaction."""
    conn.execute(
        "INSERT INTO audit(at, actor, action, session, snapshot, reason, detail) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        (now, actor, action, session, snapshot, reason, dumps(detail)),
    )


def add_event(
    conn: sqlite3.Connection, now: float, sid: str | None, kind: str, data: Mapping[str, Any]
) -> None:
    """Append one feed event inside the caller's transaction."""
    conn.execute(
        "INSERT INTO events(at, session, type, data) VALUES (?, ?, ?, ?)",
        (now, sid, kind, dumps(data)),
    )


def add_retention(
    conn: sqlite3.Connection,
    now: float,
    reason: str,
    counts: Mapping[str, int],
    removed: tuple[str, list[str]],
) -> None:
    """Audit (actor and action ``retention``) and announce what a purge removed.

    Args:
        counts: how many of each kind went (audit detail and feed event).
        removed: (detail key, ids): every id removed, listed in the audit detail.
    """
    add_audit(
        conn, now, "retention", "retention", None, None, reason, {**counts, removed[0]: removed[1]}
    )
    add_event(conn, now, None, "retention", counts)


SESSION_COLS = (
    "id, meta, status, head, epoch, created_at, updated_at, step_count, msg_count, loops, "
    "rollbacks, last_verdict"
)


def to_session(row: tuple[Any, ...]) -> SessionInfo:
    """A `SessionInfo` from a row of `SESSION_COLS`."""
    return SessionInfo(
        id=row[0],
        meta=json.loads(row[1]),
        status=SessionStatus(row[2]),
        head=row[3],
        epoch=row[4],
        created_at=row[5],
        updated_at=row[6],
        steps=row[7],
        messages=row[8],
        loops=row[9],
        rollbacks=row[10],
        last_verdict=cast(StoredVerdict | None, loads(row[11])),
    )


STEP_COLS = (
    "n, tool, args, fingerprint, status, error, result_digest, result_preview, started_at, "
    "ended_at, side_effect, compensation, verdict, branch, late, snapshot, text, epoch, budget"
)


def to_step(r: tuple[Any, ...]) -> StepRecord:
    """A `StepRecord` from a row of `STEP_COLS`."""
    comp = loads(r[11])
    return StepRecord(
        n=r[0],
        tool=r[1],
        args=json.loads(r[2]),
        fingerprint=r[3],
        status=StepStatus(r[4]),
        error=r[5],
        result_digest=r[6],
        result_preview=r[7],
        started_at=r[8],
        ended_at=r[9],
        side_effect=bool(r[10]),
        compensation=(comp[0], comp[1]) if comp else None,  # stored as [name, args]
        verdict=cast(StoredVerdict | None, loads(r[12])),
        on_live_line=r[13] is None,
        branch=r[13],
        late=bool(r[14]),
        snapshot=r[15],
        text=r[16],
        epoch=r[17],
        budget=cast(TokenBreakdown | None, loads(r[18])),
    )


COMP_COLS = (
    "id, session, step, name, args, idem_key, status, attempts, error, created_at, "
    "updated_at, branch, resolved_by, resolved_reason"
)


def to_compensation(r: tuple[Any, ...]) -> Compensation:
    """A `Compensation` from a row of `COMP_COLS`."""
    return Compensation(
        id=r[0],
        session=r[1],
        step=r[2],
        name=r[3],
        args=json.loads(r[4]),
        idempotency_key=r[5],
        status=CompensationStatus(r[6]),
        attempts=r[7],
        error=r[8],
        created_at=r[9],
        updated_at=r[10],
        branch=r[11],
        resolved_by=r[12],
        resolved_reason=r[13],
    )


AUDIT_COLS = "id, at, actor, action, session, snapshot, reason, detail"


def to_audit(r: tuple[Any, ...]) -> AuditEvent:
    """An `AuditEvent` from a row of `AUDIT_COLS`."""
    return AuditEvent(
        id=r[0],
        at=r[1],
        actor=r[2],
        action=r[3],
        session=r[4],
        snapshot=r[5],
        reason=r[6],
        detail=json.loads(r[7]),
    )


SessionRow = tuple[int, int, int, int, str | None]
"""seq, epoch, msg_count, step_count, head of a session."""


def session_row(conn: sqlite3.Connection, sid: str) -> SessionRow:
    """The session's (seq, epoch, msg_count, step_count, head), read inside a transaction.

    Raises:
        UnknownSession: no such session.
    """
    row = conn.execute(
        "SELECT seq, epoch, msg_count, step_count, head FROM sessions WHERE id = ?", (sid,)
    ).fetchone()
    if row is None:
        raise UnknownSession(f"no session {sid!r} in this store")
    return row


def put_value(
    conn: sqlite3.Connection, table: str, sid: str, ns: str, key: str, text: str | None
) -> None:
    """Set (or, for None, delete) one current value of `table` (kv or docs)."""
    if text is None:
        conn.execute(
            f"DELETE FROM {table} WHERE session = ? AND ns = ? AND key = ?", (sid, ns, key)
        )
    else:
        conn.execute(
            f"INSERT OR REPLACE INTO {table}(session, ns, key, value) VALUES (?, ?, ?, ?)",
            (sid, ns, key, text),
        )


def append_live(
    conn: sqlite3.Connection, sid: str, messages: list[dict[str, Any]], now: float
) -> tuple[int, int]:
    """Append to the live line; returns (epoch, position of the first new message)."""
    seq, epoch, msg_count, _, _ = session_row(conn, sid)
    conn.executemany(
        "INSERT INTO messages(session, seq, pos, body, created_at) VALUES (?, ?, ?, ?, ?)",
        [(sid, seq + i + 1, msg_count + i, dumps(m), now) for i, m in enumerate(messages)],
    )
    conn.execute(
        "UPDATE sessions SET seq = ?, msg_count = ?, updated_at = ? WHERE id = ?",
        (seq + len(messages), msg_count + len(messages), now, sid),
    )
    return epoch, msg_count
