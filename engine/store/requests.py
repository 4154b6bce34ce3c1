"""What callers hand the store: the shapes of step records, retention settings, session filters
and rollback requests (the arguments the `engine.store.base.Store` protocols take)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NotRequired, TypedDict

from engine.errors import DecisionRefused
from engine.records import SnapshotNode
from engine.types import (
    FACETS,
    RollbackKind,
    SessionStatus,
    StepStatus,
    StoredVerdict,
    TokenBreakdown,
)


class StepStart(TypedDict):
    """What `Store.begin_step` records about a step as it begins."""

    tool: str | None
    """Tool name; None for a plain agent message turn."""
    args: str
    """Canonical JSON text of the arguments."""
    fingerprint: str
    """Stable hash of tool + canonical args."""
    side_effect: NotRequired[bool]
    """The tool changes the outside world (default False)."""
    compensation: NotRequired[str | None]
    """JSON text of ``[handler name, args]`` that undoes the side effect, or None."""
    text: NotRequired[str | None]
    """Agent text of a message turn."""
    task: NotRequired[bool]
    """The agent's runtime began a new task right before this step (see `StepRecord.task`)."""
    turn: NotRequired[str | None]
    """Id of the model response that issued the call (see `StepRecord.turn`)."""


class StepOutcome(TypedDict):
    """What `Store.end_step` records about a step as it ends."""

    status: StepStatus
    """ok or error."""
    error: NotRequired[str | None]
    """Error text of a failed step."""
    result_digest: NotRequired[str | None]
    """Digest of the result (equal results, equal digests)."""
    result_preview: NotRequired[str | None]
    """First characters of the result, for people."""
    verdict: NotRequired[StoredVerdict | None]
    """The loop verdict this step flagged, if any."""
    budget: NotRequired[TokenBreakdown | None]
    """Token breakdown of the context the agent built for this step, if given."""


class StepTicket:
    """What `begin_step` hands back: the step number, the epoch and the write-ahead snapshot."""

    __slots__ = ("n", "epoch", "snapshot", "seq")

    def __init__(self, n: int, epoch: int, snapshot: str | None, seq: int):
        self.n = n
        """Step number within the session."""
        self.epoch = epoch
        """The session's epoch when the step began (a rollback meanwhile makes it late)."""
        self.snapshot = snapshot
        """Id of the write-ahead snapshot taken right before the step, if one was asked for."""
        self.seq = seq
        """Session sequence number of the step's record."""


class Retention:
    """Retention settings applied by the store as snapshots are taken."""

    __slots__ = ("keep_snapshots", "keep_step_snapshots")

    def __init__(self, keep_snapshots: int = 5, keep_step_snapshots: int = 50):
        if keep_snapshots < 1 or keep_step_snapshots < 1:
            raise ValueError("retention windows must keep at least one snapshot")
        self.keep_snapshots = keep_snapshots
        """Named snapshots (taken with `Session.snapshot`) that stay restorable on the live line."""
        self.keep_step_snapshots = keep_step_snapshots
        """Write-ahead step snapshots stay restorable while their step is among the last N steps."""


@dataclass(frozen=True)
class SessionFilter:
    """Which sessions `list_sessions` and `count_sessions` take: every given field must match
    (None: no filter on it)."""

    status: SessionStatus | None = None
    """Only sessions in this status."""
    tenant: str | None = None
    """Only sessions whose meta names this tenant."""
    scenario: str | None = None
    """Only sessions whose meta names this scenario."""
    prompt_version: str | None = None
    """Only sessions whose meta names this prompt version."""
    updated_since: float | None = None
    """Only sessions changed at or after this time."""

    def __post_init__(self) -> None:
        # A filter no session can match is a typo (`status="loop"`): an empty answer would read
        # as "no session is looping", the worst one there is.
        if self.status is not None and self.status not in tuple(SessionStatus):
            raise ValueError(f"status must be one of {', '.join(SessionStatus)}, "
                             f"not {self.status!r}")
        for name, value in self.facets().items():
            if not isinstance(value, str):
                raise TypeError(f"the {name} filter must be a string, not "
                                f"{type(value).__name__} {value!r}")
        since = self.updated_since
        if since is not None and (isinstance(since, bool) or not isinstance(since, (int, float))):
            raise TypeError(f"updated_since must be a Unix time (a number), not "
                            f"{type(since).__name__} {since!r}")

    def facets(self) -> dict[str, str]:
        """The meta facets (`engine.types.FACETS`) this filter asks for, name -> value."""
        wanted = {name: getattr(self, name) for name in FACETS}
        return {name: value for name, value in wanted.items() if value is not None}


@dataclass(frozen=True, order=True)
class SessionCursor:
    """Where a page of the fleet listing ended: the last session it showed. The next page
    starts right after it (keyset paging: no rows are skipped to get there, so every page costs
    what it reads, and a session that changes meanwhile is neither shown twice nor skipped
    unless it moved past the cursor)."""

    updated_at: float
    """The last session's activity time (the listing's order, newest first)."""
    id: str
    """The last session's id (the order among sessions active at the same time)."""

    @classmethod
    def after(cls, info: Any) -> SessionCursor:
        """The cursor after session summary `info` (a `SessionInfo`)."""
        return cls(float(info.updated_at), str(info.id))

    def encode(self) -> str:
        """The cursor as text (``rewind sessions --after``): ``<updated_at>/<id>``."""
        return f"{self.updated_at!r}/{self.id}"

    @classmethod
    def decode(cls, text: str) -> SessionCursor:
        """The cursor `encode` wrote.

        Raises:
            ValueError: `text` is no cursor.
        """
        at, sep, sid = text.partition("/")
        try:
            return cls(float(at), sid) if sep and sid else cls._bad(text)
        except ValueError:
            return cls._bad(text)

    @staticmethod
    def _bad(text: str) -> SessionCursor:
        raise ValueError(f"{text!r} is not a page cursor; pass the one the last page printed "
                         "(<time>/<session id>)")


ALL_SESSIONS = SessionFilter()
"""The filter every session matches (the default of `list_sessions` and `count_sessions`)."""


@dataclass(frozen=True)
class RollbackRequest:
    """What `Store.rollback` is asked to do: which snapshot, on whose behalf, and under which
    conditions."""

    target: str
    """Id of a restorable snapshot on the live line."""
    actor: str
    """Who rolls back (audited)."""
    reason: str
    """Why (audited, labels the branch)."""
    now: float
    """Time of the rollback (engine clock)."""
    notice: dict[str, Any] | None = None
    """Chat message appended after the rollback, or None."""
    expect_epoch: int | None = None
    """Refuse unless the session's epoch is still this one (None: any epoch)."""
    kind: RollbackKind = "rollback"
    """A recovery (counted, sets the status) or an integration's time travel (``fork``)."""
    batch: str | None = None
    """Id of the bulk rollback this one belongs to (None: not part of one)."""


class SessionWrite(TypedDict):
    """The parts of one atomic `Store.write_session`; every part may be left out."""

    messages: NotRequired[list[dict[str, Any]]]
    """Chat messages (each with a ``role``) to append to the live line."""
    messages_if_empty: NotRequired[bool]
    """Append `messages` only when the session's live line holds no message yet."""
    values: NotRequired[dict[str, dict[str, Any]]]
    """Versioned key-value writes: namespace -> items (None deletes a key), as `Store.put`."""
    snapshot: NotRequired[str]
    """Label of a ``manual`` snapshot taken after the messages and values."""
    documents: NotRequired[dict[str, dict[str, Any]]]
    """Unversioned documents: namespace -> items (None deletes one), as `Store.doc_put`."""
    stamp: NotRequired[tuple[str, str]]
    """(namespace, key) of a document in `documents` that records the snapshot taken."""
    create: NotRequired[dict[str, Any]]
    """Canonical meta: create the session with it when missing, else merge its keys into the
    session's meta (as `Store.ensure_session`), before the other parts."""
    expect: NotRequired[tuple[str | None, int]]
    """(snapshot id, epoch): the session's epoch must be this one and its newest manual snapshot
    on the live line this one (its head, or followed only by step snapshots), else nothing is
    written (`RollbackConflict`); a session that `create` creates is at (None, 0). A writer that
    decided what to write from what it saw of the session earlier (the LangGraph saver's live
    checkpoint) writes without reading it again: a rollback moves the epoch, a manual snapshot
    (another checkpoint's, an operator's) the newest one; a guarded tool call's step snapshot
    moves neither."""


def moved_message(sid: str, at: tuple[str | None, int]) -> str:
    """Why a `SessionWrite` with ``expect`` was refused: where the session is now."""
    return (f"session {sid!r} moved since it was read (it is at snapshot {at[0]!r}, epoch "
            f"{at[1]}: rolled back or snapshotted meanwhile); nothing was written")


def stamped(write: SessionWrite, epoch: int, node: SnapshotNode | None
            ) -> dict[str, dict[str, Any]]:
    """The documents of `write`, the one its stamp names holding the snapshot `node` (its id as
    ``snap``, its live message count as ``msgs``) and the session's `epoch`.

    Raises:
        ValueError: a stamp without a snapshot, or naming no dict among the documents.
    """
    documents = dict(write.get("documents") or {})
    stamp = write.get("stamp")
    if stamp is None:
        return documents
    ns, key = stamp
    doc = documents.get(ns, {}).get(key)
    if node is None or not isinstance(doc, dict):
        raise ValueError(f"the stamp {stamp!r} needs a snapshot and a document that is a dict")
    documents[ns] = {**documents[ns], key: {**doc, "snap": node.id, "msgs": node.messages,
                                            "epoch": epoch}}
    return documents


@dataclass(frozen=True)
class DecisionRequest:
    """What `Store.decide` is asked to write: an operator's decision on a session waiting for
    on-call, with its audit row, in one atomic write."""

    kind: Literal["released", "stopped"]
    """released (status healthy: the agent may continue) or stopped (status stopped)."""
    actor: str
    """Who decides (audited)."""
    reason: str
    """Why (audited; never blank)."""
    now: float
    """Time of the decision (engine clock)."""
    note: dict[str, Any] | None = None
    """Chat message appended to the live line with a release (the operator's note), or None."""
    note_text: str | None = None
    """The operator's note as written (stored with the decision; `note` carries it)."""
    step: int = 0
    """The session's step count when the operator decided (steps up to it are the evidence of
    the wait: a released session's detector window starts after them)."""

    @property
    def action(self) -> str:
        """The audit action: ``release`` or ``stop``."""
        return "release" if self.kind == "released" else "stop"

    def record(self) -> dict[str, Any]:
        """The decision as stored on the session's verdict (`engine.types.DecisionRecord`)."""
        note = self.note_text if self.note is not None else None
        return {"kind": self.kind, "actor": self.actor, "reason": self.reason, "note": note,
                "at": self.now, "step": self.step}


def refuse_undecidable(sid: str, status: str, verdict: dict[str, Any] | None) -> None:
    """Raises DecisionRefused unless session `sid` (its `status` and last verdict) waits for
    on-call with no decision yet. Every store runs this check in the write that decides."""
    if verdict and verdict.get("waiting") and verdict.get("decision"):
        d = verdict["decision"]
        raise DecisionRefused(decided_message(sid, str(d.get("kind")), str(d.get("actor"))))
    if status != SessionStatus.LOOPING or not verdict or not verdict.get("waiting"):
        raise DecisionRefused(not_waiting_message(sid, status))


def decided_message(sid: str, kind: str, actor: str) -> str:
    """Why a second decision on one wait is refused."""
    return (f"session {sid!r} was {kind} already by {actor}: one decision per wait; nothing "
            f"was written")


def not_waiting_message(sid: str, status: str) -> str:
    """Why a decision on a session that does not wait is refused."""
    return (f"session {sid!r} is not waiting for on-call (status {status}): only a session "
            f"flagged under the 'flag' loop policy waits for a decision; nothing was written")


@dataclass(frozen=True)
class AuditEntry:
    """An audit row written in the same atomic write as the change it records (a quarantine set
    or lifted, a freeze declared or ended): a crash can leave neither without the other."""

    actor: str
    """Who acted."""
    action: str
    """What was done (``quarantine``, ``quarantine_lift``, ``freeze``, …)."""
    reason: str = ""
    """Why, as the actor said it."""
    detail: dict[str, Any] = field(default_factory=dict)
    """What the change was (JSON-representable), also the feed event's data."""


def snapshot_seq(snapshot_id: str) -> int | None:
    """The session sequence number a snapshot id names (``snap-<seq>``, as every store writes
    it), or None for any other spelling (``snap-07``, ``snap-１``, 19 digits or more)."""
    prefix, _, number = snapshot_id.partition("-")
    if prefix != "snap" or not (number.isascii() and number.isdigit()) or len(number) > 18:
        return None
    seq = int(number)
    return seq if f"snap-{seq}" == snapshot_id else None
