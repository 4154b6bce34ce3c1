"""A LangGraph store on Rewind session memory: long-term facts that a rollback undoes.

    from engine import Engine
    from engine.integrations.langgraph import RewindSaver, RewindStore

    engine = Engine.open("sqlite:///.rewind/rewind.db")
    store = RewindStore(engine, depth=2)       # ("users", "u1") -> session langgraph-store/users/u1
    graph = builder.compile(checkpointer=RewindSaver(engine), store=store)

    store.put(("users", "u1"), "home", {"text": "lives in Denver"})
    store.get(("users", "u1"), "home").value          # {"text": "lives in Denver"}
    store.search(("users",), query="where does u1 live?")

**One session per namespace.** Given an engine, the store keeps each namespace's items in a
session of its own, named by the namespace's first ``depth`` labels: ``<prefix>/<label>/…``
(each label percent-escaped; a hash of the labels, ``<prefix>/#<sha256>``, when the id would pass
200 characters). So users' facts spread over a Redis Cluster (each session is one hash tag), and
rolling one user's session back (``store.session_for(("users", "u1"))``, or the console) undoes
that user's puts only. The namespace sessions are listed in the fleet documents ``langgraph_store``
(written before a session's first item), which a search or listing of a namespace prefix shorter
than ``depth`` reads to find them; such a query search ranks each session's items by its own
retrieval and merges them by score. Given a session
(``RewindStore(engine.session("agent-memory"))``, as in earlier releases), every namespace shares
that one session.

**Upgrading from one session.** Items kept in one session stay there and stay readable through
``RewindStore(that_session)``. To spread them: ``move_items(engine.session("agent-memory"),
RewindStore(engine, depth=2))`` copies each item to its namespace's session (value, index flag
and first put time kept; run again, it copies only what changed), then compile the graph with the
new store. The old session is not touched (nothing is deleted): remove it by retention once the
new store is in use. Snapshots and rollbacks of the old session do not carry over.

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

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

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

from engine.engine import Engine
from engine.ids import validate_session_id
from engine.integrations.threads import off_loop
from engine.memory.session import Memory
from engine.sessions.session import Session

__all__ = ["DEFAULT_PREFIX", "REGISTRY", "RewindStore", "fact_key", "move_items"]

DEFAULT_PREFIX = "langgraph-store"
"""Start of the ids of a store's namespace sessions."""
PREFIX_CHARS = 100
"""Longest prefix: the namespace labels need the rest of a session id's 200 characters."""
REGISTRY = "langgraph_store"
"""Fleet document namespace listing the namespace sessions of every store (key: session id;
value: the store's prefix and the namespace labels naming the session)."""
KEPT_HANDLES = 1_000
"""Session handles a store keeps open (least recently used go first)."""

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
    """A LangGraph `BaseStore` whose items are keyed memories of Rewind sessions: one session per
    namespace (given an engine), or one session for every namespace (given a session)."""

    supports_ttl = False

    def __init__(self, target: Session | Engine, *, prefix: str = DEFAULT_PREFIX,
                 depth: int = 1):
        """Keep the store's items in the memory of Rewind sessions.

        Args:
            target: an `Engine`: each namespace's items go to a session of their own (see the
                module doc, "One session per namespace"); or a `Session` (for example
                ``engine.session("agent-memory")``): every item goes to that one session, as in
                earlier releases, and a rollback of it undoes every namespace's writes.
            prefix: (with an engine) the start of the sessions' ids; two stores with different
                prefixes on one engine never share an item.
            depth: (with an engine) how many leading labels of a namespace name its session:
                1 puts ``("users", "u1")`` and ``("users", "u2")`` in one session ``users``,
                2 in one each. Choose the labels that say whose facts they are.

        Raises:
            ValueError: `depth` below 1, or a `prefix` that is no session id.
        """
        self._lock = threading.RLock()
        if isinstance(target, Engine):
            if depth < 1:
                raise ValueError("depth must be >= 1: the namespace labels naming a session")
            validate_session_id(prefix)
            if len(prefix) > PREFIX_CHARS:
                raise ValueError(f"the prefix must be at most {PREFIX_CHARS} characters")
            self.engine: Engine | None = target
            self.session: Session | None = None
            """The one session of every item (None: one session per namespace)."""
        else:
            self.engine = None
            self.session = target
        self.prefix = prefix
        self.depth = depth
        self._handles: OrderedDict[str, Session] = OrderedDict()

    # -- the mapping -------------------------------------------------------------------------
    def session_id(self, namespace: tuple[str, ...]) -> str:
        """The id of the session holding `namespace`'s items: the prefix and the namespace's
        first `depth` labels, each percent-escaped, joined by ``/``; a hash of them when that
        would pass 200 characters."""
        if self.session is not None:
            return self.session.id
        head = tuple(namespace)[: self.depth]
        sid = "/".join([self.prefix, *(quote(label, safe="") for label in head)])
        if len(sid) > 200:
            digest = hashlib.sha256("\x00".join(head).encode("utf-8", "surrogatepass"))
            sid = f"{self.prefix}/#{digest.hexdigest()}"
        return sid

    def session_for(self, namespace: tuple[str, ...], create: bool = False) -> Session | None:
        """The session holding `namespace`'s items (None: it has none yet and `create` is
        False). Roll it back to undo what was put under it."""
        if self.session is not None:
            return self.session
        assert self.engine is not None
        sid = self.session_id(namespace)
        found = self._handles.get(sid)
        if found is None:
            if not create and self.engine.session_info(sid) is None:
                return None
            if create:  # listed before its first item is written, so a search finds it
                head = list(tuple(namespace)[: self.depth])
                self.engine.documents.put_fleet(
                    REGISTRY, {sid: {"store": self.prefix, "namespace": head}})
            found = self.engine.session(sid, meta={"channel": "langgraph-store"})
        self._handles[sid] = found
        self._handles.move_to_end(sid)
        while len(self._handles) > KEPT_HANDLES:
            self._handles.popitem(last=False)
        return found

    def _sessions_under(self, prefix: tuple[str, ...]) -> list[Session]:
        """The sessions that may hold items under the namespace `prefix` (``*`` matches any
        label)."""
        if self.session is not None:
            return [self.session]
        if len(prefix) >= self.depth and "*" not in prefix[: self.depth]:
            found = self.session_for(prefix)
            return [found] if found is not None else []
        assert self.engine is not None
        out = []
        for doc in self.engine.documents.fleet(REGISTRY).values():
            if not isinstance(doc, dict) or doc.get("store") != self.prefix:
                continue
            head = tuple(doc.get("namespace") or ())
            if all(p in ("*", h) for p, h in zip(prefix, head, strict=False)):
                found = self.session_for(head)
                if found is not None:
                    out.append(found)
        return out

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
        return await off_loop(self.session if self.session is not None else self, self.batch,
                              list(ops))

    # -- operations --------------------------------------------------------------------------
    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        session = self.session_for(tuple(namespace))
        if session is None:
            return None
        m = session.memory.fact(fact_key(tuple(namespace), key))
        return _item(m) if m is not None and META in m.meta else None

    def _put(self, op: PutOp) -> None:
        namespace = tuple(op.namespace)
        if not namespace:
            raise ValueError("a store item needs a namespace of at least one label")
        if op.value is not None and not isinstance(op.value, Mapping):
            raise TypeError(f"a store value must be a dict, got {type(op.value).__name__}")
        session = self.session_for(namespace, create=op.value is not None)
        if session is None:
            return  # deleting from a namespace that never had an item
        memory = session.memory
        name = fact_key(namespace, op.key)
        old = memory.fact(name)
        if op.value is None:
            if old is not None:
                memory.forget(old.id)
            return
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
        prefix = _prefix(tuple(op.namespace_prefix))
        query = getattr(op, "query", None)
        want = op.offset + op.limit
        ranked: list[tuple[Memory, float | None]] = []
        sessions = self._sessions_under(tuple(op.namespace_prefix))
        for session in sessions:
            memory = session.memory
            if query:
                by_id = {m.id: m for m in memory.facts(prefix)}
                for hit in memory.recall(query, k=max(want * 4, want + 10), key_prefix=prefix):
                    m = by_id.get(hit.id)
                    if m is None or META not in m.meta or not m.meta[META].get("indexed", True):
                        continue
                    if _matches(m.meta[META]["value"], op.filter):
                        ranked.append((m, hit.score))
            else:
                listed = [m for m in memory.facts(prefix) if META in m.meta]
                ranked += [(m, None) for m in listed if _matches(m.meta[META]["value"], op.filter)]
        if query and len(sessions) > 1:
            # each session ranks its own items; merged by score (see the module doc)
            ranked.sort(key=lambda pair: -(pair[1] or 0.0))
        elif not query:
            ranked.sort(key=lambda pair: (pair[0].created_at, pair[0].id), reverse=True)
        page = ranked[op.offset : op.offset + op.limit]
        return [_search_item(m, score) for m, score in page]

    def _namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        seen: dict[tuple[str, ...], None] = {}
        prefix: tuple[str, ...] = ()
        for c in op.match_conditions or ():
            if c.match_type == "prefix":
                prefix = tuple(c.path)
        for session in self._sessions_under(prefix):
            for m in session.memory.facts():
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


def move_items(source: Session, target: RewindStore) -> int:
    """Copy every store item kept in `source` (a store's one session, as in earlier releases)
    into `target` (a store with one session per namespace), keeping each item's value, index
    flag and first put time; returns how many were copied. `source` is left as it is (nothing
    is deleted; retention or an operator removes it once the new store is in use). Running it
    again copies only what changed.

    Raises:
        ValueError: `target` keeps its items in one session too.
    """
    if target.session is not None:
        raise ValueError("move items into a store made from an engine (one session per "
                         "namespace), not from a session")
    copied = 0
    for m in source.memory.facts():
        stored = m.meta.get(META)
        if stored is None:
            continue
        namespace = tuple(stored["namespace"])
        session = target.session_for(namespace, create=True)
        assert session is not None
        name = fact_key(namespace, stored["key"])
        old = session.memory.fact(name)
        if old is not None and old.meta.get(META, {}).get("value") == stored["value"]:
            continue
        meta = {META: {**stored, "first": stored.get("first") or m.created_at}}
        session.memory.add(m.text, importance=1.0, meta=meta, key=name)
        copied += 1
    return copied


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
