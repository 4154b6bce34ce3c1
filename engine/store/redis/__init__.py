"""The Redis and Redis Cluster store: one hash tag per session, one Lua script per operation."""

from typing import TYPE_CHECKING

from engine.store.redis.store import RedisStore

__all__ = ["RedisStore"]

if TYPE_CHECKING:
    from engine.store.base import Store

    def _matches_the_contract(store: RedisStore) -> Store:
        # mypy checks every Store method against RedisStore's here: a parameter or return type
        # that drifts from the protocol is a type error (tests/test_store_protocol.py checks
        # names, kinds and defaults at run time).
        return store
