"""From SQLite rows to typed records and back: JSON columns, one column-to-field map per record
(rows are read by column name), the one WHERE builder of the fleet queries, and the audit and
feed writes every state change shares."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from engine.errors import UnknownSession
from engine.records import (
    AuditEvent,
    BranchInfo,
    Compensation,
    CompensationWorker,
    Event,
    MessageRecord,
    ReplayStep,
    SessionInfo,
    SnapshotNode,
    StepRecord,
)
from engine.store.fieldmap import Column, FieldMap
from engine.types import CompensationStatus, SessionStatus, StepStatus, canonical_json

dumps = canonical_json
"""The form stored in every JSON column."""


def loads(text: str | None) -> Any:
    """The value of a nullable JSON column."""
    return None if text is None else json.loads(text)


_DECODER = json.JSONDecoder()


def json_value(text: str) -> Any:
    """`json.loads` of a JSON column this store wrote (`dumps`: nothing around the value), by
    the decoder's `raw_decode`, without `json.loads`' checks for other input (a step's
    arguments are read for every step a replay reads); any other text goes through
    `json.loads`, so it decodes or fails as it would have."""
    try:
        value, end = _DECODER.raw_decode(text)
    except ValueError:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


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


def named(cursor: sqlite3.Cursor) -> sqlite3.Cursor:
    """`cursor` with rows read by column name (`sqlite3.Row`), for the `FieldMap` decoders."""
    cursor.row_factory = sqlite3.Row
    return cursor


def _comp_pair(text: str | None) -> tuple[str, Any] | None:
    comp = loads(text)
    return (comp[0], comp[1]) if comp else None  # stored as [name, args]


def _is_none(value: Any) -> bool:
    return value is None


_STEP_STATUSES = {s.value: s for s in StepStatus}


def _step_status(text: str) -> StepStatus:
    """`StepStatus(text)` by a dict lookup (the enum's call costs a microsecond, a tenth of
    a step row's decoding); text that names no status still raises its ValueError."""
    status = _STEP_STATUSES.get(text)
    return StepStatus(text) if status is None else status


def _handlers(text: str) -> tuple[str, ...]:
    return tuple(json.loads(text))


SESSION: FieldMap[SessionInfo] = FieldMap(
    SessionInfo,
    Column("id", "id"),
    Column("meta", "meta", json.loads),
    Column("status", "status", SessionStatus),
    Column("head", "head"),
    Column("epoch", "epoch"),
    Column("created_at", "created_at"),
    Column("updated_at", "updated_at"),
    Column("step_count", "steps"),
    Column("msg_count", "messages"),
    Column("loops", "loops"),
    Column("rollbacks", "rollbacks"),
    Column("last_verdict", "last_verdict", loads),
)
"""A `sessions` row as a `SessionInfo`."""

STEP: FieldMap[StepRecord] = FieldMap(
    StepRecord,
    Column("n", "n"),
    Column("tool", "tool"),
    Column("args", "args", json_value),
    Column("fingerprint", "fingerprint"),
    Column("status", "status", _step_status),
    Column("error", "error"),
    Column("result_digest", "result_digest"),
    Column("result_preview", "result_preview"),
    Column("started_at", "started_at"),
    Column("ended_at", "ended_at"),
    Column("side_effect", "side_effect", bool),
    Column("compensation", "compensation", _comp_pair),
    Column("verdict", "verdict", loads),
    Column("branch", "branch"),
    Column("branch", "on_live_line", _is_none),
    Column("late", "late", bool),
    Column("snapshot", "snapshot"),
    Column("text", "text"),
    Column("epoch", "epoch"),
    Column("budget", "budget", loads),
    Column("task", "task", bool),
    Column("turn", "turn"),
)
"""A `steps` row as a `StepRecord`."""

REPLAY_STEP: FieldMap[ReplayStep] = FieldMap(
    ReplayStep, *(c for c in STEP.columns if c.field in ReplayStep._fields)
)
"""What a replay reads of a `steps` row."""

COMPENSATION: FieldMap[Compensation] = FieldMap(
    Compensation,
    Column("id", "id"),
    Column("session", "session"),
    Column("step", "step"),
    Column("name", "name"),
    Column("args", "args", json.loads),
    Column("idem_key", "idempotency_key"),
    Column("status", "status", CompensationStatus),
    Column("attempts", "attempts"),
    Column("error", "error"),
    Column("created_at", "created_at"),
    Column("updated_at", "updated_at"),
    Column("branch", "branch"),
    Column("resolved_by", "resolved_by"),
    Column("resolved_reason", "resolved_reason"),
    Column("lease_until", "lease_until"),
)
"""A `compensations` row as a `Compensation`."""

RESOLUTION_COLUMNS = frozenset({"resolved_by", "resolved_reason"})
"""Compensation columns a file of an older schema lacks."""

AUDIT: FieldMap[AuditEvent] = FieldMap(
    AuditEvent,
    Column("id", "id"),
    Column("at", "at"),
    Column("actor", "actor"),
    Column("action", "action"),
    Column("session", "session"),
    Column("snapshot", "snapshot"),
    Column("reason", "reason"),
    Column("detail", "detail", json.loads),
)
"""An `audit` row as an `AuditEvent`."""

EVENT: FieldMap[Event] = FieldMap(
    Event,
    Column("id", "id"),
    Column("at", "at"),
    Column("session", "session"),
    Column("type", "type"),
    Column("data", "data", json.loads),
)
"""An `events` row as an `Event`."""

MESSAGE: FieldMap[MessageRecord] = FieldMap(
    MessageRecord,
    Column("seq", "seq"),
    Column("pos", "pos"),
    Column("body", "message", json.loads),
    Column("branch", "branch"),
    Column("created_at", "created_at"),
)
"""A `messages` row as a `MessageRecord`."""

BRANCH: FieldMap[BranchInfo] = FieldMap(
    BranchInfo,
    Column("id", "id"),
    Column("from_snapshot", "from_snapshot"),
    Column("actor", "actor"),
    Column("reason", "reason"),
    Column("created_at", "created_at"),
    Column("epoch", "epoch"),
)
"""A `branches` row as a `BranchInfo`."""

WORKER: FieldMap[CompensationWorker] = FieldMap(
    CompensationWorker,
    Column("id", "id"),
    Column("handlers", "handlers", _handlers),
    Column("seen_at", "seen_at"),
)
"""A `workers` row as a `CompensationWorker`."""

SNAPSHOT: FieldMap[SnapshotNode] = FieldMap(
    SnapshotNode,
    Column("id", "id"),
    Column("parent", "parent"),
    Column("label", "label"),
    Column("kind", "kind"),
    Column("created_at", "created_at"),
    Column("next_step", "next_step"),
    Column("msg_count", "messages"),
    Column("branch", "branch"),
    Column("branch", "on_live_line", _is_none),
)
"""A `snapshots` row as a `SnapshotNode`, but for what the caller derives (is_head, restorable,
abandoned_reason)."""

EMBEDDED_SNAPSHOT = (
    "snapshot AS id, snap_parent AS parent, snap_label AS label, 'step' AS kind, "
    "started_at AS created_at, n AS next_step, snap_msgs AS msg_count, branch, "
    "NULL AS retired_at, seq - 1 AS seq"
)
"""The write-ahead snapshot kept in a `steps` row (``snap_msgs`` not NULL), under the column
names of `SNAPSHOT` plus ``retired_at`` and ``seq``: taken at the step's start, at the sequence
number right before the step's own, as the step's next step; on the step's line (a rollback to
it moves it into ``snapshots`` first, see `engine.store.sqlite.branches`)."""

SESSION_COLS = SESSION.select()
STEP_COLS = STEP.select()
COMP_COLS = COMPENSATION.select()
AUDIT_COLS = AUDIT.select()


def to_session(row: sqlite3.Row) -> SessionInfo:
    """A `SessionInfo` from a named row of `SESSION_COLS`."""
    return SESSION.decode(row)


def to_step(row: sqlite3.Row) -> StepRecord:
    """A `StepRecord` from a named row of `STEP_COLS`."""
    return STEP.decode(row)


def to_compensation(row: sqlite3.Row) -> Compensation:
    """A `Compensation` from a named row of `COMP_COLS` (other columns are ignored)."""
    return COMPENSATION.decode(row)


def to_audit(row: sqlite3.Row) -> AuditEvent:
    """An `AuditEvent` from a named row of `AUDIT_COLS`."""
    return AUDIT.decode(row)


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


def create_session(conn: sqlite3.Connection, sid: str, meta: dict[str, Any], now: float) -> None:
    """Insert session `sid`'s row, its facets kept beside the meta (each filter is one index)."""
    conn.execute(
        "INSERT INTO sessions(id, meta, tenant, scenario, prompt_version, created_at, "
        "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (sid, dumps(meta), meta.get("tenant"), meta.get("scenario"),
         meta.get("prompt_version"), now, now),
    )


def set_meta(conn: sqlite3.Connection, sid: str, meta: dict[str, Any]) -> None:
    """Replace session `sid`'s meta and its facet columns."""
    conn.execute(
        "UPDATE sessions SET meta = ?, tenant = ?, scenario = ?, prompt_version = ? "
        "WHERE id = ?",
        (dumps(meta), meta.get("tenant"), meta.get("scenario"), meta.get("prompt_version"),
         sid),
    )


_NEWEST_STEP = "SELECT n, seq FROM steps WHERE session = ? ORDER BY n DESC LIMIT 1"
_FIRST_STEP_IN = (
    "SELECT n, seq FROM steps WHERE session = ? AND n >= ? AND n <= ? ORDER BY n LIMIT 1"
)


def step_at_seq(
    query: Callable[[str, tuple[Any, ...]], list[Any]], sid: str, seq: int
) -> int | None:
    """The number of the session's step whose row has sequence number `seq`, or None (`query`
    runs one statement and returns its rows: inside a transaction or a read).

    Steps are found by number (the primary key), not by an index on ``seq``: a second index of
    ``steps`` was one more page written by every guarded step, for the few reads by sequence
    number (a write-ahead snapshot named by its id). Both numbers only grow along a session's
    steps (a step takes the next one or two sequence numbers, other writes take more), so step
    ``n`` has a sequence number of at least ``n``, and the step with `seq` lies at most
    ``newest seq - seq`` steps below the newest: a binary search between those bounds, each
    probe the first step at or after a number (rows of purged branches leave gaps), costs the
    logarithm of what was written after the step, whatever the history's length."""
    top = query(_NEWEST_STEP, (sid,))
    if not top:
        return None
    n, newest = top[0]
    if newest <= seq:
        return n if newest == seq else None
    lo, hi = 1, min(n - 1, seq)
    lo = max(lo, n - (newest - seq))
    while lo <= hi:
        mid = (lo + hi) // 2
        found = query(_FIRST_STEP_IN, (sid, mid, hi))
        if not found:
            hi = mid - 1
            continue
        at, at_seq = found[0]
        if at_seq == seq:
            return at
        if at_seq < seq:
            lo = at + 1
        else:
            hi = mid - 1
    return None


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


def detach_snapshot(conn: sqlite3.Connection, sid: str, n: int, now: float) -> None:
    """Move the write-ahead snapshot kept in live step `n`'s row (if any) into ``snapshots``,
    same id and sequence number, before the step alone leaves the live line (a rollback to that
    snapshot, or a late step): the snapshot stays on the live line, and a row's snapshot always
    shares its row's branch. Step snapshot rows the session's ``snap_floor`` passed are marked
    retired meanwhile, so the restorable index keeps holding about a retention window."""
    found = conn.execute(
        "INSERT INTO snapshots(session, id, parent, label, kind, seq, msg_count, next_step, "
        "created_at) SELECT session, snapshot, snap_parent, snap_label, 'step', seq - 1, "
        "snap_msgs, n, started_at FROM steps WHERE session = ? AND n = ? "
        "AND snap_msgs IS NOT NULL AND branch IS NULL",
        (sid, n),
    ).rowcount
    if found:
        conn.execute(
            "UPDATE steps SET snap_label = NULL, snap_parent = NULL, snap_msgs = NULL "
            "WHERE session = ? AND n = ?",
            (sid, n),
        )
        conn.execute(
            "UPDATE snapshots INDEXED BY snapshots_restorable SET retired_at = ? "
            "WHERE session = ? AND kind = 'step' AND branch IS NULL AND retired_at IS NULL "
            "AND next_step <= (SELECT snap_floor FROM sessions WHERE id = ?)",
            (now, sid, sid),
        )
