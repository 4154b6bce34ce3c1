"""The saga outbox on SQLite: queueing compensations when steps leave the live line, and the
workers' claim/finish cycle under leases."""

from __future__ import annotations

import dataclasses
import json
import sqlite3

from engine.records import Compensation
from engine.store.sqlite.rows import COMP_COLS, add_audit, add_event, dumps, to_compensation, where
from engine.store.sqlite.tx import SQLiteDB
from engine.types import CompensationStatus


def queue_compensations(
    conn: sqlite3.Connection,
    sid: str,
    rows: list[tuple[int, str]],
    branch: str | None,
    now: float,
) -> list[Compensation]:
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
            (sid, n, name, dumps(args), key, branch, now, now),
        )
        if cur.rowcount and cur.lastrowid is not None:
            queued.append(
                Compensation(
                    id=cur.lastrowid,
                    session=sid,
                    step=n,
                    name=name,
                    args=args,
                    idempotency_key=key,
                    status=CompensationStatus.PENDING,
                    attempts=0,
                    error=None,
                    created_at=now,
                    updated_at=now,
                    branch=branch,
                )
            )
    return queued


class SagaOutbox:
    """The compensation methods of `SQLiteStore`."""

    _db: SQLiteDB

    def compensations(
        self,
        *,
        session: str | None = None,
        status: CompensationStatus | None = None,
        limit: int = 1000,
    ) -> list[Compensation]:
        """Compensations matching every given filter, newest first."""
        clause, params = where({"session": session, "status": status})
        rows = self._db.read(
            f"SELECT {COMP_COLS} FROM compensations{clause} ORDER BY id DESC LIMIT ?",
            (*params, limit),
        )
        return [to_compensation(r) for r in rows]

    def count_compensations(self, status: CompensationStatus) -> int:
        """How many compensations have `status`."""
        clause, params = where({"status": status})
        return int(self._db.read(f"SELECT COUNT(*) FROM compensations{clause}", params)[0][0])

    def claim_compensation(
        self, names: list[str], owner: str, lease_s: float, now: float
    ) -> Compensation | None:
        """Atomically take the oldest pending (or lease-expired) compensation of `names`."""
        if not names:
            return None
        marks = ",".join("?" * len(names))
        with self._db.write() as conn:
            row = conn.execute(
                f"SELECT {COMP_COLS} FROM compensations WHERE name IN ({marks}) AND "
                "(status = 'pending' OR (status = 'running' AND lease_until < ?)) "
                "ORDER BY id LIMIT 1",
                (*names, now),
            ).fetchone()
            if row is None:
                return None
            conn.execute(
                "UPDATE compensations SET status = 'running', owner = ?, lease_until = ?, "
                "attempts = attempts + 1, updated_at = ? WHERE id = ?",
                (owner, now + lease_s, now, row[0]),
            )
        comp = to_compensation(row)
        return dataclasses.replace(
            comp, status=CompensationStatus.RUNNING, attempts=comp.attempts + 1
        )

    def finish_compensation(
        self, cid: int, owner: str, ok: bool, error: str | None, now: float, final: bool
    ) -> None:
        """Mark a claimed compensation done, or failed (pending again unless `final`)."""
        if ok:
            status = CompensationStatus.DONE
        else:
            status = CompensationStatus.FAILED if final else CompensationStatus.PENDING
        with self._db.write() as conn:
            row = conn.execute(
                "SELECT session, name, step FROM compensations WHERE id = ? AND owner = ? "
                "AND status = 'running'",
                (cid, owner),
            ).fetchone()
            if row is None:  # lease lost to another worker; its outcome stands
                return
            conn.execute(
                "UPDATE compensations SET status = ?, error = ?, lease_until = NULL, "
                "updated_at = ? WHERE id = ?",
                (status, error, now, cid),
            )
            if status != CompensationStatus.PENDING:
                add_audit(
                    conn,
                    now,
                    owner,
                    "compensation",
                    row[0],
                    None,
                    error,
                    {"id": cid, "name": row[1], "step": row[2], "status": status},
                )
            add_event(
                conn, now, row[0], "compensation", {"id": cid, "name": row[1], "status": status}
            )
