"""Typed records that the engine hands out. Every field says what it means."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from engine.types import (
    CompensationStatus,
    DecisionKind,
    SessionStatus,
    SnapshotKind,
    StepStatus,
    StoredVerdict,
    TokenBreakdown,
)


@dataclass(frozen=True)
class SessionInfo:
    """Summary of one session, as the fleet view lists it."""

    id: str
    """Session id (1–200 printable characters)."""
    meta: dict[str, Any]
    """Free metadata: tenant, scenario, prompt_version, locale, channel, …"""
    status: SessionStatus
    """healthy, looping, rolled_back or stopped (`SessionStatus`)."""
    head: str | None
    """Id of the newest snapshot on the live line, None before the first snapshot."""
    epoch: int
    """Incremented by every rollback; a step begun in an older epoch lands as late."""
    created_at: float
    """Unix time the session was created."""
    updated_at: float
    """Unix time of the last change, to within a second: on SQLite a busy session's steps move it
    at most once a second (status changes, verdicts and rollbacks always move it)."""
    steps: int = 0
    """Number of steps ever recorded (live and abandoned)."""
    messages: int = 0
    """Number of messages on the live line."""
    loops: int = 0
    """Number of loop verdicts so far."""
    rollbacks: int = 0
    """Number of rollbacks so far."""
    last_verdict: StoredVerdict | None = None
    """The latest loop verdict (rule, explanation, evidence steps, loop_start_step), if any."""

    @property
    def waiting_since(self) -> float | None:
        """Unix time since which the session waits for on-call (its loop policy is ``flag``:
        a person decides, see `engine.recovery.oncall`), or None when it does not wait."""
        verdict = self.last_verdict
        if (self.status != SessionStatus.LOOPING or not verdict or not verdict.get("waiting")
                or verdict.get("decision")):
            return None
        return float(verdict.get("at") or 0.0)

    @property
    def waiting(self) -> bool:
        """True while the session waits for on-call (`waiting_since`)."""
        return self.waiting_since is not None

    @property
    def tenant(self) -> str | None:
        return self.meta.get("tenant")

    @property
    def scenario(self) -> str | None:
        return self.meta.get("scenario")

    @property
    def prompt_version(self) -> str | None:
        return self.meta.get("prompt_version")

    @property
    def locale(self) -> str:
        return self.meta.get("locale") or "en"

    def loop_cost(self, now: float) -> LoopCost | None:
        """What the session's latest loop cost from its first step (`LoopCost`), read from the
        last verdict alone (no step is read); None without a loop verdict. While the session
        still loops the steps and the time run on to now."""
        verdict = self.last_verdict
        if not verdict:
            return None
        episode = verdict.get("episode")
        ongoing = self.status == SessionStatus.LOOPING
        if episode:
            start, began = int(episode["start_step"]), float(episode["started_at"])
            flags, tokens = int(episode["flags"]), episode["tokens"]
            snapshots: int | None = int(episode["snapshots"])
            through = int(episode["through_step"])
        else:  # a verdict stored before episodes were recorded: its own window only
            start = loop_first_step(verdict) or 0
            if not start:
                return None
            began, flags, tokens, snapshots = float(verdict["at"]), 1, None, None
            through = max(verdict.get("evidence_steps") or [start])
        last = max(self.steps, through) if ongoing else through
        until = max(now, began) if ongoing else float(verdict["at"])
        return LoopCost(start_step=start, started_at=began, last_step=last, steps=last - start + 1,
                        seconds=max(until - began, 0.0), flags=flags, tokens=tokens,
                        snapshots=snapshots, ongoing=ongoing)


def loop_first_step(verdict: StoredVerdict | None) -> int | None:
    """The first step of the loop a stored verdict belongs to: its episode's start (the first
    flag's, kept while the session is flagged again), else the verdict's own ``loop_start_step``
    (where its evidence window begins), else its oldest evidence step."""
    if not verdict:
        return None
    episode = verdict.get("episode")
    if episode:
        return int(episode["start_step"])
    start = verdict.get("loop_start_step")
    if start:
        return int(start)
    evidence = verdict.get("evidence_steps") or []
    return min(evidence) if evidence else None


@dataclass(frozen=True)
class LoopCost:
    """What one loop cost, from its first step (`SessionInfo.loop_cost`,
    `Engine.fleet.loop_cost`)."""

    start_step: int
    """The loop's first step (the first flag's evidence begins there)."""
    started_at: float
    """Unix time that step began."""
    last_step: int
    """The newest step inside the loop: the session's newest step while it loops, else the
    step of the loop's last flag."""
    steps: int
    """Steps spent since the loop began (`start_step` … `last_step`)."""
    seconds: float
    """Time since the loop began: until now while it loops, else until its last flag."""
    flags: int
    """How often this loop was flagged (the session's lifetime count is `SessionInfo.loops`)."""
    tokens: int | None
    """Context tokens its steps sent to the model through its last flag (recorded budgets);
    None when no step recorded one."""
    snapshots: int | None
    """Write-ahead snapshots taken for its steps through its last flag (None: not recorded)."""
    ongoing: bool
    """The session still loops: the cost grows."""


@dataclass(frozen=True)
class Decision:
    """What an operator decided about a session that waited for on-call
    (`Session.wait_for_decision`)."""

    kind: DecisionKind
    """rolled_back (the session was rolled back), released (the agent may continue) or
    stopped (it runs no more steps)."""
    actor: str
    """Who decided."""
    reason: str
    """Why, as the operator said it."""
    note: str | None
    """A release's note for the agent (also appended to the session's messages), else None."""
    at: float
    """Unix time of the decision."""


@dataclass(frozen=True)
class State:
    """The live state of a session."""

    messages: list[dict[str, Any]]
    """Chat messages on the live line, oldest first."""
    variables: dict[str, Any]
    """Current variables."""
    head: str | None
    """Newest snapshot on the live line."""
    status: SessionStatus
    """Session status."""
    epoch: int = 0
    """Rollback epoch."""


@dataclass(frozen=True)
class SnapshotNode:
    """One node of the snapshot tree."""

    id: str
    """Snapshot id, unique within the session."""
    parent: str | None
    """Id of the snapshot this one was taken after (None for the first)."""
    label: str | None
    """Human label (e.g. "before refund", "before step 12")."""
    created_at: float
    """Unix time taken."""
    on_live_line: bool
    """True while the snapshot lies on the live line."""
    abandoned_reason: str | None
    """For snapshots on an abandoned branch: who rolled back, why, when."""
    kind: SnapshotKind = "manual"
    """manual (asked for by the runtime) or step (write-ahead, before a guarded step)."""
    restorable: bool = True
    """False when retention retired it or it lies on an abandoned branch."""
    next_step: int = 1
    """Number of the first step taken after this snapshot."""
    messages: int = 0
    """Number of live messages the snapshot restores."""
    branch: str | None = None
    """Id of the abandoned branch holding it, None on the live line."""
    is_head: bool = False
    """True for the session's current head."""


@dataclass(frozen=True)
class StepRecord:
    """One tool call or agent turn, live or abandoned."""

    n: int
    """Step number within the session (1, 2, …; never reused)."""
    tool: str | None
    """Tool name; None for a plain agent message turn."""
    args: Any
    """Canonical arguments."""
    fingerprint: str
    """Stable hash of tool + canonical args."""
    status: StepStatus
    """running, ok or error (`StepStatus`)."""
    error: str | None
    """Error text for failed steps."""
    result_digest: str | None
    """Digest of the result (equal results, equal digests)."""
    result_preview: str | None
    """First characters of the result, for people."""
    started_at: float
    """Unix time the step began."""
    ended_at: float | None
    """Unix time the step ended, None while running."""
    side_effect: bool
    """The tool changes the outside world."""
    compensation: tuple[str, Any] | None
    """(handler name, args) that undoes the side effect."""
    verdict: StoredVerdict | None
    """Loop verdict recorded with this step, if it flagged one."""
    on_live_line: bool
    """False once a rollback abandoned the step."""
    branch: str | None
    """Abandoned branch id, None on the live line."""
    late: bool = False
    """The step was in flight while the session was rolled back; it never reached the live line."""
    snapshot: str | None = None
    """Write-ahead snapshot taken right before this step."""
    text: str | None = None
    """Agent text of a message turn."""
    epoch: int = 0
    """Epoch in which the step began."""
    task: bool = False
    """The agent's runtime started a new task right before this step (`Session.new_task`: a
    new run, a graph invocation, an MCP client back after an idle gap); a user message starts
    one by itself and is not marked here. Replay restarts the step budget here, as the live
    detector did."""
    budget: TokenBreakdown | None = None
    """Token breakdown of the context the agent built for this step (system, dialogue, memories,
    reserve, dropped, total, max_tokens), when the runtime passed one."""
    turn: str | None = None
    """Id of the model response that issued the call (`Step.turn`); None when the runtime did
    not say (and for every step recorded before turns were kept)."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def duration_ms(self) -> float | None:
        return None if self.ended_at is None else (self.ended_at - self.started_at) * 1000


@dataclass(frozen=True)
class MessageRecord:
    """A message with where it lives."""

    seq: int
    """Session sequence number of the write."""
    pos: int
    """Position in the history of its line."""
    message: dict[str, Any]
    """The chat message."""
    branch: str | None
    """Abandoned branch id, None on the live line."""
    created_at: float


class ReplayStep(NamedTuple):
    """What a replay reads of a stored step (`SessionStore.replay_histories`): the detector's
    input and where the step stands, without the rest of a `StepRecord` (its verdict, snapshot,
    compensation, budget...). A fleet's replay reads a million steps, and building and filling
    every `StepRecord` cost half of reading them."""

    n: int
    """Session step number (`StepRecord.n`)."""
    tool: str | None
    args: Any
    status: StepStatus
    error: str | None
    result_digest: str | None
    text: str | None
    side_effect: bool
    turn: str | None
    task: bool
    """The runtime began a task right before this step (`StepRecord.task`)."""
    started_at: float

    @classmethod
    def of(cls, record: StepRecord) -> ReplayStep:
        """The replay's view of a full step record."""
        return cls(record.n, record.tool, record.args, record.status, record.error,
                   record.result_digest, record.text, record.side_effect, record.turn,
                   record.task, record.started_at)


ReplayHistory = list[ReplayStep | None]
"""A session's history as a replay reads it: its steps (every branch) and, as None, each user
message, in the order they happened (a message before a step that started in the same
instant)."""


def replay_history(steps: list[ReplayStep], spoke: list[tuple[float, int]]) -> ReplayHistory:
    """`ReplayHistory` of a session's steps (in step order) and the (created_at, seq) of its
    user messages."""
    timed: list[tuple[float, int, int, ReplayStep | None]] = [
        (at, 0, seq, None) for at, seq in spoke]
    timed += [(s.started_at, 1, s.n, s) for s in steps]
    timed.sort(key=lambda item: item[:3])
    return [item[3] for item in timed]


@dataclass(frozen=True)
class BranchInfo:
    """An abandoned branch left behind by a rollback."""

    id: str
    from_snapshot: str
    """Snapshot the session was rolled back to."""
    actor: str
    reason: str
    created_at: float
    epoch: int
    """Epoch the branch ended (steps begun in it and finished later are late)."""

    @property
    def why(self) -> str:
        """Why it was abandoned, as snapshot trees show it: ``rolled back to snap-3 by alice:
        looping on search``."""
        return f"rolled back to {self.from_snapshot} by {self.actor}: {self.reason}"


@dataclass(frozen=True)
class Compensation:
    """One saga compensation in the durable outbox."""

    id: int
    session: str
    step: int
    """Step whose side effect this undoes."""
    name: str
    """Registered handler name."""
    args: Any
    idempotency_key: str
    """Stable key (session + step): a handler may see it again after a crash, never a new one."""
    status: CompensationStatus
    """pending, running, done, failed or resolved (`CompensationStatus`)."""
    attempts: int
    """Runs of the handler since it was queued (or since an operator last retried it)."""
    error: str | None
    """Error of the handler's last failed run (kept after a retry until it succeeds)."""
    created_at: float
    updated_at: float
    branch: str | None = None
    """Abandoned branch whose rollback queued it."""
    resolved_by: str | None = None
    """Operator who marked it resolved by hand (status resolved); None otherwise."""
    resolved_reason: str | None = None
    """Why the operator marked it resolved (also in the audit log)."""
    lease_until: float | None = None
    """Unix time until which it is not taken: a running one's lease, a pending one's next
    attempt after a failure (backoff); None when it may be taken now."""

    @property
    def next_attempt_at(self) -> float | None:
        """For a pending compensation that failed before: when it is tried next (unix time)."""
        return self.lease_until if self.status == CompensationStatus.PENDING else None


@dataclass(frozen=True)
class RollbackResult:
    """What a rollback did."""

    session: str
    target: str
    """Snapshot the live line now ends at."""
    branch: str
    """Id of the abandoned branch holding what left the live line."""
    epoch: int
    """The session's new epoch."""
    actor: str
    reason: str
    at: float
    abandoned_messages: int = 0
    abandoned_steps: int = 0
    abandoned_snapshots: int = 0
    abandoned_memories: int = 0
    compensations: tuple[Compensation, ...] = ()
    """Compensations queued, newest step first."""
    notice: str | None = None
    """Notice appended to the live history, if any."""


@dataclass(frozen=True)
class RollbackPreview:
    """What a rollback to `target` would do, without doing it."""

    session: str
    target: str
    messages: list[dict[str, Any]]
    """Messages that would leave the live line."""
    steps: list[StepRecord]
    """Steps that would leave the live line."""
    compensations: list[tuple[int, str, Any]]
    """(step, handler, args) that would be queued, newest first."""

    @property
    def uncompensated(self) -> list[StepRecord]:
        """Side-effecting steps that would leave the live line with no compensation queued, in
        the order of `steps`: still running (their process died or lost the call, so whether
        the side effect happened is unknown; a step that ends later, ok, queues its own) or
        finished with none registered. Someone has to check these by hand."""
        return [s for s in self.steps if s.side_effect
                and (s.status == StepStatus.RUNNING
                     or (s.status == StepStatus.OK and s.compensation is None))]


@dataclass(frozen=True)
class AuditEvent:
    """An operator or engine action, for the audit log."""

    id: int
    at: float
    actor: str
    action: str
    """rollback, notice, compensation, retention, …"""
    session: str | None
    snapshot: str | None
    reason: str | None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Event:
    """An entry of the change feed; `id` is the cursor."""

    id: int
    at: float
    session: str | None
    type: str
    """session, message, vars, snapshot, step, verdict, rollback, notice, compensation, …"""
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class BulkRollbackItem:
    """What `Engine.rollback_many` did (or, in a dry run, would do) to one session."""

    session: str
    """Session id."""
    ok: bool
    """True when the session was rolled back (dry run: when a rollback target was found)."""
    error: str | None = None
    """Why this session was not rolled back (error type and message), None when ok."""
    rollback: RollbackResult | None = None
    """The rollback done (None in a dry run or on failure)."""
    preview: RollbackPreview | None = None
    """Dry run: what would leave the live line and which compensations would run."""
    batch: str = ""
    """Id shared by every rollback of one `rollback_many` call (in each audit event's detail)."""
    exception: BaseException | None = field(default=None, compare=False, repr=False)
    """The exception that stopped this session's rollback, None when ok: callers tell a
    conflict from a missing target by its type (``isinstance(item.exception,
    RollbackConflict)``), never by parsing `error`."""


@dataclass(frozen=True)
class Quarantine:
    """A fleet-wide ban on one tool: while it applies, `Session.step(tool)` is refused."""

    id: str
    """Quarantine id (``q-`` and 12 hex digits)."""
    tool: str
    """The tool name refused."""
    actor: str
    """Operator who set it."""
    reason: str
    """Why (shown to agents and in the audit log)."""
    created_at: float
    """Unix time it was set."""
    until: float | None = None
    """Unix time it stops applying by itself; None: until lifted."""
    scope: dict[str, str] = field(default_factory=dict)
    """Only sessions whose meta has these values (keys: tenant, scenario, prompt_version);
    empty: every session."""

    def active(self, now: float) -> bool:
        """True while it has not expired."""
        return self.until is None or now < self.until

    def applies(self, tool: str, meta: dict[str, Any], now: float) -> bool:
        """True when it refuses `tool` for a session with `meta` at `now`."""
        return (
            tool == self.tool
            and self.active(now)
            and all(meta.get(k) == v for k, v in self.scope.items())
        )


@dataclass(frozen=True)
class CompensationWorker:
    """A process that registered compensation handlers, as its last heartbeat in the store says."""

    id: str
    """The process's worker id (host, pid and engine: `Engine.config.worker_id`)."""
    handlers: tuple[str, ...]
    """Names of the compensation handlers it registered, sorted."""
    seen_at: float
    """Unix time of its last heartbeat (engine clock of that process)."""
