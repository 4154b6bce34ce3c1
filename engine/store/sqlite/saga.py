"""The saga outbox on SQLite: queueing compensations when steps leave the live line, the
workers' claim/finish cycle under leases, the operators' retry and resolve, and the workers'
heartbeats (which handlers a live process has)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3

from engine.errors import CompensationConflict, UnknownCompensation
from engine.records import Compensation, CompensationWorker
from engine.store.base import compensation_refusal
from engine.store.sqlite.rows import (
    COMP_COLS,
    WORKER,
    add_audit,
    add_event,
    dumps,
    named,
    to_compensation,
    where,
)
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
    """The compensation methods of `SQLiteStore`.

    Args:
        db: the store's database.
        url: the store's URL, named in the errors.
        comp_cols: the compensation columns read (a read-only file of an older schema has no
            resolved_by/resolved_reason: NULLs stand in for them).
        has_workers: False on a read-only file of an older schema (no workers table).
    """

    def __init__(self, db: SQLiteDB, url: str, *, comp_cols: str = COMP_COLS,
                 has_workers: bool = True) -> None:
        self._db = db
        self._url = url
        self._comp_cols = comp_cols
        self._has_workers = has_workers

    def compensations(
        self,
        *,
        session: str | None = None,
        status: CompensationStatus | None = None,
        limit: int = 1000,
    ) -> list[Compensation]:
        """Compensations matching every given filter, newest first."""
        clause, params = where({"session": session, "status": status})
        rows = self._db.read_named(
            f"SELECT {self._comp_cols} FROM compensations{clause} ORDER BY id DESC LIMIT ?",
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
            row = named(conn.execute(
                f"SELECT {self._comp_cols} FROM compensations WHERE name IN ({marks}) AND "
                "((status = 'pending' AND (lease_until IS NULL OR lease_until <= ?)) "
                "OR (status = 'running' AND lease_until < ?)) ORDER BY id LIMIT 1",
                (*names, now, now),
            )).fetchone()
            if row is None:
                return None
            conn.execute(
                "UPDATE compensations SET status = 'running', owner = ?, lease_until = ?, "
                "attempts = attempts + 1, updated_at = ? WHERE id = ?",
                (owner, now + lease_s, now, row["id"]),
            )
        comp = to_compensation(row)
        return dataclasses.replace(
            comp, status=CompensationStatus.RUNNING, attempts=comp.attempts + 1
        )

    def finish_compensation(
        self, cid: int, owner: str, ok: bool, error: str | None, now: float, final: bool,
        retry_at: float | None = None,
    ) -> None:
        """Mark a claimed compensation done, or failed (pending again unless `final`, not
        claimed before `retry_at`)."""
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
                "UPDATE compensations SET status = ?, error = ?, lease_until = ?, "
                "updated_at = ? WHERE id = ?",
                (status, error, retry_at if status == CompensationStatus.PENDING else None, now,
                 cid),
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

    def _operate(
        self, cid: int, actor: str, reason: str, now: float, action: str
    ) -> Compensation:
        """Retry or resolve compensation `cid` (see `retry_compensation`)."""
        with self._db.write() as conn:
            row = named(conn.execute(
                f"SELECT {COMP_COLS}, lease_until FROM compensations WHERE id = ?", (cid,)
            )).fetchone()
            if row is None:
                raise UnknownCompensation(
                    f"no compensation {cid} in {self._url}; list them with "
                    "`rewind compensations`"
                )
            comp, lease_until = to_compensation(row), row["lease_until"]
            why = compensation_refusal(comp, lease_until, now, action)
            if why is not None:
                raise CompensationConflict(why)
            if action == "retry":
                conn.execute(
                    "UPDATE compensations SET status = 'pending', attempts = 0, owner = NULL, "
                    "lease_until = NULL, updated_at = ? WHERE id = ?",
                    (now, cid),
                )
                after = dataclasses.replace(
                    comp, status=CompensationStatus.PENDING, attempts=0, updated_at=now
                )
            else:
                conn.execute(
                    "UPDATE compensations SET status = 'resolved', owner = NULL, "
                    "lease_until = NULL, resolved_by = ?, resolved_reason = ?, updated_at = ? "
                    "WHERE id = ?",
                    (actor, reason, now, cid),
                )
                after = dataclasses.replace(
                    comp,
                    status=CompensationStatus.RESOLVED,
                    resolved_by=actor,
                    resolved_reason=reason,
                    updated_at=now,
                )
            detail = {
                "id": cid,
                "name": comp.name,
                "step": comp.step,
                "status": after.status,
                "from": comp.status,
                "attempts": comp.attempts,
            }
            add_audit(conn, now, actor, f"compensation.{action}", comp.session, None, reason,
                      detail)
            add_event(conn, now, comp.session, f"compensation.{action}",
                      {"actor": actor, **detail})
        return after

    def retry_compensation(self, cid: int, actor: str, reason: str, now: float) -> Compensation:
        """Put compensation `cid` back to pending with no attempts counted (audited)."""
        return self._operate(cid, actor, reason, now, "retry")

    def resolve_compensation(self, cid: int, actor: str, reason: str, now: float) -> Compensation:
        """Mark compensation `cid` resolved by hand (audited)."""
        return self._operate(cid, actor, reason, now, "resolve")

    def heartbeat_worker(
        self, worker: str, handlers: list[str], now: float, expire_before: float
    ) -> None:
        """Record `worker`'s handlers as seen at `now`; forget workers not seen since
        `expire_before`."""
        with self._db.write() as conn:
            conn.execute("DELETE FROM workers WHERE seen_at < ?", (expire_before,))
            if handlers:
                conn.execute(
                    "INSERT INTO workers(id, handlers, seen_at) VALUES (?, ?, ?) "
                    "ON CONFLICT(id) DO UPDATE SET handlers = excluded.handlers, "
                    "seen_at = excluded.seen_at",
                    (worker, dumps(sorted(handlers)), now),
                )
            else:
                conn.execute("DELETE FROM workers WHERE id = ?", (worker,))

    def compensation_workers(self, since: float) -> list[CompensationWorker]:
        """Workers seen at or after `since`, most recently seen first."""
        if not self._has_workers:
            return []
        rows = self._db.read_named(
            f"SELECT {WORKER.select()} FROM workers WHERE seen_at >= ? ORDER BY seen_at DESC, id",
            (since,),
        )
        return [WORKER.decode(r) for r in rows]
