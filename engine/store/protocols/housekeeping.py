"""Housekeeping: the part of the storage contract that keeps a store tidy and closes it.

Part of `engine.store.base.Store` (see there for the model and the rules every method follows).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from engine.records import StepRecord


@runtime_checkable
class HousekeepingStore(Protocol):
    """The store itself: its URL, closing it, retention purges and index repair."""

    @property
    def url(self) -> str:
        """The store's URL with any password removed (safe to print)."""
        ...

    def close(self) -> None:
        """Release connections. The store must not be used afterwards."""
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

    def running_steps(self, started_before: float) -> list[tuple[str, StepRecord]]:
        """Every step of the store still running that started at or before `started_before`
        (its process died or lost the call), over all sessions and lines, not a sample; for
        `rewind doctor`, which may take its time.

        Returns:
            (session id, step) pairs, oldest start first (ties: session, then step number).
        """
        ...

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
