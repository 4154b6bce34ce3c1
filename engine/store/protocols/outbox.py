"""The saga outbox: the part of the storage contract that undoes side effects after a rollback.

Part of `engine.store.base.Store` (see there for the model and the rules every method follows).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from engine.records import Compensation, CompensationWorker
from engine.types import CompensationStatus


@runtime_checkable
class OutboxStore(Protocol):
    """The saga outbox: compensations queued by rollbacks, claimed by workers under leases,
    retried or resolved by operators; and the heartbeats that say which worker has which handler."""

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
        """Atomically take one pending compensation whose next attempt is due (or a running one
        whose lease expired) with a handler in `names`, oldest queued first, leased to `owner`
        for `lease_s` seconds.

        Returns:
            The claimed compensation (status running, attempts counted), or None when there is
            none.
        """
        ...

    def finish_compensation(
        self, cid: int, owner: str, ok: bool, error: str | None, now: float, final: bool,
        retry_at: float | None = None,
    ) -> None:
        """Mark a claimed compensation done, or failed (pending again unless `final`; a pending
        one is not claimed before `retry_at`, its `next_attempt_at`).

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
