"""`SQLiteStore.write_session`: an integration's multi-part write to one session (a LangGraph
checkpoint: mirrored messages, snapshot, documents) as one short transaction."""

from __future__ import annotations

import json
import sqlite3
from functools import lru_cache
from typing import Any

from engine.errors import RollbackConflict, UnknownSession
from engine.records import SnapshotNode
from engine.store.requests import Retention, SessionWrite, moved_message, stamped
from engine.store.sqlite.docs import doc_text
from engine.store.sqlite.rows import create_session, dumps, set_meta
from engine.store.sqlite.snapshots import insert_snapshot
from engine.store.sqlite.tx import SQLiteDB

ACTIVITY_GRAIN_S = 1.0
"""A step (and an integration's multi-part write, a LangGraph checkpoint) moves its session's
``updated_at`` only when the last move is this old (status changes,
verdicts, rollbacks and late steps always move it). ``updated_at`` keys two paging indexes: moving
it twice per step rewrote four index entries each step; at this grain a busy session rewrites
them about once a second, and last activity stays exact to within a second."""

_WRITE_SESSION = (
    "SELECT seq, epoch, msg_count, step_count, head, meta, updated_at FROM sessions WHERE id = ?"
)
"""What `SQLiteStore.write_session` reads of the session's row, once, inside its transaction."""
_WRITE_SESSION_ROW = "UPDATE sessions SET seq = ?, msg_count = ?, head = ? WHERE id = ?"
_WRITE_SESSION_TOUCH = _WRITE_SESSION_ROW.replace(" WHERE", ", updated_at = ? WHERE")


def _newest_manual(conn: sqlite3.Connection, sid: str) -> str | None:
    """The id of the session's newest manual snapshot on the live line (step snapshots taken
    since do not count), None when it has none."""
    row = conn.execute(
        "SELECT id FROM snapshots INDEXED BY snapshots_seq WHERE session = ? AND kind = 'manual' "
        "AND branch IS NULL ORDER BY seq DESC LIMIT 1", (sid,)).fetchone()
    return row[0] if row else None


_ROWS_PER_INSERT = 200
"""Rows one multi-row INSERT writes at most (4 or 5 parameters each: under the 999 bound
parameters of older SQLite builds)."""


@lru_cache(maxsize=64)
def _insert_sql(head: str, width: int, count: int) -> str:
    row = "(" + ", ".join("?" * width) + ")"
    return f"{head} VALUES {', '.join([row] * count)}"


def _insert(conn: sqlite3.Connection, head: str, rows: list[tuple[Any, ...]]) -> None:
    """`head` (``INSERT … INTO table(columns)``) with every row of `rows` in one statement (a
    chunk of `_ROWS_PER_INSERT` at a time): one run of the statement, not one per row."""
    width = len(rows[0])
    for at in range(0, len(rows), _ROWS_PER_INSERT):
        chunk = rows[at:at + _ROWS_PER_INSERT]
        conn.execute(_insert_sql(head, width, len(chunk)),
                     [value for row in chunk for value in row])


def _put_rows(conn: sqlite3.Connection, table: str, sid: str, ns: str,
              texts: list[tuple[str, Any]]) -> None:
    """Set the current values of `table` (kv or docs) in two statements at most: the rows to
    write, and the keys to delete (value None)."""
    rows = [(sid, ns, key, text) for key, text in texts if text is not None]
    if rows:
        _insert(conn, f"INSERT OR REPLACE INTO {table}(session, ns, key, value)", rows)
    gone = [(sid, ns, key) for key, text in texts if text is None]
    if gone:
        conn.executemany(f"DELETE FROM {table} WHERE session = ? AND ns = ? AND key = ?", gone)


class SessionWrites:
    """The multi-part write of `SQLiteStore`.

    Args:
        db: the store's database.
    """

    def __init__(self, db: SQLiteDB) -> None:
        self._db = db

    def write_session(
        self, sid: str, write: SessionWrite, now: float, retention: Retention
    ) -> tuple[int, SnapshotNode | None]:
        """Messages, versioned values, a snapshot and documents in one transaction.

        The rows each part's own method writes, with the same sequence numbers and feed
        events, but the session's row read once and written once, and each table's rows in one
        statement: a LangGraph checkpoint (its messages, snapshot, documents) is
        one short transaction, near what a plain checkpointer's insert costs."""
        create = write.get("create")
        with self._db.write() as conn:
            events: list[tuple[float, str, str, str]] = []
            row = conn.execute(_WRITE_SESSION, (sid,)).fetchone()
            expect = write.get("expect")
            if expect is not None:  # before anything is written (a new session is at None, 0)
                at = (None, 0) if row is None else (row[4], row[1])
                if at[1] != expect[1] or (at[0] != expect[0] and _newest_manual(
                        conn, sid) != expect[0]):
                    raise RollbackConflict(moved_message(sid, at))
            if row is None:
                if create is None:
                    raise UnknownSession(f"no session {sid!r} in this store")
                create_session(conn, sid, create, now)
                events.append((now, sid, "session", dumps({"meta": create})))
                seq, epoch, msg_count, step_count, head, updated_at = 0, 0, 0, 0, None, now
            else:
                seq, epoch, msg_count, step_count, head, meta_text, updated_at = row
                if create:
                    meta = json.loads(meta_text)
                    merged = {**meta, **create}
                    if merged != meta:
                        set_meta(conn, sid, merged)
            messages = write.get("messages") or []
            if write.get("messages_if_empty") and msg_count:
                messages = []
            if messages:
                _insert(conn, "INSERT INTO messages(session, seq, pos, body, created_at)",
                        [(sid, seq + i + 1, msg_count + i, dumps(m), now)
                         for i, m in enumerate(messages)])
                events.append((now, sid, "message", dumps(
                    {"count": len(messages), "pos": msg_count,
                     "roles": [m["role"] for m in messages]})))
                seq += len(messages)
                msg_count += len(messages)
            for ns, items in (write.get("values") or {}).items():
                seq += 1
                texts = [(key, None if value is None else dumps(value))
                         for key, value in items.items()]
                if texts:
                    _insert(conn, "INSERT INTO kv_writes(session, seq, ns, key, value)",
                            [(sid, seq, ns, key, text) for key, text in texts])
                _put_rows(conn, "kv", sid, ns, texts)
                events.append((now, sid, ns, dumps(
                    {"keys": sorted(items)[:20], "count": len(items)})))
            node = None
            label = write.get("snapshot")
            if label is not None:
                node = insert_snapshot(conn, sid, (seq, epoch, msg_count, step_count, head),
                                       label, "manual", now, retention)
                seq, head = seq + 1, node.id
                events.append((now, sid, "snapshot", dumps(
                    {"id": node.id, "label": label, "kind": "manual"})))
            for ns, docs in stamped(write, epoch, node).items():
                _put_rows(conn, "docs", sid, ns, [
                    (key, None if value is None else doc_text(value))
                    for key, value in docs.items()])
            if now - updated_at >= ACTIVITY_GRAIN_S:
                conn.execute(_WRITE_SESSION_TOUCH, (seq, msg_count, head, now, sid))
            else:  # as a step: the paging indexes on updated_at move about once a second
                conn.execute(_WRITE_SESSION_ROW, (seq, msg_count, head, sid))
            if events:
                _insert(conn, "INSERT INTO events(at, session, type, data)", events)
        return epoch, node
