"""Rewind: catch LLM agents in tool-call death loops and roll them back.

Public contract (see DESIGN.md): Engine, ContextBuilder, LoopDetector, LoopDetected, Step, plus
the records, config classes, vocabulary and errors exported below.
"""

from __future__ import annotations

from typing import Any

from engine.identity import Actor
from engine.engine import Engine
from engine.errors import (
    BudgetError,
    CompensationConflict,
    ConfigError,
    EncodingIntegrityError,
    EncodingUnavailable,
    InvalidSessionId,
    LoopDetected,
    NothingToRollBack,
    PermissionDenied,
    RewindError,
    RollbackConflict,
    SchemaMismatch,
    SizeLimitExceeded,
    SnapshotNotRestorable,
    StepError,
    StoreAuthError,
    StoreError,
    StoreUnavailable,
    ToolQuarantined,
    UnknownCompensation,
    UnknownEncoding,
    UnknownQuarantine,
    UnknownSession,
    UnknownSnapshot,
)
from engine.freeze import FreezeWindow, PolicyChoice
from engine.limits import Limits
from engine.loops.detector import LoopDetector, Step, Verdict
from engine.records import (
    AuditEvent,
    BranchInfo,
    BulkRollbackItem,
    Compensation,
    CompensationWorker,
    Event,
    MessageRecord,
    Quarantine,
    RollbackPreview,
    RollbackResult,
    SessionInfo,
    SnapshotNode,
    State,
    StepRecord,
)
from engine.sessions.session import Session, StepCall
from engine.store.base import Retention
from engine.types import (
    CompensationStatus,
    LoopPolicy,
    Role,
    SessionStatus,
    StepStatus,
    StoredVerdict,
    TokenBreakdown,
)
from engine.auth import hash_password, verify_password
from engine.fleet import LoopTally
from engine.freeze import POLICY_SHORT, freeze_window, policy_sentence
from engine.saga import LIVE_S
from engine.sessions.notices import NOTICE_FLAG, TEMPLATES, template_for

__all__ = [
    "Actor", "AuditEvent", "BranchInfo", "BudgetError", "Compensation", "CompensationStatus",
    "Context", "ContextBuilder", "EncodingIntegrityError", "EncodingUnavailable", "Engine",
    "Event", "InvalidSessionId", "Limits", "LoopDetected", "LoopDetector", "LoopPolicy",
    "MemoryConfig", "MessageRecord", "NothingToRollBack", "PermissionDenied", "Retention",
    "RewindError", "Role", "RollbackConflict", "RollbackPreview", "RollbackResult",
    "SchemaMismatch", "Session", "SessionInfo", "SessionStatus", "SizeLimitExceeded",
    "SnapshotNode", "SnapshotNotRestorable", "State", "Step", "StepCall", "StepError",
    "StepRecord", "StepStatus", "StoreAuthError", "StoreError", "StoreUnavailable",
    "StoredVerdict", "TokenBreakdown", "UnknownCompensation", "UnknownEncoding",
    "UnknownSession", "UnknownSnapshot", "Verdict",
    "BulkRollbackItem", "Quarantine", "ToolQuarantined", "UnknownQuarantine",
    "ConfigError", "FreezeWindow", "PolicyChoice",
    "CompensationConflict", "CompensationWorker",
    "LIVE_S", "LoopTally", "NOTICE_FLAG", "POLICY_SHORT", "TEMPLATES", "freeze_window",
    "hash_password", "policy_sentence", "template_for", "verify_password",
]
__version__ = "0.1.0"

_LAZY = {  # tiktoken and the retrieval stack load only when they are used
    "ContextBuilder": "engine.budget.builder",
    "Context": "engine.budget.builder",
    "MemoryConfig": "engine.memory.config",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
