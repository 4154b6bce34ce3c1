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

import datetime as dt
from typing import Any, NotRequired, Protocol, TypedDict, runtime_checkable

from engine.records import (
    AuditEvent,
    BranchInfo,
    Compensation,
    CompensationWorker,
    Event,
    MessageRecord,
    RollbackResult,
    SessionInfo,
    SnapshotNode,
    StepRecord,
)
from engine.types import (
    CompensationStatus,
    RollbackKind,
    SessionStatus,
    SnapshotKind,
    StepStatus,
    StoredVerdict,
    TokenBreakdown,
)


class StepStart(TypedDict):
    """What `Store.begin_step` records about a step as it begins."""

    tool: str | None
    """Tool name; None for a plain agent message turn."""
    args: str
    """Canonical JSON text of the arguments."""
    fingerprint: str
    """Stable hash of tool + canonical args."""
    side_effect: NotRequired[bool]
    """The tool changes the outside world (default False)."""
    compensation: NotRequired[str | None]
    """JSON text of ``[handler name, args]`` that undoes the side effect, or None."""
    text: NotRequired[str | None]
    """Agent text of a message turn."""


class StepOutcome(TypedDict):
    """What `Store.end_step` records about a step as it ends."""

    status: StepStatus
    """ok or error."""
    error: NotRequired[str | None]
    """Error text of a failed step."""
    result_digest: NotRequired[str | None]
    """Digest of the result (equal results, equal digests)."""
    result_preview: NotRequired[str | None]
    """First characters of the result, for people."""
    verdict: NotRequired[StoredVerdict | None]
    """The loop verdict this step flagged, if any."""
    budget: NotRequired[TokenBreakdown | None]
    """Token breakdown of the context the agent built for this step, if given."""


class StepTicket:
    """What `begin_step` hands back: the step number, the epoch and the write-ahead snapshot."""

    __slots__ = ("n", "epoch", "snapshot", "seq")

    def __init__(self, n: int, epoch: int, snapshot: str | None, seq: int):
        self.n = n
        """Step number within the session."""
        self.epoch = epoch
        """The session's epoch when the step began (a rollback meanwhile makes it late)."""
        self.snapshot = snapshot
        """Id of the write-ahead snapshot taken right before the step, if one was asked for."""
        self.seq = seq
        """Session sequence number of the step's record."""


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


OPERABLE_COMPENSATIONS = (
    CompensationStatus.FAILED,
    CompensationStatus.PENDING,
    CompensationStatus.RUNNING,
)
"""Statuses an operator may retry or resolve from (running only once its lease has ended)."""


def compensation_refusal(
    comp: Compensation, lease_until: float | None, now: float, action: str
) -> str | None:
    """Why an operator may not `action` (retry, resolve) `comp` now, or None when they may:
    the one rule (and wording) of `Store.retry_compensation` and `resolve_compensation` on
    every backend. `lease_until` is the end of its lease when it is running."""
    what = f"compensation {comp.id} ({comp.name} for session {comp.session!r}, step {comp.step})"
    if comp.status == CompensationStatus.DONE:
        return f"{what} is done: its handler succeeded; there is nothing to {action}"
    if comp.status == CompensationStatus.RESOLVED:
        by = f" by {comp.resolved_by}" if comp.resolved_by else ""
        return f"{what} was resolved by hand{by}; there is nothing to {action}"
    leased = lease_until is not None and lease_until >= now
    if comp.status == CompensationStatus.RUNNING and leased:
        assert lease_until is not None
        until = dt.datetime.fromtimestamp(lease_until, dt.UTC).strftime("%H:%M:%S UTC")
        return (f"{what} is running: a worker holds its lease until {until} and may be running "
                f"the handler right now; wait for its outcome (or for the lease to end), then "
                f"{action} it if it is still needed")
    if comp.status not in OPERABLE_COMPENSATIONS:
        return f"{what} is {comp.status}; only failed, pending or stalled ones can be {action}d"
    return None


@runtime_checkable
class Store(Protocol):
    """Storage backend contract.

    Times (`now`, `since`, `before`) are Unix seconds from the engine's clock; the store never
    reads a clock of its own, so tests and replays control time. `sid` is a session id already
    validated by the engine (1–200 printable characters).
    """

    @property
    def url(self) -> str:
        """The store's URL with any password removed (safe to print)."""
        ...

    def close(self) -> None:
        """Release connections. The store must not be used afterwards."""
        ...

    # -- sessions ---------------------------------------------------------------------------
    def ensure_session(self, sid: str, meta: dict[str, Any] | None, now: float) -> SessionInfo:
        """Create the session if missing; merge `meta` keys into an existing one.

        Args:
            sid: the session id.
            meta: free metadata (tenant, scenario, prompt_version, locale, …); None or {} leaves
                an existing session's meta as it is.
            now: creation time of a new session.

        Returns:
            The session summary after the call.
        """
        ...

    def get_session(self, sid: str) -> SessionInfo | None:
        """The session summary.

        Returns:
            The summary, or None when no such session exists.
        """
        ...

    def list_sessions(
        self,
        *,
        status: SessionStatus | None = None,
        tenant: str | None = None,
        scenario: str | None = None,
        prompt_version: str | None = None,
        updated_since: float | None = None,
        limit: int = 200,
        offset: int = 0,
    ) -> list[SessionInfo]:
        """Sessions matching every given filter, most recently active first.

        Args:
            status: only sessions in this status.
            tenant: only sessions whose meta names this tenant (likewise `scenario`,
                `prompt_version`).
            updated_since: only sessions changed at or after this time.
            limit: at most this many.
            offset: skip this many first (paging).

        Returns:
            The summaries, newest `updated_at` first.
        """
        ...

    def count_sessions(
        self, *, status: SessionStatus | None = None, updated_since: float | None = None
    ) -> int:
        """How many sessions match every given filter (as in `list_sessions`).

        Returns:
            The count, without loading the sessions.
        """
        ...

    def set_status(
        self, sid: str, status: SessionStatus, verdict: StoredVerdict | None, now: float
    ) -> None:
        """Set the session status; a verdict (loop) is stored as the session's last verdict and
        counted as a loop.

        Raises:
            UnknownSession: no such session.
        """
        ...

    # -- history ----------------------------------------------------------------------------
    def append_messages(self, sid: str, messages: list[dict[str, Any]], now: float) -> int:
        """Append chat messages (each with a ``role``) to the live line.

        Returns:
            The session's epoch after the write.

        Raises:
            UnknownSession: no such session.
        """
        ...

    def put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> int:
        """Set keys of namespace `ns` (None deletes a key), versioned, in one write.

        Returns:
            The session's epoch after the write.

        Raises:
            UnknownSession: no such session.
        """
        ...

    def get_all(self, sid: str, ns: str) -> dict[str, Any]:
        """Current values of namespace `ns` on the live line ({} for an unknown session)."""
        ...

    def live_messages(self, sid: str) -> list[dict[str, Any]]:
        """Messages on the live line, oldest first ([] for an unknown session)."""
        ...

    def all_messages(self, sid: str) -> list[MessageRecord]:
        """Every message, live and abandoned, in write order."""
        ...

    # -- snapshots and steps ----------------------------------------------------------------
    def take_snapshot(
        self, sid: str, label: str | None, kind: SnapshotKind, now: float, retention: Retention
    ) -> SnapshotNode:
        """Take a snapshot of the live line (cost independent of history length) and make it
        the head; snapshots of the same kind that fall out of the retention window are retired.

        Returns:
            The new snapshot node.

        Raises:
            UnknownSession: no such session.
        """
        ...

    def snapshots(self, sid: str) -> list[SnapshotNode]:
        """Every snapshot of the session, live and abandoned, oldest first."""
        ...

    def restorable_snapshot(self, sid: str, before_step: int | None) -> str | None:
        """The newest restorable snapshot on the live line taken before step `before_step`
        began (any, when None). Cost independent of the history length.

        Returns:
            Its id, or None when there is none.
        """
        ...

    def branches(self, sid: str) -> list[BranchInfo]:
        """Every abandoned branch, oldest first."""
        ...

    def begin_step(
        self,
        sid: str,
        step: StepStart,
        snapshot_label: str | None,
        now: float,
        retention: Retention,
    ) -> StepTicket:
        """Record the start of a step (status running), after a write-ahead snapshot of kind
        ``step`` when `snapshot_label` is given; both in one atomic write.

        Returns:
            The ticket that `end_step` takes.

        Raises:
            UnknownSession: no such session.
        """
        ...

    def end_step(self, sid: str, ticket: StepTicket, outcome: StepOutcome, now: float) -> bool:
        """Record a step's outcome.

        A step whose session was rolled back while it ran lands on the abandoned branch and is
        marked late; it never reaches the live line. A late side-effecting step that ended ok
        gets its compensation queued, as the rollback would have done. A looping verdict also
        sets the session status to looping and stores the verdict as the session's last verdict;
        a step that ends ok without one makes the session healthy again (unless stopped).

        Returns:
            True when the step was late.

        Raises:
            UnknownSession: no such session.
        """
        ...

    def steps(
        self, sid: str, *, live_only: bool = False, last: int | None = None
    ) -> list[StepRecord]:
        """Steps in step order.

        Args:
            live_only: only the steps on the live line.
            last: keep only the newest N.
        """
        ...

    # -- rollback ---------------------------------------------------------------------------
    def rollback(
        self,
        sid: str,
        target: str,
        *,
        actor: str,
        reason: str,
        notice: dict[str, Any] | None,
        now: float,
        expect_epoch: int | None = None,
        kind: RollbackKind = "rollback",
        batch: str | None = None,
    ) -> RollbackResult:
        """Make snapshot `target` the head, abandon what came after, queue compensations.

        Everything on the live line written after `target` moves to a new abandoned branch;
        side-effecting steps that ended ok on it get their compensations queued (newest first)
        under the idempotency key ``<sid>#<step>@<incarnation>`` (the incarnation changes when a
        deleted or expired session is created again);
        `notice` (a chat message) is appended to the restored live line; an audit event and a
        feed event are written; the epoch is incremented; the status becomes rolled_back (a
        stopped session stays stopped). All or nothing.

        `kind="fork"` moves the live line the same way for an integration's time travel (e.g. a
        LangGraph fork): the status and the rollback count stay, and it is audited as a fork.

        Args:
            target: id of a restorable snapshot on the live line.
            actor: who rolls back (audited). reason: why (audited, labels the branch).
            notice: chat message appended after the rollback, or None.
            expect_epoch: refuse unless the session's epoch is still this one.
            batch: id of the bulk rollback this one belongs to, kept as ``batch`` in the
                detail of its audit event and feed event (None: not part of one).

        Returns:
            What the rollback did.

        Raises:
            UnknownSession: no such session.
            UnknownSnapshot: the session has no snapshot `target`.
            SnapshotNotRestorable: `target` lies on an abandoned branch or was retired.
            RollbackConflict: the epoch is no longer `expect_epoch` (someone else rolled the
                session back meanwhile).
            NothingToRollBack: (kind rollback) nothing on the live line was written after
                `target`: no message, step, snapshot, variable or memory would leave it. Nothing
                is written then: no empty branch, no notice, no epoch change, no audit event.
        """
        ...

    def add_notice(self, sid: str, message: dict[str, Any], actor: str, now: float) -> None:
        """Append a recovery notice (a chat message) to the live line and audit it.

        Raises:
            UnknownSession: no such session.
        """
        ...

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
        """Audit events matching every given filter, newest first.

        Args:
            session, actor, action: only events with this value.
            since: only events at or after this time.
            limit: at most this many.
        """
        ...

    def count_audit(self, action: str, since: float) -> int:
        """How many audit events of `action` happened at or after `since` (none loaded)."""
        ...

    def add_audit(
        self,
        actor: str,
        action: str,
        session: str | None,
        snapshot: str | None,
        reason: str | None,
        detail: dict[str, Any],
        now: float,
    ) -> None:
        """Append an audit event (and a feed event of type `action`)."""
        ...

    def events(self, since: int = 0, limit: int = 1000, session: str | None = None) -> list[Event]:
        """Feed events with cursor greater than `since`, oldest first.

        Args:
            since: the cursor (`Event.id`) last seen; 0 for the start.
            limit: at most this many.
            session: only this session's events.
        """
        ...

    def last_event_id(self) -> int:
        """Cursor of the newest event (0 when none)."""
        ...

    # -- saga -------------------------------------------------------------------------------
    def compensations(
        self,
        *,
        session: str | None = None,
        status: CompensationStatus | None = None,
        limit: int = 1000,
    ) -> list[Compensation]:
        """Compensations matching every given filter, newest first."""
        ...

    def count_compensations(self, status: CompensationStatus) -> int:
        """How many compensations have `status` (none loaded)."""
        ...

    def claim_compensation(
        self, names: list[str], owner: str, lease_s: float, now: float
    ) -> Compensation | None:
        """Atomically take one pending compensation (or one whose lease expired) with a handler
        in `names`, oldest queued first, leased to `owner` for `lease_s` seconds.

        Returns:
            The claimed compensation (status running, attempts counted), or None when there is
            none.
        """
        ...

    def finish_compensation(
        self, cid: int, owner: str, ok: bool, error: str | None, now: float, final: bool
    ) -> None:
        """Mark a claimed compensation done, or failed (pending again unless `final`).

        Done and failed outcomes are audited. A worker that lost its lease (another took the
        compensation over) changes nothing: the other worker's outcome stands.
        """
        ...

    def retry_compensation(self, cid: int, actor: str, reason: str, now: float) -> Compensation:
        """Put compensation `cid` back to pending with no attempts counted, so the next process
        with its handler runs it again (its last error stays until a run succeeds); audited as
        ``compensation.retry`` with a feed event of that type, all in one atomic write.

        Allowed from failed, pending, and running whose lease ended before `now` (its worker
        is gone; were it only slow, its `finish_compensation` changes nothing afterwards, as
        the claim is no longer its own).

        Args:
            actor: the operator (audited). reason: why (audited).

        Returns:
            The compensation after the change.

        Raises:
            UnknownCompensation: no compensation `cid`.
            CompensationConflict: it is done or resolved, or running under a lease that has not
                ended (its worker may be running the handler right now). Nothing is written.
        """
        ...

    def resolve_compensation(self, cid: int, actor: str, reason: str, now: float) -> Compensation:
        """Mark compensation `cid` resolved by hand: status resolved, `actor` and `reason` kept
        on the record; audited as ``compensation.resolve`` with a feed event of that type, all
        in one atomic write. No worker claims it afterwards, and a worker whose lease had ended
        changes nothing when it finishes.

        Allowed from failed, pending, and running whose lease ended before `now`.

        Returns:
            The compensation after the change.

        Raises:
            UnknownCompensation: no compensation `cid`.
            CompensationConflict: it is done or resolved already, or running under a lease that
                has not ended. Nothing is written.
        """
        ...

    def heartbeat_worker(
        self, worker: str, handlers: list[str], now: float, expire_before: float
    ) -> None:
        """Record that process `worker` has the compensation handlers `handlers`, seen at `now`,
        and forget every worker last seen before `expire_before`, in one atomic write (so the
        record stays as small as the set of recently live processes). An empty `handlers`
        forgets `worker`.
        """
        ...

    def compensation_workers(self, since: float) -> list[CompensationWorker]:
        """Workers whose last heartbeat is at or after `since`, most recently seen first."""
        ...

    # -- documents (unversioned) --------------------------------------------------------------
    def doc_put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> None:
        """Set documents of namespace `ns` (None deletes one). Unlike `put`, documents are not
        versioned and rollbacks do not touch them: integrations keep their own history here
        (e.g. LangGraph checkpoints). Atomic.

        Raises:
            UnknownSession: no such session.
        """
        ...

    def doc_get(self, sid: str, ns: str, keys: list[str]) -> dict[str, Any]:
        """The documents among `keys` that exist."""
        ...

    def doc_scan(self, sid: str, ns: str, prefix: str = "") -> dict[str, Any]:
        """Every document of `ns` whose key starts with `prefix`, in key order."""
        ...

    # -- fleet documents (unversioned, not owned by a session) ---------------------------------
    def fleet_docs(self, ns: str) -> dict[str, Any]:
        """Every fleet document of namespace `ns` (key -> JSON value), in key order.

        Fleet documents hold small fleet-wide settings every process must see (tool
        quarantines, the alert worker's cursor). No session owns them: deleting or purging
        sessions never touches them.
        """
        ...

    def fleet_doc_put(self, ns: str, values: dict[str, Any | None], now: float) -> None:
        """Set fleet documents of namespace `ns` (a value of None deletes the key), all in one
        atomic write; the values must be JSON-representable. `now` is the time of the write.
        """
        ...

    def delete_session(self, sid: str, now: float) -> bool:
        """Delete a session and everything it owns (audit events and compensations stay).

        Returns:
            True if it existed.
        """
        ...

    def purge_sessions(self, before: float, now: float, *, dry_run: bool = False) -> dict[str, int]:
        """Delete the sessions last changed before `before` that are not evidence, like
        `delete_session` (their audit events stay), in one atomic write, and audit it as
        ``retention`` with the ``session_ids`` removed.

        A session is evidence once it has a loop verdict, a rollback (or fork), a notice, a
        compensation or any audit event of its own: it is kept however old, as a Redis store
        never lets it expire.

        Args:
            before: sessions whose last change is earlier than this time may go.
            now: time of the audit event.
            dry_run: count without removing or auditing anything.

        Returns:
            ``sessions``: how many went (or would go); ``evidence``: how many as old were kept.
        """
        ...

    # -- maintenance ------------------------------------------------------------------------
    def rebuild_indexes(self) -> dict[str, int]:
        """Rebuild fleet-wide views (session indexes, counters) from the sessions; safe while
        agents write.

        Returns:
            Counts of what was rebuilt or removed ({} when the backend keeps no separate
            indexes).

        Raises:
            StoreUnavailable: the store failed its integrity check.
        """
        ...

    # -- retention --------------------------------------------------------------------------
    def purge_branches(self, before: float, now: float, *, dry_run: bool = False) -> dict[str, int]:
        """Delete abandoned branches created before `before`, with their messages, steps,
        snapshots and key-value writes, in one atomic write, and audit it as ``retention``: the
        audit detail holds the counts and ``branch_ids``, every removed branch as
        ``<session>/<branch>``, oldest first.

        Args:
            before: branches created earlier than this time go.
            now: time of the audit event.
            dry_run: count what would go without removing or auditing anything.

        Returns:
            Counts of what went (or would go): branches, messages, steps, snapshots, kv_writes.
        """
        ...

    # -- atomic multi-part writes (one door to the store; issue 21) ---------------------------
    def write_session(
        self, sid: str, write: SessionWrite, now: float, retention: Retention
    ) -> tuple[int, SnapshotNode | None]:
        """Several writes to one session as one atomic write (one transaction on SQLite, one
        script on Redis and Redis Cluster): all of them happen, or none.

        In this order, each exactly as its own method would write it (same sequence numbers,
        same feed events): `write["messages"]` appended (`append_messages`; skipped when
        `write["messages_if_empty"]` and the live line holds messages already), each namespace
        of `write["values"]` set (`put`), a ``manual`` snapshot labelled `write["snapshot"]`
        taken (`take_snapshot`, with `retention`), and each namespace of `write["documents"]`
        set (`doc_put`). The document `write["stamp"]` names, a dict among the documents, is
        stored with the snapshot's ``snap`` (id), ``msgs`` (live message count) and ``epoch``.

        Returns:
            (the session's epoch, the snapshot taken or None).

        Raises:
            UnknownSession: no such session. Nothing is written.
            ValueError: a stamp without a snapshot, or naming no dict among the documents.
        """
        ...


class SessionWrite(TypedDict):
    """The parts of one atomic `Store.write_session`; every part may be left out."""

    messages: NotRequired[list[dict[str, Any]]]
    """Chat messages (each with a ``role``) to append to the live line."""
    messages_if_empty: NotRequired[bool]
    """Append `messages` only when the session's live line holds no message yet."""
    values: NotRequired[dict[str, dict[str, Any]]]
    """Versioned key-value writes: namespace -> items (None deletes a key), as `Store.put`."""
    snapshot: NotRequired[str]
    """Label of a ``manual`` snapshot taken after the messages and values."""
    documents: NotRequired[dict[str, dict[str, Any]]]
    """Unversioned documents: namespace -> items (None deletes one), as `Store.doc_put`."""
    stamp: NotRequired[tuple[str, str]]
    """(namespace, key) of a document in `documents` that records the snapshot taken."""


def stamped(write: SessionWrite, epoch: int, node: SnapshotNode | None
            ) -> dict[str, dict[str, Any]]:
    """The documents of `write`, the one its stamp names holding the snapshot `node` (its id as
    ``snap``, its live message count as ``msgs``) and the session's `epoch`.

    Raises:
        ValueError: a stamp without a snapshot, or naming no dict among the documents.
    """
    documents = dict(write.get("documents") or {})
    stamp = write.get("stamp")
    if stamp is None:
        return documents
    ns, key = stamp
    doc = documents.get(ns, {}).get(key)
    if node is None or not isinstance(doc, dict):
        raise ValueError(f"the stamp {stamp!r} needs a snapshot and a document that is a dict")
    documents[ns] = {**documents[ns], key: {**doc, "snap": node.id, "msgs": node.messages,
                                            "epoch": epoch}}
    return documents
