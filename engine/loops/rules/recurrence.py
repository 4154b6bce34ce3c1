"""``recurrence``: the same failure, or the same write, coming back again and again within the
window, whatever the agent does in between."""

from __future__ import annotations

from collections import deque
from typing import Final

from engine.loops.rules.base import Finding, Rule, clip, quote
from engine.loops.window import CALL, Observation, Window

__all__ = ["RECURRENCE", "Recurrence"]

RECURRENCE: Final = "recurrence"


class Recurrence(Rule):
    """Fires when one failing call fails the same way, or one write is made identically,
    `recurrence_threshold` times within the window since the last flag, whatever sits in
    between: interleaved "fix attempts" (an ``apt-get update``, a one-line edit) are progress
    for ``exact_repeat`` but do not make the same failure new. A write's outcome is "done", so
    the same edit re-issued while the file keeps growing recurs too, unless another change came
    between (``git add -A`` after every edit is made again on purpose). Occurrences with a wait
    before each repeat are polling, left to ``poll_budget``. Successful reads never count: a
    ``git status`` after every edit is ordinary work. One model response (`Step.turn`) issuing
    the same call twice is one occurrence."""

    id = RECURRENCE
    kinds = frozenset({CALL})

    def __init__(self, recurrence_threshold: int) -> None:
        if recurrence_threshold < 2:
            raise ValueError(f"recurrence_threshold must be at least 2, got {recurrence_threshold}")
        self.threshold = recurrence_threshold
        super().__init__()

    @property
    def span(self) -> int:
        return self.threshold

    def reset(self) -> None:
        # per state: (index, waited since the previous one, turn) of its occurrences in the
        # window
        self._seen: dict[tuple[str, str], deque[tuple[int, bool, str | None]]] = {}
        # the latest write, and the latest write of another call: (index, call fingerprint)
        self._write: tuple[int, str] = (-1, "")
        self._other_write: tuple[int, str] = (-1, "")

    def after_flag(self) -> None:
        self._seen.clear()

    def check(self, obs: Observation, window: Window) -> Finding | None:
        if obs.ok and not obs.write:
            return None
        other_write = self._note_write(obs.index, obs.call) if obs.write else -1
        state = obs.state
        assert state is not None
        seen = self._seen
        occurrences = seen.get(state) if not obs.novel_state else None
        if occurrences is None:
            if len(seen) > 2 * window.size:
                in_window = window.state_seen
                self._seen = seen = {s: o for s, o in seen.items() if s in in_window}
            occurrences = seen[state] = deque()
        index = obs.index
        oldest = max(window.fence, index - window.size)
        while occurrences and occurrences[0][0] <= oldest:
            occurrences.popleft()
        if obs.write and occurrences and other_write > occurrences[-1][0]:
            occurrences.clear()  # another change came between: this one is made again on purpose
        turn = obs.step.turn
        if turn is not None and occurrences and occurrences[-1][2] == turn:
            return None  # the same call twice in one turn: one occurrence
        waited = bool(occurrences) and window.waited_since(occurrences[-1][0])
        occurrences.append((index, waited, turn))
        count = len(occurrences)
        if count < self.threshold:
            return None
        if all(o[1] for o in list(occurrences)[1:]):
            return None
        tool = obs.tool
        if not self.allowed((tool,)):
            return None
        step = obs.step
        indexes = [o[0] for o in occurrences]
        between = index - indexes[0] + 1 - count
        details = {"count": count, "fingerprint": obs.call, "steps_between": between}
        if not step.ok:
            details["error"] = clip(step.error or "", 200)
            explanation = (
                f"{tool} failed {count} times with the same error ({quote(step.error)}) within "
                f"{index - indexes[0] + 1} steps; the {between} steps in between did not change "
                "the outcome, so the agent's fixes are not working."
            )
            advice = (
                f"{tool} keeps failing with {quote(step.error)} whatever you try in between; "
                "stop retrying it and change the approach, or report the problem."
            )
        else:
            explanation = (
                f"{tool} made the same change {count} times within {index - indexes[0] + 1} "
                "steps, so the agent is re-issuing a write that already happened."
            )
            advice = f"This {tool} change was already made; do not make it again."
        return Finding(
            f"{state[0]}\x00{state[1]}", tool, indexes, indexes[0], explanation, advice, details
        )

    def _note_write(self, index: int, call: str) -> int:
        """Record a write; return the index of the latest earlier write of another call."""
        latest, other = self._write, self._other_write
        if latest[1] == call:
            self._write = (index, call)
            return other[0]
        self._other_write, self._write = latest, (index, call)
        return latest[0]
