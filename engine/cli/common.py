"""What every `rewind` command shares: exit codes, the one-line error (`CLIError`), and the
engine on the store a command names (never created by a reading command)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from engine.errors import RewindError, StoreError
from engine.store import redact

if TYPE_CHECKING:
    pass

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_STORE, EXIT_NOT_FOUND, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT_CODES = {
    EXIT_OK: "ok",
    EXIT_REFUSED: "the operation was refused or failed (nothing to roll back, someone else "
    "rolled the session back first, a size limit, a viewer's role, purge not confirmed, a "
    "compensation that is done or leased, …)",
    EXIT_USAGE: "usage error: a missing or malformed argument or setting ($REWIND_FREEZE_*), an "
    "unknown store URL scheme",
    EXIT_STORE: "the store is unreachable, refuses the credentials, is read-only, or is broken "
    "(a corrupt database file, a newer schema)",
    EXIT_NOT_FOUND: "the session, snapshot, compensation or quarantine does not exist",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}


class CLIError(Exception):
    """A failure the CLI reports in one line with its own exit code."""

    def __init__(self, message: str, code: int = EXIT_REFUSED):
        super().__init__(message)
        self.code = code


def _engine(args):
    """The engine on the store the command names. Every command here works on a fleet that
    exists, so a store that does not exist is refused (exit 4, naming the absolute path), never
    created empty: from the wrong folder, "0 looping" would be the worst possible answer. Which
    store was read goes to stderr, so piped output stays clean."""
    from engine import Engine, StoreNotFound

    try:
        engine = Engine.open(args.store, create=False)
    except StoreNotFound as exc:
        raise CLIError(str(exc), EXIT_NOT_FOUND) from exc
    except ValueError as exc:  # an unknown scheme or a malformed URL: the user's to fix
        if isinstance(exc, RewindError):
            raise
        raise CLIError(str(exc), EXIT_USAGE) from exc
    print(f"rewind: store {_store_name(engine.store.url)}", file=sys.stderr)
    return engine


def _store_name(url: str) -> str:
    """The store as people check it: a SQLite file by its absolute path, others by their URL
    with the password masked."""
    from engine.store.urls import store_name

    return store_name(url) if url.lower().startswith("sqlite:") else redact(url)


def _store_failure(exc: BaseException) -> str | None:
    """A one-line description when `exc` says the store itself failed, else None."""
    import sqlite3

    if isinstance(exc, StoreError):
        return str(exc)
    if isinstance(exc, sqlite3.Error):
        text = str(exc)
        if "readonly" in text or "read-only" in text:
            return (f"the store is read-only for this user ({text}); reading commands work, "
                    "this one writes. Run as the file's owner, or copy the database and point "
                    "--store at the copy")
        return f"the SQLite store failed: {text} (is the file damaged? `rewind doctor`)"
    from redis.exceptions import RedisError

    if isinstance(exc, RedisError):
        return f"the Redis store failed: {type(exc).__name__}: {exc}"
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return f"the store failed: {type(exc).__name__}: {exc}"
    return None
