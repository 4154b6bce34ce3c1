"""Snapshots and branches: the part of the storage contract that moves the live line back.

Part of `engine.store.base.Store` (see there for the model and the rules every method follows).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from engine.records import BranchInfo, RollbackResult, SnapshotNode
from engine.store.requests import Retention, RollbackRequest
from engine.types import SnapshotKind


@runtime_checkable
class SnapshotStore(Protocol):
    """Snapshots and branches: snapshots of the live line, the rollback to one, and the
    abandoned branches a rollback leaves."""

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

    def newest_snapshots(self, sid: str, kind: SnapshotKind, label_prefix: str, limit: int
                         ) -> list[tuple[str, str]]:
        """(id, label) of the newest `limit` snapshots of `kind` on the live line whose label
        starts with `label_prefix` (retired ones count: they are still on the line), newest
        first. An integration that labels its snapshots finds the newest of its own this way
        (LangGraph's live checkpoint: what a rollback to any snapshot leaves live), past any
        an operator labelled alike."""
        ...

    def snapshot(self, sid: str, snapshot_id: str) -> SnapshotNode | None:
        """Snapshot `snapshot_id` of the session (live or abandoned), as `snapshots` lists it,
        or None when the session has none of that id. Cost independent of the history length:
        a rollback's preview and checks read the one snapshot they go back to."""
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

    def rollback(self, sid: str, request: RollbackRequest) -> RollbackResult:
        """Make snapshot `request.target` the head, abandon what came after, queue compensations.

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
            sid: the session.
            request: the target snapshot, actor, reason, notice, time, and optionally the
                expected epoch, the kind and the batch id (kept as ``batch`` in the detail of
                the audit event and feed event of a bulk rollback's members).

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
