"""Session memory: short and long term tiers, decay and pruning, hybrid BM25 + dense retrieval,
contradiction checks. `SessionMemory` (``s.memory``) keeps items in the session's versioned store
namespace, so a rollback removes what a loop remembered.
"""

from engine.memory.session import Memory, MemoryConfig, MemoryHit, SessionMemory

__all__ = ["Memory", "MemoryConfig", "MemoryHit", "SessionMemory"]
