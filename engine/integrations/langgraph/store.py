"""A LangGraph store on Rewind session memory: long-term facts that a rollback undoes.

    from engine import Engine
    from engine.integrations.langgraph import RewindSaver, RewindStore

    engine = Engine.open("sqlite:///.rewind/rewind.db")
    store = RewindStore(engine.session("agent-memory"))
    graph = builder.compile(checkpointer=RewindSaver(engine), store=store)

    store.put(("users", "u1"), "home", {"text": "lives in Denver"})
    store.get(("users", "u1"), "home").value          # {"text": "lives in Denver"}
    store.search(("users",), query="where does u1 live?")

**Items are keyed facts.** ``put(namespace, key, value)`` writes one memory of the session with
``s.memory.add(text, key="<namespace>/<key>")`` (labels joined by ``/``; a ``/`` or ``%`` inside a
label is percent-escaped), so a newer value replaces the older one exactly, the way LangGraph's
own stores overwrite by namespace and key: the older memory is kept, marked invalid by ``key``,
and listed in the session's corrections. The value itself travels in the memory's meta and comes
back as it was put. A keyed memory is never pruned by decay nor evicted from the short-term
buffer; ``delete`` forgets it.

**Rollback wins.** The memories are session state: rolling the session back (from the console,
the CLI or the loop detector) removes what was put after the target snapshot and brings back the
values it overwrote or deleted, and the next ``get`` or ``search`` (in any process) sees that.

**Search is the memory's hybrid retrieval.** With a ``query``, items under the namespace prefix are
ranked by ``s.memory.recall`` (BM25 + dense, fused; a search counts as a recall of the items it
returns); without one they are listed newest first. The text searched is the value's ``text``,
``content`` or ``memory`` string when it has one, the fields named by ``index=[...]`` at ``put``,
or else the value as JSON; ``index=False`` keeps an item out of query results. ``filter`` matches
top-level value fields by equality or with ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``.
TTLs are not supported (``supports_ttl`` is False).

``batch`` runs in the caller's thread; ``abatch`` runs it in a worker thread
(`engine.integrations.threads`), so the store's I/O and the embedding model never stall the event
loop. Each operation is one read of the session's event feed and at most one
write. A value must be JSON and fit the engine's ``Limits.meta_bytes``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from engine.integrations.threads import off_loop
from engine.memory.session import Memory
from engine.sessions.session import Session

__all__ = ["RewindStore", "fact_key"]

META = "langgraph_store"
"""The memory meta field holding the item: namespace, key, value, first put time, index flag."""
TEXT_FIELDS = ("text", "content", "memory")


def _escape(label: str) -> str:
    return label.replace("%", "%25").replace("/", "%2F")


def fact_key(namespace: tuple[str, ...], key: str) -> str:
    """The memory key of a store item: ``"<namespace>/<key>"`` (labels percent-escaped)."""
    return "/".join(_escape(part) for part in (*namespace, key))


def _prefix(namespace_prefix: tuple[str, ...]) -> str:
    return "".join(_escape(part) + "/" for part in namespace_prefix)


def _text(value: dict[str, Any], index: Any) -> str:
    """What retrieval reads for a value."""
    if isinstance(index, list) and index:
        parts = [value.get(field) for field in index]
        found = [p if isinstance(p, str) else json.dumps(p, ensure_ascii=False) for p in parts
                 if p is not None]
        if found:
            return "\n".join(found)
    for field in TEXT_FIELDS:
        if isinstance(value.get(field), str) and value[field].strip():
            return str(value[field])
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _when(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)


_OPS = {
    "$eq": lambda a, b: a == b,
    "$ne": lambda a, b: a != b,
    "$gt": lambda a, b: a is not None and a > b,
    "$gte": lambda a, b: a is not None and a >= b,
    "$lt": lambda a, b: a is not None and a < b,
    "$lte": lambda a, b: a is not None and a <= b,
}


def _matches(value: dict[str, Any], where: dict[str, Any] | None) -> bool:
    for field, want in (where or {}).items():
        have = value.get(field)
        if isinstance(want, dict) and want and all(op in _OPS for op in want):
            try:
                if not all(_OPS[op](have, arg) for op, arg in want.items()):
                    return False
            except TypeError:
                return False
        elif have != want:
            return False
    return True


class RewindStore(BaseStore):
    """A LangGraph `BaseStore` whose items are keyed memories of one Rewind session."""

    supports_ttl = False

    def __init__(self, session: Session):
        """Keep the store's items in ``session``'s memory.

        Args:
            session: the Rewind session holding the agent's long-term facts (for example
                ``engine.session("agent-memory")``; a rollback of it undoes the store's writes).
        """
        self.session = session
        self._lock = threading.RLock()

    # -- BaseStore ---------------------------------------------------------------------------
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run the operations in order; one result per operation (None for a put)."""
        with self._lock:
            out: list[Result] = []
            for op in ops:
                if isinstance(op, GetOp):
                    out.append(self._get(op.namespace, op.key))
                elif isinstance(op, PutOp):
                    self._put(op)
                    out.append(None)
                elif isinstance(op, SearchOp):
                    out.append(self._search(op))
                elif isinstance(op, ListNamespacesOp):
                    out.append(self._namespaces(op))
                else:
                    raise TypeError(f"unknown store operation {type(op).__name__}")
            return out

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """`batch` in a worker thread: the store's I/O and the embedding model keep off the
        event loop."""
        return await off_loop(self.session, self.batch, list(ops))

    # -- operations --------------------------------------------------------------------------
    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        m = self.session.memory.fact(fact_key(tuple(namespace), key))
        return _item(m) if m is not None and META in m.meta else None

    def _put(self, op: PutOp) -> None:
        namespace, memory = tuple(op.namespace), self.session.memory
        name = fact_key(namespace, op.key)
        old = memory.fact(name)
        if op.value is None:
            if old is not None:
                memory.forget(old.id)
            return
        if not isinstance(op.value, Mapping):
            raise TypeError(f"a store value must be a dict, got {type(op.value).__name__}")
        value = dict(op.value)
        index = getattr(op, "index", None)
        first = None
        if old is not None:
            first = old.meta.get(META, {}).get("first") or old.created_at
        meta = {
            META: {
                "namespace": list(namespace),
                "key": op.key,
                "value": value,
                "first": first,
                "indexed": index is not False,
            }
        }
        memory.add(_text(value, index), importance=1.0, meta=meta, key=name)

    def _search(self, op: SearchOp) -> list[SearchItem]:
        memory = self.session.memory
        prefix = _prefix(tuple(op.namespace_prefix))
        query = getattr(op, "query", None)
        if query:
            found: list[tuple[Memory | None, float | None]] = []
            want = op.offset + op.limit
            by_id = {m.id: m for m in memory.facts(prefix)}
            for hit in memory.recall(query, k=max(want * 4, want + 10), key_prefix=prefix):
                m = by_id.get(hit.id)
                if m is None or META not in m.meta or not m.meta[META].get("indexed", True):
                    continue
                if _matches(m.meta[META]["value"], op.filter):
                    found.append((m, hit.score))
            ranked = found
        else:
            listed = [m for m in memory.facts(prefix) if META in m.meta]
            listed.sort(key=lambda m: (m.created_at, m.id), reverse=True)
            ranked = [(m, None) for m in listed if _matches(m.meta[META]["value"], op.filter)]
        page = ranked[op.offset : op.offset + op.limit]
        return [_search_item(m, score) for m, score in page if m is not None]

    def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        seen: dict[tuple[str, ...], None] = {}
        for m in self.session.memory.facts():
            stored = m.meta.get(META)
            if stored is None:
                continue
            ns = tuple(stored["namespace"])
            if not all(_condition(ns, c) for c in op.match_conditions or ()):
                continue
            if op.max_depth is not None:
                ns = ns[: op.max_depth]
            seen[ns] = None
        return sorted(seen)[op.offset : op.offset + op.limit]


def _condition(ns: tuple[str, ...], condition: Any) -> bool:
    path = tuple(condition.path)
    if len(path) > len(ns):
        return False
    part = ns[: len(path)] if condition.match_type == "prefix" else ns[len(ns) - len(path) :]
    return all(p == "*" or p == n for p, n in zip(path, part, strict=True))


def _fields(m: Memory) -> dict[str, Any]:
    stored = m.meta[META]
    first = stored.get("first")
    return {
        "value": stored["value"],
        "key": stored["key"],
        "namespace": tuple(stored["namespace"]),
        "created_at": _when(first if first is not None else m.created_at),
        "updated_at": _when(m.created_at),
    }


def _item(m: Memory) -> Item:
    return Item(**_fields(m))


def _search_item(m: Memory, score: float | None) -> SearchItem:
    return SearchItem(**_fields(m), score=score)
