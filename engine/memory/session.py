"""Session memory: short and long term, decay, hybrid recall, contradiction checks.

Memory items are part of the session state: they live in the store's versioned ``mem`` namespace,
so a rollback removes every memory written after the target snapshot and undoes later changes
(recall counts, promotions, invalidations). What a loop wrote never survives a rollback.

Each handle keeps an in-process view of the namespace (items, corrections, lifecycle log), the
retrieval index (BM25 + dense), the contradiction judge's (owner, attribute) keys, the exact
fact keys (``add(..., key=)``), a heap of prune times and the short-term set, and brings them
up to date without reading every item:

- its own writes are applied to the view as they are written;
- before each call it reads the session's event feed after its cursor (one indexed query that
  returns the few events since the last call). Its own ``mem`` writes are recognized by their
  key signature and skipped; messages, steps, snapshots, variables and other harmless events
  only move the cursor;
- anything else (a ``mem`` write by another handle or process, a rollback, a deletion, an
  unknown event, or a page of events so long that the feed may have been trimmed) drops the
  view, which is rebuilt from one `get_all`. The event cursor is read before that read, so
  nothing written meanwhile is missed.

So an add or a recall costs what it touches, not the size of the memory, while a second handle,
another process or a rollback is still picked up on the next call. The store protocol has no
per-key read of a versioned namespace; with one (or a ``changes(sid, ns, since)`` feed) a foreign
write could be applied without a full reload.
"""

from __future__ import annotations

import heapq
import logging
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import JudgeUnavailable
from engine.limits import canonical_within, check_text, cut_text
from engine.memory.config import MemoryConfig
from engine.memory.decay import Curve, MemoryItem
from engine.memory.host import MemoryHost
from engine.memory.judges import Judgement
from engine.memory.retrieval import HybridIndex
from engine.memory.rules import subject_keys
from engine.memory.surface import mentions, normalize, query_speakers, split_speaker

__all__ = ["Memory", "MemoryConfig", "MemoryHit", "SessionMemory"]

NS = "mem"
ITEM, FIX, LOG = "item:", "fix:", "log:"
MAX_ACCESS_TIMES = 50
MAX_LOG = 200
log = logging.getLogger("rewind.memory")
_FAILED: dict[str, int] = {}
"""Judge failures in this process, by judge name (the first of each is logged)."""


def _judge_failed(name: str, exc: BaseException) -> None:
    _FAILED[name] = _FAILED.get(name, 0) + 1
    if _FAILED[name] == 1:
        log.warning("memory judge %r failed (%s); memories are kept and nothing is invalidated "
                    "while it fails; later failures are counted, not logged", name, exc)


def judge_failures() -> dict[str, int]:
    """Judge failures in this process so far, by judge name."""
    return dict(_FAILED)


@dataclass(frozen=True)
class Memory:
    """One memory item as stored."""

    id: str
    text: str
    importance: float
    meta: dict
    tier: str
    """short or long."""
    created_at: float
    access_times: tuple[float, ...]
    """When it was recalled (newest 50)."""
    access_count: int
    invalid_at: float | None = None
    """When a newer, contradicting memory invalidated it (it is kept, not deleted)."""
    invalid_reason: str | None = None
    superseded_by: str | None = None
    claim_keys: tuple[str, ...] | None = None
    """The contradiction judge's (owner, attribute) keys, computed once when written."""
    key: str | None = None
    """The fact key it was written with (``add(..., key=)``): a newer memory with the same key
    replaces it exactly."""
    invalid_by: str | None = None
    """Who invalidated it: the judge's name (``rules``, ``llm``, …) or ``key``."""
    invalid_confidence: float | None = None
    """The judge's confidence (1.0 for a keyed replacement)."""

    @property
    def valid(self) -> bool:
        return self.invalid_at is None

    def decay_item(self) -> MemoryItem:
        return MemoryItem(
            id=self.id,
            importance=self.importance,
            created_at=self.created_at,
            access_times=self.access_times,
            access_count=self.access_count,
            tier=self.tier,
        )


@dataclass(frozen=True)
class MemoryHit:
    """A recalled memory, best first."""

    id: str
    text: str
    meta: dict
    score: float
    """Fused retrieval score."""
    importance: float
    tier: str
    weight: float
    """Decay weight at recall time."""
    key: str | None = None
    """The fact key it was written with, if any."""


def _memory(mid: str, d: dict) -> Memory:
    return Memory(
        id=mid,
        text=d["text"],
        importance=d["importance"],
        meta=d.get("meta") or {},
        tier=d["tier"],
        created_at=d["created_at"],
        access_times=tuple(d.get("access_times", ())),
        access_count=d.get("access_count", 0),
        invalid_at=d.get("invalid_at"),
        invalid_reason=d.get("invalid_reason"),
        superseded_by=d.get("superseded_by"),
        claim_keys=tuple(d["claim_keys"]) if d.get("claim_keys") is not None else None,
        key=d.get("key"),
        invalid_by=d.get("invalid_by"),
        invalid_confidence=d.get("invalid_confidence"),
    )


HARMLESS_EVENTS = frozenset(
    {"status", "message", "snapshot", "step", "notice", "compensation", "var", "langgraph_head"}
)
"""Feed events that never change the ``mem`` namespace (they only move a handle's cursor)."""
EVENT_PAGE = 256
"""Events read per refresh; a full page means many foreign changes (or a trimmed feed): reload."""


class _View:
    """One handle's picture of the session's ``mem`` namespace and what is derived from it."""

    def __init__(self, config: MemoryConfig):
        self.items: dict[str, Memory] = {}
        self.fixes: dict[str, dict] = {}
        self.logs: dict[str, dict] = {}
        self.index: HybridIndex = config.new_index()
        self.indexed: dict[str, str] = {}  # id -> text in the index (valid items)
        self.by_key: dict[str, dict[str, float]] = {}  # claim key -> {id: created_at}
        self.item_keys: dict[str, frozenset[str]] = {}
        self.prune_at: dict[str, float] = {}  # id -> when its decay weight falls under the floor
        self.heap: list[tuple[float, str]] = []  # (prune_at, id); stale entries are skipped
        self.short: dict[str, None] = {}  # valid short-term ids, in insertion order
        self.keyed: dict[str, dict[str, float]] = {}  # fact key -> {valid id: created_at}


class SessionMemory:
    """`session.memory`: add, recall, inspect."""

    def __init__(self, runtime: MemoryHost, sid: str):
        self._rt = runtime
        self._sid = sid
        self.config: MemoryConfig = runtime.memory()
        self._view: _View | None = None
        self._cursor = 0
        self._pending: deque[tuple[tuple[str, ...], int]] = deque()  # signatures of own puts

    # -- keeping the view current -----------------------------------------------------------
    def _refresh(self) -> _View:
        """The view, brought up to date from the event feed (or rebuilt when it must be)."""
        view = self._view
        if view is None:
            return self._reload()
        events = self._rt.store.events(since=self._cursor, limit=EVENT_PAGE, session=self._sid)
        if len(events) >= EVENT_PAGE:
            return self._reload()
        for event in events:
            if event.type == NS:
                signature = (tuple(event.data.get("keys") or ()), event.data.get("count"))
                if not self._pending or self._pending[0] != signature:
                    return self._reload()  # written by another handle or process
                self._pending.popleft()
            elif event.type not in HARMLESS_EVENTS:
                return self._reload()  # rollback, fork, deletion, re-creation, unknown
            self._cursor = event.id
        return view

    def _reload(self) -> _View:
        store = self._rt.store
        cursor = store.last_event_id()  # before the read: later changes show up as events
        raw = store.get_all(self._sid, NS)
        view = _View(self.config)
        now = self._rt.clock()
        for key in sorted(
            raw, key=lambda k: (raw[k].get("created_at", 0), k) if k.startswith(ITEM) else (0, k)
        ):
            self._apply(view, key, raw[key], now)
        self._view, self._cursor = view, cursor
        self._pending.clear()
        return view

    def _apply(self, view: _View, key: str, value: dict | None, now: float) -> None:
        """Apply one written key to the view (and everything derived from it)."""
        if key.startswith(FIX):
            _set(view.fixes, key, value)
            return
        if key.startswith(LOG):
            _set(view.logs, key, value)
            return
        if not key.startswith(ITEM):
            return
        mid = key[len(ITEM) :]
        old = view.items.get(mid)
        m = None if value is None else _memory(mid, value)
        if m is None:
            view.items.pop(mid, None)
        else:
            view.items[mid] = m
        live = m if m is not None and m.valid else None
        # retrieval index
        if view.indexed.get(mid) is not None and (live is None or view.indexed[mid] != live.text):
            view.index.remove(mid)
            del view.indexed[mid]
        if live is not None and mid not in view.indexed:
            view.index.add(mid, live.text, chained=_turn(live))
            view.indexed[mid] = live.text
        # exact fact keys
        if old is not None and old.key is not None:
            view.keyed.get(old.key, {}).pop(mid, None)
        if live is not None and live.key is not None:
            view.keyed.setdefault(live.key, {})[mid] = live.created_at
        # contradiction keys
        keys_of = _keys_of(self.config.judge)
        for k in view.item_keys.pop(mid, ()):
            view.by_key.get(k, {}).pop(mid, None)
        if live is not None and value is not None and keys_of is not None:
            stored = value.get("claim_keys")
            keys = frozenset(stored) if stored is not None else frozenset(keys_of(live.text))
            view.item_keys[mid] = keys
            for k in keys:
                view.by_key.setdefault(k, {})[mid] = live.created_at
        # decay and tiers (a keyed fact stays until replaced or forgotten: never pruned or evicted)
        view.prune_at.pop(mid, None)
        view.short.pop(mid, None)
        if live is not None and live.key is None:
            wait = self.config.decay.time_to_prune(live.decay_item(), now)
            if wait is not None:
                at = now + wait
                view.prune_at[mid] = at
                heapq.heappush(view.heap, (at, mid))
            if live.tier == "short":
                view.short[mid] = None
        if old is not None and m is None and len(view.heap) > 4 * len(view.items) + 64:
            view.heap = [(t, i) for t, i in view.heap if view.prune_at.get(i) == t]
            heapq.heapify(view.heap)

    def _write(self, view: _View, writes: dict[str, Any], now: float) -> None:
        """Put the writes (already applied to the view) in one atomic store write."""
        if not writes:
            return
        try:
            self._rt.store.put(self._sid, NS, writes, now)
        except BaseException:
            self._view = None  # the view holds writes that may not have landed: rebuild it
            raise
        self._pending.append((tuple(sorted(writes)[:20]), len(writes)))

    def _stage(self, view: _View, writes: dict[str, Any], key: str, value: Any, now: float) -> None:
        writes[key] = value
        self._apply(view, key, value, now)

    # -- reading ----------------------------------------------------------------------------
    def items(self, include_invalid: bool = False) -> list[Memory]:
        """Memories on the live line, oldest first."""
        view = self._refresh()
        out = sorted(view.items.values(), key=lambda m: (m.created_at, m.id))
        return out if include_invalid else [m for m in out if m.valid]

    def fact(self, key: str) -> Memory | None:
        """The current memory of a fact key (the newest valid one written with ``key``), or None."""
        view = self._refresh()
        same = view.keyed.get(key, {})
        if not same:
            return None
        return view.items[max(same, key=lambda i: (same[i], i))]

    def facts(self, prefix: str = "") -> list[Memory]:
        """The current memory of every fact key starting with ``prefix``, oldest first."""
        view = self._refresh()
        out = []
        for key, same in view.keyed.items():
            if same and key.startswith(prefix):
                out.append(view.items[max(same, key=lambda i: (same[i], i))])
        return sorted(out, key=lambda m: (m.created_at, m.id))

    def corrections(self) -> list[dict]:
        """Contradiction resolutions, oldest first: at, kept, invalidated, kind, reason, judge
        (its name, or ``key`` for a keyed fact), confidence, key, old_text, new_text."""
        return sorted(self._refresh().fixes.values(), key=lambda f: f["at"])

    def log(self) -> list[dict]:
        """Lifecycle events (promote, evict, prune), oldest first."""
        logs = self._refresh().logs
        return sorted(logs.values(), key=lambda e: (e["at"], e.get("id", "")))

    def curves(
        self, start: float | None = None, end: float | None = None, points: int = 100
    ) -> Curve:
        """Decay curves of the valid memories (weight over time, recall markers, threshold)."""
        items = [m.decay_item() for m in self.items()]
        if end is None and start is None and items:
            start = min(i.created_at for i in items)
            end = max(self._rt.clock(), start) + self.config.decay.half_life_seconds
        return self.config.decay.curve(items, start=start, end=end, points=points)

    # -- writing ----------------------------------------------------------------------------
    def add(
        self,
        text: str,
        importance: float = 0.5,
        meta: dict | None = None,
        key: str | None = None,
    ) -> str:
        """Write a memory; returns its id.

        With a ``key`` (``"user.home_city"``) the memory is an exact fact: it replaces every
        older valid memory with the same key (marked invalid by ``key``, confidence 1), and no
        judge is asked. A keyed fact goes straight to long-term memory and is never pruned by
        decay nor evicted: it stays until a newer one with its key replaces it, `forget`
        removes it or a rollback undoes it (`fact` reads it back by key). Only chat turns (free
        text with a speaker, ``"Caroline: …"``) share BM25 context with the memories written
        around them. Without one, the engine's
        `ContradictionJudge` decides which older free-text memories it replaces: it sees, in
        one batch, the older memories closest in words and those sharing an (owner, attribute)
        key with the new one; each replacement at or above `MemoryConfig.min_confidence`
        marks the older memory invalid (kept, not deleted) with the judge's name, confidence
        and reason, and logs a correction. Keyed
        memories are never judged against free text. The short-term buffer is then
        consolidated (important or often-recalled items move to long term; the least important
        oldest items beyond capacity are evicted) and memories whose decay weight fell under
        the threshold are pruned. Everything lands in one atomic write, so a rollback undoes
        it whole.

        Args:
            text: what to remember.
            importance: 0..1.
            meta: JSON-able details returned with recalls.
            key: an exact fact key; None for free text.

        Raises:
            ValueError: empty text, empty key or importance outside [0, 1]. TypeError: meta not
                JSON or key not a string. SizeLimitExceeded: text or meta over the engine's
                `Limits` (nothing is written).
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError("a memory needs non-empty text")
        if key is not None:
            if not isinstance(key, str):
                raise TypeError(f"a memory key must be a string, got {type(key).__name__}")
            if not key.strip():
                raise ValueError("a memory key must be non-empty (or None for free text)")
        limits = self._rt.limits
        check_text(text, limits.memory_text, "a memory's text", "memory_text")
        if key is not None:
            check_text(key, limits.memory_text, "a memory's key", "memory_text")
        if not isinstance(importance, (int, float)) or not 0 <= importance <= 1:
            raise ValueError(f"importance must be between 0 and 1, got {importance!r}")
        meta, _ = canonical_within(meta or {}, limits.meta_bytes, "a memory's meta", "meta_bytes")
        now = self._rt.clock()
        view = self._refresh()
        mid = f"m-{uuid.uuid4().hex[:12]}"
        writes: dict[str, Any] = {}
        judge = self.config.judge
        keys = None
        unjudged: list[dict] = []
        try:
            if key is not None:
                replaced = [
                    (
                        view.items[h],
                        Judgement(True, 1.0, f"replaced by a newer {key!r}", "key"),
                        "key",
                    )
                    for h in view.keyed.get(key, {})
                    if h in view.items
                ]
            elif judge is not None:
                keys = frozenset(_keys_of(judge)(text))
                replaced = self._judged(view, judge, text, keys, mid, now, unjudged)
            else:
                replaced = []
            for old, verdict, by in replaced:
                if not old.valid:
                    continue
                self._stage(
                    view,
                    writes,
                    ITEM + old.id,
                    {
                        **_dump(old),
                        "invalid_at": now,
                        "invalid_reason": verdict.reason,
                        "superseded_by": mid,
                        "invalid_by": by,
                        "invalid_confidence": verdict.confidence,
                    },
                    now,
                )
                self._stage(
                    view,
                    writes,
                    f"{FIX}{now:.6f}:{old.id}",
                    {
                        "at": now,
                        "kept": mid,
                        "invalidated": old.id,
                        "kind": verdict.kind,
                        "reason": verdict.reason,
                        "judge": by,
                        "confidence": verdict.confidence,
                        "key": key,
                        "old_text": old.text,
                        "new_text": text,
                    },
                    now,
                )
            new: dict[str, Any] = {
                "text": text,
                "importance": float(importance),
                "meta": meta,
                "tier": "short" if key is None else "long",
                "created_at": now,
                "access_times": [],
                "access_count": 0,
            }
            if key is not None:
                new["key"] = key
            if keys is not None:
                new["claim_keys"] = sorted(keys)
            self._stage(view, writes, ITEM + mid, new, now)
            self._lifecycle(view, writes, now, unjudged)
        except BaseException:
            self._view = None
            raise
        self._write(view, writes, now)
        return mid

    def _judged(
        self, view: _View, judge: Any, text: str, keys: frozenset[str] | None, mid: str,
        now: float, unjudged: list[dict],
    ) -> list[tuple[Memory, Judgement, str]]:
        """Older free-text memories the judge says ``text`` replaces, with its judgements.

        A judge that fails (its model timed out, was over its budget, answered nonsense) costs
        the new memory nothing: it is kept, nothing is invalidated, and the failure goes to the
        memory's log (`unjudged`, written with the memory) and, once per judge and process, to
        the ``rewind.memory`` logger."""
        candidates = self._candidates(view, text, keys)
        if not candidates:
            return []
        name = str(getattr(judge, "name", type(judge).__name__))
        try:
            verdicts = judge.judge([(m.text, text) for m in candidates])
            if len(verdicts) != len(candidates):
                raise JudgeUnavailable(f"judge {name!r} returned {len(verdicts)} answers for "
                                       f"{len(candidates)} pairs")
        except Exception as exc:  # noqa: BLE001 - any judge failure: keep the memory, invalidate nothing
            _judge_failed(name, exc)
            unjudged.append({"at": now, "id": mid, "event": "judge unavailable",
                             "reason": cut_text(f"{name}: {exc}", 500)})
            return []
        floor = self.config.min_confidence
        return [
            (m, v, name)
            for m, v in zip(candidates, verdicts, strict=True)
            if v.contradicts and v.confidence >= floor
        ]

    def _candidates(self, view: _View, text: str, keys: frozenset[str] | None) -> list[Memory]:
        """The older memories a judge is asked about for ``text``, newest first: valid free-text
        memories of the same owner (`_same_owner`) that share a subject key with it (the
        judge's ``keys``, or the rules judge's reading of who states what: newest first, at
        most half the bound; a key that meets any value, ``*``, last) or are closest to it in
        words (BM25 and, for Han text, Han bigrams, fused as recall fuses them), at most
        `MemoryConfig.judge_pairs` in all. The dense side is left out: on the tuned half of
        ``bench/updates.py --hidden`` it reached no update the words and keys missed, and it
        would cost an embedding per add."""
        bound = self.config.judge_pairs
        speaker = _speaker(text)

        def fits(h: str) -> bool:
            m = view.items.get(h)
            return (m is not None and m.valid and m.key is None and m.text != text
                    and _same_owner(speaker, _speaker(m.text), text))

        picked: dict[str, None] = {}
        for claim_key in sorted(keys or (), key=lambda k: (k.endswith("*"), k)):  # "*" last
            owners = view.by_key.get(claim_key, {})
            for h in heapq.nlargest(bound, owners, key=owners.__getitem__):
                if len(picked) < bound // 2 and fits(h):
                    picked[h] = None
        near = view.index.search(text, 2 * bound, dense=False) if len(picked) < bound else ()
        for h, _ in near:
            if len(picked) == bound:
                break
            if fits(h):
                picked[h] = None
        return sorted((view.items[h] for h in picked), key=lambda m: (-m.created_at, m.id))

    def recall(self, query: str, k: int = 10, key_prefix: str | None = None) -> list[MemoryHit]:
        """The `k` memories most relevant to `query`, best first (hybrid BM25 + dense).

        Recalled memories count as accesses (they decay slower and may be consolidated). With
        ``key_prefix`` only keyed facts whose key starts with it are returned.

        Raises:
            TypeError: `query` is not a string, `k` not an int, `key_prefix` neither a string
            nor None. ValueError: `k` is negative, or `query` holds a lone surrogate (text
            decoded wrongly; the tokenizers have no UTF-8 form for it either).
        """
        if not isinstance(query, str):
            raise TypeError("the query must be a string")
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"k, the number of memories to return, must be an int, not "
                            f"{type(k).__name__} {k!r}")
        if k < 0:
            raise ValueError(f"k, the number of memories to return, must be 0 or more, not {k}")
        if key_prefix is not None and not isinstance(key_prefix, str):
            raise TypeError(f"key_prefix must be a string or None, not {type(key_prefix).__name__}")
        check_text(query, len(query), "the query", "memory_text")  # a lone surrogate: say so
        if k == 0 or not query.strip():
            return []
        now = self._rt.clock()
        view = self._refresh()
        hits = []
        writes: dict[str, Any] = {}
        decay = self.config.decay
        try:
            for mid, score in self._ranked(view, query, k, key_prefix):
                m = view.items[mid]
                times = (list(m.access_times) + [now])[-MAX_ACCESS_TIMES:]
                updated = {**_dump(m), "access_times": times, "access_count": m.access_count + 1}
                self._stage(view, writes, ITEM + mid, updated, now)
                hits.append(
                    MemoryHit(
                        id=mid,
                        text=m.text,
                        meta=m.meta,
                        score=score,
                        importance=m.importance,
                        tier=m.tier,
                        weight=decay.weight(view.items[mid].decay_item(), now),
                        key=m.key,
                    )
                )
            if writes:
                self._lifecycle(view, writes, now)
        except BaseException:
            self._view = None
            raise
        self._write(view, writes, now)
        return hits

    def _speaker_boost(self, view: _View, query: str) -> dict[str, float] | None:
        """The factor for each indexed memory that names a speaker of a query written as chat
        turns (`MemoryConfig.speaker_boost`); None when the query has no named speaker."""
        factor = 1.0 + self.config.speaker_boost
        if factor == 1.0:
            return None
        names = query_speakers(query)
        if not names:
            return None
        patterns = [mentions(name) for name in names]
        return {
            mid: factor
            for mid, text in view.indexed.items()
            if any(p.search(text) for p in patterns)
        } or None

    def _ranked(
        self, view: _View, query: str, k: int, key_prefix: str | None
    ) -> list[tuple[str, float]]:
        """The best `k` current memories for `query` (keyed under `key_prefix` when given)."""
        want = k
        boost = self._speaker_boost(view, query)
        while True:
            ranked = view.index.search(query, want, boost)
            out = []
            for mid, score in ranked:
                m = view.items.get(mid)
                if m is None or not m.valid or not _current(view, m):
                    continue
                if key_prefix is not None and (m.key is None or not m.key.startswith(key_prefix)):
                    continue
                out.append((mid, score))
                if len(out) == k:
                    return out
            if key_prefix is None or len(ranked) < want:
                return out
            want *= 4

    def forget(self, mid: str) -> None:
        """Remove a memory (a rollback to before this call brings it back)."""
        view = self._refresh()
        if mid not in view.items:
            raise KeyError(f"session {self._sid!r} has no memory {mid!r}")
        now = self._rt.clock()
        writes: dict[str, Any] = {}
        self._stage(view, writes, ITEM + mid, None, now)
        self._write(view, writes, now)

    def prune(self) -> list[str]:
        """Apply decay now: remove memories under the threshold; returns their ids."""
        now = self._rt.clock()
        view = self._refresh()
        writes: dict[str, Any] = {}
        before = set(view.items)
        try:
            self._lifecycle(view, writes, now)
        except BaseException:
            self._view = None
            raise
        self._write(view, writes, now)
        return sorted(before - set(view.items))

    def _lifecycle(self, view: _View, writes: dict, now: float,
                   extra: Sequence[dict] = ()) -> None:
        """Prune, consolidate and evict; stages the writes and log entries (`extra` too).

        Only what can change is looked at: the memories whose prune time has come (a heap) and
        the short-term buffer, so the cost does not grow with the long-term memory."""
        entries = list(extra)
        due: dict[str, None] = {}
        while view.heap and view.heap[0][0] <= now + 1e-3:
            at, mid = heapq.heappop(view.heap)
            if view.prune_at.get(mid) == at:
                due[mid] = None
        if due:
            items = [view.items[mid].decay_item() for mid in due]
            kept, pruned = self.config.decay.prune(items, now)
            for item in kept:  # inside the slack but not under the floor yet: back in the heap
                heapq.heappush(view.heap, (view.prune_at[item.id], item.id))
            for p in pruned:
                self._stage(view, writes, ITEM + p.id, None, now)
                entries.append({"at": now, "id": p.id, "event": "prune", "reason": p.reason})
        plan = self.config.policy.plan(view.items[mid].decay_item() for mid in list(view.short))
        for mid in plan.promote:
            self._stage(view, writes, ITEM + mid, {**_dump(view.items[mid]), "tier": "long"}, now)
            entries.append(
                {"at": now, "id": mid, "event": "promote", "reason": plan.reasons.get(mid, "")}
            )
        for mid in plan.evict:
            self._stage(view, writes, ITEM + mid, None, now)
            entries.append(
                {"at": now, "id": mid, "event": "evict", "reason": plan.reasons.get(mid, "")}
            )
        overflow = len(view.logs) + len(entries) - MAX_LOG
        if overflow > 0:
            for key in sorted(view.logs)[:overflow]:
                self._stage(view, writes, key, None, now)
        for i, entry in enumerate(entries):
            self._stage(view, writes, f"{LOG}{now:.6f}:{i:04d}:{entry['id']}", entry, now)


def _turn(m: Memory) -> bool:
    """Whether a memory is a turn of a conversation (free text with a speaker): only turns share
    BM25 context with the memories written just before and after them. Keyed facts and notes
    without a speaker are no turns: on MADial-Bench's memory notes the share lost recall
    (bench/retrieval.py), on LoCoMo's turns it gains."""
    return m.key is None and _speaker(m.text) is not None


def _keys_of(judge: Any) -> Any:
    """How subject keys are read for a judge: its own ``keys`` when it has one, else the rules
    judge's reading (who and what a text states a value of), so a model judge is asked about
    the same owner's older statements of the same thing even when they share no word."""
    if judge is None:
        return None
    return getattr(judge, "keys", None) or subject_keys


def _speaker(text: str) -> str | None:
    return split_speaker(normalize(text))[0]


def _same_owner(new: str | None, old: str | None, new_text: str) -> bool:
    """Whether an older memory may be about the same owner as the new one: same speaker, no
    speaker on either side, or the new text names the older one's speaker."""
    return new is None or old is None or new == old or old in new_text.lower()


def _current(view: _View, m: Memory) -> bool:
    """Whether a memory is the newest of its fact key (two processes may each have written one
    before seeing the other's: the newer wins at read time too)."""
    if m.key is None:
        return True
    same = view.keyed.get(m.key, {})
    return max(same, key=lambda i: (same[i], i), default=m.id) == m.id


def _set(target: dict, key: str, value: Any) -> None:
    if value is None:
        target.pop(key, None)
    else:
        target[key] = value


def _dump(m: Memory) -> dict:
    d = {
        "text": m.text,
        "importance": m.importance,
        "meta": m.meta,
        "tier": m.tier,
        "created_at": m.created_at,
        "access_times": list(m.access_times),
        "access_count": m.access_count,
    }
    if m.claim_keys is not None:
        d["claim_keys"] = list(m.claim_keys)
    if m.key is not None:
        d["key"] = m.key
    if m.invalid_at is not None:
        d.update(
            invalid_at=m.invalid_at,
            invalid_reason=m.invalid_reason,
            superseded_by=m.superseded_by,
            invalid_by=m.invalid_by,
            invalid_confidence=m.invalid_confidence,
        )
    return d
