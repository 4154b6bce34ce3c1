"""Store backends and `open_store(url)`."""

from __future__ import annotations

from typing import Any

from engine.store.base import (
    Retention,
    RollbackRequest,
    SessionCursor,
    SessionFilter,
    StepTicket,
    Store,
)
from engine.store.urls import DEFAULT_URL, redact, resolve

__all__ = [
    "DEFAULT_URL",
    "Retention",
    "RollbackRequest",
    "SessionCursor",
    "SessionFilter",
    "StepTicket",
    "Store",
    "open_store",
    "redact",
    "resolve",
]


def open_store(url: str | None = None, *, create: bool = True, **options: Any) -> Store:
    """Open the store at `url`; None means $REWIND_STORE, else the embedded SQLite default.

    Args:
        url: ``sqlite:///path``, ``sqlite:///:memory:``, ``redis://…``, ``rediss://…`` or
            ``redis+cluster://…``. An empty string is refused (an unset variable pasted into a
            command line must not quietly mean the default).
        create: False for readers: a SQLite file that does not exist is refused with
            StoreNotFound (naming its absolute path) instead of being created empty.
        options: backend options (Redis: ttl, prefix, fallback, …; see the Redis store).

    Returns:
        The open store.

    Raises:
        ValueError: the URL is empty or its scheme is not one Rewind knows. TypeError: not a
            string (a `Path` too: write ``f"sqlite:///{path}"``).
        StoreUnavailable: the store cannot be reached (the message names it, never a password).
        StoreNotFound: `create` is False and the SQLite file does not exist.
    """
    if url is not None and not isinstance(url, str):
        raise TypeError(f"a store URL is a string such as sqlite:///path or redis://host:port/db, "
                        f"not {type(url).__name__} {url!r}")
    if url is not None and not url.strip():
        raise ValueError("the store URL is empty: give sqlite:///path, redis://host:port/db, "
                         "rediss://… or redis+cluster://host:port, or leave it out for "
                         "$REWIND_STORE (else sqlite:///.rewind/rewind.db)")
    url = resolve(url)
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from engine.store.sqlite.store import SQLiteStore

        return SQLiteStore(url, create=create)
    if scheme in {"redis", "rediss", "redis+cluster", "rediss+cluster"}:
        from engine.store.fallback import open_redis

        return open_redis(url, **options)
    raise ValueError(
        f"unknown store URL {redact(url)!r}: use sqlite:///path, redis://host:port/db, "
        "rediss://… or redis+cluster://host:port"
    )
