"""Every error Rewind raises on purpose. Each message says what was wrong and what to do."""

from __future__ import annotations

import datetime as _dt
from typing import Any


class RewindError(Exception):
    """Base class of all Rewind errors."""


class InvalidSessionId(RewindError, ValueError):
    """A session id is empty, longer than 200 characters or holds control characters."""


class UnknownSession(RewindError, KeyError):
    """No session with that id exists in the store."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "unknown session"


class UnknownSnapshot(RewindError, KeyError):
    """No snapshot with that id exists in the session."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown snapshot"


class SnapshotNotRestorable(RewindError, ValueError):
    """The snapshot exists but cannot be a rollback target (abandoned branch or retired)."""


class RollbackConflict(RewindError, RuntimeError):
    """The session was rolled back by someone else after the caller looked at it."""


class NothingToRollBack(RewindError, ValueError):
    """A rollback was asked for but no restorable snapshot qualifies."""


class SizeLimitExceeded(RewindError, ValueError):
    """A value is larger than the engine's `Limits` allow; nothing was written."""


class StepError(RewindError, RuntimeError):
    """A guarded step was used wrongly (finished twice, never finished, …)."""


class StoreError(RewindError):
    """The store failed; the message names the store (never its password)."""


class StoreUnavailable(StoreError, ConnectionError):
    """The store cannot be reached."""


class StoreBusy(StoreUnavailable):
    """Another connection held the store's write lock for longer than the engine waits (a
    SQLite file with a write transaction left open elsewhere); nothing was written."""


class StoreFull(StoreError):
    """The disk holding the store is full (or the store reached its size limit); nothing of
    the write was kept. Free space there, then retry."""


class StoreNotFound(StoreError, LookupError):
    """A reading command was pointed at a store that does not exist (a SQLite file that is not
    there): refused, never created empty, so a wrong path cannot pass for an empty fleet."""


class WatchOnly(RewindError):
    """The session is of an agent Rewind only watches (through OpenTelemetry, `rewind otlp`):
    it can be flagged, paged, shown and labelled, but Rewind cannot roll it back or tell its
    user anything, since it does not run that agent."""


class SchemaMismatch(StoreError):
    """The store was written by a newer release of Rewind."""


class ConfigError(RewindError, ValueError):
    """A setting (an environment variable or a configuration table) is malformed; the message
    names the setting and what it accepts."""


class PermissionDenied(RewindError, PermissionError):
    """The actor's role does not allow this action."""


class UnknownCompensation(RewindError, KeyError):
    """No compensation with that id is in the store, or no handler is registered under that
    compensation name in this process."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown compensation"


class CompensationConflict(RewindError, RuntimeError):
    """The compensation's status does not allow the action: it is done or resolved already, or
    a worker holds its lease right now."""


class LoopDetected(RewindError):
    """Raised from a guarded step when the loop detector flags the session.

    Attributes:
        verdict: the detector's `Verdict` (rule, explanation, evidence, loop start).
        rollback: the `RollbackResult` when the engine already rolled the session back
            (the default policy), or None when the policy only nudged the agent.
    """

    def __init__(self, verdict, rollback=None):
        self.verdict = verdict
        self.rollback = rollback
        where = f"; rolled back to {rollback.target}" if rollback is not None else ""
        super().__init__(f"loop detected ({verdict.rule}): {verdict.explanation}{where}")


class LoopWaiting(LoopDetected):
    """Raised from a guarded step when the session waits for on-call: the loop policy is
    ``flag`` (the session's own or a freeze's), so a person, not the engine, decides what
    happens to the looping session. Raised by the step that was flagged (on leaving its block)
    and by every later step on the waiting session before its body runs: the looping call is
    not executed again. Wait for the decision with `Session.wait_for_decision` (or
    ``await Session.await_decision()``): rolled back, released (with the operator's note) or
    stopped.

    Attributes:
        verdict: the detector's `Verdict` that made the session wait.
        since: unix time the session began to wait.
        session: the id of the waiting session.
        rollback: always None (nothing was rolled back).
    """

    def __init__(self, verdict, since: float, session: str = "") -> None:
        super().__init__(verdict, None)
        self.since = since
        self.session = session
        stamp = _dt.datetime.fromtimestamp(since, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
        self.args = (
            f"waiting for on-call since {stamp}: loop detected ({verdict.rule}): "
            f"{str(verdict.explanation).rstrip('.')}. The call was not run; wait for an "
            f"operator's decision (Session.wait_for_decision) or ask one to act: rewind "
            f"release|stop|rollback "
            f"{session or 'SESSION'} --actor A --reason R",
        )


class DecisionRefused(RewindError, ValueError):
    """An operator's decision on a waiting session (release, stop) was refused before anything
    was written: the session is not waiting for on-call (never flagged, rolled back, decided
    already), or the reason is blank. The message says which."""


class SessionStopped(RewindError):
    """Raised from a guarded step when an operator stopped the session (`Session.stop` with an
    actor, `rewind stop`): it stays readable, but it runs no more steps. An operator's rollback
    makes it runnable again."""


class WaitTimeout(RewindError, TimeoutError):
    """`Session.wait_for_decision` timed out: the session still waits for on-call."""


class UnknownEncoding(RewindError, ValueError):
    """The encoding name is not one Rewind can load offline."""


class EncodingUnavailable(RewindError, LookupError):
    """No installed package carries the rank file of a known encoding."""


class EncodingIntegrityError(RewindError, ValueError):
    """A shipped rank file does not have the SHA-256 published with tiktoken."""


class BudgetError(RewindError, ValueError):
    """What must always be kept does not fit the window, or the builder was set up wrongly."""


class EmbedderUnavailable(RewindError, RuntimeError):
    """The embedding model or the library that runs it is not installed."""


class JudgeUnavailable(RewindError, RuntimeError):
    """A contradiction judge's model, or the library that runs it, cannot be loaded."""


class StoreAuthError(StoreError):
    """The store answered but refused the credentials or the ACL (wrong or missing password,
    unknown user, a command the user may not run). A configuration error, not an outage: it is
    never retried into a fallback store."""


class UnknownQuarantine(RewindError, KeyError):
    """No quarantine with that id is in the store (lifted already, or never set)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown quarantine"


class ToolQuarantined(RewindError):
    """Raised by `Session.step` before the step's body runs when an operator quarantined the
    tool for this session (`Engine.quarantine`). The refusal is on the session's timeline as a
    step that ended in error.

    Attributes:
        tool: the tool that was refused.
        quarantine: the `Quarantine` record that applies (id, reason, actor, until, scope).
    """

    def __init__(self, tool: str, quarantine: Any) -> None:
        self.tool = tool
        self.quarantine = quarantine
        q = quarantine
        if q.until is None:
            until = "until it is lifted"
        else:
            stamp = _dt.datetime.fromtimestamp(q.until, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
            until = f"until {stamp}"
        scope = ", ".join(f"{k}={v}" for k, v in sorted(q.scope.items()))
        super().__init__(
            f"tool {tool!r} is quarantined{f' for {scope}' if scope else ''} by {q.actor} "
            f"{until}: {q.reason or 'no reason given'} (quarantine {q.id}). Do not call it; "
            f"use another tool or tell the user. An operator lifts it with "
            f"`rewind quarantine --lift {q.id} --reason …`"
        )


class UnknownIncident(RewindError, KeyError):
    """No incident with that id is in the store."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown incident"


class IncidentConflict(RewindError, RuntimeError):
    """The incident does not allow the remedy now: it is closed, or another operator took a
    remedy on it first (nothing was written)."""
