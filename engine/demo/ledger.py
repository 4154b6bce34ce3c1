"""The demo's outside world: loyalty points, warehouse stock and support tickets.

Side-effecting demo tools change this world, and the compensation handlers undo those changes.
It stands in for the external systems a real runtime talks to, so it lives *outside* the Rewind
store: a session variable would be the wrong place, because a rollback reverts variables and the
handler would forget that it already refunded.

Idempotency works as it does against a real payment or ticketing API:

* every forward effect carries a reference (`ref`) chosen by the runtime before the call, the way
  an ``Idempotency-Key`` header is; applying the same ref twice changes nothing;
* every compensation is recorded under the engine's idempotency key; a handler that sees a key
  again (a retry after a crash, a second worker racing for an expired lease) does nothing, and a
  forward effect is reversed at most once whatever key asks for it.

The ledger is a small SQLite file (WAL, one connection per thread, the store's own transaction
helper `engine.store.sqlite.tx.SQLiteDB`), so the worker processes of one
demo share it; ``:memory:`` keeps it inside one process. Every handler call is logged, which is how
the tests prove that each compensation ran exactly once.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from engine import resolve_url

# The one exemption from "no store access outside the engine" (tests/test_one_door.py): these are
# SQLite helpers (connections, WAL, write transactions, the script runner, the URL's path) for the
# ledger's OWN database, a stand-in for the outside world that must not live in the Rewind store.
# Nothing here reads or writes the Rewind store; a second copy of the helpers would only drift.
from engine.store.sqlite.schema import run_script
from engine.store.sqlite.tx import SQLiteDB, path_from_url

_SCHEMA = """
CREATE TABLE IF NOT EXISTS effects (
    ref TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    session TEXT NOT NULL,
    subject TEXT NOT NULL,
    amount REAL NOT NULL,
    at REAL NOT NULL,
    reversed_by TEXT
);
CREATE TABLE IF NOT EXISTS reversals (
    idem_key TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    ref TEXT NOT NULL,
    at REAL NOT NULL,
    pid INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS handler_calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    idem_key TEXT NOT NULL,
    name TEXT NOT NULL,
    applied INTEGER NOT NULL,
    at REAL NOT NULL,
    pid INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS handler_calls_key ON handler_calls(idem_key);
"""


@dataclass(frozen=True)
class Effect:
    """One change made to the outside world by a side-effecting tool."""

    ref: str
    """Runtime-chosen reference of the request (its idempotency key towards the world)."""
    kind: str
    """points_deducted, stock_reserved or ticket_opened."""
    session: str
    subject: str
    """Customer, SKU or ticket the effect applies to."""
    amount: float
    reversed_by: str | None
    """Idempotency key of the compensation that undid it, None while it stands."""


class Ledger:
    """Simulated external systems shared by the demo's workers, idempotent by key."""

    def __init__(self, path: str):
        self.path = path
        self.memory = path == ":memory:"
        self._db = SQLiteDB(path, name=f"the demo ledger {path}")
        with self._db.write() as conn:
            run_script(conn, _SCHEMA)

    @classmethod
    def for_store(cls, url: str | None) -> Ledger:
        """The default ledger for a store URL: a file beside a SQLite store file, in memory for
        ``sqlite:///:memory:``, else ``.rewind/demo-ledger.db`` in the working directory."""
        return cls(default_path(url))

    def close(self) -> None:
        """Close this thread's connection (reopened on next use)."""
        self._db.close()

    # -- the world --------------------------------------------------------------------------
    def apply(self, ref: str, kind: str, session: str, subject: str, amount: float) -> bool:
        """Apply a forward effect once per `ref`. Returns False when `ref` was already applied."""
        with self._db.write() as conn:
            cur = conn.execute(
                "INSERT OR IGNORE INTO effects(ref, kind, session, subject, amount, at) "
                "VALUES (?, ?, ?, ?, ?, ?)", (ref, kind, session, subject, amount, time.time()),
            )
            return cur.rowcount == 1

    def reverse(self, name: str, ref: str, idem_key: str) -> bool:
        """Undo the effect `ref` for compensation `idem_key`, at most once.

        Returns:
            True when this call changed the world, False for a replay (the key was seen before,
            or the effect was already reversed, or never applied).
        """
        with self._db.write() as conn:
            seen = conn.execute(
                "SELECT 1 FROM reversals WHERE idem_key = ?", (idem_key,)
            ).fetchone()
            applied = False
            if seen is None:
                conn.execute(
                    "INSERT INTO reversals(idem_key, name, ref, at, pid) VALUES (?, ?, ?, ?, ?)",
                    (idem_key, name, ref, time.time(), os.getpid()),
                )
                cur = conn.execute(
                    "UPDATE effects SET reversed_by = ? WHERE ref = ? AND reversed_by IS NULL",
                    (idem_key, ref),
                )
                applied = cur.rowcount == 1
            conn.execute(
                "INSERT INTO handler_calls(idem_key, name, applied, at, pid) "
                "VALUES (?, ?, ?, ?, ?)",
                (idem_key, name, int(applied), time.time(), os.getpid()),
            )
            return applied

    # -- reading (tests, summaries) ---------------------------------------------------------
    def effects(self, session: str | None = None) -> list[Effect]:
        """Every forward effect, oldest first."""
        clause, params = ("WHERE session = ?", (session,)) if session else ("", ())
        rows = self._db.read(
            "SELECT ref, kind, session, subject, amount, reversed_by FROM effects "
            f"{clause} ORDER BY at, ref", params,
        )
        return [Effect(*row) for row in rows]

    def handler_calls(self) -> dict[str, int]:
        """How many times a handler was invoked per idempotency key."""
        rows = self._db.read("SELECT idem_key, COUNT(*) FROM handler_calls GROUP BY idem_key")
        return dict(rows)

    def reversals(self) -> dict[str, str]:
        """Idempotency key -> the effect ref it reversed."""
        rows = self._db.read("SELECT idem_key, ref FROM reversals")
        return dict(rows)


def default_path(url: str | None) -> str:
    """Where the ledger of a demo on store `url` lives (see `Ledger.for_store`)."""

    url = resolve_url(url)
    if url.lower().startswith("sqlite:"):
        path = path_from_url(url)
        if path == ":memory:":
            return ":memory:"
        if path:
            return f"{path}.demo-ledger"
    return os.path.join(".rewind", "demo-ledger.db")
