"""The Redis and Redis Cluster store: one hash tag per session, one Lua script per operation."""

from typing import TYPE_CHECKING

from engine.store.redis.store import RedisStore

__all__ = ["RedisStore"]

if TYPE_CHECKING:
    from engine.store.base import (
        AuditStore,
        DocumentStore,
        HousekeepingStore,
        OutboxStore,
        SessionStore,
        SnapshotStore,
        Store,
    )

    def _fills_the_contract(store: RedisStore) -> Store:
        # RedisStore fills each focused protocol of the Store contract, so it is a Store: mypy
        # checks every method against RedisStore's here, and an error names the protocol whose
        # parameter or return type drifted (tests/store/test_store_protocol.py checks names, kinds
        # and defaults at run time).
        _sessions: SessionStore = store
        _snapshots: SnapshotStore = store
        _outbox: OutboxStore = store
        _documents: DocumentStore = store
        _audit: AuditStore = store
        _housekeeping: HousekeepingStore = store
        return store
