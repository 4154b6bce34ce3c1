"""The embedded SQLite store (WAL, several processes on one host)."""

from engine.store.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]
