"""Unversioned documents: the part of the storage contract integrations and fleet settings keep
their own state in.

Part of `engine.store.base.Store` (see there for the model and the rules every method follows).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from engine.store.requests import AuditEntry

RawDocument = bytes
"""A session document stored as bytes, not JSON (`DocumentStore`)."""


@runtime_checkable
class DocumentStore(Protocol):
    """Unversioned documents: a session's (rollbacks leave them alone) and the fleet's (no
    session owns them).

    A session's document is JSON data, or `bytes` (`RawDocument`): bytes are kept as they are
    (SQLite: a BLOB; Redis, whose client reads replies as text: base64 text marked as bytes) and
    read back as `bytes`, so an integration holding serialized data (LangGraph's channel values)
    neither encodes it as text nor parses it back. Documents stored before bytes were allowed
    read as they always did."""

    def doc_put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> None:
        """Set documents of namespace `ns` (None deletes one; `bytes` are kept as they are).
        Unlike `put`, documents are not
        versioned and rollbacks do not touch them: integrations keep their own history here
        (e.g. LangGraph checkpoints). Atomic.

        Raises:
            UnknownSession: no such session.
        """
        ...

    def doc_get(self, sid: str, ns: str, keys: list[str], *,
                prefix: str | None = None) -> dict[str, Any]:
        """The documents among `keys` that exist (`bytes` for one stored as bytes); with
        `prefix`, also every document whose key starts with it (as `doc_scan` finds them), in
        the same read: a record and the documents filed under it cost one round trip."""
        ...

    def doc_scan(self, sid: str, ns: str, prefix: str = "", *, below: str | None = None,
                 last: int | None = None) -> dict[str, Any]:
        """Every document of `ns` whose key starts with `prefix` (and is less than `below`
        when given), in key order; with `last`, only the last that many of them (a page read
        newest first reads no more than it returns on SQLite)."""
        ...

    def fleet_docs(self, ns: str) -> dict[str, Any]:
        """Every fleet document of namespace `ns` (key -> JSON value), in key order.

        Fleet documents hold small fleet-wide settings every process must see (tool
        quarantines, the alert worker's cursor). No session owns them: deleting or purging
        sessions never touches them.
        """
        ...

    def fleet_doc_put(self, ns: str, values: dict[str, Any | None], now: float,
                      audit: AuditEntry | None = None) -> None:
        """Set fleet documents of namespace `ns` (a value of None deletes the key), all in one
        atomic write; the values must be JSON-representable. `now` is the time of the write.
        `audit`, when given, is written in that same atomic write (an audit row without a
        session, and its feed event).
        """
        ...

    def fleet_doc_get(self, ns: str, keys: list[str]) -> dict[str, Any]:
        """The fleet documents of namespace `ns` among `keys` that exist (key -> JSON value):
        one read that costs what it returns, however many documents the namespace holds."""
        ...

    def fleet_doc_swap(self, ns: str, expect: dict[str, Any | None],
                       values: dict[str, Any | None], now: float,
                       audit: AuditEntry | None = None, feed_only: bool = False) -> bool:
        """Compare and set fleet documents of namespace `ns`: when every key of `expect` holds
        exactly the value given (None: the key is absent), set `values` (None deletes a key)
        and write `audit`, all in one atomic write, and return True; otherwise write nothing
        and return False. Values are compared by their canonical JSON, so a value read with
        `fleet_docs` or `fleet_doc_get` and passed back unchanged matches. Lets several
        processes change one shared record (an incident) without losing each other's changes.
        """
        ...
