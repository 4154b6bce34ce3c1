"""``cycle``: the agent going round the same few calls (ABAB, ABCABC…) with identical results."""

from __future__ import annotations

from typing import Final

from engine.loops.rules.base import Finding, Rule, times
from engine.loops.window import CALL, Observation, Window

__all__ = ["CYCLE", "Cycle"]

CYCLE: Final = "cycle"


class Cycle(Rule):
    """Fires when the last `cycle_repeats` × p + 1 tool calls (waiting tools left out) repeat a
    block of period p, `cycle_min_period` ≤ p ≤ `cycle_max_period`, state for state: the block
    ran `cycle_repeats` times and the next round has begun (ABAB then A, the "third head").

    Two rounds alone (ABAB) are not enough: an agent checks where it is and reads a file, then
    does it once more after a change it cannot see (``pwd``, read, ``pwd``, read), and a broken
    alternation (A B A B C A B A B) starts counting again after the break."""

    id = CYCLE
    kinds = frozenset({CALL})

    def __init__(self, cycle_min_period: int, cycle_max_period: int, cycle_repeats: int) -> None:
        for name, value in (
            ("cycle_min_period", cycle_min_period),
            ("cycle_repeats", cycle_repeats),
        ):
            if value < 2:
                raise ValueError(f"{name} must be at least 2, got {value}")
        if cycle_max_period < cycle_min_period:
            raise ValueError("cycle_max_period must be >= cycle_min_period")
        self.periods = range(cycle_min_period, cycle_max_period + 1)
        self.repeats = cycle_repeats
        super().__init__()

    @property
    def span(self) -> int:
        return self.periods[-1] * self.repeats + 1

    def check(self, obs: Observation, window: Window) -> Finding | None:
        calls = window.calls
        fence = window.fence
        size = len(calls)
        repeats = self.repeats
        for period in self.periods:
            needed = period * repeats + 1
            if size < needed:
                return None
            if calls[-1].state != calls[-1 - period].state:
                continue
            if calls[size - needed].index <= fence:
                continue
            if any(
                calls[size - 1 - k].state != calls[size - 1 - k - period].state
                for k in range(1, needed - period)
            ):
                continue
            block = [calls[size - period + k] for k in range(period)]
            if len({r.state for r in block}) == 1:
                continue
            start = size - needed
            while (
                start > 0
                and calls[start - 1].index > fence
                and calls[start - 1].state == calls[start - 1 + period].state
            ):
                start -= 1
            tools = [r.tool for r in block]
            if not self.allowed(tools):
                continue
            first = calls[start]
            pattern = [calls[start + k].tool for k in range(period)]
            seen = (size - start) / period
            arrow = " → ".join(str(t) for t in pattern)
            rotation = min(
                "|".join(f"{r.state[0]}:{r.state[1]}" for r in block[k:] + block[:k] if r.state)
                for k in range(period)
            )
            return Finding(
                rotation,
                pattern[0],
                [calls[k].index for k in range(start, size)],
                first.index,
                f"The agent is going round the same {period} steps ({arrow}) with identical "
                f"results; the cycle has now run {times(seen)} without progress.",
                f"You are repeating the sequence {arrow} and getting the same results; do "
                "something different.",
                {"period": period, "repeats": round(seen, 2), "pattern": pattern},
            )
        return None
