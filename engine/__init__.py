"""Rewind: catch LLM agents in tool-call death loops and roll them back.

Public contract (see DESIGN.md): Engine, ContextBuilder, LoopDetector, LoopDetected, Step, plus
the records, config classes, vocabulary and errors exported below.

Every name loads on first use (PEP 562): ``import engine.loops.detector`` or ``from engine import
LoopDetector`` costs the detector alone, never the stores, the Redis client or prometheus_client,
and ``from engine import Engine`` loads what an engine needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.budget.builder import Context, ContextBuilder
    from engine.engine import Engine
    from engine.errors import (
        BudgetError,
        CompensationConflict,
        ConfigError,
        DecisionRefused,
        EncodingIntegrityError,
        EncodingUnavailable,
        IncidentConflict,
        InvalidSessionId,
        JudgeUnavailable,
        LoopDetected,
        LoopWaiting,
        NothingToRollBack,
        PermissionDenied,
        RewindError,
        RollbackConflict,
        SchemaMismatch,
        SessionStopped,
        SizeLimitExceeded,
        SnapshotNotRestorable,
        StepError,
        StoreAuthError,
        StoreError,
        StoreFull,
        StoreNotFound,
        StoreUnavailable,
        ToolQuarantined,
        UnknownCompensation,
        UnknownEncoding,
        UnknownIncident,
        UnknownQuarantine,
        UnknownSession,
        UnknownSnapshot,
        WaitTimeout,
        WatchOnly,
    )
    from engine.fleet.incidents import Incident
    from engine.fleet.incidents import state_of as incident_state
    from engine.fleet.quarantine import unused_tool_hint
    from engine.fleet.queries import LABEL_ACTION, LoopTally
    from engine.freeze import (
        POLICY_SHORT,
        FreezeWindow,
        PolicyChoice,
        freeze_window,
        policy_sentence,
    )
    from engine.identity import Actor
    from engine.limits import Limits
    from engine.loops.detector import LoopDetector, Step, Verdict
    from engine.loops.replay import RuleReading, WhyFlagged
    from engine.loops.rules import RULES
    from engine.memory.config import MemoryConfig
    from engine.records import (
        AuditEvent,
        BranchInfo,
        BulkRollbackItem,
        Compensation,
        CompensationWorker,
        Decision,
        Event,
        LoopCost,
        MessageRecord,
        Quarantine,
        RollbackPreview,
        RollbackResult,
        SessionInfo,
        SnapshotNode,
        State,
        StepRecord,
        loop_first_step,
    )
    from engine.recovery.notices import (
        NOTICE_FLAG,
        PAUSED_TEMPLATES,
        TEMPLATES,
        notice_gist,
        template_for,
    )
    from engine.recovery.saga import LIVE_S
    from engine.sessions.session import Session, StepCall
    from engine.store.base import Retention
    from engine.store.urls import redact as redact_url
    from engine.store.urls import resolve as resolve_url
    from engine.store.urls import store_name as shown_store
    from engine.types import (
        AUDIT_ACTIONS,
        CompensationStatus,
        LoopEpisode,
        LoopPolicy,
        Role,
        SessionStatus,
        StepStatus,
        StoredVerdict,
        TokenBreakdown,
        is_refused,
    )

__all__ = [
    "redact_url",
    "resolve_url",
    "shown_store",
    "loop_first_step",
    "incident_state",
    "Decision",
    "WaitTimeout",
    "SessionStopped",
    "DecisionRefused",
    "LoopWaiting",
    "AUDIT_ACTIONS",
    "WatchOnly",
    "PAUSED_TEMPLATES",
    "LIVE_S",
    "policy_sentence",
    "freeze_window",
    "POLICY_SHORT",
    "LoopTally",
    "LABEL_ACTION",
    "template_for",
    "TEMPLATES",
    "NOTICE_FLAG",
    "Actor",
    "AuditEvent",
    "BranchInfo",
    "BudgetError",
    "BulkRollbackItem",
    "Compensation",
    "CompensationConflict",
    "CompensationStatus",
    "CompensationWorker",
    "ConfigError",
    "Context",
    "ContextBuilder",
    "EncodingIntegrityError",
    "EncodingUnavailable",
    "Engine",
    "Event",
    "FreezeWindow",
    "InvalidSessionId",
    "JudgeUnavailable",
    "Limits",
    "LoopDetected",
    "LoopCost",
    "LoopDetector",
    "LoopEpisode",
    "LoopPolicy",
    "MemoryConfig",
    "MessageRecord",
    "NothingToRollBack",
    "PermissionDenied",
    "PolicyChoice",
    "Quarantine",
    "Retention",
    "RewindError",
    "Role",
    "RollbackConflict",
    "RollbackPreview",
    "RollbackResult",
    "SchemaMismatch",
    "Session",
    "SessionInfo",
    "SessionStatus",
    "SizeLimitExceeded",
    "SnapshotNode",
    "SnapshotNotRestorable",
    "State",
    "Step",
    "StepCall",
    "StepError",
    "StepRecord",
    "StepStatus",
    "StoreAuthError",
    "StoreError",
    "StoreFull",
    "StoreNotFound",
    "StoreUnavailable",
    "StoredVerdict",
    "TokenBreakdown",
    "ToolQuarantined",
    "UnknownCompensation",
    "UnknownEncoding",
    "UnknownIncident",
    "IncidentConflict",
    "Incident",
    "UnknownQuarantine",
    "UnknownSession",
    "UnknownSnapshot",
    "Verdict",
    "RuleReading",
    "WhyFlagged",
    "unused_tool_hint",
    "is_refused",
    "notice_gist",
    "RULES",
]
__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "Decision": "engine.records",
    "WaitTimeout": "engine.errors",
    "SessionStopped": "engine.errors",
    "DecisionRefused": "engine.errors",
    "LoopWaiting": "engine.errors",
    "AUDIT_ACTIONS": "engine.types",
    "WatchOnly": "engine.errors",
    "PAUSED_TEMPLATES": "engine.recovery.notices",
    "LIVE_S": "engine.recovery.saga",
    "policy_sentence": "engine.freeze",
    "freeze_window": "engine.freeze",
    "POLICY_SHORT": "engine.freeze",
    "LoopTally": "engine.fleet.queries",
    "LABEL_ACTION": "engine.fleet.queries",
    "template_for": "engine.recovery.notices",
    "TEMPLATES": "engine.recovery.notices",
    "NOTICE_FLAG": "engine.recovery.notices",
    "Actor": "engine.identity",
    "AuditEvent": "engine.records",
    "BranchInfo": "engine.records",
    "BudgetError": "engine.errors",
    "BulkRollbackItem": "engine.records",
    "Compensation": "engine.records",
    "CompensationConflict": "engine.errors",
    "CompensationStatus": "engine.types",
    "CompensationWorker": "engine.records",
    "ConfigError": "engine.errors",
    "Context": "engine.budget.builder",
    "ContextBuilder": "engine.budget.builder",
    "EncodingIntegrityError": "engine.errors",
    "EncodingUnavailable": "engine.errors",
    "Engine": "engine.engine",
    "Event": "engine.records",
    "FreezeWindow": "engine.freeze",
    "InvalidSessionId": "engine.errors",
    "JudgeUnavailable": "engine.errors",
    "Limits": "engine.limits",
    "LoopDetected": "engine.errors",
    "LoopCost": "engine.records",
    "LoopDetector": "engine.loops.detector",
    "LoopEpisode": "engine.types",
    "LoopPolicy": "engine.types",
    "MemoryConfig": "engine.memory.config",
    "MessageRecord": "engine.records",
    "NothingToRollBack": "engine.errors",
    "PermissionDenied": "engine.errors",
    "PolicyChoice": "engine.freeze",
    "Quarantine": "engine.records",
    "Retention": "engine.store.base",
    "RewindError": "engine.errors",
    "Role": "engine.types",
    "RollbackConflict": "engine.errors",
    "RollbackPreview": "engine.records",
    "RollbackResult": "engine.records",
    "SchemaMismatch": "engine.errors",
    "Session": "engine.sessions.session",
    "SessionInfo": "engine.records",
    "SessionStatus": "engine.types",
    "SizeLimitExceeded": "engine.errors",
    "SnapshotNode": "engine.records",
    "SnapshotNotRestorable": "engine.errors",
    "State": "engine.records",
    "Step": "engine.loops.detector",
    "StepCall": "engine.sessions.session",
    "StepError": "engine.errors",
    "StepRecord": "engine.records",
    "StepStatus": "engine.types",
    "StoreAuthError": "engine.errors",
    "StoreError": "engine.errors",
    "StoreFull": "engine.errors",
    "StoreNotFound": "engine.errors",
    "StoreUnavailable": "engine.errors",
    "StoredVerdict": "engine.types",
    "TokenBreakdown": "engine.types",
    "ToolQuarantined": "engine.errors",
    "UnknownCompensation": "engine.errors",
    "UnknownEncoding": "engine.errors",
    "UnknownQuarantine": "engine.errors",
    "UnknownIncident": "engine.errors",
    "IncidentConflict": "engine.errors",
    "Incident": "engine.fleet.incidents",
    "UnknownSession": "engine.errors",
    "UnknownSnapshot": "engine.errors",
    "unused_tool_hint": "engine.fleet.quarantine",
    "is_refused": "engine.types",
    "notice_gist": "engine.recovery.notices",
    "RULES": "engine.loops.rules",
    "Verdict": "engine.loops.detector",
    "RuleReading": "engine.loops.replay",
    "WhyFlagged": "engine.loops.replay",
    "redact_url": "engine.store.urls:redact",
    "resolve_url": "engine.store.urls:resolve",
    "shown_store": "engine.store.urls:store_name",
    "loop_first_step": "engine.records",
    "incident_state": "engine.fleet.incidents:state_of",
}
"""Where each public name lives."""


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    module, _, attr = where.partition(":")  # "module:attr" where the public name differs
    value = getattr(importlib.import_module(module), attr or name)
    globals()[name] = value  # the next lookup is a plain attribute read
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
