"""``step_budget``: the session used up its hard budget of steps."""

from __future__ import annotations

from typing import Final

from engine.loops.rules.base import Finding, Rule
from engine.loops.window import CALL, CONDENSATION, EXEMPT, TURN, Observation, Window

__all__ = ["STEP_BUDGET", "StepBudget"]

STEP_BUDGET: Final = "step_budget"


class StepBudget(Rule):
    """Fires once, at the `max_steps`-th observed step since the last reset (remedy ``stop``,
    nothing to roll back to); None: no budget."""

    id = STEP_BUDGET
    kinds = frozenset({CALL, TURN, CONDENSATION, EXEMPT})

    def __init__(self, max_steps: int | None) -> None:
        if max_steps is not None and max_steps < 1:
            raise ValueError("max_steps must be positive or None")
        self.max_steps = max_steps
        super().__init__()

    def reset(self) -> None:
        self._flagged = False

    def check(self, obs: Observation, window: Window) -> Finding | None:
        budget = self.max_steps
        if budget is None or window.n < budget or self._flagged:
            return None
        self._flagged = True
        return Finding(
            "budget",
            None,
            (obs.index,),
            None,
            f"The session used up its hard budget of {budget} steps, so it must stop here.",
            "You have used all the steps allowed for this task; stop and summarize.",
            {"steps": window.n, "budget": budget},
            remedy="stop",
        )
