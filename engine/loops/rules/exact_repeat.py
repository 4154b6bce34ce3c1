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
    turn between keep `repeat_threshold`.

    Turns (`Step.turn`, the model response that issued the call): one state issued twice in
    one turn counts once (a model that duplicates a parallel call has tried once). A batch, a
    turn of two or more calls that all failed, sent again as the next turn with the same
    calls failing the same way (in any order), no progress and no user turn since, is a repeat
    at once: the agent read every error of its batch and changed nothing (after a user turn
    the batch counts as usual: a customer may ask for one retry)."""

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
        # and the turn that issued it
        self._hits: dict[tuple[str, str], list[tuple[int, Any, bool, str | None]]] = {}
        # per write state: the indexes of its latest run of repeats each made as the agent's
        # next call after a user turn (the first of them included)
        self._answered: dict[tuple[str, str], list[int]] = {}
        # the batch being issued (turn id, its states, their indexes, all failed so far) and
        # the last finished one with two or more calls that all failed (its states sorted,
        # its indexes, the progress count before it), for the batch repeat
        self._batch: tuple[str | None, list[tuple[str, str]], list[int], bool] = (
            None, [], [], True
        )
        self._batch_progress = 0
        self._failed_batch: tuple[list[tuple[str, str]], list[int], int] | None = None

    def after_flag(self) -> None:
        self._answered.clear()
        self._failed_batch = None
        self._batch = (None, [], [], True)

    def _same_batch(self, obs: Observation, window: Window, turn: str) -> Finding | None:
        """Take a call of turn `turn` into the batch being issued; report it when the batch
        repeats the last failed batch exactly (see the class docstring)."""
        state = obs.state
        assert state is not None
        current, states, indexes, failed = self._batch
        if current != turn:  # a new turn: the one before it is finished
            if current is not None and failed and len(states) > 1:
                self._failed_batch = (sorted(states), indexes, self._batch_progress)
            else:
                self._failed_batch = None  # a turn that did something else came between
            states, indexes, failed = [], [], True
            self._batch_progress = obs.progress_before
        states.append(state)
        indexes.append(obs.index)
        failed = failed and not obs.ok
        self._batch = (turn, states, indexes, failed)
        last = self._failed_batch
        if (
            last is None
            or not failed
            or len(states) != len(last[0])
            or last[1][0] <= window.fence
            or last[2] != window.progress
            or window.last_user > last[1][0]  # the user spoke since: a retry they may ask for
            or sorted(states) != last[0]
            or not self.allowed(_tools(window, indexes))
        ):
            return None
        evidence = [*last[1], *indexes]
        self._failed_batch = None
        return Finding(
            "batch\x00" + "\x00".join(f"{c}\x00{o}" for c, o in last[0]),
            obs.tool,
            evidence,
            evidence[0],
            f"The agent sent the same batch of {len(states)} calls in two turns in a row and "
            "every call failed the same way both times, with no progress in between, so it is "
            "retrying its whole attempt unchanged.",
            "Every call of this batch already failed with these exact arguments; do not send "
            "it again, change the approach.",
            {"count": 2, "batch": len(states), "turns": 2},
        )

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
        turn = obs.step.turn
        if turn is not None:
            batch = self._same_batch(obs, window, turn)
            if batch is not None:
                return batch
        elif self._batch[0] is not None:  # a call of no known turn ends the batch
            self._batch = (None, [], [], True)
            self._failed_batch = None
        hits = self._hits.get(state) if not obs.novel_state else None
        if hits is None:  # new in the window: what it did before has gone with it
            if len(self._hits) > 4 * window.size:
                seen = window.state_seen
                self._hits = {s: h for s, h in self._hits.items() if s in seen}
            hits = self._hits[state] = []
        if turn is not None and hits and hits[-1][3] == turn:
            return None  # the same call again in one turn: one attempt
        waited = bool(hits) and window.waited_since(hits[-1][0])
        mark = obs.progress_mark
        hits.append((obs.index, mark, waited, turn))
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
        first_index, progress_then = hits[0][0], hits[0][1]
        if first_index <= window.fence or progress_then != mark:
            return None
        if all(h[2] for h in hits[1:]):
            return None
        tool = obs.tool
        if not self.allowed((tool,)):
            return None
        step = obs.step
        evidence = [h[0] for h in hits]
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


def _tools(window: Window, indexes: list[int]) -> set[str | None]:
    """The tools of the steps at `indexes` still in the window."""
    records = window.records
    first = window.n - len(records)
    return {records[i - first].tool for i in indexes if i >= first}
