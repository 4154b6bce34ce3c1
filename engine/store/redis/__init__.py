"""The Redis and Redis Cluster store: one hash tag per session, one Lua script per operation."""

from engine.store.redis.store import RedisStore

__all__ = ["RedisStore"]
