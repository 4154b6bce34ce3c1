"""How session memory behaves: tiers, decay, fusion weights, embedder, contradiction judge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.memory.contradictions import ContradictionChecker
from engine.memory.decay import Decay, MemoryPolicy
from engine.memory.judges import CheckerJudge, ContradictionJudge, RulesJudge
from engine.memory.retrieval import DEFAULT_HAN_WEIGHT, DEFAULT_WEIGHTS, HybridIndex

DEFAULT_SPEAKER_BOOST = 0.5
"""Fused-score boost of a memory that names a speaker of the query (see
`MemoryConfig.speaker_boost`); chosen on MADial-Bench's Chinese tuning dialogues through
``s.memory``: recall@10 0.553 -> 0.641 (held-out 0.494 -> 0.609; English, not tuned on, held-out
0.585 -> 0.677); from 0.5 up the figures no longer change there."""


@dataclass
class MemoryConfig:
    """How memory behaves; one per engine (`Engine(..., memory=MemoryConfig(...))`)."""

    policy: MemoryPolicy = field(default_factory=MemoryPolicy)
    """Short-term capacity (10) and consolidation thresholds (importance 0.7, 3 recalls)."""
    decay: Decay = field(default_factory=Decay)
    """Half-life (7 days) and pruning threshold (0.1)."""
    weights: tuple[float, float] = DEFAULT_WEIGHTS
    """Fusion weights (BM25, dense) of the weighted reciprocal rank fusion."""
    embedder: Any = None
    """Dense `Embedder`; None: all-MiniLM-L6-v2 when the ``[dense]`` extra is installed (loaded
    offline), else BM25 alone."""
    han_weight: float = DEFAULT_HAN_WEIGHT
    """Fusion weight of the Han-character-bigram ranking on queries with Han characters
    (`HybridIndex`); 0: off."""
    speaker_boost: float = DEFAULT_SPEAKER_BOOST
    """When a query is written as chat turns (``"<Bart>: …"``, ``"Bart: …\nAssistant: …"``), the
    memories that name one of its speakers (roles such as ``Assistant`` aside) get their fused
    score multiplied by ``1 + speaker_boost``: in a pool shared by several people, what the
    speaker said or did comes before what others did with the same words. 0: off."""
    judge: ContradictionJudge | None = field(default_factory=RulesJudge)
    """Decides which older free-text memories a new one replaces (`engine.memory.judges`); the
    default `RulesJudge` is conservative, deterministic and offline. None: free text never
    invalidates anything (keyed facts still replace each other)."""
    min_confidence: float = 0.7
    """A judgement invalidates an older memory only at or above this confidence."""
    checker: ContradictionChecker | None = None
    """Deprecated: an old-style checker (e.g. `RuleChecker`); when set it is used through
    `CheckerJudge` instead of `judge`."""

    def new_index(self) -> HybridIndex:
        return HybridIndex(embedder=self.embedder, weights=self.weights, han_weight=self.han_weight)

    def active_judge(self) -> ContradictionJudge | None:
        """The judge `SessionMemory.add` asks: `checker` (adapted) when set, else `judge`."""
        if self.checker is not None:
            cached = getattr(self, "_adapted", None)
            if cached is None or cached.checker is not self.checker:
                cached = CheckerJudge(self.checker)
                object.__setattr__(self, "_adapted", cached)
            return cached
        return self.judge
