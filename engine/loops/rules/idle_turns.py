"""``idle_turns``: agent turns without a tool call that are empty or repeat each other."""

from __future__ import annotations

from collections import deque
from typing import Final

from engine.loops.normalize import error_signature, turn_signature, values_close
from engine.loops.rules.base import Finding, Rule, quote
from engine.loops.window import TURN, Observation, Window

__all__ = ["IDLE_TURNS", "IdleTurns"]

IDLE_TURNS: Final = "idle_turns"


class IdleTurns(Rule):
    """Fires at `idle_turns_threshold` agent turns in a row, each empty or (nearly, at
    `turn_similarity`) repeating another turn of the run; or, in a run that has called tools,
    at that many message turns in a row without a tool call, whatever they say (an agent that
    works through tools and stops calling them is talking instead of acting). A tool call
    ends the run, unless every call since the last turn was a successful read whose state the
    window had already seen (it learned nothing new); a model call that overflowed is no turn
    (``context_overflow`` counts it).

    Rejected answers: a turn without a tool call that the runtime or harness rejected (its
    `Step.error`: "not a valid call", "locations not precise") is a failed attempt. At
    `idle_turns_threshold` rejections in a row of the same kind (one error signature), with no
    progress between and no turn accepted between, it fires, whatever the turns say and
    whether or not the run called tools: failed calls between do not end the run, nor does the
    harness's answer arriving as a user message.

    In a conversation, a turn that follows a user message repeats an earlier one only when it
    is nearly verbatim (`user_turn_similarity`): an agent holding a policy against an insistent
    customer rewords its refusal each time, which is the customer repeating, not the agent
    stuck; an agent that sends the same reply whatever the user says is still caught."""

    id = IDLE_TURNS
    kinds = frozenset({TURN})

    def __init__(self, idle_turns_threshold: int, turn_similarity: float,
                 user_turn_similarity: float) -> None:
        if idle_turns_threshold < 2:
            raise ValueError(f"idle_turns_threshold must be at least 2, got {idle_turns_threshold}")
        self.threshold = idle_turns_threshold
        self.similarity = turn_similarity
        self.user_similarity = max(turn_similarity, user_turn_similarity)
        super().__init__()

    @property
    def span(self) -> int:
        return self.threshold

    def reset(self) -> None:
        self._turns: deque[tuple[int, str]] = deque()
        self._counts: dict[str, int] = {}
        self._messages: list[int] = []  # message turns (no thought tool) in a row
        self._rejected: list[int] = []  # rejected answers of one kind in a row
        self._rejection = ""  # their error signature
        self._rejected_progress = 0  # the progress count when the first of them came
        self._user_spoke = False  # a user message came since the last turn

    def after_flag(self) -> None:
        self._end_run()
        self._rejected.clear()

    def _end_run(self) -> None:
        """A tool call ended the run of idle turns (not a run of rejected answers)."""
        self._turns.clear()
        self._counts.clear()
        self._messages.clear()

    def user_input(self) -> None:
        self._messages.clear()  # answering the user is talking to them, not instead of acting
        self._user_spoke = True

    def check(self, obs: Observation, window: Window) -> Finding | None:
        if obs.overflow:
            return None  # a model call that overflowed is no turn the agent spoke
        if obs.step.tool is None:
            rejected = self._rejected_answer(obs, window)
            if rejected is not None:
                return rejected
        turns, counts = self._turns, self._counts
        if (
            turns
            and (window.last_call or -1) > turns[-1][0]
            and not _only_stale_reads(window, turns[-1][0])
        ):
            self._end_run()  # a tool call ended the last run of idle turns
        step = obs.step
        text = step.text
        if text is None and step.tool is not None and step.args is not None:
            args = step.args
            text = " ".join(str(v) for v in args.values()) if isinstance(args, dict) else str(args)
        similarity = self.user_similarity if self._user_spoke else self.similarity
        self._user_spoke = False
        signature = self._turn_key(turn_signature(text), similarity)
        turns.append((obs.index, signature))
        counts[signature] = counts.get(signature, 0) + 1
        if len(turns) > window.size:
            _, gone = turns.popleft()
            counts[gone] -= 1
            if not counts[gone]:
                del counts[gone]
        messages = self._messages
        if step.tool is None:
            messages.append(obs.index)
        else:
            messages.clear()
        needed = self.threshold
        if len(turns) < needed or not self.allowed(()):
            return None

        def idle(sig: str) -> bool:
            return sig == "" or counts[sig] >= 2

        if not all(idle(turns[-k][1]) for k in range(1, needed + 1)):
            if len(messages) < needed or window.last_call is None:
                return None
            return Finding(
                "toolless",
                None,
                list(messages),
                messages[0],
                f"The agent answered {len(messages)} times in a row without calling a tool, in "
                "a run that works through tools, so it is talking instead of acting.",
                "Call a tool for your next step, or say clearly that the task is finished or "
                "what is blocking you.",
                {"turns": len(messages)},
            )
        run = [turns[-1]]
        for k in range(len(turns) - 2, -1, -1):
            if not idle(turns[k][1]):
                break
            run.append(turns[k])
        run.reverse()
        empty = sum(1 for _, sig in run if sig == "")
        what = "empty" if empty == len(run) else ("repeated" if not empty else "empty or repeated")
        return Finding(
            "turns",
            None,
            [i for i, _ in run],
            run[0][0],
            f"The agent produced {len(run)} turns in a row without calling a tool that were all "
            f"{what}, so it is talking in circles instead of acting.",
            "Your last replies were empty or repeated; take a concrete next action or say what "
            "is blocking you.",
            {"turns": len(run), "empty": empty, "repeated": len(run) - empty},
        )

    def _rejected_answer(self, obs: Observation, window: Window) -> Finding | None:
        """Count a rejected answer (a message turn with an error); report the run of them."""
        step = obs.step
        run = self._rejected
        if step.ok or not step.error:
            run.clear()  # an answer accepted: the run of rejections ends
            return None
        kind = error_signature(step.error)
        if not run or kind != self._rejection or self._rejected_progress != window.progress:
            run.clear()
            self._rejection, self._rejected_progress = kind, window.progress
        run.append(obs.index)
        if len(run) < self.threshold or not self.allowed(()):
            return None
        evidence = list(run)
        run.clear()
        return Finding(
            "rejected\x00" + kind,
            None,
            evidence,
            evidence[0],
            f"The agent's answer was rejected {len(evidence)} times in a row the same way "
            f"({quote(step.error)}) with no progress in between, so it keeps retrying an answer "
            "that cannot pass.",
            f"Your last answers were all rejected with {quote(step.error)}; read the rejection "
            "and change the answer (or call a tool to find what is missing) instead of "
            "restating it.",
            {"turns": len(evidence), "rejected": len(evidence), "error": step.error[:200]},
        )

    def _turn_key(self, signature: str, similarity: float) -> str:
        """The earlier turn of this run that `signature` repeats (at least `similarity` alike),
        else itself; only the last few distinct turns are compared, to keep chatty sessions
        cheap."""
        counts = self._counts
        if signature in counts or not signature:
            return signature
        for earlier in list(counts)[-8:]:
            if earlier and values_close(earlier, signature, 0, 0, similarity):
                return earlier
        return signature


def _only_stale_reads(window: Window, since: int) -> bool:
    """Whether every tool call after step `since` was a successful read whose state the window
    had already seen: a read that learns nothing new between idle turns is no progress, so it
    does not end their run (a failure, a write or a new result does)."""
    saw_call = False
    for record in reversed(window.records):
        if record.index <= since:
            break
        state = record.state
        if state is None:
            continue
        outcome = state[1]
        if outcome == "done" or outcome.startswith("!") or window.state_seen.get(state, 0) < 2:
            return False
        saw_call = True
    return saw_call
