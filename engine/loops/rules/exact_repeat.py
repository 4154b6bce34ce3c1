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
    with back-off and an unchanged answer is left to ``poll_budget``.

    Sooner, at `user_repeat_threshold`, for a successful write whose every repeat was the
    agent's next call after a user turn (only talk between, no progress): the user's reply did
    not change what the agent does next, and the action it repeats already happened (a second
    cancellation of one reservation refunds it twice). Failures are not counted sooner by
    default: a customer asking to "try again" once is an ordinary retry. With
    `user_repeat_failures` they are: the same failing call (any tool) made again as the agent's
    next call after a user turn, with the same error, flags at `user_repeat_threshold` too (a
    stricter setting for conversational agents: it catches a retry loop at its second attempt,
    and also flags a single retry the customer asked for). Back-to-back repeats with no user
    turn between keep `repeat_threshold`."""

    id = EXACT_REPEAT
    kinds = frozenset({CALL})

    def __init__(
        self, repeat_threshold: int, user_repeat_threshold: int, user_repeat_failures: bool
    ) -> None:
        if repeat_threshold < 2:
            raise ValueError(f"repeat_threshold must be at least 2, got {repeat_threshold}")
        if user_repeat_threshold < 2:
            raise ValueError(
                f"user_repeat_threshold must be at least 2, got {user_repeat_threshold}"
            )
        self.threshold = repeat_threshold
        self.user_threshold = min(user_repeat_threshold, repeat_threshold)
        self.user_failures = bool(user_repeat_failures)
        super().__init__()

    @property
    def span(self) -> int:
        return self.threshold

    def reset(self) -> None:
        # per state, of its last `threshold` steps: index, progress mark right after it
        # (`Observation.progress_mark`), and whether the agent waited since the previous one
        self._hits: dict[tuple[str, str], list[tuple[int, Any, bool]]] = {}
        # per write state: the indexes of its latest run of repeats each made as the agent's
        # next call after a user turn (the first of them included)
        self._answered: dict[tuple[str, str], list[int]] = {}

    def after_flag(self) -> None:
        self._answered.clear()

    def _after_user(
        self, obs: Observation, window: Window, before: int, mark: Any
    ) -> Finding | None:
        """The same successful write (or, with `user_failures`, the same failure) made again, as
        the agent's next call after a user turn, `user_threshold` times in a row (see the class
        docstring); its last occurrence was
        step `before` (progress mark `mark`) and the user spoke since."""
        calls = window.calls
        if (
            before <= window.fence
            or mark != obs.progress_mark
            or len(calls) < 2
            or calls[-2].index != before  # another call came between: not only talk
            or window.waited_since(before)
        ):
            return None
        state = obs.state
        assert state is not None
        index = obs.index
        run = self._answered.get(state)
        if run is None or run[-1] != before:  # a repeat without a user turn broke the run
            if len(self._answered) > window.size:
                self._answered.clear()
            run = self._answered[state] = [before]
        run.append(index)
        if len(run) < self.user_threshold or not self.allowed((obs.tool,)):
            return None
        tool = obs.tool
        evidence = run[-self.user_threshold :]
        count = len(evidence)
        del self._answered[state]
        details: dict[str, Any] = {"count": count, "fingerprint": obs.call, "after_user_turn": True}
        if not obs.ok:
            error = obs.step.error
            details["error"] = clip(error or "", 200)
            return Finding(
                f"{state[0]}\x00{state[1]}",
                tool,
                evidence,
                evidence[0],
                f"{tool} was called {count} times with the same arguments and failed each time "
                f"with the same error ({quote(error)}); each retry came right after the user "
                "spoke, so the user's turn did not change what the agent does.",
                f"{tool} keeps failing with {quote(error)} for these exact arguments; do not "
                "retry it unchanged: tell the user what failed and ask for what would change it.",
                details,
            )
        return Finding(
            f"{state[0]}\x00{state[1]}",
            tool,
            evidence,
            evidence[0],
            f"{tool} made the same change {count} times with the same arguments, each repeat "
            "right after the user spoke, so the agent is repeating an action that already "
            "happened instead of answering what the user said.",
            f"The {tool} action already succeeded; do not perform it again, answer the user "
            "instead.",
            details,
        )

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
        if (
            (obs.write if obs.ok else self.user_failures)  # a done write, or a failure if asked
            and len(hits) > 1
            and window.last_user > hits[-2][0]  # the user spoke since the last one
            and self.user_threshold < needed
        ):
            answered = self._after_user(obs, window, hits[-2][0], hits[-2][1])
            if answered is not None:
                return answered
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
