"""Session memory: short and long term tiers, decay and pruning, hybrid BM25 + dense retrieval,
contradiction judges and exact keyed facts. `SessionMemory` (``s.memory``) keeps items in the
session's versioned store namespace, so a rollback removes what a loop remembered.

The names below load on first use, so ``import engine.memory.decay`` (pure code) loads neither
the session layer nor what it needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.memory.config import MemoryConfig
    from engine.memory.endpoint import EndpointJudge
    from engine.memory.judges import ContradictionJudge, FunctionJudge, Judgement
    from engine.memory.nli import NLIJudge
    from engine.memory.rules import RulesJudge
    from engine.memory.session import Memory, MemoryHit, SessionMemory

__all__ = [
    "ContradictionJudge",
    "EndpointJudge",
    "FunctionJudge",
    "Judgement",
    "Memory",
    "MemoryConfig",
    "MemoryHit",
    "NLIJudge",
    "RulesJudge",
    "SessionMemory",
]
_WHERE = {
    "Memory": "engine.memory.session",
    "MemoryHit": "engine.memory.session",
    "SessionMemory": "engine.memory.session",
    "MemoryConfig": "engine.memory.config",
    "ContradictionJudge": "engine.memory.judges",
    "FunctionJudge": "engine.memory.judges",
    "Judgement": "engine.memory.judges",
    "RulesJudge": "engine.memory.rules",
    "NLIJudge": "engine.memory.nli",
    "EndpointJudge": "engine.memory.endpoint",
}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'engine.memory' has no attribute {name!r}")
    return getattr(importlib.import_module(where), name)
