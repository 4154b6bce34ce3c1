"""Documents and multi-part writes: what integrations keep beside a session's history, written
through the engine like everything else (`Engine.documents.put`,
`Engine.documents.write_session`, …).

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
from engine.types import FACETS, SnapshotKind

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


def checked_meta(rt: Runtime, meta: Any) -> dict | None:
    """`meta` as canonical data, within ``Limits.meta_bytes``, its facets strings.

    Raises:
        TypeError: not a dict, not representable as JSON, or a facet (tenant, scenario,
        prompt_version, locale) that is not a string. SizeLimitExceeded: over its limit.
    """
    if meta is not None and not isinstance(meta, dict):
        raise TypeError("meta must be a dict")
    for key in (*FACETS, "locale"):
        # The fleet is filtered, indexed and quarantined by these: one rule on every store.
        value = (meta or {}).get(key)
        if value is not None and not isinstance(value, str):
            raise TypeError(f"meta {key} must be a string (or left out), not "
                            f"{type(value).__name__} {value!r:.80}")
    if meta:
        meta, _ = canonical_within(meta, rt.limits.meta_bytes, "meta", "meta_bytes")
    return meta


def session_info(rt: Runtime, sid: str) -> SessionInfo | None:
    """The stored summary of session `sid`, None when there is no such session."""
    return rt.store.get_session(validate_session_id(sid))


def get_documents(rt: Runtime, sid: str, ns: str, keys: Sequence[str], *,
                  prefix: str | None = None) -> dict[str, Any]:
    """The documents among `keys` that exist in namespace `ns` of session `sid`, and with
    `prefix` every document whose key starts with it, in one read."""
    if prefix is not None and not isinstance(prefix, str):
        raise TypeError(f"a document key prefix must be a string, not {prefix!r}")
    return rt.store.doc_get(validate_session_id(sid), _namespace(ns, "document"), list(keys),
                            prefix=prefix)


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


def get_session_values(rt: Runtime, sid: str, ns: str
                       ) -> tuple[SessionInfo | None, dict[str, Any]]:
    """The summary of session `sid` (None: no such session) and the current values of its
    versioned namespace `ns`, in one read."""
    return rt.store.get_session_values(validate_session_id(sid), _namespace(ns, "key-value"))


def get_session_documents(rt: Runtime, sid: str, ns: str, doc_ns: str, keys: Sequence[str], *,
                          prefix: str | None = None
                          ) -> tuple[tuple[str | None, int, int] | None, dict[str, Any],
                                     dict[str, Any]]:
    """Where session `sid` is (head snapshot id, epoch, live message count), its values of
    `ns` and documents of `doc_ns`, in one read (`Store.get_session_docs`)."""
    if prefix is not None and not isinstance(prefix, str):
        raise TypeError(f"a document key prefix must be a string, not {prefix!r}")
    return rt.store.get_session_docs(
        validate_session_id(sid), _namespace(ns, "key-value"), _namespace(doc_ns, "document"),
        list(keys), prefix=prefix)


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
    expect: tuple[str | None, int] | None = None,
) -> tuple[int, SnapshotNode | None]:
    """Messages, versioned values, a snapshot and documents of session `sid` in one atomic
    write (see `Store.write_session`): every part is checked first, then all are written or
    none is. The snapshot retires older ones by `retention` (None: the engine's). `create`
    (canonical meta, checked by the caller) creates the session when it is missing; with
    `expect` (snapshot id, epoch) the write happens only at that epoch with that newest manual
    snapshot (`Store.write_session`).

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
    if expect is not None:
        head, epoch = expect
        if (head is not None and not isinstance(head, str)) or type(epoch) is not int:
            raise TypeError(f"expect must be (head snapshot id or None, epoch), not {expect!r}")
        write["expect"] = (head, epoch)
    return rt.store.write_session(sid, write, rt.clock(), retention or rt.retention)


class Documents:
    """`engine.documents`: the one door integrations use for state of their own beside a
    session's history. Every write is size-checked before the store is touched, and the parts of
    one change are written atomically; see the module docstring for what is checked."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt

    def get(self, sid: str, ns: str, keys: Sequence[str], *,
            prefix: str | None = None) -> dict[str, Any]:
        """The documents among `keys` that exist in namespace `ns` of session `sid`; with
        `prefix`, also every document whose key starts with it (as `scan` finds them), in the
        same read. Documents are unversioned (rollbacks leave them alone): integrations keep
        their own history there. A document is JSON data, or `bytes` when it was stored as
        bytes.

        Raises:
            InvalidSessionId: bad id. ValueError: `ns` is not an identifier.
        """
        return get_documents(self._rt, sid, ns, keys, prefix=prefix)

    def scan(self, sid: str, ns: str, prefix: str = "", *, below: str | None = None,
             last: int | None = None) -> dict[str, Any]:
        """Every document of namespace `ns` of session `sid` whose key starts with `prefix`, in
        key order ({} for an unknown session). `below` keeps the keys less than it; `last`
        keeps only the last that many (a page of the newest, read without the rest on SQLite).

        Raises:
            InvalidSessionId: bad id. ValueError: `ns` is not an identifier, or `last` is not
            a count.
        """
        return scan_documents(self._rt, sid, ns, prefix, below=below, last=last)

    def put(self, sid: str, ns: str, items: Mapping[str, Any]) -> None:
        """Set documents of namespace `ns` of session `sid` (a value of None deletes one), in
        one atomic write; each document is checked against ``Limits.document_bytes`` first. A
        document is JSON data, or `bytes` kept as they are; `get` gives bytes back.

        Raises:
            UnknownSession: no such session. ValueError: bad namespace or key.
            SizeLimitExceeded: a document over its limit (nothing written). TypeError: a
            document with no JSON form.
        """
        put_documents(self._rt, sid, ns, items)

    def fleet(self, ns: str) -> dict[str, Any]:
        """Every fleet document of namespace `ns` (small fleet-wide state no session owns, such
        as the alert worker's cursor), in key order.

        Raises:
            ValueError: `ns` is not an identifier.
        """
        return fleet_documents(self._rt, ns)

    def put_fleet(self, ns: str, values: Mapping[str, Any]) -> None:
        """Set fleet documents of namespace `ns` (None deletes one) in one atomic write, each
        checked against ``Limits.document_bytes`` first.

        Raises:
            ValueError: bad namespace or key. SizeLimitExceeded: a document over its limit
            (nothing written). TypeError: a document with no JSON form.
        """
        put_fleet_documents(self._rt, ns, values)

    def values(self, sid: str, ns: str) -> dict[str, Any]:
        """Current values of versioned namespace `ns` on the live line of session `sid` ({} for
        an unknown session); a rollback restores them as they were at its snapshot.

        Raises:
            InvalidSessionId: bad id. ValueError: `ns` is not an identifier.
        """
        return get_values(self._rt, sid, ns)

    def session_values(self, sid: str, ns: str) -> tuple[SessionInfo | None, dict[str, Any]]:
        """`Engine.session_info` and `values` in one read: the summary of session `sid` (None
        when there is no such session) and the current values of its versioned namespace `ns`
        ({} then). What an integration reads first on every turn.

        Raises:
            InvalidSessionId: bad id. ValueError: `ns` is not an identifier.
        """
        return get_session_values(self._rt, sid, ns)

    def newest_snapshots(self, sid: str, label_prefix: str, *, kind: SnapshotKind = "manual",
                         limit: int = 1) -> list[tuple[str, str]]:
        """(id, label) of the newest `limit` snapshots of `kind` on session `sid`'s live line
        whose label starts with `label_prefix` (retired ones count), newest first ([] for an
        unknown session): an integration that labels its snapshots finds what a rollback left
        live (LangGraph's live checkpoint). It costs the snapshots taken since.

        Raises:
            InvalidSessionId: bad id. TypeError: `label_prefix` is not a string, or `limit`
            not an integer.
        """
        if not isinstance(label_prefix, str):
            raise TypeError(f"a label prefix must be a string, not {label_prefix!r}")
        if type(limit) is not int:
            raise TypeError(f"limit must be an integer, not {limit!r}")
        return self._rt.store.newest_snapshots(validate_session_id(sid), kind, label_prefix,
                                               limit)

    def session_documents(self, sid: str, ns: str, doc_ns: str, keys: Sequence[str], *,
                          prefix: str | None = None
                          ) -> tuple[tuple[str | None, int, int] | None, dict[str, Any],
                                     dict[str, Any]]:
        """In one read (one statement on SQLite): where session `sid` is, as (head snapshot
        id, epoch, live message count) (`SessionInfo.head`, ``.epoch``, ``.messages``; None
        when there is no such session, with {} and {}), the current values of its versioned
        namespace `ns` (as `values`), and its documents of namespace `doc_ns` among `keys`, with
        `prefix` also every document under it (as `get`). For a reader that can guess which
        documents the values will name: a warm read of LangGraph's latest checkpoint.

        Raises:
            InvalidSessionId: bad id. ValueError: a namespace is not an identifier.
        """
        return get_session_documents(self._rt, sid, ns, doc_ns, keys, prefix=prefix)

    def put_values(self, sid: str, ns: str, items: Mapping[str, Any]) -> int:
        """Set keys of versioned namespace `ns` of session `sid` (None deletes one) in one
        write, checked like `Session.set_vars`. ``var`` and ``mem`` are refused: they hold the
        session's variables and memory.

        Returns:
            The session's epoch.

        Raises:
            UnknownSession: no such session. ValueError: bad or reserved namespace, bad key.
            SizeLimitExceeded: over ``Limits.variables_bytes`` (nothing written).
        """
        return put_values(self._rt, sid, ns, items)

    def write_session(
        self,
        sid: str,
        *,
        messages: Sequence[Mapping[str, Any]] = (),
        messages_if_empty: bool = False,
        values: Mapping[str, Mapping[str, Any]] | None = None,
        snapshot: str | None = None,
        documents: Mapping[str, Mapping[str, Any]] | None = None,
        stamp: tuple[str, str] | None = None,
        retention: Retention | None = None,
        create: Mapping[str, Any] | None = None,
        expect: tuple[str | None, int] | None = None,
    ) -> tuple[int, SnapshotNode | None]:
        """Several writes to session `sid` as one atomic write: all happen, or none.

        With `create` (meta, as `Engine.session` takes it), a missing session is created first
        and an existing one gets the keys merged into its meta (on SQLite in the same
        transaction, so a new thread's first write is one transaction; elsewhere just before).

        In this order: `messages` appended to the live line (only when it holds none yet, with
        `messages_if_empty`), `values` set (namespace -> items, as `put_values`), a manual
        snapshot labelled `snapshot` taken (older ones retired by `retention`, None: the
        engine's), `documents` set (namespace -> items, as `put`). The document that `stamp`
        (namespace, key) names records the snapshot: its ``snap`` (id), ``msgs`` (live message
        count) and ``epoch``. Every part is size-checked before the store is touched. With
        `expect` (snapshot id, epoch: the newest manual snapshot and `SessionInfo.epoch` as the
        caller last saw them), nothing is written unless the session is still there: a caller
        that decided what to write from an earlier read need not read again (a rollback moves
        the epoch, a manual snapshot the newest one, a step snapshot neither; a session
        `create` makes is at (None, 0)).

        Returns:
            (the session's epoch, the snapshot taken or None).

        Raises:
            UnknownSession: no such session (and no `create`). ValueError: a bad part, or a
            stamp without a snapshot or naming no dict among `documents`. SizeLimitExceeded: a
            part over its limit. TypeError: `create` is not a dict, or a facet in it is not a
            string. RollbackConflict: the session is not at `expect`. Nothing is written
            when any of these is raised.
        """
        return write_session(
            self._rt, sid, messages=messages, messages_if_empty=messages_if_empty,
            values=values, snapshot=snapshot, documents=documents, stamp=stamp,
            retention=retention, expect=expect,
            create=None if create is None else (checked_meta(self._rt, dict(create)) or {}))

    def live_messages(self, sid: str, *, since: int = 0,
                      until: int | None = None) -> list[dict[str, Any]]:
        """The messages on the live line of session `sid` from position `since` on (0: all;
        `SessionInfo.messages` counts them), before position `until` (None: to the end), oldest
        first, [] for an unknown session. Reading a span costs what it returns, however long
        the history.

        Raises:
            InvalidSessionId: bad id.
        """
        return self._rt.store.live_messages(validate_session_id(sid), since=since, until=until)

    def live_tail(self, sid: str, ns: str, last: int
                  ) -> tuple[int, int, dict[str, Any], list[dict[str, Any]]] | None:
        """In one consistent read (one round trip): session `sid`'s epoch, its live message
        count (`SessionInfo.messages`), the values of versioned namespace `ns` (as `values`)
        and its last `last` live messages, oldest first (as `live_messages`); None for an
        unknown session. A chat integration's read of the newest items, in one store call.

        Raises:
            InvalidSessionId: bad id. ValueError: `ns` is not an identifier, or `last` is not
            a non-negative integer.
        """
        if type(last) is not int or last < 0:
            raise ValueError(f"last must be a non-negative integer, not {last!r}")
        return self._rt.store.live_tail(validate_session_id(sid), _namespace(ns, "key-value"),
                                        last)

    def record_refusal(self, sid: str, tool: str, args: Any, reason: str) -> int:
        """Record on session `sid`'s timeline a call to `tool` that an integration's own guard
        refused before it ran (the MCP proxy's loop block): a step that ended in error, its
        text ``refused by Rewind: <reason>``, no snapshot. The loop detector never counts it, so
        a refused call is never evidence of a loop. Returns its step number.

        Raises:
            UnknownSession: no such session. SizeLimitExceeded: `args` over its limit.
        """
        from engine.fleet.quarantine import refuse_call

        return refuse_call(self._rt, sid, tool, args, reason)
