"""The storage contract. Each backend (SQLite, Redis, Redis Cluster) lives in its own module and
only fills this contract; `tests/test_store_conformance.py` runs the same tests against every one.

Model: every write to a session takes the next number of the session's sequence (`seq`). A
snapshot is one row holding the sequence number and the live message count at that moment, so it
costs the same whatever the history length. The live line is everything not yet assigned to an
abandoned branch; a rollback to snapshot S assigns every live row with `seq > S.seq` to a new
branch, so its cost follows what leaves the live line, not the history before S.

Key-value namespaces (`ns`): ``var`` holds the session variables, ``mem`` the memory items. A value
of None deletes the key. Every put is versioned, so a rollback restores the values at S.

All state-changing methods are atomic per session: they either happen entirely or not at all.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

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


class StepTicket:
    """What `begin_step` hands back: the step number, the epoch and the write-ahead snapshot."""

    __slots__ = ("n", "epoch", "snapshot", "seq")

    def __init__(self, n: int, epoch: int, snapshot: str | None, seq: int):
        self.n = n
        self.epoch = epoch
        self.snapshot = snapshot
        self.seq = seq


class Retention:
    """Retention settings applied by the store as snapshots are taken."""

    __slots__ = ("keep_snapshots", "keep_step_snapshots")

    def __init__(self, keep_snapshots: int = 5, keep_step_snapshots: int = 50):
        if keep_snapshots < 1 or keep_step_snapshots < 1:
            raise ValueError("retention windows must keep at least one snapshot")
        self.keep_snapshots = keep_snapshots
        """Named snapshots (taken with `Session.snapshot`) that stay restorable on the live line."""
        self.keep_step_snapshots = keep_step_snapshots
        """Write-ahead step snapshots stay restorable while their step is among the last N steps."""


@runtime_checkable
class Store(Protocol):
    """Storage backend contract."""

    url: str
    """The store's URL with any password removed (safe to print)."""

    def close(self) -> None:
        """Release connections. The store must not be used afterwards."""

    # -- sessions ---------------------------------------------------------------------------
    def ensure_session(self, sid: str, meta: dict | None, now: float) -> SessionInfo:
        """Create the session if missing; merge `meta` keys into an existing one.

        Returns:
            The session summary after the call.
        """

    def get_session(self, sid: str) -> SessionInfo | None:
        """The session summary, or None when no such session exists."""

    def list_sessions(
        self,
        *,
        status: str | None = None,
        tenant: str | None = None,
        scenario: str | None = None,
        prompt_version: str | None = None,
        updated_since: float | None = None,
        limit: int = 200,
        offset: int = 0,
    ) -> list[SessionInfo]:
        """Sessions matching every given filter, most recently active first."""

    def count_sessions(
        self, *, status: str | None = None, updated_since: float | None = None
    ) -> int:
        """How many sessions match."""

    def set_status(self, sid: str, status: str, verdict: dict | None, now: float) -> None:
        """Set the session status; a verdict (loop) is stored as the session's last verdict.

        Raises:
            UnknownSession: no such session.
        """

    # -- history ----------------------------------------------------------------------------
    def append_messages(self, sid: str, messages: list[dict], now: float) -> int:
        """Append messages to the live line. Returns the session's epoch after the write.

        Raises:
            UnknownSession: no such session.
        """

    def put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> int:
        """Set keys of namespace `ns` (None deletes a key), versioned. Returns the epoch."""

    def get_all(self, sid: str, ns: str) -> dict[str, Any]:
        """Current values of namespace `ns` on the live line."""

    def live_messages(self, sid: str) -> list[dict]:
        """Messages on the live line, oldest first."""

    def all_messages(self, sid: str) -> list[MessageRecord]:
        """Every message, live and abandoned, in write order."""

    # -- snapshots and steps ----------------------------------------------------------------
    def take_snapshot(
        self, sid: str, label: str | None, kind: str, now: float, retention: Retention
    ) -> SnapshotNode:
        """Take a snapshot of the live line (cost independent of history length)."""

    def snapshots(self, sid: str) -> list[SnapshotNode]:
        """Every snapshot of the session, oldest first."""

    def restorable_snapshot(self, sid: str, before_step: int | None) -> str | None:
        """Id of the newest restorable snapshot on the live line taken before step
        `before_step` began (any, when None); None when there is none. Cost independent of the
        history length."""

    def branches(self, sid: str) -> list[BranchInfo]:
        """Every abandoned branch, oldest first."""

    def begin_step(
        self,
        sid: str,
        step: dict,
        snapshot_label: str | None,
        now: float,
        retention: Retention,
    ) -> StepTicket:
        """Record the start of a step, after a write-ahead snapshot when a label is given.

        `step` holds tool, args (canonical JSON text), fingerprint, side_effect, compensation
        (JSON text or None) and text.
        """

    def end_step(self, sid: str, ticket: StepTicket, outcome: dict, now: float) -> bool:
        """Record a step's outcome (status, error, result_digest, result_preview, verdict,
        budget: the token breakdown dict or None).

        A step whose session was rolled back while it ran lands on the abandoned branch and is
        marked late; it never reaches the live line. A late side-effecting step that ended ok
        gets its compensation queued, as the rollback would have done. A looping verdict also
        sets the session status to looping and stores the verdict as the session's last verdict.

        Returns:
            True when the step was late.
        """

    def steps(
        self, sid: str, *, live_only: bool = False, last: int | None = None
    ) -> list[StepRecord]:
        """Steps in step order; `last` keeps only the newest N."""

    # -- rollback ---------------------------------------------------------------------------
    def rollback(
        self,
        sid: str,
        target: str,
        *,
        actor: str,
        reason: str,
        notice: dict | None,
        now: float,
        expect_epoch: int | None = None,
        kind: str = "rollback",
    ) -> RollbackResult:
        """Make snapshot `target` the head, abandon what came after, queue compensations.

        Everything on the live line written after `target` moves to a new abandoned branch;
        side-effecting steps that ended ok on it get their compensations queued (newest first)
        under the idempotency key ``<sid>#<step>@<incarnation>`` (the incarnation changes when a
        deleted or expired session is created again);
        `notice` (a chat message) is appended to the restored live line; an audit event and a
        feed event are written; the epoch is incremented; the status becomes rolled_back. All or
        nothing.

        Raises:
            UnknownSession, UnknownSnapshot, SnapshotNotRestorable, RollbackConflict (the epoch
            is no longer `expect_epoch`: someone else rolled the session back meanwhile).

        `kind="fork"` moves the live line the same way for an integration's time travel (e.g. a
        LangGraph fork): the status and the rollback count stay, and it is audited as a fork.
        """

    def add_notice(self, sid: str, message: dict, actor: str, now: float) -> None:
        """Append a recovery notice to the live line and audit it."""

    # -- fleet views ------------------------------------------------------------------------
    def audit(
        self,
        *,
        session: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        since: float | None = None,
        limit: int = 1000,
    ) -> list[AuditEvent]:
        """Audit events, newest first."""

    def count_audit(self, action: str, since: float) -> int:
        """How many audit events of `action` happened at or after `since`."""

    def add_audit(self, actor: str, action: str, session: str | None, snapshot: str | None,
                  reason: str | None, detail: dict, now: float) -> None:
        """Append an audit event (and a feed event)."""

    def events(self, since: int = 0, limit: int = 1000, session: str | None = None) -> list[Event]:
        """Feed events with cursor greater than `since`, oldest first."""

    def last_event_id(self) -> int:
        """Cursor of the newest event (0 when none)."""

    # -- saga -------------------------------------------------------------------------------
    def compensations(
        self, *, session: str | None = None, status: str | None = None, limit: int = 1000
    ) -> list[Compensation]:
        """Compensations, newest first."""

    def count_compensations(self, status: str) -> int:
        """How many compensations have `status` (pending, running, done, failed)."""

    def claim_compensation(
        self, names: list[str], owner: str, lease_s: float, now: float
    ) -> Compensation | None:
        """Atomically take one pending compensation (or one whose lease expired) with a handler
        in `names`, oldest queued first; None when there is none."""

    def finish_compensation(
        self, cid: int, owner: str, ok: bool, error: str | None, now: float, final: bool
    ) -> None:
        """Mark a claimed compensation done, or failed (pending again unless `final`)."""

    # -- documents (unversioned) --------------------------------------------------------------
    def doc_put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> None:
        """Set documents of namespace `ns` (None deletes one). Unlike `put`, documents are not
        versioned and rollbacks do not touch them: integrations keep their own history here
        (e.g. LangGraph checkpoints). Atomic; the session must exist."""

    def doc_get(self, sid: str, ns: str, keys: list[str]) -> dict[str, Any]:
        """The documents among `keys` that exist."""

    def doc_scan(self, sid: str, ns: str, prefix: str = "") -> dict[str, Any]:
        """Every document of `ns` whose key starts with `prefix`, in key order."""

    def delete_session(self, sid: str, now: float) -> bool:
        """Delete a session and everything it owns (audit events stay). True if it existed."""

    # -- maintenance ------------------------------------------------------------------------
    def rebuild_indexes(self) -> dict:
        """Rebuild fleet-wide views (session indexes, counters) from the sessions; safe while
        agents write. Returns counts of what was rebuilt or removed ({} when the backend keeps
        no separate indexes)."""

    # -- retention --------------------------------------------------------------------------
    def purge_branches(self, before: float, now: float) -> dict:
        """Delete abandoned branches created before `before`; returns counts of what went."""
