"""The storage contract. Each backend (SQLite, Redis, Redis Cluster) lives in its own module and
only fills this contract; `tests/store/test_store_conformance.py` runs the same tests against
every one.

Model: every write to a session takes the next number of the session's sequence (`seq`). A
snapshot is one row holding the sequence number and the live message count at that moment, so it
costs the same whatever the history length. The live line is everything not yet assigned to an
abandoned branch; a rollback to snapshot S assigns every live row with `seq > S.seq` to a new
branch, so its cost follows what leaves the live line, not the history before S.

Key-value namespaces (`ns`): ``var`` holds the session variables, ``mem`` the memory items. A value
of None deletes the key. Every put is versioned, so a rollback restores the values at S.

All state-changing methods are atomic per session: they either happen entirely or not at all.

The contract is six focused protocols, each in `engine.store.protocols` (`STORE_PROTOCOLS`), and
`Store` is all of them: code that needs only part of a store can ask for that part.
"""

from __future__ import annotations

import datetime as dt
from typing import Protocol, runtime_checkable

from engine.records import Compensation
from engine.store.protocols.audit import AuditStore
from engine.store.protocols.documents import DocumentStore
from engine.store.protocols.housekeeping import HousekeepingStore
from engine.store.protocols.outbox import OutboxStore
from engine.store.protocols.sessions import SessionStore
from engine.store.protocols.snapshots import SnapshotStore
from engine.store.requests import (
    ALL_SESSIONS,
    AuditEntry,
    DecisionRequest,
    Retention,
    RollbackRequest,
    SessionCursor,
    SessionFilter,
    SessionWrite,
    StepOutcome,
    StepStart,
    StepTicket,
    refuse_undecidable,
    stamped,
)
from engine.types import CompensationStatus

__all__ = [
    "ALL_SESSIONS",
    "AuditEntry",
    "DecisionRequest",
    "OPERABLE_COMPENSATIONS",
    "STORE_PROTOCOLS",
    "AuditStore",
    "DocumentStore",
    "HousekeepingStore",
    "OutboxStore",
    "Retention",
    "RollbackRequest",
    "SessionCursor",
    "SessionFilter",
    "SessionWrite",
    "SessionStore",
    "SnapshotStore",
    "StepOutcome",
    "StepStart",
    "StepTicket",
    "Store",
    "compensation_refusal",
    "protocol_members",
    "refuse_undecidable",
    "stamped",
]


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
class Store(
    SessionStore,
    SnapshotStore,
    OutboxStore,
    DocumentStore,
    AuditStore,
    HousekeepingStore,
    Protocol,
):
    """Storage backend contract: every focused protocol of `STORE_PROTOCOLS` at once.

    Times (`now`, `since`, `before`) are Unix seconds from the engine's clock; the store never
    reads a clock of its own, so tests and replays control time. `sid` is a session id already
    validated by the engine (1–200 printable characters).
    """


STORE_PROTOCOLS: tuple[type, ...] = (
    SessionStore,
    SnapshotStore,
    OutboxStore,
    DocumentStore,
    AuditStore,
    HousekeepingStore,
)
"""The focused protocols `Store` is made of; each member of `Store` is in exactly one."""


def protocol_members(protocol: type) -> list[str]:
    """The public methods and properties `protocol` declares, its bases' included, sorted.

    `vars()` of a composed protocol lists none of its bases' members: callers that derive
    something from the contract (the fallback store's forwarding, the signature tests) use this.
    """
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass is object or klass is Protocol or not getattr(klass, "_is_protocol", False):
            continue
        names |= {
            name
            for name, value in vars(klass).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, property))
        }
    return sorted(names)
