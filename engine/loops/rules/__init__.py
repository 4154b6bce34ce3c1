"""The loop rules, one module each, and `REGISTRY`: the order they run in on a step.

Adding a rule: write its class (a `Rule` subclass, see `base`) in a module of its own and add it
to `REGISTRY` at the place it should run. A new setting is a documented field of
`DetectorConfig`; the rule's constructor parameter of the same name receives it.
"""

from __future__ import annotations

from engine.loops.rules.base import Finding, Remedy, Rule
from engine.loops.rules.circuit_breaker import CIRCUIT_BREAKER, CircuitBreaker
from engine.loops.rules.context_overflow import CONTEXT_OVERFLOW, ContextOverflow
from engine.loops.rules.cycle import CYCLE, Cycle
from engine.loops.rules.exact_repeat import EXACT_REPEAT, ExactRepeat
from engine.loops.rules.idle_turns import IDLE_TURNS, IdleTurns
from engine.loops.rules.near_duplicate import NEAR_DUPLICATE, NearDuplicate
from engine.loops.rules.poll_budget import POLL_BUDGET, PollBudget
from engine.loops.rules.recurrence import RECURRENCE, Recurrence
from engine.loops.rules.repeated_content import REPEATED_CONTENT, RepeatedContent
from engine.loops.rules.step_budget import STEP_BUDGET, StepBudget

__all__ = [
    "Rule",
    "Finding",
    "Remedy",
    "REGISTRY",
    "RULES",
    "EXACT_REPEAT",
    "CIRCUIT_BREAKER",
    "NEAR_DUPLICATE",
    "CYCLE",
    "RECURRENCE",
    "CONTEXT_OVERFLOW",
    "IDLE_TURNS",
    "REPEATED_CONTENT",
    "POLL_BUDGET",
    "STEP_BUDGET",
]

REGISTRY: tuple[type[Rule], ...] = (
    ExactRepeat,
    CircuitBreaker,
    NearDuplicate,
    Cycle,
    Recurrence,
    ContextOverflow,
    IdleTurns,
    RepeatedContent,
    PollBudget,
    StepBudget,
)
"""Every rule, in the order the rules run on one step (the first that fires wins, and the rules
after it do not see that step)."""

RULES: tuple[str, ...] = tuple(rule.id for rule in REGISTRY)
"""Every rule id, in the order rules run on one step."""
