"""Rollbacks on SQLite: moving the live line back to a snapshot, the abandoned branches this
leaves behind, and their removal by retention."""

from __future__ import annotations

import sqlite3

from engine.errors import (
    NothingToRollBack,
    RollbackConflict,
    SnapshotNotRestorable,
    UnknownSnapshot,
)
from engine.records import BranchInfo, RollbackResult
from engine.store.requests import RollbackRequest, snapshot_seq
from engine.store.sqlite.rows import (
    BRANCH,
    add_audit,
    add_event,
    add_retention,
    append_live,
    detach_snapshot,
    put_value,
    session_row,
    step_at_seq,
)
from engine.store.sqlite.saga import queue_compensations
from engine.store.sqlite.tx import SQLiteDB

_LINE_TABLES = ("messages", "steps", "snapshots", "kv_writes")
"""Tables whose rows are written on the live line and move to a branch on rollback."""


_STEPS_AFTER = "n >= ?"
"""The steps written after a snapshot: those from its ``next_step`` on. Step numbers and
sequence numbers grow together (a snapshot records the step count it saw; every later step has
a larger number and a larger sequence number), so this reaches them through the primary key;
``steps`` has no index on ``seq`` (see `engine.store.sqlite.rows.step_at_seq`)."""


def _written_after(conn: sqlite3.Connection, sid: str, seq: int, next_step: int) -> bool:
    """Whether anything on the live line was written after sequence number `seq` (the steps
    after it are those from `next_step` on, `_STEPS_AFTER`)."""
    return any(
        conn.execute(
            f"SELECT 1 FROM {table} WHERE session = ? AND "
            f"{_STEPS_AFTER if table == 'steps' else 'seq > ?'} AND branch IS NULL LIMIT 1",
            (sid, next_step if table == "steps" else seq),
        ).fetchone()
        for table in _LINE_TABLES
    )


def _restore_kv(conn: sqlite3.Connection, sid: str, snap_seq: int, branch: str) -> int:
    """Abandon the versioned writes after `snap_seq` and restore each affected key to its
    value at that point. Returns how many memories left the live line."""
    affected = conn.execute(
        "SELECT DISTINCT ns, key FROM kv_writes WHERE session = ? AND seq > ? AND branch IS NULL",
        (sid, snap_seq),
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
        put_value(conn, "kv", sid, ns, key, None if row is None else row[0])
        if ns == "mem" and row is None:
            abandoned_memories += 1
    return abandoned_memories


def _embedded_snapshot(
    conn: sqlite3.Connection, sid: str, target: str
) -> tuple[int, int, str | None, None, str, int] | None:
    """(seq, msg_count, branch, retired_at, kind, next_step) of write-ahead snapshot `target`
    kept in its step's row (id ``snap-<seq>``, the step's sequence number one more), or None."""
    seq = snapshot_seq(target)
    if seq is None:
        return None
    n = step_at_seq(lambda sql, params: conn.execute(sql, params).fetchall(), sid, seq + 1)
    if n is None:
        return None
    row = conn.execute(
        "SELECT seq - 1, snap_msgs, branch, n FROM steps WHERE session = ? AND n = ? "
        "AND snapshot = ? AND snap_msgs IS NOT NULL",
        (sid, n, target),
    ).fetchone()
    if row is None:
        return None
    return row[0], row[1], row[2], None, "step", row[3]


class BranchLine:
    """The rollback and branch methods of `SQLiteStore`.

    Args:
        db: the store's database.
    """

    def __init__(self, db: SQLiteDB) -> None:
        self._db = db

    def branches(self, sid: str) -> list[BranchInfo]:
        """Every abandoned branch, oldest first."""
        rows = self._db.read_named(
            f"SELECT {BRANCH.select()} FROM branches WHERE session = ? ORDER BY seq", (sid,)
        )
        return [BRANCH.decode(r) for r in rows]

    def rollback(self, sid: str, request: RollbackRequest) -> RollbackResult:
        """Make snapshot `request.target` the head, abandon what came after, queue
        compensations."""
        target, actor, reason, now = request.target, request.actor, request.reason, request.now
        notice, expect_epoch, kind, batch = (
            request.notice, request.expect_epoch, request.kind, request.batch
        )
        with self._db.write() as conn:
            seq, epoch, _msgs, _steps, _head = session_row(conn, sid)
            if expect_epoch is not None and epoch != expect_epoch:
                raise RollbackConflict(
                    f"session {sid!r} was rolled back by someone else (epoch is now {epoch}); "
                    "look at it again before rolling back"
                )
            snap = conn.execute(
                "SELECT seq, msg_count, branch, retired_at, kind, next_step FROM snapshots "
                "WHERE session = ? AND id = ?",
                (sid, target),
            ).fetchone()
            embedded = snap is None
            if embedded:
                snap = _embedded_snapshot(conn, sid, target)
            if snap is None:
                raise UnknownSnapshot(f"session {sid!r} has no snapshot {target!r}")
            snap_seq, snap_msgs, snap_branch, retired, snap_kind, next_step = snap
            if retired is None and snap_kind == "step":
                (floor,) = conn.execute(
                    "SELECT snap_floor FROM sessions WHERE id = ?", (sid,)
                ).fetchone()
                retired = True if next_step <= floor else None
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
            if kind == "rollback" and not _written_after(conn, sid, snap_seq, next_step):
                raise NothingToRollBack(
                    f"session {sid!r} has nothing after snapshot {target!r} to roll back: no "
                    "message, step, snapshot, variable or memory was written since; pick an "
                    "earlier snapshot"
                )
            if embedded:  # its step leaves the live line, the snapshot stays on it
                detach_snapshot(conn, sid, next_step, now)
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
                after = _STEPS_AFTER if table == "steps" else "seq > ?"
                cur = conn.execute(
                    f"UPDATE {table} SET branch = ? WHERE session = ? AND {after} "
                    "AND branch IS NULL",
                    (branch, sid, next_step if table == "steps" else snap_seq),
                )
                counts[table] = cur.rowcount
            # the write-ahead snapshots kept in the abandoned steps' rows left with them
            counts["snapshots"] += conn.execute(
                f"SELECT COUNT(*) FROM steps WHERE session = ? AND {_STEPS_AFTER} "
                "AND branch = ? AND snap_msgs IS NOT NULL",
                (sid, next_step, branch),
            ).fetchone()[0]
            abandoned_memories = _restore_kv(conn, sid, snap_seq, branch)
            # Saga: side-effecting steps that completed on the abandoned branch, newest first.
            # The step numbers reach the branch's steps through the primary key: the branch
            # alone has no index and would walk every step of the session.
            comp_rows = conn.execute(
                f"SELECT n, compensation FROM steps WHERE session = ? AND {_STEPS_AFTER} "
                "AND branch = ? AND side_effect = 1 AND compensation IS NOT NULL "
                "AND status = 'ok' ORDER BY n DESC",
                (sid, next_step, branch),
            ).fetchall()
            queued = queue_compensations(conn, sid, comp_rows, branch, now)
            fork = kind == "fork"  # a fork moves the line but is no recovery: status stays
            conn.execute(
                "UPDATE sessions SET seq = ?, epoch = ?, head = ?, msg_count = ?, "
                # a stopped session stays stopped: a rollback repairs it, it does not restart it
                "status = CASE WHEN ? OR status = 'stopped' THEN status ELSE 'rolled_back' END, "
                "rollbacks = rollbacks + CASE WHEN ? THEN 0 ELSE 1 END, "
                "loop_open = loop_open AND ?, updated_at = ? WHERE id = ?",  # a rollback ends it
                (seq, new_epoch, target, snap_msgs, fork, fork, fork, now, sid),
            )
            notice_text = None
            if notice is not None:
                append_live(conn, sid, [notice], now)
                notice_text = notice.get("content")
            detail = {
                "branch": branch,
                "epoch": new_epoch,
                "messages": counts["messages"],
                "steps": counts["steps"],
                "snapshots": counts["snapshots"],
                "compensations": [c.name for c in queued],
                "notice": notice_text,
            }
            if batch:
                detail["batch"] = batch
            action = "fork" if fork else "rollback"
            add_audit(conn, now, actor, action, sid, target, reason, detail)
            add_event(conn, now, sid, action, {"target": target, "actor": actor, **detail})
            if notice_text is not None:
                said = {"text": notice_text, **({"batch": batch} if batch else {})}
                add_audit(conn, now, actor, "notice", sid, target, reason, said)
        return RollbackResult(
            session=sid,
            target=target,
            branch=branch,
            epoch=new_epoch,
            actor=actor,
            reason=reason,
            at=now,
            abandoned_messages=counts["messages"],
            abandoned_steps=counts["steps"],
            abandoned_snapshots=counts["snapshots"],
            abandoned_memories=abandoned_memories,
            compensations=tuple(queued),
            notice=notice_text,
        )

    def purge_branches(self, before: float, now: float, *, dry_run: bool = False) -> dict[str, int]:
        """Delete abandoned branches created before `before`; returns counts of what went (with
        `dry_run`, of what would go, removing and auditing nothing)."""
        removed = dict.fromkeys(("branches", *_LINE_TABLES), 0)
        with self._db.write() as conn:
            rows = conn.execute(
                "SELECT session, id FROM branches WHERE created_at < ? ORDER BY created_at, seq",
                (before,),
            ).fetchall()
            verb = "SELECT COUNT(*)" if dry_run else "DELETE"
            for sid, branch in rows:
                # a step row's write-ahead snapshot always shares the row's branch
                removed["snapshots"] += conn.execute(
                    "SELECT COUNT(*) FROM steps WHERE session = ? AND branch = ? "
                    "AND snap_msgs IS NOT NULL",
                    (sid, branch),
                ).fetchone()[0]
                for table in _LINE_TABLES:
                    cur = conn.execute(
                        f"{verb} FROM {table} WHERE session = ? AND branch = ?", (sid, branch)
                    )
                    removed[table] += cur.fetchone()[0] if dry_run else cur.rowcount
                if not dry_run:
                    conn.execute("DELETE FROM branches WHERE session = ? AND id = ?", (sid, branch))
                removed["branches"] += 1
            if rows and not dry_run:
                reason = "abandoned branches past their time limit"
                add_retention(
                    conn, now, reason, removed, ("branch_ids", [f"{s}/{b}" for s, b in rows])
                )
        return removed
