"""Snapshot reads on SQLite: the whole tree, one snapshot by id, and the newest restorable one.

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
from engine.store.requests import snapshot_seq
from engine.store.sqlite.rows import BRANCH, EMBEDDED_SNAPSHOT, SNAPSHOT, step_at_seq
from engine.store.sqlite.tx import SQLiteDB

_COLUMNS = f"{SNAPSHOT.select()}, retired_at, seq"


class SnapshotReads:
    """The snapshot reads of `SQLiteStore` (a mixin: it uses the store's database)."""

    _db: SQLiteDB
    _embedded: bool

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
