"""``circuit_breaker``: one tool failing again and again, whatever the arguments."""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from engine.loops.normalize import error_location
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
    same: list[int]
    """Indexes of the last failures in a row of one call (the same arguments)."""
    call: str = ""
    location: str = ""
    """Where in the code the last failure of that call was (`error_location`)."""
    turn: str | None = None
    """The model response that issued the last failure (`Step.turn`), if known."""


class CircuitBreaker(Rule):
    """Trips at `breaker_failures` (per-tool: `tool_breaker_failures`) consecutive failures of
    one tool with no success of it and no progress elsewhere in between; sooner, at
    `repeat_threshold`, when they are failures of one call (the same arguments) back to back,
    no other action in between (chat with the user does not count: `Window.last_action`),
    whatever the errors say, unless the error moved to another place in the code (the code it
    runs changed). Failures issued by one model response (`Step.turn`) are
    one attempt: a batch of guesses that all fail counts once."""

    id = CIRCUIT_BREAKER
    kinds = frozenset({CALL})

    def __init__(
        self, breaker_failures: int, tool_breaker_failures: Mapping[str, int], repeat_threshold: int
    ) -> None:
        if breaker_failures < 1:
            raise ValueError(f"breaker_failures must be positive, got {breaker_failures}")
        self.limit = breaker_failures
        self.same_limit = repeat_threshold
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
            streak = self._streaks[tool] = _Streak(deque(maxlen=limit), deque(maxlen=limit), 0, [])
        elif obs.step.turn is not None and streak.turn == obs.step.turn:
            return None  # another call of the same batch: the same attempt
        streak.turn = obs.step.turn
        same = streak.same
        location = error_location(obs.signature)
        if (
            not same
            or streak.call != obs.call
            or same[-1] != obs.prev_action
            or streak.location != location
        ):
            # another call, an action in between (a wait, a thought, other work), or the error
            # moved to another place in the code: the retries are no longer blind. Chat with the
            # user between is no action: the same call failing again after "please try again"
            # is still a blind retry, and its third failure is the loop's evidence.
            streak.call, streak.location = obs.call, location
            same.clear()
        same.append(obs.index)
        streak.indexes.append(obs.index)
        streak.errors.append(obs.signature)
        streak.progress = window.progress
        if len(same) >= self.same_limit and len(streak.indexes) < limit:
            return self._same_call(tool, same[-self.same_limit :], streak)
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

    def _same_call(self, tool: str, indexes: list[int], streak: _Streak) -> Finding | None:
        """The same call failed `repeat_threshold` times in a row."""
        if not self.allowed((tool,)):
            return None
        count = len(indexes)
        errors = list(streak.errors)[-count:]
        distinct = list(dict.fromkeys(errors))
        return Finding(
            f"{tool}\x00{streak.call}",
            tool,
            indexes,
            indexes[0],
            f"{tool} was called {count} times in a row with the same arguments and failed every "
            f"time ({len(distinct)} different error{'s' if len(distinct) != 1 else ''}), with no "
            "success and no progress in between.",
            f"{tool} keeps failing for these exact arguments; do not retry it unchanged, try a "
            "different approach.",
            {
                "failures": count,
                "same_call": True,
                "errors": [clip(e, 120) for e in distinct[:3]],
            },
        )
