"""Snapshots on SQLite: taking one (and retiring what falls out of the retention window), and
reading the whole tree, one snapshot by id, and the newest restorable one.

Snapshots live in two places: the rows of ``snapshots`` (manual snapshots, and step snapshots
moved there by a rollback or a late step, or written by an older release), and the write-ahead
snapshots kept in their steps' rows (``EMBEDDED_SNAPSHOT``). Reading one snapshot or the newest
restorable one costs the same at any history length; only `SnapshotReads.snapshots` reads them
all.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from engine.records import BranchInfo, SnapshotNode
from engine.store.requests import Retention, snapshot_seq
from engine.store.sqlite.rows import BRANCH, EMBEDDED_SNAPSHOT, SNAPSHOT, step_at_seq
from engine.store.sqlite.tx import SQLiteDB
from engine.types import SnapshotKind

_COLUMNS = f"{SNAPSHOT.select()}, retired_at, seq"


def insert_snapshot(
    conn: sqlite3.Connection,
    sid: str,
    row: tuple[int, int, int, int, str | None],
    label: str | None,
    kind: SnapshotKind,
    now: float,
    retention: Retention,
) -> SnapshotNode:
    """Insert a snapshot at sequence number ``seq + 1`` of the session row `row` and retire
    what falls out of its window; the caller moves the session's seq and head."""
    seq, _epoch, msg_count, step_count, head = row
    seq += 1
    snap_id = f"snap-{seq}"
    conn.execute(
        "INSERT INTO snapshots(session, id, parent, label, kind, seq, msg_count, next_step, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (sid, snap_id, head, label, kind, seq, msg_count, step_count + 1, now),
    )
    if kind == "step" or seq > retention.keep_snapshots:
        # A session's snapshots each took a sequence number of their own (numbers only
        # grow, and go with the session when it is deleted), so while the newest number is
        # within the window there cannot be more snapshots than it keeps: a short thread's
        # checkpoint pays nothing for retention.
        retire(conn, sid, kind, step_count + 1, now, retention)
    return SnapshotNode(
        id=snap_id,
        parent=head,
        label=label,
        created_at=now,
        on_live_line=True,
        abandoned_reason=None,
        kind=kind,
        restorable=True,
        next_step=step_count + 1,
        messages=msg_count,
        is_head=True,
    )


def retire(
    conn: sqlite3.Connection,
    sid: str,
    kind: SnapshotKind,
    next_step: int,
    now: float,
    retention: Retention,
) -> None:
    """Retire the snapshots of `kind` that fall out of the retention window."""
    if kind == "step":
        # Step snapshots are retired by a floor on their step number (`snap_floor`): one
        # column of the session's row instead of a row update per step.
        conn.execute(
            "UPDATE sessions SET snap_floor = max(snap_floor, ?) WHERE id = ?",
            (next_step - retention.keep_step_snapshots, sid),
        )
        return
    # INDEXED BY: the partial index holds only the restorable snapshots (at most the window
    # plus one), so retiring costs the window, not the session's history; left to itself
    # the planner walks every snapshot row of the session.
    conn.execute(
        "UPDATE snapshots INDEXED BY snapshots_restorable SET retired_at = ? "
        "WHERE session = ? AND kind = ? "
        "AND branch IS NULL AND retired_at IS NULL AND seq < ("
        "  SELECT MIN(seq) FROM (SELECT seq FROM snapshots WHERE session = ? AND kind = ?"
        "  AND branch IS NULL AND retired_at IS NULL ORDER BY seq DESC LIMIT ?))",
        (now, sid, kind, sid, kind, retention.keep_snapshots),
    )


class SnapshotReads:
    """The snapshot reads of `SQLiteStore`.

    Args:
        db: the store's database.
        embedded: whether the file keeps write-ahead snapshots in their steps' rows (False on
            a read-only file of an older schema: every snapshot is a row of ``snapshots``).
    """

    def __init__(self, db: SQLiteDB, *, embedded: bool = True) -> None:
        self._db = db
        self._embedded = embedded

    def _head_and_floor(self, sid: str) -> tuple[str | None, int]:
        """The session's head and its ``snap_floor``: step snapshots with ``next_step`` at or
        below the floor are retired (0 on a read-only file of an older schema)."""
        floor = ", snap_floor" if self._embedded else ", 0"
        rows = self._db.read(f"SELECT head{floor} FROM sessions WHERE id = ?", (sid,))
        return (rows[0][0], int(rows[0][1])) if rows else (None, 0)

    @staticmethod
    def _node(r: sqlite3.Row, branch: BranchInfo | None, floor: int,
              head: str | None) -> SnapshotNode:
        return SNAPSHOT.decode(
            r,
            abandoned_reason=branch.why if branch is not None else None,
            restorable=r["branch"] is None and r["retired_at"] is None
            and not (r["kind"] == "step" and r["next_step"] <= floor),
            is_head=r["id"] == head,
        )

    def snapshots(self, sid: str) -> list[SnapshotNode]:
        """Every snapshot of the session, oldest first: the rows of ``snapshots`` and the
        write-ahead snapshots kept in their steps' rows."""
        head, floor = self._head_and_floor(sid)
        branches = {r["id"]: BRANCH.decode(r) for r in self._db.read_named(
            f"SELECT {BRANCH.select()} FROM branches WHERE session = ?", (sid,))}
        sql = f"SELECT {_COLUMNS} FROM snapshots WHERE session = ?"
        params: tuple[Any, ...] = (sid,)
        if self._embedded:
            sql += f" UNION ALL SELECT {EMBEDDED_SNAPSHOT} FROM steps WHERE session = ? " \
                   "AND snap_msgs IS NOT NULL"
            params = (sid, sid)
        rows = self._db.read_named(sql + " ORDER BY seq", params)
        return [self._node(r, branches.get(r["branch"]), floor, head) for r in rows]

    def snapshot(self, sid: str, snapshot_id: str) -> SnapshotNode | None:
        """Snapshot `snapshot_id` of the session, or None: a primary-key lookup in
        ``snapshots``, else in the step row whose sequence number follows the id's (found by
        `step_at_seq`)."""
        rows = self._db.read_named(
            f"SELECT {_COLUMNS} FROM snapshots WHERE session = ? AND id = ?", (sid, snapshot_id)
        )
        seq = snapshot_seq(snapshot_id)
        if not rows and self._embedded and seq is not None:
            n = step_at_seq(self._db.read, sid, seq + 1)
            if n is not None:
                rows = self._db.read_named(
                    f"SELECT {EMBEDDED_SNAPSHOT} FROM steps "
                    "WHERE session = ? AND n = ? AND snapshot = ? AND snap_msgs IS NOT NULL",
                    (sid, n, snapshot_id),
                )
        if not rows:
            return None
        head, floor = self._head_and_floor(sid)
        branch = None
        if rows[0]["branch"] is not None:
            found = self._db.read_named(
                f"SELECT {BRANCH.select()} FROM branches WHERE session = ? AND id = ?",
                (sid, rows[0]["branch"]),
            )
            branch = BRANCH.decode(found[0]) if found else None
        return self._node(rows[0], branch, floor, head)

    def restorable_snapshot(self, sid: str, before_step: int | None) -> str | None:
        """Newest restorable live snapshot taken before step `before_step` began, or None."""
        before = before_step if before_step is not None else 2**62
        _head, floor = self._head_and_floor(sid)
        read = self._db.read
        candidates = read(  # each kind has its own retention window
            "SELECT id, seq FROM snapshots WHERE session = ? AND kind = 'manual' "
            "AND branch IS NULL AND retired_at IS NULL AND next_step <= ? "
            "ORDER BY seq DESC LIMIT 1",
            (sid, before),
        )
        candidates += read(
            "SELECT id, seq FROM snapshots WHERE session = ? AND kind = 'step' "
            "AND branch IS NULL AND retired_at IS NULL AND next_step > ? AND next_step <= ? "
            "ORDER BY seq DESC LIMIT 1",
            (sid, floor, before),
        )
        if self._embedded:
            # A step's snapshot has next_step = n: the retention window bounds the walk.
            candidates += read(
                "SELECT snapshot, seq - 1 FROM steps WHERE session = ? AND n > ? AND n <= ? "
                "AND branch IS NULL AND snap_msgs IS NOT NULL ORDER BY n DESC LIMIT 1",
                (sid, floor, before),
            )
        best = max(candidates, key=lambda r: r[1], default=None)
        return best[0] if best else None
