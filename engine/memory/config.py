"""How session memory behaves: tiers, decay, fusion weights, embedder, contradiction checker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.memory.contradictions import ContradictionChecker, RuleChecker
from engine.memory.decay import Decay, MemoryPolicy
from engine.memory.retrieval import DEFAULT_WEIGHTS, HybridIndex


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
    checker: ContradictionChecker = field(default_factory=RuleChecker)
    """Contradiction checker; the default is deterministic and offline."""

    def new_index(self) -> HybridIndex:
        return HybridIndex(embedder=self.embedder, weights=self.weights)
