"""``poll_budget``: one call polled past its budget while nothing else new happens."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from engine.loops.rules.base import Finding, Rule
from engine.loops.window import CALL, Observation, Window

__all__ = ["POLL_BUDGET", "PollBudget"]

POLL_BUDGET: Final = "poll_budget"


@dataclass(slots=True)
class _Poll:
    """How often one call repeated while little else new happened."""

    count: int
    first: int
    last: int
    new_in_last_gap: bool


class PollBudget(Rule):
    """Fires when one call returned something new, or was repeated after waiting (polling with
    back-off), more than `poll_budget` times (per tool: `tool_poll_budgets`) while nothing else
    new was going on.

    The count of a call starts over when it is new, or when two gaps in a row between its
    occurrences held a new call: a first ``sleep`` between polls, or a longer one each time
    (back-off), does not end the polling, an edit before every test run does.
    """

    id = POLL_BUDGET
    kinds = frozenset({CALL})

    def __init__(self, poll_budget: int, tool_poll_budgets: Mapping[str, int]) -> None:
        if poll_budget < 1:
            raise ValueError(f"poll_budget must be positive, got {poll_budget}")
        self.budget = poll_budget
        self.tool_budgets = tool_poll_budgets
        # no budget is exceeded at or below this count
        self._least = min([poll_budget, *tool_poll_budgets.values()])
        super().__init__()

    def reset(self) -> None:
        self._polls: dict[str, _Poll] = {}
        self._last_new_call = -1

    def after_flag(self) -> None:
        self._polls.clear()

    def check(self, obs: Observation, window: Window) -> Finding | None:
        if obs.waits:  # waiting is not polling, and a longer sleep (back-off) is not new work
            return None
        index, call, novel_call = obs.index, obs.call, obs.novel_call
        polls = self._polls
        if novel_call:
            self._last_new_call = index
            if len(polls) > 2 * window.size:
                oldest = index - window.size
                self._polls = polls = {c: p for c, p in polls.items() if p.last > oldest}
        poll = polls.get(call)
        if poll is None or novel_call or poll.first <= window.fence:
            poll = polls[call] = _Poll(1, index, index, False)
        else:
            new_in_gap = self._last_new_call > poll.last
            if new_in_gap and poll.new_in_last_gap:
                poll.count, poll.first = 0, index
            waited = window.waited_since(poll.last)
            poll.new_in_last_gap = new_in_gap
            poll.last = index
            poll.count += (obs.ok and obs.novel_state) or waited
        if poll.count <= self._least:
            return None
        tool = obs.tool
        assert tool is not None
        budget = self.tool_budgets.get(tool, self.budget)
        if poll.count <= budget or not self.allowed((tool,)):
            return None
        evidence = [r.index for r in window.calls if r.call == call and r.index >= poll.first]
        return Finding(
            call,
            tool,
            evidence,
            poll.first,
            f"{tool} was polled {poll.count} times with the same arguments, more than its poll "
            f"budget of {budget}, and the thing it waits for never finishes.",
            f"You have polled {tool} {poll.count} times; stop polling and report the status.",
            {"polls": poll.count, "budget": budget},
        )
