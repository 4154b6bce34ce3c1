"""What happens after the detector flags a loop: rollback, nudge, stop or flag.

`respond` decides (pure: a verdict and the policy in effect in, a `LoopResponse` out), so the
session handle and the integrations that act on loops themselves (the LangGraph tool guard,
which rolls back graph checkpoints instead of the session) follow one rule:

1. No looping verdict, or policy ``off`` (but for a hard budget's stop, rule 3): nothing.
2. A handle whose integration acts on loops itself: the verdict is stored and counted, nothing
   else (the integration carries the rule out its own way).
3. The verdict's remedy is ``stop`` (a step budget ran out): there is no healthy point to return
   to, so the session is stopped, whatever the policy: no policy, freeze or setting switches a
   hard budget off.
4. Policy ``flag``: the session waits for on-call (`engine.recovery.oncall`); a person decides.
5. Policy ``nudge_then_rollback`` on the loop's first flag: the detector's advice is appended as
   a system message; the agent gets one chance to change course.
6. Otherwise: roll back to the snapshot before the loop began, with a notice.

`recover` carries the decision out on the store for a session handle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engine import metrics
from engine.freeze import PolicyChoice
from engine.loops.detector import Verdict
from engine.records import RollbackResult, loop_first_step
from engine.recovery.verbs import rollback
from engine.runtime import Runtime
from engine.types import SessionStatus, StoredVerdict

NUDGE_TEXT = (
    "Rewind: the last tool calls repeat without progress ({explanation}). Stop repeating them; "
    "change the arguments, try another tool, or ask the user."
)
"""The nudge appended when the detector gives no advice of its own."""

AUTOMATIC_ACTOR = "rewind"
"""Actor of the engine's own rollbacks in the audit log."""

LoopAction = Literal["none", "flag", "stop", "nudge", "rollback"]


@dataclass(frozen=True)
class LoopResponse:
    """What to do about one step's verdict (see the module docstring for the rule)."""

    action: LoopAction
    """none (not a loop, or policy off), flag, stop, nudge or rollback."""
    nudge: str | None = None
    """For ``nudge``: the text for the agent (without the "Rewind: " prefix)."""


def respond(verdict: Verdict, choice: PolicyChoice | None, *, acts: bool = True) -> LoopResponse:
    """The response to `verdict` under `choice` (None: no policy was resolved because the step
    did not loop). `acts` is False for a handle whose integration acts on loops itself."""
    if not verdict.looping or choice is None or (
            choice.policy == "off" and verdict.remedy != "stop"):
        return LoopResponse("none")
    if not acts:
        return LoopResponse("flag")
    if verdict.remedy == "stop":
        return LoopResponse("stop")
    if choice.policy == "flag":
        return LoopResponse("flag")
    if choice.policy == "nudge_then_rollback" and verdict.flag_count <= 1:
        return LoopResponse("nudge", verdict.advice or NUDGE_TEXT.format(
            explanation=verdict.explanation))
    return LoopResponse("rollback")


def automatic_reason(verdict: Verdict, choice: PolicyChoice) -> str:
    """The reason the engine's own rollback records: the rule, its explanation and the policy."""
    return f"loop detected ({verdict.rule}): {verdict.explanation}; {choice}"


def recover(rt: Runtime, sid: str, tool: str | None, verdict: Verdict, stored: StoredVerdict,
            choice: PolicyChoice, response: LoopResponse) -> RollbackResult | None:
    """Carry out `response` (``stop`` or ``rollback``) for session `sid`, whose step on `tool`
    just stored `stored`; counts the loop in the metrics for any response but ``none``. A
    ``nudge`` is the caller's to append (it goes through the handle's own message path).

    Returns:
        The rollback done, or None (stopped, flagged, nudged, or no restorable snapshot before
        the loop: the session stays flagged for on-call).
    """
    if response.action == "none":
        return None
    metrics.record_loop(verdict, tool, rt.require_session(sid).meta)
    if response.action == "stop":
        rt.store.set_status(sid, SessionStatus.STOPPED, None, rt.clock())
        return None
    if response.action != "rollback":
        return None
    start = loop_first_step(stored)  # the loop's first step, however often it was flagged
    target = rt.store.restorable_snapshot(sid, start) if start is not None else None
    if target is None:
        return None
    return rollback(rt, sid, to=target, actor=AUTOMATIC_ACTOR,
                    reason=automatic_reason(verdict, choice), notice=True, automatic=True,
                    rule=verdict.rule)
