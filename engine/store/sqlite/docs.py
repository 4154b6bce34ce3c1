"""Documents on SQLite: a session's unversioned documents (``docs``: JSON text, or bytes kept
as a BLOB) and the fleet documents no session owns (``fleet_docs``), written alone or inside
another write's transaction (`DocumentRows._doc_put`)."""

from __future__ import annotations

import json
import sqlite3
from functools import lru_cache
from typing import Any

from engine.store.requests import AuditEntry
from engine.store.sqlite.rows import add_audit, add_event, dumps, session_row
from engine.store.sqlite.tx import SQLiteDB


class DocumentRows:
    """The documents of `SQLiteStore`: a session's, and the fleet's.

    Args:
        db: the store's database.
    """

    def __init__(self, db: SQLiteDB) -> None:
        self._db = db

    def doc_put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> None:
        """Set documents of namespace `ns` (None deletes one), unversioned."""
        with self._db.write() as conn:
            self._doc_put(conn, sid, ns, items, now)

    @staticmethod
    def _doc_put(conn: sqlite3.Connection, sid: str, ns: str, items: dict[str, Any],
                 now: float) -> None:
        session_row(conn, sid)
        for key, value in items.items():
            _put_doc(conn, sid, ns, key, value)
        conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now, sid))

    def doc_get(self, sid: str, ns: str, keys: list[str], *,
                prefix: str | None = None) -> dict[str, Any]:
        """The documents among `keys` that exist, and with `prefix` every document under it:
        one statement (the prefix's range beside the first 500 keys)."""
        out: dict[str, Any] = {}
        span = None if prefix is None else [sid, ns, prefix, prefix + "\U0010ffff"]
        for i in range(0, max(len(keys), 1 if span else 0), 500):  # SQLite's parameter limit
            chunk = keys[i : i + 500]
            params: list[Any] = [sid, ns, *chunk] if chunk else []
            sql = _doc_get_sql(len(chunk), span is not None)
            if span is not None:
                params, span = span + params, None
            out.update((k, _doc_value(v)) for k, v in self._db.read(sql, params))
        return out

    def doc_scan(self, sid: str, ns: str, prefix: str = "", *, below: str | None = None,
                 last: int | None = None) -> dict[str, Any]:
        """Every document of `ns` whose key starts with `prefix` (and is less than `below`),
        in key order; with `last`, the last that many, read backwards through the key."""
        end = prefix + "\U0010ffff"
        if below is not None and below < end:
            end = below
        if last is None:
            rows = self._db.read(
                "SELECT key, value FROM docs WHERE session = ? AND ns = ? AND key >= ? "
                "AND key < ? ORDER BY key",
                (sid, ns, prefix, end),
            )
        else:
            rows = self._db.read(
                "SELECT key, value FROM docs WHERE session = ? AND ns = ? AND key >= ? "
                "AND key < ? ORDER BY key DESC LIMIT ?",
                (sid, ns, prefix, end, max(0, last)),
            )
            rows.reverse()
        return {k: _doc_value(v) for k, v in rows}

    # -- fleet documents --------------------------------------------------------------------
    def fleet_docs(self, ns: str) -> dict[str, Any]:
        """Every fleet document of namespace `ns`, in key order."""
        rows = self._db.read("SELECT key, value FROM fleet_docs WHERE ns = ? ORDER BY key", (ns,))
        return {k: json.loads(v) for k, v in rows}

    def fleet_doc_put(self, ns: str, values: dict[str, Any | None], now: float,
                      audit: AuditEntry | None = None) -> None:
        """Set fleet documents of `ns` (None deletes one), and write `audit`, in one
        transaction."""
        encoded = {k: None if v is None else dumps(v) for k, v in values.items()}
        with self._db.write() as conn:
            _write_fleet_docs(conn, ns, encoded, now, audit)

    def fleet_doc_get(self, ns: str, keys: list[str]) -> dict[str, Any]:
        """The fleet documents of `ns` among `keys` that exist, in key order."""
        out: dict[str, Any] = {}
        for i in range(0, len(keys), 500):  # stay under SQLite's bound-parameter limit
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._db.read(
                f"SELECT key, value FROM fleet_docs WHERE ns = ? AND key IN ({marks})",
                (ns, *chunk))
            out.update((k, json.loads(v)) for k, v in rows)
        return dict(sorted(out.items()))

    def fleet_doc_swap(self, ns: str, expect: dict[str, Any | None],
                       values: dict[str, Any | None], now: float,
                       audit: AuditEntry | None = None, feed_only: bool = False) -> bool:
        """Set `values` (and write `audit`) when every key of `expect` holds its value, in one
        transaction; False (nothing written) when one does not."""
        wanted = {k: None if v is None else dumps(v) for k, v in expect.items()}
        encoded = {k: None if v is None else dumps(v) for k, v in values.items()}
        with self._db.write() as conn:  # BEGIN IMMEDIATE: nobody writes between check and set
            for key, value in wanted.items():
                row = conn.execute("SELECT value FROM fleet_docs WHERE ns = ? AND key = ?",
                                   (ns, key)).fetchone()
                if (None if row is None else row[0]) != value:
                    return False
            _write_fleet_docs(conn, ns, encoded, now, audit, feed_only)
        return True


def doc_get_read(sid: str, ns: str, keys: list[str], prefix: str | None
                 ) -> tuple[str, list[Any]]:
    """The statement and parameters of `DocumentRows.doc_get` for at most 500 `keys` (one
    statement: the prefix's range beside the keys), for a caller that reads more with it."""
    params: list[Any] = [sid, ns, *keys] if keys else []
    if prefix is not None:
        params = [sid, ns, prefix, prefix + "\U0010ffff", *params]
    return _doc_get_sql(len(keys), prefix is not None), params


def doc_value(stored: str | bytes) -> Any:
    """A document as `_put_doc` stored it."""
    return _doc_value(stored)


@lru_cache(maxsize=64)
def _doc_get_sql(count: int, scan: bool) -> str:
    """`DocumentRows.doc_get`'s statement for `count` keys, with a prefix's range when `scan`
    (the range first: the keys are optional, the range is not)."""
    keys = ("SELECT key, value FROM docs WHERE session = ? AND ns = ? AND key IN "
            f"({','.join('?' * count)})")
    if not scan:
        return keys
    span = "SELECT key, value FROM docs WHERE session = ? AND ns = ? AND key >= ? AND key < ?"
    return f"{span} UNION ALL {keys}" if count else span


def _put_doc(conn: sqlite3.Connection, sid: str, ns: str, key: str, value: Any) -> None:
    """Set (None: delete) one document: the ``docs`` row holds its JSON text, or bytes as they
    are (a BLOB: the column's TEXT affinity leaves BLOBs alone)."""
    if value is None:
        conn.execute("DELETE FROM docs WHERE session = ? AND ns = ? AND key = ?", (sid, ns, key))
        return
    conn.execute("INSERT OR REPLACE INTO docs(session, ns, key, value) VALUES (?, ?, ?, ?)",
                 (sid, ns, key, doc_text(value)))


def doc_text(value: Any) -> str | bytes:
    """What a ``docs`` row holds for a document: its JSON text, or bytes as they are."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return dumps(value)


def _doc_value(stored: str | bytes) -> Any:
    """A document as `_put_doc` stored it."""
    return stored if isinstance(stored, bytes) else json.loads(stored)


def _write_fleet_docs(conn: Any, ns: str, encoded: dict[str, str | None], now: float,
                      audit: AuditEntry | None, feed_only: bool = False) -> None:
    """Inside the caller's transaction: the audit row (unless `feed_only`) and its feed event,
    then each document set (JSON text) or deleted (None). Shared by a plain put and a swap."""
    if audit is not None:
        if not feed_only:
            add_audit(conn, now, audit.actor, audit.action, None, None, audit.reason,
                      audit.detail)
        add_event(conn, now, None, audit.action, {"actor": audit.actor, **audit.detail})
    for key, value in encoded.items():
        if value is None:
            conn.execute("DELETE FROM fleet_docs WHERE ns = ? AND key = ?", (ns, key))
        else:
            conn.execute(
                "INSERT INTO fleet_docs(ns, key, value, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(ns, key) DO UPDATE SET value = excluded.value, "
                "updated_at = excluded.updated_at",
                (ns, key, value, now),
            )
