"""The `Rule` base class every loop rule fills, and the `Finding` a rule reports.

A rule is one class: its id, the kinds of step it looks at, the `DetectorConfig` fields it reads
(its constructor's parameters, by name), the state it keeps between steps, and `check`, which
reads one `Observation` and the `Window` and returns a `Finding` when the rule fires. The detector
turns the finding into a `Verdict` (signature, flag count, fence) and tells every rule through
`after_flag`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from engine.loops.window import Kind, Observation, Window

__all__ = ["Rule", "Finding", "Remedy", "clip", "quote", "times"]

Remedy = Literal["rollback", "stop"]
"""What the engine should do about a loop: roll back to before it, or stop the session."""


@dataclass(slots=True)
class Finding:
    """What a rule reports when it fires; the detector makes a `Verdict` of it."""

    what: str
    """What repeats, as text; with the rule id it makes the loop's stable signature."""
    tool: str | None
    """The tool the loop is about (the first tool of a cycle); None for agent turns."""
    evidence: Iterable[int]
    """Indexes of the steps that make the case (any order; the detector sorts them and drops
    those beyond the horizon)."""
    loop_start: int | None
    """Index of the step where the loop began; None when there is nothing to roll back to."""
    explanation: str
    """One sentence an on-call engineer understands."""
    advice: str
    """One sentence addressed to the agent."""
    details: dict[str, Any] = field(default_factory=dict)
    """Rule-specific extras as plain JSON data."""
    remedy: Remedy = "rollback"
    """What the engine should do."""


class Rule:
    """One loop rule. Subclasses set `id` and `kinds`, take their settings as keyword
    parameters named after `DetectorConfig` fields (validating them, raising ValueError), keep
    their state in `reset`, and implement `check`.

    One instance serves one detector: it keeps state between steps.
    """

    id: ClassVar[str]
    """Rule id, as it appears in `Verdict.rule`, `disabled_rules` and `tool_exemptions`."""
    kinds: ClassVar[frozenset[Kind]]
    """The kinds of step `check` is called on."""
    settings: ClassVar[tuple[str, ...]] = ()
    """The `DetectorConfig` fields the rule reads: its constructor's parameter names (derived)."""
    exempt: frozenset[str] = frozenset()
    """Tools this rule must not fire on (from `DetectorConfig.tool_exemptions`)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        params = inspect.signature(cls.__init__).parameters
        cls.settings = tuple(name for name in params if name != "self")

    def __init__(self) -> None:
        self.reset()

    @property
    def span(self) -> int:
        """Steps of the window the rule's longest pattern needs (0: no pattern)."""
        return 0

    def reset(self) -> None:
        """Forget every step (the detector was reset)."""

    def after_flag(self) -> None:
        """A verdict (of any rule) fenced off everything observed so far: drop partial
        evidence that must not be counted again."""

    def user_input(self) -> None:
        """The user spoke: what the agent says next answers them, a new exchange begins."""

    def new_task(self, next_index: int) -> None:
        """A new task starts with the step that will get `next_index` (a user message, a new
        run or graph invocation, a client back after an idle gap): budgets of the task begin
        again. Loop evidence is kept: a retry across tasks is still the same loop."""

    def check(self, obs: Observation, window: Window) -> Finding | None:
        """Take in one step (already in `window`) and report a loop, or None."""
        raise NotImplementedError

    def allowed(self, tools: Iterable[str | None]) -> bool:
        """Whether the rule may fire on a loop about these tools (none of them exempted)."""
        exempt = self.exempt
        return not exempt or not any(t in exempt for t in tools if t is not None)


def clip(text: str, limit: int) -> str:
    """`text` on one line, cut to `limit` characters with an ellipsis."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def quote(error: str | None) -> str:
    """An error text quoted for an explanation sentence."""
    return f'"{clip(error or "no error text", 80)}"'


def times(n: float) -> str:
    """``2 times``, ``2.5 times``."""
    whole = int(n)
    return f"{whole} times" if n == whole else f"{n:.1f} times"
