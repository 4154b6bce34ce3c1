"""``exact_repeat``: the same state (call and outcome) again and again with no progress."""

from __future__ import annotations

from typing import Any, Final

from engine.loops.rules.base import Finding, Rule, clip, quote
from engine.loops.window import CALL, Observation, Window

__all__ = ["EXACT_REPEAT", "ExactRepeat"]

EXACT_REPEAT: Final = "exact_repeat"


class ExactRepeat(Rule):
    """Fires at the `repeat_threshold`-th occurrence of one state when no progress step came
    between the first of them and now, unless the agent waited before every repeat: polling
    with back-off and an unchanged answer is left to ``poll_budget``."""

    id = EXACT_REPEAT
    kinds = frozenset({CALL})

    def __init__(self, repeat_threshold: int) -> None:
        if repeat_threshold < 2:
            raise ValueError(f"repeat_threshold must be at least 2, got {repeat_threshold}")
        self.threshold = repeat_threshold
        super().__init__()

    @property
    def span(self) -> int:
        return self.threshold

    def reset(self) -> None:
        # per state, of its last `threshold` steps: index, progress mark right after it
        # (`Observation.progress_mark`), and whether the agent waited since the previous one
        self._hits: dict[tuple[str, str], list[tuple[int, Any, bool]]] = {}

    def check(self, obs: Observation, window: Window) -> Finding | None:
        state = obs.state
        assert state is not None
        hits = self._hits.get(state) if not obs.novel_state else None
        if hits is None:  # new in the window: what it did before has gone with it
            if len(self._hits) > 4 * window.size:
                seen = window.state_seen
                self._hits = {s: h for s, h in self._hits.items() if s in seen}
            hits = self._hits[state] = []
        waited = bool(hits) and window.waited_since(hits[-1][0])
        mark = obs.progress_mark
        hits.append((obs.index, mark, waited))
        needed = self.threshold
        if len(hits) > needed:
            del hits[0]
        if len(hits) < needed:
            return None
        first_index, progress_then, _ = hits[0]
        if first_index <= window.fence or progress_then != mark:
            return None
        if all(waited for _, _, waited in hits[1:]):
            return None
        tool = obs.tool
        if not self.allowed((tool,)):
            return None
        step = obs.step
        evidence = [i for i, _, _ in hits]
        details: dict[str, Any] = {"count": needed, "fingerprint": obs.call}
        if not step.ok:
            details["error"] = clip(step.error or "", 200)
            explanation = (
                f"{tool} was called {needed} times with the same arguments and failed each "
                f"time with the same error ({quote(step.error)}), with no progress in between."
            )
            advice = (
                f"{tool} keeps failing with {quote(step.error)} for these exact arguments; "
                "do not retry it unchanged, try a different approach."
            )
        elif step.side_effect:
            details["side_effect"] = True
            explanation = (
                f"{tool} performed the same side effect {needed} times with the same arguments, "
                "so the agent is repeating an action that already happened."
            )
            advice = f"The {tool} action already succeeded; do not perform it again."
        else:
            explanation = (
                f"{tool} was called {needed} times with the same arguments and returned the same "
                "result each time, so the agent is repeating itself without making progress."
            )
            advice = (
                f"You already have the result of this {tool} call; use it instead of calling again."
            )
        return Finding(
            f"{state[0]}\x00{state[1]}",
            tool,
            evidence,
            evidence[0],
            explanation,
            advice,
            details,
        )
