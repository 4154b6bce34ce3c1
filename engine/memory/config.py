"""How session memory behaves: tiers, decay, fusion weights, embedder, contradiction judge."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.memory.decay import Decay, MemoryPolicy
from engine.memory.judges import ContradictionJudge
from engine.memory.retrieval import DEFAULT_HAN_WEIGHT, DEFAULT_WEIGHTS, HybridIndex
from engine.memory.rules import RulesJudge

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
    default `RulesJudge` (`engine.memory.rules`) is conservative, deterministic and offline.
    None: free text never invalidates anything (keyed facts still replace each other)."""
    min_confidence: float = 0.7
    """A judgement invalidates an older memory only at or above this confidence."""
    judge_pairs: int = 16
    """At most this many (older, newer) pairs are asked of the judge per `add`, in one batch:
    the same owner's older free-text memories closest in meaning or sharing a subject key,
    newest first (`SessionMemory.add`)."""

    def __post_init__(self) -> None:
        if isinstance(self.judge_pairs, bool) or not isinstance(self.judge_pairs, int):
            raise TypeError(f"judge_pairs must be an int, not {type(self.judge_pairs).__name__}")
        if self.judge_pairs < 1:
            raise ValueError(f"judge_pairs must be at least 1, got {self.judge_pairs}")

    def new_index(self) -> HybridIndex:
        return HybridIndex(embedder=self.embedder, weights=self.weights, han_weight=self.han_weight)
