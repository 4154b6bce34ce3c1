"""The embedded SQLite store (WAL, several processes on one host)."""

from typing import TYPE_CHECKING

from engine.store.sqlite.store import SQLiteStore

__all__ = ["SQLiteStore"]

if TYPE_CHECKING:
    from engine.store.base import Store

    def _matches_the_contract(store: SQLiteStore) -> Store:
        # mypy checks every Store method against SQLiteStore's here: a parameter or return type
        # that drifts from the protocol is a type error (tests/test_store_protocol.py checks
        # names, kinds and defaults at run time).
        return store
