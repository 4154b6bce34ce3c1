"""Documents and multi-part writes: what integrations keep beside a session's history, written
through the engine like everything else (`Engine.put_documents`, `Engine.write_session`, …).

Integrations (the LangGraph saver and guard, the MCP proxy, the alert worker) keep state of
their own in the store: unversioned documents of a session (LangGraph's checkpoints), versioned
values of a namespace of their own (the live checkpoint, restored by every rollback), and fleet
documents no session owns (the alert worker's cursor). Here each such write is checked against
the engine's size limits (`engine.limits`) before the store is touched, and several parts that
belong together go to the store as one atomic write (`Store.write_session`), so a failure
leaves none of them behind.

What is checked, and against which limit:

- every document, with its key: ``Limits.document_bytes`` (its JSON text, stored as given; a
  document given as `bytes` is stored as those bytes and measured by them);
- the values of one versioned write: ``Limits.variables_bytes``, their keys ``name_chars``;
- every chat message: as `Session.append_messages` checks it (``message_bytes``);
- a snapshot label: ``name_chars``.

The namespaces ``var`` and ``mem`` belong to session variables and memory; they are written
through `Session.set_vars` and `Session.memory` only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.ids import validate_session_id
from engine.limits import bytes_within, canonical_within, chat_message, check_text, json_within
from engine.records import SessionInfo, SnapshotNode
from engine.runtime import Runtime
from engine.store.base import Retention, SessionWrite

RESERVED_VALUES = ("var", "mem")
"""Versioned namespaces of the engine's own: variables and memory."""


def _namespace(ns: Any, what: str) -> str:
    if not isinstance(ns, str) or not ns.isidentifier():
        raise ValueError(f"a {what} namespace must be an identifier (letters, digits, _), "
                         f"not {ns!r}")
    return ns


def _key(key: Any, what: str) -> str:
    if not isinstance(key, str) or not key:
        raise ValueError(f"a {what} key must be a non-empty string, not {key!r}")
    return key


def checked_documents(rt: Runtime, ns: str, items: Mapping[str, Any]) -> dict[str, Any]:
    """`items`, each document (with its key) within ``Limits.document_bytes``; None (delete)
    passes as it is.

    Raises:
        ValueError: bad namespace or key. SizeLimitExceeded: a document over the limit.
        TypeError: a document with no JSON form.
    """
    _namespace(ns, "document")
    if not isinstance(items, Mapping):
        raise TypeError(f"documents must be a dict of key -> value, not {type(items).__name__}")
    limit = rt.limits.document_bytes
    out: dict[str, Any] = {}
    for key, value in items.items():
        _key(key, "document")
        if value is None:
            out[key] = None
            continue
        if isinstance(value, (bytes, bytearray, memoryview)):
            out[key] = bytes_within(key, bytes(value), limit, f"document {key[:80]!r}",
                                    "document_bytes")
            continue
        json_within([key, value], limit, f"document {key[:80]!r}", "document_bytes")
        out[key] = value
    return out


def checked_values(rt: Runtime, ns: str, items: Mapping[str, Any]) -> dict[str, Any]:
    """`items` of a versioned namespace as canonical data, within ``Limits.variables_bytes``.

    Raises:
        ValueError: bad or reserved namespace, bad key. SizeLimitExceeded: over a limit.
    """
    _namespace(ns, "key-value")
    if ns in RESERVED_VALUES:
        raise ValueError(f"namespace {ns!r} holds the session's "
                         f"{'variables' if ns == 'var' else 'memory'}; write it with "
                         f"{'Session.set_vars' if ns == 'var' else 'Session.memory'}")
    limits = rt.limits
    for key in items:
        check_text(_key(key, "value"), limits.name_chars, "a value's key", "name_chars")
    clean, _ = canonical_within(dict(items), limits.variables_bytes, "values", "variables_bytes")
    return clean


def session_info(rt: Runtime, sid: str) -> SessionInfo | None:
    """The stored summary of session `sid`, None when there is no such session."""
    return rt.store.get_session(validate_session_id(sid))


def get_documents(rt: Runtime, sid: str, ns: str, keys: Sequence[str]) -> dict[str, Any]:
    """The documents among `keys` that exist in namespace `ns` of session `sid`."""
    return rt.store.doc_get(validate_session_id(sid), _namespace(ns, "document"), list(keys))


def scan_documents(rt: Runtime, sid: str, ns: str, prefix: str = "", *,
                   below: str | None = None, last: int | None = None) -> dict[str, Any]:
    """Every document of namespace `ns` of session `sid` whose key starts with `prefix` (and
    is less than `below`), in key order; with `last`, only the last that many."""
    if last is not None and (not isinstance(last, int) or last < 0):
        raise ValueError(f"last must be a count of documents (0 or more), not {last!r}")
    return rt.store.doc_scan(validate_session_id(sid), _namespace(ns, "document"), prefix,
                             below=below, last=last)


def put_documents(rt: Runtime, sid: str, ns: str, items: Mapping[str, Any]) -> None:
    """Set documents of namespace `ns` of session `sid` (None deletes one), in one atomic
    write, after the size checks.

    Raises:
        UnknownSession, ValueError, SizeLimitExceeded, TypeError.
    """
    sid = validate_session_id(sid)
    clean = checked_documents(rt, ns, items)
    if clean:
        rt.store.doc_put(sid, ns, clean, rt.clock())


def fleet_documents(rt: Runtime, ns: str) -> dict[str, Any]:
    """Every fleet document of namespace `ns`, in key order."""
    return rt.store.fleet_docs(_namespace(ns, "document"))


def put_fleet_documents(rt: Runtime, ns: str, values: Mapping[str, Any]) -> None:
    """Set fleet documents of namespace `ns` (None deletes one) in one atomic write, after the
    size checks.

    Raises:
        ValueError, SizeLimitExceeded, TypeError.
    """
    clean = checked_documents(rt, ns, values)
    if any(isinstance(v, bytes) for v in clean.values()):
        raise TypeError("a fleet document must be JSON data, not bytes")
    if clean:
        rt.store.fleet_doc_put(ns, clean, rt.clock())


def get_values(rt: Runtime, sid: str, ns: str) -> dict[str, Any]:
    """Current values of versioned namespace `ns` on the live line of session `sid`."""
    return rt.store.get_all(validate_session_id(sid), _namespace(ns, "key-value"))


def put_values(rt: Runtime, sid: str, ns: str, items: Mapping[str, Any]) -> int:
    """Set keys of versioned namespace `ns` (None deletes one): a rollback restores them.

    Returns:
        The session's epoch.

    Raises:
        UnknownSession, ValueError, SizeLimitExceeded, TypeError.
    """
    sid = validate_session_id(sid)
    clean = checked_values(rt, ns, items)
    return rt.store.put(sid, ns, clean, rt.clock())


def write_session(
    rt: Runtime,
    sid: str,
    *,
    messages: Sequence[Mapping[str, Any]] = (),
    messages_if_empty: bool = False,
    values: Mapping[str, Mapping[str, Any]] | None = None,
    snapshot: str | None = None,
    documents: Mapping[str, Mapping[str, Any]] | None = None,
    stamp: tuple[str, str] | None = None,
    retention: Retention | None = None,
    create: dict[str, Any] | None = None,
) -> tuple[int, SnapshotNode | None]:
    """Messages, versioned values, a snapshot and documents of session `sid` in one atomic
    write (see `Store.write_session`): every part is checked first, then all are written or
    none is. The snapshot retires older ones by `retention` (None: the engine's). `create`
    (canonical meta, checked by the caller) creates the session when it is missing.

    Raises:
        UnknownSession: no such session (nothing written). ValueError: a bad part, or a
        `stamp` without a snapshot or naming no dict among `documents`. SizeLimitExceeded: a
        part over its limit (nothing written). TypeError: a part with no JSON form.
    """
    sid = validate_session_id(sid)
    limits = rt.limits
    write: SessionWrite = {}
    if messages:
        msgs = []
        for m in messages:
            if not isinstance(m, Mapping) or "role" not in m:
                raise ValueError(f"a message must be a dict with a role, not {m!r:.200}")
            extra = {k: v for k, v in m.items() if k not in ("role", "content")}
            msgs.append(chat_message(m["role"], m.get("content"), extra, limits))
        write["messages"] = msgs
        write["messages_if_empty"] = bool(messages_if_empty)
    if values:
        write["values"] = {ns: checked_values(rt, ns, items) for ns, items in values.items()}
    if snapshot is not None:
        if not isinstance(snapshot, str):
            raise TypeError("a snapshot label must be a string")
        write["snapshot"] = check_text(snapshot, limits.name_chars, "a snapshot label",
                                       "name_chars")
    if documents:
        write["documents"] = {ns: checked_documents(rt, ns, items)
                              for ns, items in documents.items()}
    if stamp is not None:
        ns, key = stamp
        if snapshot is None or not isinstance(write.get("documents", {}).get(ns, {}).get(key),
                                              dict):
            raise ValueError(f"the stamp {stamp!r} needs a snapshot and a document that is a "
                             "dict among the documents")
        write["stamp"] = (ns, key)
    if create is not None:
        write["create"] = create
    return rt.store.write_session(sid, write, rt.clock(), retention or rt.retention)
