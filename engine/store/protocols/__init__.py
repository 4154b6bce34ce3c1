"""The focused protocols that together make the storage contract `engine.store.base.Store`."""

from engine.store.protocols.audit import AuditStore
from engine.store.protocols.documents import DocumentStore
from engine.store.protocols.housekeeping import HousekeepingStore
from engine.store.protocols.outbox import OutboxStore
from engine.store.protocols.sessions import SessionStore
from engine.store.protocols.snapshots import SnapshotStore

__all__ = [
    "AuditStore",
    "DocumentStore",
    "HousekeepingStore",
    "OutboxStore",
    "SessionStore",
    "SnapshotStore",
]
