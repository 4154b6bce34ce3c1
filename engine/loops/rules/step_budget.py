"""``step_budget``: a task used up its hard budget of steps.

The budget stops a runaway task, not a long session: it counts the steps since the current task
began (`LoopDetector.new_task`: a user message, a new `Runner.run`, a new graph invocation, an MCP
client back after an idle gap), so a support chat that lasts a day, with a new request every
fifty steps, is never stopped for being long.
"""

from __future__ import annotations

from typing import Final

from engine.loops.rules.base import Finding, Rule
from engine.loops.window import CALL, CONDENSATION, EXEMPT, TURN, Observation, Window

__all__ = ["STEP_BUDGET", "StepBudget"]

STEP_BUDGET: Final = "step_budget"


class StepBudget(Rule):
    """Fires once per task, at its `max_steps`-th observed step (remedy ``stop``, nothing to
    roll back to); None: no budget."""

    id = STEP_BUDGET
    kinds = frozenset({CALL, TURN, CONDENSATION, EXEMPT})

    def __init__(self, max_steps: int | None) -> None:
        if max_steps is not None and max_steps < 1:
            raise ValueError("max_steps must be positive or None")
        self.max_steps = max_steps
        super().__init__()

    def reset(self) -> None:
        self._flagged = False
        self._task_start = 0

    def new_task(self, next_index: int) -> None:
        self._flagged = False
        self._task_start = next_index

    def check(self, obs: Observation, window: Window) -> Finding | None:
        budget = self.max_steps
        used = window.n - self._task_start
        if budget is None or used < budget or self._flagged:
            return None
        self._flagged = True
        return Finding(
            "budget",
            None,
            (self._task_start, obs.index),
            None,
            f"The task that began at the first step in evidence used up its hard budget of "
            f"{budget} steps, so it must stop here.",
            "You have used all the steps allowed for this task; stop and summarize.",
            {"steps": used, "budget": budget, "task_start_index": self._task_start},
            remedy="stop",
        )
