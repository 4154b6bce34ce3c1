"""Opt-in fallback from Redis to the embedded store, for when Redis is down at start-up.

``redis://host:6379/0?fallback=sqlite:///.rewind/fallback.db`` (or
``Engine.open(url, store_options={"fallback": "sqlite:///…"})``) opens Redis as usual; if Redis
cannot be reached (after its retries), the store runs on the embedded SQLite store instead and
says so: `FallbackStore.degraded` is True and `FallbackStore.degraded_reason` tells why, for the
console's banner.

Only unreachable means unreachable: a Redis that answers but refuses the credentials or the ACL
raises `StoreAuthError` (a wrong password is a configuration error to fix, not an outage to ride
out), and the fallback is not used.

The switch happens only when the store is opened. Once running on Redis, a write that fails after
the retries raises `StoreUnavailable` and is not redirected: writing half a session to Redis and
the rest to SQLite would lose snapshots silently, which Rewind never does. Sessions written while
degraded live in the fallback file; restart with Redis reachable to go back to it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from engine.errors import StoreError, StoreUnavailable
from engine.store.base import Store, protocol_members
from engine.store.urls import redact

log = logging.getLogger("rewind.store")


def _split_fallback(url: str, options: dict[str, Any]) -> tuple[str, str | None]:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    fallback = options.pop("fallback", None)
    for key, value in query:
        if key == "fallback" and fallback is None:
            fallback = value
    rest = urlencode([(k, v) for k, v in query if k != "fallback"])
    return urlunsplit(parts._replace(query=rest)), fallback or None


def open_redis(url: str, **options: Any) -> Store:
    """Open a Redis (or Redis Cluster) store; with a ``fallback`` URL (query parameter or
    option), a `FallbackStore` that degrades to it when Redis is unreachable at start-up.

    Raises:
        StoreUnavailable: Redis cannot be reached and no fallback was asked for.
        StoreAuthError: Redis refused the credentials or the ACL (with or without a fallback).
    """
    from engine.store.redis.store import RedisStore

    primary, fallback = _split_fallback(url, dict(options))
    options = {k: v for k, v in options.items() if k != "fallback"}
    if fallback is None:
        return RedisStore(primary, **options)
    # FallbackStore fills the Store contract with methods generated from it (at the end of this
    # module), which a type checker cannot follow.
    return cast(Store, FallbackStore(primary, fallback, **options))


class FallbackStore:
    """A Redis store that runs on an embedded store when Redis is unreachable at start-up.

    Every `Store` method goes to whichever store is active.
    """

    def __init__(self, primary_url: str, fallback_url: str, **options: Any):
        from engine.store.redis.store import RedisStore

        if not fallback_url.lower().startswith("sqlite:"):
            raise ValueError(f"the fallback must be a sqlite:/// URL, not {redact(fallback_url)!r}")
        self.primary_url = redact(primary_url)
        """The Redis URL (without password)."""
        self.fallback_url = fallback_url
        """The embedded store's URL used when degraded."""
        self.degraded = False
        """True when Redis was unreachable and the embedded store is in use (console banner)."""
        self.degraded_reason: str | None = None
        """Why the store is degraded, naming host and port (never the password)."""
        self.degraded_since: float | None = None
        """Unix time the store degraded."""
        self._options = options
        self._primary_secret = primary_url
        try:
            self._store: Store = RedisStore(primary_url, **options)
        except StoreUnavailable as exc:
            from engine.store.sqlite.store import SQLiteStore

            self._store = SQLiteStore(fallback_url)
            self.degraded = True
            where = getattr(exc, "where", self.primary_url)
            cause = getattr(exc, "cause", str(exc))
            self.degraded_reason = (
                f"Redis at {where} was unreachable at start-up ({cause}); running on the "
                f"embedded store {redact(fallback_url)}: sessions written now live there. "
                "Restart once Redis is back."
            )
            self.degraded_since = time.time()
            log.warning("store degraded: %s", self.degraded_reason)

    @property
    def url(self) -> str:
        """The active store's URL (without password)."""
        return self._store.url

    @property
    def active(self) -> Store:
        """The store in use."""
        return self._store

    def primary_reachable(self) -> bool:
        """Whether Redis answers now (a restart would go back to it)."""
        if not self.degraded:
            return True
        from engine.store.redis.store import RedisStore

        try:
            RedisStore(self._primary_secret, **self._options).close()
        except StoreError:  # unreachable, or refusing our credentials: a restart would fail
            return False
        return True

    def rebuild_indexes(self) -> dict[str, int]:
        """`RedisStore.rebuild_indexes` when on Redis; nothing to do on the embedded store."""
        rebuild = getattr(self._store, "rebuild_indexes", None)
        return rebuild() if rebuild is not None else {}

    def close(self) -> None:
        self._store.close()


def _delegate(name: str) -> Callable[..., Any]:
    def method(self: FallbackStore, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._store, name)(*args, **kwargs)

    method.__name__ = name
    method.__doc__ = getattr(Store, name).__doc__
    return method


# Every member of the Store contract (all its focused protocols) that FallbackStore does not
# define itself goes to the active store; deriving the list from the contract keeps new methods
# from being forgotten.
for _name in protocol_members(Store):
    if _name not in vars(FallbackStore):
        setattr(FallbackStore, _name, _delegate(_name))
