"""A session handle: what an agent runtime holds while it runs one conversation.

The handle keeps no state of its own that matters: everything lives in the store, so a handle in
an agent process keeps working after an operator rolled the session back from another process. The
only local state is the loop detector's window, rebuilt from the store whenever the session's epoch
moves. A handle takes the engine's `Runtime` (never the `Engine`); rollbacks and notices go
through `engine.recovery`, like every operator action.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from engine.documents import checked_documents
from engine.errors import (
    LoopDetected,
    LoopWaiting,
    SessionStopped,
    StepError,
    ToolQuarantined,
    WaitTimeout,
)
from engine.fleet import quarantine
from engine.freeze import PolicyChoice
from engine.identity import Actor
from engine.ids import validate_session_id
from engine.limits import canonical_within, chat_message, check_text, cut_text
from engine.loops.detector import Step, Verdict
from engine.loops.fingerprint import digest
from engine.records import (
    BranchInfo,
    Decision,
    MessageRecord,
    Quarantine,
    RollbackPreview,
    RollbackResult,
    SessionInfo,
    SnapshotNode,
    State,
    StepRecord,
)
from engine.recovery import oncall, policy, targets, verbs
from engine.recovery.policy import NUDGE_TEXT
from engine.runtime import Runtime
from engine.sessions.episode import EpisodeTracker
from engine.sessions.steps import (
    budget_record,
    detector_step,
    json_within,
    result_preview,
    verdict_record,
)
from engine.store.base import StepOutcome, StepStart, StepTicket
from engine.types import (
    LOOP_POLICIES,
    LoopPolicy,
    SessionStatus,
    StepStatus,
    StoredVerdict,
    canonical_json,
    checked_policy,
)

if TYPE_CHECKING:
    from engine.memory.session import SessionMemory

__all__ = ["LOOP_POLICIES", "NUDGE_TEXT", "Session", "StepCall", "validate_session_id"]


class StepCall:
    """A guarded step in progress; use it as a context manager from `Session.step`."""

    def __init__(
        self,
        session: Session,
        tool: str | None,
        args: Any,
        side_effect: bool,
        compensation: tuple[str, Any] | None,
        snapshot: bool,
        text: str | None,
        context: Any = None,
        turn: str | None = None,
    ):
        self.session = session
        limits = session._rt.limits
        self.budget = None if context is None else budget_record(context)
        """Token breakdown of the context the agent built for this step, if given."""
        self.tool = tool
        if tool is not None:
            check_text(tool, limits.name_chars, "a tool name", "name_chars")
        if text is not None:
            if not isinstance(text, str):
                raise TypeError(f"an agent turn's text must be a string (or None), not "
                                f"{type(text).__name__} {cut_text(repr(text), 80)}")
            canonical_within(text, limits.message_bytes, "an agent turn's text", "message_bytes")
        self.args, self._args_json = json_within(
            args if args is not None else {}, limits.args_bytes, "args", "args_bytes"
        )
        # `fingerprint(tool, self.args)`, from the canonical text already made
        self.fingerprint = digest(f"{tool or ''}\x00{self._args_json}")
        self.side_effect = side_effect
        self.compensation = None
        if compensation is not None:
            if (
                not isinstance(compensation, (tuple, list))
                or len(compensation) != 2
                or not isinstance(compensation[0], str)
                or not compensation[0]
            ):
                raise TypeError("compensation must be a (handler name, args) pair")
            check_text(compensation[0], limits.name_chars, "a compensation name", "name_chars")
            comp_args = canonical_within(
                compensation[1], limits.args_bytes, "compensation", "args_bytes"
            )[0]
            self.compensation = (compensation[0], comp_args)
        self._snapshot = snapshot
        self.text = text
        if turn is not None:
            if not isinstance(turn, str) or not turn:
                raise TypeError(f"turn must be the id of the model response that issued the call "
                                f"(a non-empty string) or None, not {cut_text(repr(turn), 80)}")
            check_text(turn, limits.name_chars, "a turn id", "name_chars")
        self.turn = turn
        """Id of the model response that issued the call (`Step.turn`)."""
        self.n: int | None = None
        """Step number, known once the step began."""
        self.snapshot_id: str | None = None
        """Write-ahead snapshot taken before the step."""
        self.verdict: Verdict | None = None
        """The detector's verdict, known once the step ended."""
        self.policy: PolicyChoice | None = None
        """The loop policy in effect when the step ended with a looping verdict, and why (see
        `Session.loop_policy`); None for a step that did not loop."""
        self.late = False
        """True when the session was rolled back while this step ran."""
        self.refused: Quarantine | None = None
        """The quarantine that refused the call, for a call recorded by `Session.record_steps`
        (``with`` raises `ToolQuarantined` instead)."""
        self.started_at: float | None = None
        """Unix time the step began (engine clock), once it began."""
        self._outcome: StepOutcome | None = None
        self._result: Any = None
        self._ticket: StepTicket | None = None

    def __enter__(self) -> StepCall:
        s = self.session
        if self._ticket is not None or self._outcome is not None:
            # a second `with call:` would begin another step and record the first one's outcome
            # as its own
            done = f"step {self.n}" if self.n is not None else "a call finished without `with`"
            raise StepError(f"this StepCall was used already ({done}); open one with "
                            "Session.step(...) for every call")
        s._check_hold()  # a session waiting for on-call, or stopped by one, runs no step
        if self.tool is not None:  # an operator's quarantine refuses the call before it runs
            q = quarantine.applying(s._rt, s.id, self.tool)
            if q is not None:
                quarantine.refuse(s._rt, s.id, self.tool, self._args_json, self.fingerprint, q)
                raise ToolQuarantined(self.tool, q)
        rt = s._rt
        start: StepStart = {
            "tool": self.tool,
            "args": self._args_json,
            "fingerprint": self.fingerprint,
            "side_effect": self.side_effect,
            "compensation": None
            if self.compensation is None
            else canonical_json(list(self.compensation)),
            "text": self.text,
        }
        if s._task_pending:
            start["task"] = True
        if self.turn is not None:
            start["turn"] = self.turn
        # A repeat of the call that just failed takes no write-ahead snapshot of its own
        # (`engine.sessions.episode`): a loop's rollback goes to before its first step.
        snapshot = self._snapshot and not s._episodes.skip_snapshot(self.fingerprint)
        self.started_at = rt.clock()
        ticket = rt.store.begin_step(
            s.id,
            start,
            f"before {self.tool or 'agent turn'}" if snapshot else None,
            self.started_at,
            rt.retention,
        )
        self._ticket = ticket
        s._task_pending = False
        self.n = ticket.n
        self.snapshot_id = ticket.snapshot
        if ticket.n != (s._began or 0) + 1:
            s._epoch = None  # steps began elsewhere since this handle's last (another process
            # serving the same session, a refusal): the detector reads them before judging
        s._began = ticket.n
        s._sync_epoch(ticket.epoch, exclude=self.n)
        return self

    def ok(self, result: Any = None) -> None:
        """Record success with the tool's result."""
        if self._outcome is not None:
            raise StepError(f"step {self.n} was already finished as {self._outcome['status']}")
        result_digest, preview = result_preview(result, self.session._rt.limits)
        self._result = result
        self._outcome = StepOutcome(
            status=StepStatus.OK, result_digest=result_digest, result_preview=preview
        )

    def fail(self, error: str | BaseException) -> None:
        """Record failure with the error text (or exception)."""
        if self._outcome is not None:
            raise StepError(f"step {self.n} was already finished as {self._outcome['status']}")
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        # Cut, not refused: a failing tool must still be recorded as failed. Lone surrogates
        # (no UTF-8 form) become U+FFFD for the same reason.
        text = cut_text(text, self.session._rt.limits.error_chars)
        self._outcome = StepOutcome(status=StepStatus.ERROR, error=text or "error")

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> Literal[False]:
        if self._ticket is None:
            return False
        if self._outcome is None:
            if exc is not None:
                self.fail(exc)
            else:
                self.ok(None)
        self.session._finish_step(self)
        return False

    def record_context(self, context: Any) -> None:
        """Attach the token breakdown of the context built for this step (a `Context` from
        `ContextBuilder.build`, or its breakdown dict)."""
        self.budget = budget_record(context)


class Session:
    """Handle on one session. Cheap to create; every call goes to the store."""

    def __init__(self, runtime: Runtime, info: SessionInfo, on_loop: LoopPolicy | None = None,
                 freeze_exempt: bool = False):
        self._rt = runtime
        self.id = info.id
        self._on_loop: LoopPolicy | None = checked_policy(on_loop)
        if not isinstance(freeze_exempt, bool):
            raise TypeError(f"freeze_exempt is True or False, not {freeze_exempt!r:.80}")
        self.freeze_exempt = freeze_exempt
        """True: a declared freeze's loop policy does not apply to this handle (its own
        `on_loop`, else the engine's default, does)."""
        self.acts_on_loops = True
        """False when an integration acts on loops itself (the LangGraph tool guard): the handle
        still stores each verdict with the policy in effect, but neither rolls back, nudges nor
        stops; the integration reads the policy from `StepCall.policy`."""
        self.holds_on_loops = not (info.meta or {}).get("watch_only")
        """False for a handle that only watches an agent running elsewhere (as `record_steps`
        always does): under ``flag`` its loops are flagged, but the session is not made to
        wait for on-call, since nothing here can hold the agent."""
        self._epoch: int | None = None
        self._detector, self._settings = runtime.new_detector()
        self._observed: list[int] = []  # detector index - offset -> step number
        self._count = 0  # steps the detector has observed since its last reset
        self._episodes = EpisodeTracker(4 * max(self._detector.horizon, 1))
        self._memory: SessionMemory | None = None
        self._task_pending = False  # `new_task` was called: the next step's row says so
        self._began: int | None = None  # number of the last step this handle began

        # (since, epoch) of the on-call wait this handle knows of; while set, every step looks
        # at the store first (a handle that never saw a wait costs no extra read)
        self._hold: tuple[float, int] | None = None
        self._evidence_through = 0  # steps a release left behind the detector's window
        self._note_session(info)
    # -- loop policy ------------------------------------------------------------------------
    @property
    def on_loop(self) -> LoopPolicy:
        """The loop policy in effect now (see `loop_policy`); setting it fixes this handle's
        policy, freeze or not."""
        return self.loop_policy().policy

    @on_loop.setter
    def on_loop(self, value: LoopPolicy | None) -> None:
        self._on_loop = checked_policy(value)

    def loop_policy(self, now: float | None = None) -> PolicyChoice:
        """The loop policy this handle follows at unix time `now` (None: the engine's clock),
        and why: the freeze's while one is in force (unless this handle is `freeze_exempt`),
        else the policy given for this handle, else the engine's default
        (`engine.freeze.resolve`)."""
        return self._rt.loop_policy(self._on_loop, now, self.freeze_exempt)

    # -- reading ----------------------------------------------------------------------------
    def info(self) -> SessionInfo:
        """The session's summary as stored now."""
        return self._rt.require_session(self.id)

    def state(self) -> State:
        """The live state: messages, variables, head snapshot, status."""
        store = self._rt.store
        info = self.info()
        return State(
            messages=store.live_messages(self.id),
            variables=store.get_all(self.id, "var"),
            head=info.head,
            status=info.status,
            epoch=info.epoch,
        )

    def tree(self) -> list[SnapshotNode]:
        """Every snapshot as a tree node (parent links), live and abandoned."""
        return self._rt.store.snapshots(self.id)

    def steps(self, *, live_only: bool = False, last: int | None = None) -> list[StepRecord]:
        """Step records, live and abandoned, each saying which line it is on."""
        return self._rt.store.steps(self.id, live_only=live_only, last=last)

    def messages(self) -> list[MessageRecord]:
        """Every message ever written, live and abandoned, with its branch."""
        return self._rt.store.all_messages(self.id)

    def branches(self) -> list[BranchInfo]:
        """Abandoned branches left by rollbacks."""
        return self._rt.store.branches(self.id)

    @property
    def memory(self) -> SessionMemory:
        """The session's memory (short and long term), rolled back with the session."""
        if self._memory is None:
            from engine.memory.session import SessionMemory

            self._memory = SessionMemory(self._rt, self.id)
        return self._memory

    # -- writing ----------------------------------------------------------------------------
    def append_message(self, role: str, content: Any, **extra: Any) -> None:
        """Append a chat message to the live history.

        Raises:
            ValueError: empty or non-string role. TypeError: content not representable as JSON.
        """
        msg = chat_message(role, content, extra, self._rt.limits)
        self._sync_epoch(self._rt.store.append_messages(self.id, [msg], self._rt.clock()))
        self._episodes.wrote()
        if role == "user":
            self._detector.user_input()
            self._detector.new_task()

    def append_messages(self, messages: list[dict], *, snapshot: str | None = None) -> None:
        """Append several chat messages in one atomic write (all of them or none); with
        `snapshot`, take a snapshot so labelled after them in the same write (as `snapshot`
        would, one transaction instead of two).

        Raises:
            TypeError: `messages` is one message (a dict) or text, not a list of them; a label
                that is not a string.
            ValueError, TypeError: as `append_message`, for the first bad message.
            SizeLimitExceeded: a label over ``Limits.name_chars``. Nothing is written when any
                of these is raised.
        """
        if isinstance(messages, (Mapping, str, bytes)):
            raise TypeError(f"append_messages takes a list of messages (dicts with a role), not "
                            f"a {type(messages).__name__}; for one message use append_message")
        msgs = []
        for m in messages:
            if not isinstance(m, dict) or "role" not in m:
                raise ValueError(f"a message must be a dict with a role, not {m!r}")
            extra = {k: v for k, v in m.items() if k not in ("role", "content")}
            msgs.append(chat_message(m["role"], m.get("content"), extra, self._rt.limits))
        if snapshot is not None:
            if not isinstance(snapshot, str):
                raise TypeError("a snapshot label must be a string")
            check_text(snapshot, self._rt.limits.name_chars, "a snapshot label", "name_chars")
        if msgs:
            if snapshot is None:
                epoch = self._rt.store.append_messages(self.id, msgs, self._rt.clock())
            else:
                epoch, _ = self._rt.store.write_session(
                    self.id, {"messages": msgs, "snapshot": snapshot}, self._rt.clock(),
                    self._rt.retention)
            self._sync_epoch(epoch)
            self._episodes.wrote()
            if any(m["role"] == "user" for m in msgs):
                self._detector.user_input()
                self._detector.new_task()
        elif snapshot is not None:
            self.snapshot(snapshot)

    def new_task(self) -> None:
        """A new task starts here (a new run or graph invocation, a client back after an idle
        gap; a user message starts one by itself): the hard step budget counts again from the
        next step. Loop evidence is kept. The next step's record says a task began there
        (`StepRecord.task`), so replay and the console's "Why flagged" count the budget as
        this handle did."""
        self._detector.new_task()
        self._task_pending = True

    def set_var(self, key: str, value: Any) -> None:
        """Set a session variable (plain data); rolled back with the session."""
        self.set_vars({key: value})

    def set_vars(self, values: dict[str, Any]) -> None:
        """Set several variables atomically. A value of None deletes the variable.

        Raises:
            TypeError: `values` is not a mapping (a list of pairs: pass ``dict(pairs)``).
            ValueError, TypeError, SizeLimitExceeded: a bad name or value, before any is set.
        """
        if not isinstance(values, Mapping):
            raise TypeError(f"set_vars takes a dict of name -> value, not a "
                            f"{type(values).__name__}; for pairs pass dict(pairs)")
        limits = self._rt.limits
        for key in values:
            if not isinstance(key, str) or not key:
                raise ValueError(f"a variable name must be a non-empty string, not {key!r}")
            check_text(key, limits.name_chars, "a variable name", "name_chars")
        clean, _ = canonical_within(
            dict(values), limits.variables_bytes, "variables", "variables_bytes"
        )
        if clean:
            self._sync_epoch(self._rt.store.put(self.id, "var", clean, self._rt.clock()))
            self._episodes.wrote()

    def del_var(self, key: str) -> None:
        """Delete a variable."""
        self.set_vars({key: None})

    def snapshot(self, label: str | None = None) -> str:
        """Take a snapshot of the live state and make it the head. Returns its id."""
        if label is not None and not isinstance(label, str):
            raise TypeError("a snapshot label must be a string")
        if label is not None:
            check_text(label, self._rt.limits.name_chars, "a snapshot label", "name_chars")
        node = self._rt.store.take_snapshot(
            self.id, label, "manual", self._rt.clock(), self._rt.retention
        )
        return node.id

    def step(
        self,
        tool: str,
        args: Any = None,
        *,
        side_effect: bool = False,
        compensation: tuple[str, Any] | None = None,
        snapshot: bool = True,
        context: Any = None,
        turn: str | None = None,
    ) -> StepCall:
        """Guard one tool call: write-ahead snapshot, record, loop check.

        Use as ``with s.step("tool", {...}) as call: call.ok(result)`` (or ``call.fail(err)``).
        An exception inside the block is recorded as the failure and re-raised. `context` (the
        `Context` the agent built for this turn) records its token breakdown with the step.
        `turn` is the id of the model response that issued the call (an LLM response id): the
        calls of one response are judged as one attempt (a batch of different guesses that all
        fail is one failed try; the same batch sent again is a repeat).

        Raises:
            TypeError: args or compensation args cannot be represented as JSON.
            ToolQuarantined: (on entering the block, before its body runs) an operator
                quarantined the tool for this session; the refusal is recorded as a step that
                ended in error (see `engine.fleet.quarantine`).
            LoopDetected: (on leaving the block) the detector flagged a loop; with the default
                policy the session was already rolled back and a notice injected.
        """
        if not isinstance(tool, str) or not tool:
            raise ValueError("a step needs a tool name; use agent_turn() for a plain message")
        return StepCall(
            self, tool, args, side_effect, compensation, snapshot, None, context, turn
        )

    def agent_turn(
        self, text: str | None, context: Any = None, error: str | None = None,
        turn: str | None = None,
    ) -> Verdict:
        """Record an agent message turn without a tool call and run the loop check on it.

        `error` records a failed model call (e.g. "context length exceeded"), so repeated
        context overflows are caught too, or the runtime's or harness's rejection of the
        answer ("not a valid call"): the same kind of rejection three times in a row, with no
        progress between, is a loop. `turn` is the model response's id, if known.

        Raises:
            LoopDetected: as for `step`.
        """
        call = StepCall(self, None, None, False, None, False, text, context, turn)
        with call:
            call.fail(error) if error else call.ok(None)
        if call.verdict is None:  # pragma: no cover - _finish_step sets it or raises
            raise StepError("the agent turn ended without a verdict")
        return call.verdict

    def stop(self, actor: str | Actor | None = None, reason: str | None = None
             ) -> Decision | None:
        """Without an actor: the agent marks its own session stopped (it stays readable).
        With one: an operator's decision on the session waiting for on-call (see
        `engine.recovery.oncall.stop`): audited, its steps raise `SessionStopped`.

        Raises:
            PermissionDenied, DecisionRefused, UnknownSession: an operator's stop refused
                (nothing is written).
        """
        if actor is None:
            self._rt.store.set_status(self.id, SessionStatus.STOPPED, None, self._rt.clock())
            return None
        decision = oncall.stop(self._rt, self.id, actor=actor, reason=reason or "")
        self._hold = self._hold or (0.0, -1)
        return decision

    # -- on-call ----------------------------------------------------------------------------
    def release(self, *, actor: str | Actor, reason: str, note: str | None = None) -> Decision:
        """An operator releases the session waiting for on-call: its agent may continue;
        `note` is appended to its messages for the agent to read. Audited (action
        ``release``; see `engine.recovery.oncall`).

        Raises:
            PermissionDenied: not an operator (now). DecisionRefused: blank reason, the
                session does not wait, or was decided already. Nothing is written then.
        """
        return oncall.release(self._rt, self.id, actor=actor, reason=reason, note=note)

    def waiting_since(self) -> float | None:
        """Unix time since which the session waits for on-call, or None (read from the store)."""
        return self.info().waiting_since

    def wait_for_decision(self, timeout: float | None = None, *,
                          poll: float = oncall.POLL_S) -> Decision:
        """Block until an operator decides about this session's wait for on-call: rolled back,
        released (with the operator's note) or stopped. Polls the store, so the decision may
        come from any process. After a rollback or a release the next step runs.

        Raises:
            WaitTimeout: no decision within `timeout` seconds (None: wait as long as it
                takes); the session still waits. StepError: it neither waits nor was decided.
        """
        since, epoch = self._hold if self._hold and self._hold[1] >= 0 else (None, None)
        decision = oncall.wait_for_decision(self._rt, self.id, timeout, since=since,
                                            epoch=epoch, poll=poll)
        self._after_decision(self.info())
        return decision

    async def await_decision(self, timeout: float | None = None, *,
                             poll: float = oncall.POLL_S) -> Decision:
        """`wait_for_decision` for asyncio code: the event loop runs meanwhile (each look at
        the store runs in a worker thread; the pause between looks is `asyncio.sleep`).

        Raises:
            WaitTimeout, StepError: as `wait_for_decision`.
        """
        import asyncio

        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            try:  # one look at the store, off the event loop
                return await asyncio.to_thread(self.wait_for_decision, 0, poll=poll)
            except WaitTimeout:
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    raise WaitTimeout(f"session {self.id!r} still waits for on-call after "
                                      f"{timeout} s; await it again, or ask an operator to "
                                      "act") from None
            await asyncio.sleep(poll if left is None else min(poll, left))

    # -- rollback and notices ---------------------------------------------------------------
    def suggested_target(self) -> str | None:
        """The last healthy snapshot: before the flagged loop if the session is looping, else
        before the trailing run of failed steps, else the head."""
        return targets.suggested_target(self._rt, self.id)

    def preview_rollback(self, to: str | None = None) -> RollbackPreview:
        """What `rollback(to)` would take off the live line and which compensations it queues."""
        return targets.preview_rollback(self._rt, self.id, to)

    def rollback(
        self,
        to: str | None = None,
        actor: str | Actor = "system",
        reason: str = "",
        notice: bool | str = True,
        force: bool = False,
    ) -> RollbackResult:
        """Roll the live line back to snapshot `to` (None: the last healthy snapshot).

        What leaves the live line is kept as an abandoned branch labelled with actor, reason and
        time; compensations of side-effecting steps on it are queued; `notice` (True: the default
        template for the session's locale, a string: that text, False: none) is appended. A
        session rolled back already (only notices would leave the live line) is refused unless
        `force`.

        Raises:
            UnknownSnapshot, SnapshotNotRestorable, NothingToRollBack.
        """
        result = verbs.rollback(self._rt, self.id, to=to, actor=actor, reason=reason,
                                notice=notice, force=force)
        self._episodes.wrote()  # the state moved back: the next step takes its snapshot
        return result

    def inject_notice(self, text: str | None = None, actor: str | Actor = "system") -> str:
        """Append a recovery notice (None: the default template for the session's locale).
        `actor` is a name or an `Actor` (a viewer is refused)."""
        return verbs.notice(self._rt, self.id, text, actor=actor)

    # -- internals --------------------------------------------------------------------------
    def _note_session(self, info: SessionInfo) -> None:
        """Learn from the stored summary whether the session waits for on-call, was stopped
        by an operator, or released (the detector's window then starts after the evidence)."""
        since = info.waiting_since
        decided = oncall.stored_decision(info)
        if since is not None:
            self._hold = (since, info.epoch)
        elif info.status == SessionStatus.STOPPED and decided.get("kind") == "stopped":
            self._hold = (since or 0.0, -1)
        elif decided.get("kind") == "released":
            self._evidence_through = max(self._evidence_through, int(decided.get("step") or 0))

    def _check_hold(self) -> None:
        """Raises LoopWaiting while the session waits for on-call, SessionStopped when an
        operator stopped it; after a rollback or a release, lets the step run."""
        if self._hold is None:
            return
        info = self.info()
        since = info.waiting_since
        if since is not None:
            self._hold = (since, info.epoch)
            raise LoopWaiting(oncall.waited_verdict(info.last_verdict or {}),  # type: ignore[arg-type]
                              since, self.id)
        decided = oncall.stored_decision(info)
        if info.status == SessionStatus.STOPPED and decided.get("kind") == "stopped":
            raise SessionStopped(
                f"session {self.id!r} was stopped by {decided.get('actor')}: "
                f"{decided.get('reason')}. It runs no more steps; an operator's rollback makes "
                f"it runnable again")
        self._after_decision(info)

    def _after_decision(self, info: SessionInfo) -> None:
        """The wait is over: a released session's detector window starts after the evidence
        of the wait; a rolled-back one is rebuilt from its new live line (its epoch moved)."""
        self._hold = None
        decided = oncall.stored_decision(info)
        if decided.get("kind") == "released" and info.status != SessionStatus.STOPPED:
            through = int(decided.get("step") or info.steps)
            if through > self._evidence_through:
                self._evidence_through = through
                self._detector.reset()
                self._observed = []
                self._count = 0
        elif info.status == SessionStatus.STOPPED and decided.get("kind") == "stopped":
            self._hold = (0.0, -1)

    def _sync_epoch(self, epoch: int, exclude: int | None = None) -> None:
        """Rebuild the detector window from the live steps when the epoch moved."""
        if self._epoch == epoch:
            return
        self._epoch = epoch
        self._detector.reset()
        self._observed = []
        self._count = 0
        self._episodes.reset()
        for rec in self.steps(live_only=True, last=self._detector.horizon):
            if rec.n == exclude or rec.status == "running" or quarantine.is_refusal(rec):
                continue  # a refused call never ran: not a step the detector judges
            if rec.n <= self._evidence_through:
                continue  # the evidence of a wait an operator released
            self._observe(rec.n, detector_step(rec))
            self._episodes.seen(rec.n, rec.started_at, (rec.budget or {}).get("total"),
                                rec.snapshot is not None)

    def _observe(self, n: int, step: Step) -> Verdict:
        self._count += 1
        self._observed.append(n)
        if len(self._observed) > 4 * max(self._detector.horizon, 1):
            del self._observed[: len(self._observed) // 2]
        return self._detector.observe(step)

    def _step_number(self, index: int | None) -> int | None:
        if index is None:
            return None
        pos = index - (self._count - len(self._observed))
        if 0 <= pos < len(self._observed):
            return self._observed[pos]
        return None

    def _judge(self, call: StepCall, out: StepOutcome, n: int,
               watch: bool = False) -> StoredVerdict | None:
        """Run step `n` through the detector; sets `call.verdict` and `call.policy` and returns
        the verdict to store with it (None: not a loop, or policy off). Under ``flag`` the
        verdict makes the session wait for on-call (``waiting``), unless the handle only
        `watch`es (nothing can be held) or a hard budget ran out (the session is stopped)."""
        step = Step(
            tool=call.tool,
            args=call.args,
            ok=out["status"] == StepStatus.OK,
            error=out.get("error"),
            result=out.get("result_digest"),
            text=call.text,
            side_effect=call.side_effect,
            turn=call.turn,
        )
        verdict = self._observe(n, step)
        call.verdict = verdict
        now = self._rt.clock()
        self._episodes.seen(n, call.started_at or now, (call.budget or {}).get("total"),
                            call.snapshot_id is not None)
        # Decided once, at the moment of the verdict: a freeze that begins or ends while the
        # session handles the loop must not split one loop between two policies.
        choice = call.policy = self.loop_policy(now) if verdict.looping else None
        if choice is None or (choice.policy == "off" and verdict.remedy != "stop"):
            self._episodes.judged(n, call.fingerprint, step.ok, False)
            return None
        stored = verdict_record(verdict, self._step_number, now, choice)
        self._episodes.judged(n, call.fingerprint, step.ok, True)
        self._episodes.flag(stored, n, now, lambda: self._rt.store.get_session(self.id))
        if self._settings:
            stored["detector"] = self._settings  # the configuration that produced it
        if (choice.policy == "flag" and verdict.remedy != "stop" and not watch
                and self.holds_on_loops):
            stored["waiting"] = True
        return stored

    def record_steps(
        self, calls: Sequence[StepCall], *,
        documents: tuple[str, Mapping[str, Any]] | None = None,
    ) -> list[StepCall]:
        """Record steps that already ended, all in one store write: the batch path of a
        watcher (the OpenTelemetry receiver) that learns of tool calls after they ran.

        Each call is made by ``step(tool, args, snapshot=False)`` and finished with
        ``call.ok(result)`` or ``call.fail(error)`` without entering its block. The steps are
        numbered and judged in order exactly as ``with`` blocks one after the other would
        judge them (same detector window, verdicts, stored records and feed events; each
        call's `n`, `verdict` and `policy` are set), but no snapshot is taken and nothing is
        acted on: the handle must be one that only watches (``on_loop="flag"`` or ``"off"``,
        or `acts_on_loops` False), so a loop is flagged, never rolled back. A call to a
        quarantined tool is recorded as refused, as ``with`` would, and its `refused` says
        so (no exception). When another writer adds steps or rolls the session back
        meanwhile, the batch is judged again after it.

        `documents` (a namespace and its documents, as `Engine.documents.put` takes them) are
        set in the same store write: what the watcher keeps about the steps (the span ids it
        has seen) can never disagree with them.

        Raises:
            StepError: the handle acts on loops, or a call was entered, not finished, takes a
                snapshot or belongs to another handle.
            ValueError, SizeLimitExceeded, TypeError: `documents` as `Engine.documents.put`
                refuses them (nothing is written).
        """
        if self.acts_on_loops and self._on_loop not in ("flag", "off"):
            raise StepError("record_steps records steps Rewind only watches: open the handle "
                            "with on_loop='flag' or 'off'")
        for call in calls:
            if call.session is not self or call._ticket is not None or call.n is not None:
                raise StepError("record_steps takes calls made by this handle's step() and "
                                "never entered")
            if call._outcome is None or call._snapshot:
                raise StepError("record_steps takes calls made with snapshot=False and "
                                "finished with ok() or fail()")
        rt = self._rt
        docs = None
        if documents is not None:
            ns, items = documents
            docs = (ns, checked_documents(rt, ns, items))
        if not calls:
            if docs is not None and docs[1]:
                rt.store.doc_put(self.id, docs[0], docs[1], rt.clock())
            return []
        while True:
            info = rt.require_session(self.id)
            self._sync_epoch(info.epoch)
            now = rt.clock()  # the batch's steps are stored as begun now: judged as such
            for call in calls:
                call.started_at = now
            by_tool: dict[str | None, Quarantine | None] = {}
            for call in calls:  # one look per tool, not per call: a batch repeats its tools
                if call.tool not in by_tool:
                    by_tool[call.tool] = self._refusal(call)
            refused = [by_tool[call.tool] for call in calls]
            records = []
            for i, call in enumerate(calls):
                n = info.steps + 1 + i
                call.n, call.refused = n, refused[i]
                q = refused[i]
                if q is not None:  # as quarantine.refuse records it; never judged
                    error = ToolQuarantined(call.tool or "", q)
                    out = StepOutcome(status=StepStatus.REFUSED, error=cut_text(
                        f"{quarantine.REFUSAL_PREFIX}{error}", rt.limits.error_chars))
                    records.append((StepStart(tool=call.tool, args=call._args_json,
                                              fingerprint=call.fingerprint), out))
                    continue
                start = StepStart(
                    tool=call.tool, args=call._args_json, fingerprint=call.fingerprint,
                    side_effect=call.side_effect, text=call.text,
                    compensation=None if call.compensation is None
                    else canonical_json(list(call.compensation)))
                if call.turn is not None:
                    start["turn"] = call.turn
                ended = call._outcome
                assert ended is not None  # checked above
                stored = self._judge(call, ended, n, watch=True)
                records.append((start, StepOutcome(**ended, verdict=stored, budget=call.budget)))
            first = rt.store.record_steps(self.id, records, (info.steps, info.epoch),
                                          now, docs)
            if first is not None:
                break
            self._epoch = None  # the session moved meanwhile: judge again after what it holds
            for call in calls:
                call.n = call.verdict = call.policy = call.refused = None
        for call, (_start, out) in zip(calls, records, strict=True):
            stored = out.get("verdict")
            if stored is not None and call.verdict is not None and call.policy is not None:
                _join_incident(rt, self.id, call, out, stored)
                # a watcher acts on nothing (not even a budget's stop): the agent runs elsewhere
                response = policy.respond(call.verdict, call.policy, acts=False)
                policy.recover(rt, self.id, call.tool, call.verdict, stored, call.policy,
                               response)
        return list(calls)

    def _refusal(self, call: StepCall) -> Quarantine | None:
        if call.tool is None:
            return None
        return quarantine.applying(self._rt, self.id, call.tool)

    def _finish_step(self, call: StepCall) -> None:
        out, ticket = call._outcome, call._ticket
        if out is None or ticket is None or call.n is None:
            raise StepError("a step must begin (enter its block) and finish before it is recorded")
        rt = self._rt
        stored = self._judge(call, out, call.n)
        verdict, choice = call.verdict, call.policy
        assert verdict is not None
        late = rt.store.end_step(
            self.id,
            ticket,
            StepOutcome(**out, verdict=stored, budget=call.budget),
            rt.clock(),
        )
        if late:
            call.late = True
            self._epoch = None  # force a rebuild on the next call
            return
        if stored is None or choice is None:
            return
        _join_incident(rt, self.id, call, out, stored)
        response = policy.respond(verdict, choice, acts=self.acts_on_loops)
        if response.action == "nudge":
            policy.recover(rt, self.id, call.tool, verdict, stored, choice, response)
            self.append_message("system", f"Rewind: {response.nudge}", rewind_nudge=True)
            return
        result = policy.recover(rt, self.id, call.tool, verdict, stored, choice, response)
        if stored.get("waiting"):
            self._hold = (stored["at"], ticket.epoch)
            if self.acts_on_loops:  # the looping call is not run again: the agent waits
                raise LoopWaiting(verdict, stored["at"], self.id)
        if response.action == "flag":
            return
        raise LoopDetected(verdict, result)


def _join_incident(rt: Runtime, sid: str, call: StepCall, out: Mapping[str, Any],
                   stored: StoredVerdict) -> None:
    """Group the loop verdict just stored with the others of its cause (`engine.fleet.incidents`).
    The verdict is stored already: an incident that cannot be written is logged, never turned
    into a failure of the agent's step. (Imported here: a session that never loops does not
    load the incidents' room.)"""
    from engine.fleet import incidents

    try:
        incidents.note_loop(rt, sid, call.tool, out.get("error"), call.args, stored,
                            incidents.tokens_of(call.budget))
    except Exception:  # noqa: BLE001 - the agent's step went through; on-call reads the log
        incidents.log.warning("session %s: its loop verdict joined no incident", sid,
                              exc_info=True)
