"""Store backends and `open_store(url)`."""

from __future__ import annotations

import os

from engine.store.base import Retention, StepTicket, Store

__all__ = ["DEFAULT_URL", "Retention", "StepTicket", "Store", "open_store", "redact"]

DEFAULT_URL = "sqlite:///.rewind/rewind.db"


def redact(url: str) -> str:
    """The URL with any password replaced by ***, safe to print or log: the password of the
    user part, `password=` query parameters, and user parts of URLs nested in the query (such
    as ``?fallback=…``). A URL too malformed to parse keeps only its scheme."""
    import re
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url.split(":", 1)[0] + "://***" if "://" in url else "***"
    netloc = parts.netloc
    if password is not None:
        netloc = f"{parts.username or ''}:***@{netloc.rsplit('@', 1)[-1]}"
    query = re.sub(r"(?i)((?:^|&)(?:password|pass|pwd)=)[^&]*", r"\1***", parts.query)
    query = re.sub(r"(://[^/@:&]*):[^@/&]*@", r"\1:***@", query)
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def open_store(url: str | None = None, **options) -> Store:
    """Open the store at `url`; None means $REWIND_STORE, else the embedded SQLite default.

    Raises:
        ValueError: the URL's scheme is not one Rewind knows.
        StoreUnavailable: the store cannot be reached (the message names it, never a password).
    """
    url = url or os.environ.get("REWIND_STORE") or DEFAULT_URL
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        from engine.store.sqlite.store import SQLiteStore

        return SQLiteStore(url)
    if scheme in {"redis", "rediss", "redis+cluster", "rediss+cluster"}:
        from engine.store.fallback import open_redis

        return open_redis(url, **options)
    raise ValueError(
        f"unknown store URL {redact(url)!r}: use sqlite:///path, redis://host:port/db, "
        "rediss://… or redis+cluster://host:port"
    )
