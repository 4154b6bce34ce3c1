"""Rewind: catch LLM agents in tool-call death loops and roll them back.

Public contract (see DESIGN.md): Engine, ContextBuilder, LoopDetector, LoopDetected, Step.
"""

from __future__ import annotations

from engine.detector import LoopDetector, Step, Verdict
from engine.engine import Actor, Engine
from engine.errors import (
    InvalidSessionId,
    LoopDetected,
    NothingToRollBack,
    PermissionDenied,
    RewindError,
    RollbackConflict,
    SnapshotNotRestorable,
    StoreUnavailable,
    UnknownSession,
    UnknownSnapshot,
)
from engine.session import Session

__all__ = [
    "Actor", "ContextBuilder", "Engine", "InvalidSessionId", "LoopDetected", "LoopDetector",
    "NothingToRollBack", "PermissionDenied", "RewindError", "RollbackConflict", "Session",
    "SnapshotNotRestorable", "Step", "StoreUnavailable", "UnknownSession", "UnknownSnapshot",
    "Verdict",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "ContextBuilder":  # tiktoken loads only when a context is built
        from engine.budget import ContextBuilder

        return ContextBuilder
    raise AttributeError(f"module 'engine' has no attribute {name!r}")
