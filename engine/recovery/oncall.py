"""On-call in the loop: a session flagged under the ``flag`` policy waits for a person.

Under ``flag`` (the session's own policy or a freeze's) the engine does not act on a loop; a
person does. The flagged step stores its verdict with ``waiting`` (one atomic write with the
step), which makes the session wait (`SessionInfo.waiting_since`): the step raises `LoopWaiting`
and so does every later step on the session before its body runs, so the looping call is not
run again. The wait ends with one operator decision:

- **rolled back**: any rollback of the session (console, ``rewind rollback``, a bulk rollback);
  the agent continues from the rolled-back state and sees the notice;
- **released** (`release`): the agent may continue, with the operator's note appended to its
  messages; the detector's window starts after the flagged step, so the evidence that made the
  session wait does not flag it again at once (a loop that goes on is flagged again after
  fresh evidence);
- **stopped** (`stop`): status stopped; steps raise `SessionStopped`.

Release and stop check the actor's role at the moment they act, need a reason, and write the
decision, the note, the status and the audit row in one atomic write that refuses a session
that does not wait or was decided already (`Store.decide`). A session Rewind only watches
(OpenTelemetry, ``watch_only``) never waits: nothing can hold its agent, and a decision on it
is refused saying so. A session nobody decides about
stays waiting. The agent's runtime waits with `wait_for_decision` (polls the store, so the
decision may come from any process).
"""

from __future__ import annotations

import time
from typing import Any

from engine.errors import DecisionRefused, StepError, WaitTimeout
from engine.identity import Actor, checked_actor, checked_reason, require_operator
from engine.limits import check_text
from engine.loops.detector import Verdict
from engine.records import Decision, SessionInfo
from engine.runtime import Runtime
from engine.store.requests import DecisionRequest, refuse_undecidable
from engine.types import SessionStatus, StoredVerdict

POLL_S = 0.25
"""Seconds between two looks at the store while waiting for a decision."""

NOTE_PREFIX = "Rewind: an operator released this session"
"""Start of the message a release appends for the agent."""

RELEASE_FLAG = "rewind_release"
"""Key set on the message a release appends (as `NOTICE_FLAG` marks notices)."""


def decision_reason(limits: Any, reason: str | None, verb: str) -> str:
    """The reason of a decision, never blank.

    Raises:
        DecisionRefused: blank. TypeError: not a string. SizeLimitExceeded: too long.
    """
    if reason is None or (isinstance(reason, str) and not reason.strip()):
        raise DecisionRefused(f"to {verb} a waiting session needs a reason: it goes to the "
                              "audit log; nothing was written")
    return checked_reason(limits, reason)


def watch_only_message(sid: str, verb: str) -> str:
    """Why a decision on a session Rewind only watches (OpenTelemetry) is refused."""
    return (f"session {sid!r} is watch-only (seen through OpenTelemetry, `rewind otlp`): Rewind "
            f"does not run its agent, so nothing holds it and there is nothing to {verb}; stop "
            "or fix the agent where it runs. Nothing was written")


def note_message(note: str) -> dict[str, Any]:
    """The message a release appends so the agent reads the operator's note."""
    return {"role": "system", "content": f"{NOTE_PREFIX}: {note}", RELEASE_FLAG: True}


def _decide(rt: Runtime, sid: str, kind: str, actor: str | Actor, reason: str | None,
            note: str | None) -> Decision:
    verb = "release" if kind == "released" else "stop"
    who = checked_actor(rt.limits, actor)
    require_operator(who, f"{verb} waiting sessions")
    why = decision_reason(rt.limits, reason, verb)
    message = None
    if note is not None:
        if not isinstance(note, str):
            raise TypeError(f"a note is text, not {type(note).__name__}")
        if note.strip():
            check_text(note, rt.limits.notice_chars, "the note", "notice_chars")
            message = note_message(note.strip())
    info = rt.require_session(sid)
    if (info.meta or {}).get("watch_only"):
        raise DecisionRefused(watch_only_message(info.id, verb))
    refuse_undecidable(info.id, info.status, dict(info.last_verdict or {}) or None)
    stored = rt.store.decide(info.id, DecisionRequest(
        kind="released" if kind == "released" else "stopped", actor=who.name, reason=why,
        now=rt.clock(), note=message,
        note_text=None if message is None or note is None else note.strip(),
        step=info.steps))
    decision = stored.get("decision")
    assert decision is not None  # the store wrote it
    return _record(decision)


def release(rt: Runtime, sid: str, *, actor: str | Actor, reason: str,
            note: str | None = None) -> Decision:
    """Release session `sid`, waiting for on-call: its agent may continue; `note` (optional)
    is appended to its messages for the agent. Audited (action ``release``).

    Raises:
        PermissionDenied: not an operator (now). DecisionRefused: blank reason, the session
            does not wait, or was decided already. UnknownSession. Nothing is written then.
    """
    return _decide(rt, sid, "released", actor, reason, note)


def stop(rt: Runtime, sid: str, *, actor: str | Actor, reason: str) -> Decision:
    """Stop session `sid`, waiting for on-call: status stopped, its steps raise
    `SessionStopped`. Audited (action ``stop``).

    Raises:
        PermissionDenied, DecisionRefused, UnknownSession: as `release`.
    """
    return _decide(rt, sid, "stopped", actor, reason, None)


def stored_decision(info: SessionInfo) -> dict[str, Any]:
    """The decision stored on the session's last verdict ({} for none)."""
    verdict: dict[str, Any] = dict(info.last_verdict or {})
    return dict(verdict.get("decision") or {})


def _record(d: Any) -> Decision:
    return Decision(kind=d.get("kind"), actor=str(d.get("actor") or ""),
                    reason=str(d.get("reason") or ""), note=d.get("note"),
                    at=float(d.get("at") or 0.0))


def waited_verdict(stored: StoredVerdict) -> Verdict:
    """The detector's verdict as a stored verdict keeps it (for `LoopWaiting` raised before a
    step, by a handle that did not see the flag itself)."""
    details = dict(stored.get("details") or {})
    return Verdict(looping=True, rule=stored.get("rule") or None,
                   explanation=stored.get("explanation") or "", details=details,
                   remedy=details.get("remedy"))


def decision_after(rt: Runtime, info: SessionInfo, since: float | None,
                   epoch: int | None) -> Decision | None:
    """The decision that ended the wait session `info` was in since `since` at `epoch`, or
    None while it still waits (or when it never waited)."""
    verdict: dict[str, Any] = dict(info.last_verdict or {})
    decided = verdict.get("decision")
    if verdict.get("waiting") and decided and (since is None or verdict.get("at") == since):
        return _record(decided)
    if epoch is not None and info.epoch != epoch:
        rows = rt.store.audit(session=info.id, action="rollback", limit=1)
        if rows:
            row = rows[0]
            return Decision("rolled_back", row.actor, row.reason or "", None, row.at)
        return Decision("rolled_back", "", "", None, rt.clock())
    if info.status == SessionStatus.ROLLED_BACK:
        rows = rt.store.audit(session=info.id, action="rollback", limit=1)
        if rows and (since is None or rows[0].at >= since):
            row = rows[0]
            return Decision("rolled_back", row.actor, row.reason or "", None, row.at)
    return None


def wait_for_decision(rt: Runtime, sid: str, timeout: float | None = None, *,
                      since: float | None = None, epoch: int | None = None,
                      poll: float = POLL_S) -> Decision:
    """Block until an operator decides about session `sid` (rollback, release or stop),
    looking at the store every `poll` seconds, so the decision may come from any process.

    Args:
        timeout: seconds to wait at most (None: as long as it takes).
        since, epoch: the wait to end (the time it began, the session's epoch then); None:
            the session's current wait.

    Raises:
        WaitTimeout: no decision within `timeout`. StepError: the session neither waits nor
            had a decision to report. UnknownSession.
    """
    if timeout is not None and (isinstance(timeout, bool) or timeout < 0):
        raise ValueError(f"timeout is a number of seconds (or None), not {timeout!r}")
    deadline = None if timeout is None else time.monotonic() + timeout
    info = rt.require_session(sid)
    if since is None and epoch is None:
        if info.waiting_since is None:
            found = decision_after(rt, info, None, None)
            if found is not None:
                return found
            raise StepError(f"session {sid!r} is not waiting for on-call (status "
                            f"{info.status}): there is no decision to wait for")
        since, epoch = info.waiting_since, info.epoch
    while True:
        found = decision_after(rt, info, since, epoch)
        if found is not None:
            return found
        if info.status == SessionStatus.STOPPED:
            return Decision("stopped", "", "", None, info.updated_at)
        if deadline is not None and time.monotonic() >= deadline:
            raise WaitTimeout(f"session {sid!r} still waits for on-call after {timeout} s; "
                              "call wait_for_decision again, or ask an operator to act")
        pause = poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic()))
        time.sleep(pause)
        info = rt.require_session(sid)
