"""Session memory: short and long term, decay, hybrid recall, contradiction checks.

Memory items are part of the session state: they live in the store's versioned ``mem`` namespace,
so a rollback removes every memory written after the target snapshot and undoes later changes
(recall counts, promotions, invalidations). What a loop wrote never survives a rollback.

Each handle keeps an in-process retrieval index (BM25 + dense) that it brings up to date from the
store before each call by comparing ids and texts, so adding a memory never rebuilds the index and
a handle in another process, or a rollback, is picked up on the next call.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from engine.loops.fingerprint import canonicalize
from engine.memory.config import MemoryConfig
from engine.memory.decay import Curve, MemoryItem
from engine.memory.retrieval import HybridIndex
from engine.runtime import Runtime

__all__ = ["Memory", "MemoryConfig", "MemoryHit", "SessionMemory"]

NS = "mem"
ITEM, FIX, LOG = "item:", "fix:", "log:"
MAX_ACCESS_TIMES = 50
MAX_LOG = 200
CONTRADICTION_CANDIDATES = 8


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

    @property
    def valid(self) -> bool:
        return self.invalid_at is None

    def decay_item(self) -> MemoryItem:
        return MemoryItem(id=self.id, importance=self.importance, created_at=self.created_at,
                          access_times=self.access_times, access_count=self.access_count,
                          tier=self.tier)


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


def _memory(mid: str, d: dict) -> Memory:
    return Memory(
        id=mid, text=d["text"], importance=d["importance"], meta=d.get("meta") or {},
        tier=d["tier"], created_at=d["created_at"], access_times=tuple(d.get("access_times", ())),
        access_count=d.get("access_count", 0), invalid_at=d.get("invalid_at"),
        invalid_reason=d.get("invalid_reason"), superseded_by=d.get("superseded_by"),
    )


class SessionMemory:
    """`session.memory`: add, recall, inspect."""

    def __init__(self, runtime: Runtime, sid: str):
        self._rt = runtime
        self._sid = sid
        self.config: MemoryConfig = runtime.memory()
        self._index: HybridIndex | None = None
        self._indexed: dict[str, str] = {}  # id -> text currently in the index

    # -- reading ----------------------------------------------------------------------------
    def _load(self) -> tuple[dict[str, Memory], dict[str, dict], dict[str, dict]]:
        raw = self._rt.store.get_all(self._sid, NS)
        items, fixes, logs = {}, {}, {}
        for key, value in raw.items():
            if key.startswith(ITEM):
                items[key[len(ITEM):]] = _memory(key[len(ITEM):], value)
            elif key.startswith(FIX):
                fixes[key] = value
            elif key.startswith(LOG):
                logs[key] = value
        return items, fixes, logs

    def _sync_index(self, items: dict[str, Memory]) -> HybridIndex:
        if self._index is None:
            self._index = self.config.new_index()
        wanted = {m.id: m.text for m in items.values() if m.valid}
        for mid in [m for m in self._indexed if wanted.get(m) != self._indexed[m]]:
            self._index.remove(mid)
            del self._indexed[mid]
        for mid, text in wanted.items():
            if mid not in self._indexed:
                self._index.add(mid, text)
                self._indexed[mid] = text
        return self._index

    def items(self, include_invalid: bool = False) -> list[Memory]:
        """Memories on the live line, oldest first."""
        items, _, _ = self._load()
        out = sorted(items.values(), key=lambda m: (m.created_at, m.id))
        return out if include_invalid else [m for m in out if m.valid]

    def corrections(self) -> list[dict]:
        """Contradiction resolutions, oldest first: at, kept, invalidated, kind, reason."""
        _, fixes, _ = self._load()
        return sorted(fixes.values(), key=lambda f: f["at"])

    def log(self) -> list[dict]:
        """Lifecycle events (promote, evict, prune), oldest first."""
        _, _, logs = self._load()
        return sorted(logs.values(), key=lambda e: (e["at"], e.get("id", "")))

    def curves(self, start: float | None = None, end: float | None = None,
               points: int = 100) -> Curve:
        """Decay curves of the valid memories (weight over time, recall markers, threshold)."""
        items = [m.decay_item() for m in self.items()]
        if end is None and start is None and items:
            start = min(i.created_at for i in items)
            end = max(self._rt.clock(), start) + self.config.decay.half_life_seconds
        return self.config.decay.curve(items, start=start, end=end, points=points)

    # -- writing ----------------------------------------------------------------------------
    def add(self, text: str, importance: float = 0.5, meta: dict | None = None) -> str:
        """Write a memory; returns its id.

        A newer fact that contradicts older memories invalidates them (kept, marked with the
        time and reason) and logs a correction. The short-term buffer is then consolidated
        (important or often-recalled items move to long term; the least important oldest items
        beyond capacity are evicted) and memories whose decay weight fell under the threshold are
        pruned. Everything lands in one atomic write.

        Raises:
            ValueError: empty text or importance outside [0, 1]. TypeError: meta not JSON.
        """
        if not isinstance(text, str) or not text.strip():
            raise ValueError("a memory needs non-empty text")
        if not isinstance(importance, (int, float)) or not 0 <= importance <= 1:
            raise ValueError(f"importance must be between 0 and 1, got {importance!r}")
        meta = canonicalize(meta or {}, "meta")
        now = self._rt.clock()
        items, _, logs = self._load()
        index = self._sync_index(items)
        mid = f"m-{uuid.uuid4().hex[:12]}"
        writes: dict[str, Any] = {}

        candidates = [(h, items[h]) for h, _ in index.search(text, CONTRADICTION_CANDIDATES)
                      if h in items]
        for found in self.config.checker.check(text, [(h, m.text) for h, m in candidates]):
            old = items[found.older_id]
            writes[ITEM + old.id] = {**_dump(old), "invalid_at": now,
                                     "invalid_reason": found.reason, "superseded_by": mid}
            items[old.id] = _memory(old.id, writes[ITEM + old.id])
            writes[f"{FIX}{now:.6f}:{old.id}"] = {
                "at": now, "kept": mid, "invalidated": old.id, "kind": found.kind,
                "reason": found.reason, "old_text": old.text, "new_text": text,
            }
        new = {"text": text, "importance": float(importance), "meta": meta, "tier": "short",
               "created_at": now, "access_times": [], "access_count": 0}
        items[mid] = _memory(mid, new)
        writes[ITEM + mid] = new
        self._lifecycle(items, writes, logs, now)
        self._rt.store.put(self._sid, NS, writes, now)
        return mid

    def recall(self, query: str, k: int = 10) -> list[MemoryHit]:
        """The `k` memories most relevant to `query`, best first (hybrid BM25 + dense).

        Recalled memories count as accesses (they decay slower and may be consolidated).
        """
        if not isinstance(query, str):
            raise TypeError("the query must be a string")
        if k <= 0 or not query.strip():
            return []
        now = self._rt.clock()
        items, _, logs = self._load()
        index = self._sync_index(items)
        hits = []
        writes: dict[str, Any] = {}
        decay = self.config.decay
        for mid, score in index.search(query, k):
            m = items.get(mid)
            if m is None or not m.valid:
                continue
            times = (list(m.access_times) + [now])[-MAX_ACCESS_TIMES:]
            updated = {**_dump(m), "access_times": times, "access_count": m.access_count + 1}
            writes[ITEM + mid] = updated
            items[mid] = _memory(mid, updated)
            hits.append(MemoryHit(id=mid, text=m.text, meta=m.meta, score=score,
                                  importance=m.importance, tier=m.tier,
                                  weight=decay.weight(items[mid].decay_item(), now)))
        if writes:
            self._lifecycle(items, writes, logs, now)
            self._rt.store.put(self._sid, NS, writes, now)
        return hits

    def forget(self, mid: str) -> None:
        """Remove a memory (a rollback to before this call brings it back)."""
        items, _, _ = self._load()
        if mid not in items:
            raise KeyError(f"session {self._sid!r} has no memory {mid!r}")
        self._rt.store.put(self._sid, NS, {ITEM + mid: None}, self._rt.clock())

    def prune(self) -> list[str]:
        """Apply decay now: remove memories under the threshold; returns their ids."""
        now = self._rt.clock()
        items, _, logs = self._load()
        writes: dict[str, Any] = {}
        before = set(items)
        self._lifecycle(items, writes, logs, now)
        if writes:
            self._rt.store.put(self._sid, NS, writes, now)
        return sorted(before - set(items))

    def _lifecycle(self, items: dict[str, Memory], writes: dict, logs: dict, now: float) -> None:
        """Consolidate, evict and prune; adds the writes and log entries to `writes`."""
        entries = []
        valid = [m for m in items.values() if m.valid]
        _, pruned = self.config.decay.prune([m.decay_item() for m in valid], now)
        for p in pruned:
            writes[ITEM + p.id] = None
            items.pop(p.id, None)
            entries.append({"at": now, "id": p.id, "event": "prune", "reason": p.reason})
        plan = self.config.policy.plan(
            m.decay_item() for m in items.values() if m.valid
        )
        for mid in plan.promote:
            promoted = {**_dump(items[mid]), "tier": "long"}
            writes[ITEM + mid] = promoted
            items[mid] = _memory(mid, promoted)
            entries.append({"at": now, "id": mid, "event": "promote",
                            "reason": plan.reasons.get(mid, "")})
        for mid in plan.evict:
            writes[ITEM + mid] = None
            items.pop(mid, None)
            entries.append({"at": now, "id": mid, "event": "evict",
                            "reason": plan.reasons.get(mid, "")})
        for i, entry in enumerate(entries):
            writes[f"{LOG}{now:.6f}:{i:04d}:{entry['id']}"] = entry
        overflow = len(logs) + len(entries) - MAX_LOG
        if overflow > 0:
            for key in sorted(logs)[:overflow]:
                writes[key] = None


def _dump(m: Memory) -> dict:
    d = {"text": m.text, "importance": m.importance, "meta": m.meta, "tier": m.tier,
         "created_at": m.created_at, "access_times": list(m.access_times),
         "access_count": m.access_count}
    if m.invalid_at is not None:
        d.update(invalid_at=m.invalid_at, invalid_reason=m.invalid_reason,
                 superseded_by=m.superseded_by)
    return d
