"""The engine's vocabulary: statuses, roles and the shapes of stored JSON records.

Every module, the console and the CLI read these names; none keeps its own list. The enums are
`StrEnum`s, so a value compares equal to its string (``SessionStatus.LOOPING == "looping"``) and is
stored and serialised as that string.
"""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any, Literal, NotRequired, TypedDict

CANONICAL_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
"""The one encoder of canonical JSON (`canonical_json`); its `iterencode` lets a caller stop
early at a size limit."""


def canonical_json(value: Any) -> str:
    """`value` as canonical JSON: keys sorted, no spaces, non-ASCII kept as is. Two equal
    values give the same text, so stores can compare and index what they write.

    Raises:
        TypeError: not representable as JSON.
    """
    return CANONICAL_JSON.encode(value)


class EventType(StrEnum):
    """Kinds of entries in the change feed (`Event.type`), as every store writes them."""

    SESSION = "session"
    """A session was created or its meta changed."""
    STATUS = "status"
    """A session's status changed."""
    MESSAGE = "message"
    """Messages were appended to the live history."""
    VARS = "var"
    """Session variables were set (the ``var`` namespace; other namespaces, like memory, use
    their own name)."""
    SNAPSHOT = "snapshot"
    """A snapshot was taken."""
    STEP = "step"
    """A guarded step ended (its verdict, if any, is in the data)."""
    LOOP = "loop"
    """A loop episode started: a step's loop verdict (its ``step`` event comes just before,
    with the same ``n``) on a session that was not inside one. An episode ends when a step of
    the session ends ok (not late) or the session is rolled back; verdicts repeated within it
    write no ``loop`` event."""
    ROLLBACK = "rollback"
    """A rollback moved the live line back."""
    FORK = "fork"
    """An integration's time travel moved the live line (no recovery)."""
    NOTICE = "notice"
    """A recovery notice was appended."""
    COMPENSATION = "compensation"
    """A compensation changed status (operator verbs use ``compensation.<verb>``)."""
    DELETED = "deleted"
    """A session was deleted."""
    RETENTION = "retention"
    """Retention removed branches or sessions."""


class SessionStatus(StrEnum):
    """Where a session stands."""

    HEALTHY = "healthy"
    """Running normally (also after a loop, once a step ends ok)."""
    LOOPING = "looping"
    """The detector flagged a loop that no rollback has cleared yet."""
    ROLLED_BACK = "rolled_back"
    """A rollback moved the live line back; stays until a step ends ok."""
    STOPPED = "stopped"
    """Stopped by the agent or by a step budget; readable, not running."""


class StepStatus(StrEnum):
    """Outcome of a guarded step."""

    RUNNING = "running"
    OK = "ok"
    ERROR = "error"
    REFUSED = "refused"
    """Refused before it ran (an operator's quarantine): the tool never ran, so the step is
    no evidence of a loop and no failure of the tool."""


QUARANTINE_REFUSAL_PREFIX = "ToolQuarantined: "
"""Start of the error text of a step a quarantine refused (`engine.fleet.quarantine`)."""
GUARD_REFUSAL_PREFIX = "refused by Rewind: "
"""Start of the error text of a call an integration's own guard refused before it ran (the MCP
proxy's loop block, `engine.fleet.quarantine.refuse_call`)."""


def is_refused(status: str, error: str | None) -> bool:
    """True for a step refused before it ran (a quarantine, an integration's guard): the tool
    never ran, so the step is no evidence of a loop, and neither the live detector nor a replay
    judges it. Its status says so (`StepStatus.REFUSED`); steps stored before that status
    existed ended in error with a text starting with `QUARANTINE_REFUSAL_PREFIX` or
    `GUARD_REFUSAL_PREFIX`, and count too."""
    if status == StepStatus.REFUSED:
        return True
    return (status == StepStatus.ERROR and bool(error)
            and str(error).startswith((QUARANTINE_REFUSAL_PREFIX, GUARD_REFUSAL_PREFIX)))


class CompensationStatus(StrEnum):
    """Life of a compensation in the saga outbox."""

    PENDING = "pending"
    """Queued, waiting for a process that registered its handler."""
    RUNNING = "running"
    """Claimed under a lease by one process."""
    DONE = "done"
    """The handler returned."""
    FAILED = "failed"
    """The handler kept raising; needs manual action."""
    RESOLVED = "resolved"
    """An operator marked it resolved by hand (undone outside Rewind, or nothing to undo); the
    record keeps who and why. Terminal, like done, but the handler never succeeded."""


class Role(StrEnum):
    """What an actor may do: viewers read, operators also roll back and send notices."""

    VIEWER = "viewer"
    OPERATOR = "operator"


LoopPolicy = Literal["rollback", "nudge_then_rollback", "flag", "off"]
"""What a session does when the detector flags a loop: roll back (default), nudge the agent once
then roll back, only flag it, or not check at all."""

LOOP_POLICIES: tuple[LoopPolicy, ...] = ("rollback", "nudge_then_rollback", "flag", "off")


def checked_policy(value: LoopPolicy | None) -> LoopPolicy | None:
    """`value` as an ``on_loop`` policy (None or "" for none given).

    Raises:
        ValueError: not one of `LOOP_POLICIES`.
    """
    if not value:
        return None
    if value not in LOOP_POLICIES:
        raise ValueError(f"on_loop must be one of {', '.join(LOOP_POLICIES)}, not {value!r}")
    return value


FACETS: tuple[str, ...] = ("tenant", "scenario", "prompt_version")
"""The session meta fields the fleet is sliced by: sessions are listed, counted, rolled back in
bulk and quarantined per facet, and the stores index them."""

RollbackKind = Literal["rollback", "fork"]
"""A recovery (counted, sets the status) or an integration's time travel (neither)."""

SnapshotKind = Literal["manual", "step"]
"""Asked for by the runtime (`Session.snapshot`) or write-ahead, before a guarded step; each
kind has its own retention window."""


class LoopEpisode(TypedDict):
    """One loop from its first step, carried by every verdict of the loop (`StoredVerdict`):
    the first flag's start, kept while the session is flagged again, until a step ends ok or
    the session is rolled back (`engine.sessions.episode`)."""

    start_step: int
    """Session step number where the loop began: the first flag's evidence starts there."""
    started_at: float
    """Unix time that step began."""
    flags: int
    """Verdicts of this loop so far (1 at its first flag)."""
    tokens: int | None
    """Context tokens the loop's steps sent to the model through `through_step` (their
    recorded token budgets); None while no step of it recorded one."""
    snapshots: int
    """Write-ahead snapshots taken for the loop's steps through `through_step`."""
    through_step: int
    """The step of the verdict carrying this record (the loop's newest flag)."""


class StoredVerdict(TypedDict):
    """A loop verdict as stored with its step and on the session (`SessionInfo.last_verdict`)."""

    rule: str
    """Rule id that fired (`engine.loops.detector.RULES`)."""
    explanation: str
    """One sentence for people."""
    evidence_steps: list[int]
    """Session step numbers the verdict rests on, oldest first."""
    loop_start_step: int | None
    """Session step number where the loop began (rollback goes to the snapshot before it)."""
    details: dict[str, Any]
    """Rule-specific details (argument diffs, counts, advice, remedy)."""
    at: float
    """Unix time of the verdict (engine clock)."""
    policy: NotRequired[LoopPolicy]
    """The loop policy the session followed on this verdict (absent in verdicts stored before
    policies were recorded)."""
    policy_reason: NotRequired[str]
    """Why that policy: "set for this session", "freeze: <name>" or "engine default"."""
    episode: NotRequired[LoopEpisode]
    """The loop this verdict belongs to, from its first step (absent in verdicts stored before
    episodes were recorded)."""
    detector: NotRequired[dict[str, Any]]
    """The detector settings that produced the verdict (`DetectorConfig` field -> value, over
    the detector factory's config): the process's ``[rewind.detector]``, with the settings
    declared for the fleet in the store over it; absent when neither set any. `Engine.replay`
    takes it as is."""
    waiting: NotRequired[bool]
    """True when this verdict made the session wait for on-call (policy ``flag``, see
    `engine.recovery.oncall`): its looping call is not run again until a person decides."""
    decision: NotRequired[DecisionRecord]
    """An operator's decision on the wait this verdict began (release or stop), written with
    its audit row; absent while the session waits, and when it was rolled back instead."""


DecisionKind = Literal["rolled_back", "released", "stopped"]
"""What an operator decided about a session waiting for on-call."""


class DecisionRecord(TypedDict):
    """An operator's decision on a waiting session, as stored on its verdict."""

    kind: DecisionKind
    """released or stopped (a rollback is the rollback's own record)."""
    actor: str
    """Who decided."""
    reason: str
    """Why, as the operator said it."""
    note: str | None
    """A release's note for the agent (appended to the session's messages), or None."""
    at: float
    """Unix time of the decision (engine clock)."""
    step: NotRequired[int]
    """The session's step count at the decision: a released session's detector window starts
    after it, so the evidence of the wait does not flag it again at once."""


class TokenBreakdown(TypedDict, total=False):
    """Token counts of the context an agent built for one step (`ContextBuilder.build`)."""

    system: int
    """Tokens of the system prompt."""
    dialogue: int
    """Tokens of the dialogue kept."""
    memories: int
    """Tokens of the recalled memories kept."""
    reserve: int
    """Tokens held back for the model's answer."""
    dropped: int
    """Tokens that did not fit and were left out."""
    total: int
    """Tokens of the context as built."""
    max_tokens: int
    """The budget."""


TOKEN_BREAKDOWN_KEYS: tuple[str, ...] = tuple(TokenBreakdown.__annotations__)


AUDIT_ACTIONS: tuple[str, ...] = (
    "rollback", "rollback_many", "rollback_many.start", "fork", "notice", "delete",
    "retention", "compensation",
    "compensation.retry", "compensation.resolve", "quarantine", "quarantine_lift", "freeze",
    "freeze_end", "label", "detector", "release", "stop", "incident_close", "incident_rollback",
    "incident_quarantine", "incident_release", "incident_stop",
    "incident_notice", "incident_settings",
)
"""Every action the audit log records, as stored (`AuditEvent.action`)."""
