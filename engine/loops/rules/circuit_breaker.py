"""``circuit_breaker``: one tool failing again and again, whatever the arguments."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from engine.loops.rules.base import Finding, Rule, clip
from engine.loops.window import CALL, Observation, Window

__all__ = ["CIRCUIT_BREAKER", "CircuitBreaker"]

CIRCUIT_BREAKER: Final = "circuit_breaker"


@dataclass(slots=True)
class _Streak:
    """Consecutive failures of one tool."""

    indexes: deque[int]
    errors: deque[str]
    progress: int


class CircuitBreaker(Rule):
    """Trips at `breaker_failures` (per-tool: `tool_breaker_failures`) consecutive failures of
    one tool with no success of it and no progress elsewhere in between."""

    id = CIRCUIT_BREAKER
    kinds = frozenset({CALL})

    def __init__(self, breaker_failures: int, tool_breaker_failures: Mapping[str, int]) -> None:
        if breaker_failures < 1:
            raise ValueError(f"breaker_failures must be positive, got {breaker_failures}")
        self.limit = breaker_failures
        self.tool_limits = tool_breaker_failures
        super().__init__()

    def reset(self) -> None:
        self._streaks: dict[str, _Streak] = {}

    def after_flag(self) -> None:
        self._streaks.clear()

    def check(self, obs: Observation, window: Window) -> Finding | None:
        tool = obs.tool
        assert tool is not None
        if obs.ok:
            self._streaks.pop(tool, None)
            return None
        limit = self.tool_limits.get(tool, self.limit)
        if len(self._streaks) > 64:  # bound the memory: drop streaks that left the window
            oldest = obs.index - window.size
            self._streaks = {k: s for k, s in self._streaks.items() if s.indexes[-1] > oldest}
        streak = self._streaks.get(tool)
        if (
            streak is None
            or streak.progress != obs.progress_before
            or streak.indexes[0] <= window.fence
        ):
            streak = self._streaks[tool] = _Streak(deque(maxlen=limit), deque(maxlen=limit), 0)
        streak.indexes.append(obs.index)
        streak.errors.append(obs.signature)
        streak.progress = window.progress
        if len(streak.indexes) < limit or not self.allowed((tool,)):
            return None
        distinct = list(dict.fromkeys(streak.errors))
        return Finding(
            tool,
            tool,
            streak.indexes,
            streak.indexes[0],
            f"{tool} failed {limit} times in a row ({len(distinct)} different error"
            f"{'s' if len(distinct) != 1 else ''}) with no success and no progress in between, "
            "so the tool looks broken and calls to it should stop.",
            f"{tool} is failing every time right now; stop calling it and continue without it "
            "or report the problem.",
            {"failures": limit, "errors": [clip(e, 120) for e in distinct[:3]]},
        )
