"""A session handle: what an agent runtime holds while it runs one conversation.

The handle keeps no state of its own that matters: everything lives in the store, so a handle in
an agent process keeps working after an operator rolled the session back from another process. The
only local state is the loop detector's window, rebuilt from the store whenever the session's epoch
moves.
"""

from __future__ import annotations

import json
import unicodedata
from typing import TYPE_CHECKING, Any

from engine.detector import Step, Verdict
from engine.errors import InvalidSessionId, LoopDetected, NothingToRollBack, StepError
from engine.fingerprint import canonical_json, canonicalize, digest, fingerprint
from engine.normalize import result_digest
from engine.records import (
    BranchInfo,
    MessageRecord,
    RollbackPreview,
    RollbackResult,
    SessionInfo,
    SnapshotNode,
    State,
    StepRecord,
)

if TYPE_CHECKING:
    from engine.engine import Engine

MAX_ID_LENGTH = 200
PREVIEW_CHARS = 500
LOOP_POLICIES = ("rollback", "nudge_then_rollback", "flag", "off")

NUDGE_TEXT = (
    "Rewind: the last tool calls repeat without progress ({explanation}). Stop repeating them; "
    "change the arguments, try another tool, or ask the user."
)


def validate_session_id(sid: Any) -> str:
    """Return `sid` when it is a valid session id.

    Raises:
        InvalidSessionId: not a string, empty, longer than 200 characters, or holding control
            characters.
    """
    if not isinstance(sid, str):
        raise InvalidSessionId(f"a session id must be a string, not {type(sid).__name__}")
    if not sid:
        raise InvalidSessionId("a session id must not be empty")
    if len(sid) > MAX_ID_LENGTH:
        raise InvalidSessionId(
            f"a session id must be at most {MAX_ID_LENGTH} characters, this one has {len(sid)}"
        )
    for ch in sid:
        if unicodedata.category(ch) in ("Cc", "Cs"):
            raise InvalidSessionId(
                f"a session id must be printable; it holds the control character {ch!r}"
            )
    return sid


def _message(role: Any, content: Any, extra: dict) -> dict:
    if not isinstance(role, str) or not role:
        raise ValueError(f"a message role must be a non-empty string, not {role!r}")
    msg = {"role": role, "content": content, **extra}
    return canonicalize(msg, "message")


def _preview(result: Any) -> tuple[str | None, str | None]:
    """(digest, preview) of a tool result. The digest is the detector's normalized one (ids and
    timestamps masked), so a detector rebuilt from stored digests sees what the live one saw."""
    if result is None:
        return None, None
    try:
        text = canonical_json(result)
        result_hash = result_digest(result)
    except TypeError:
        text = repr(result)
        result_hash = digest(text)
    return result_hash, text[:PREVIEW_CHARS]


class StepCall:
    """A guarded step in progress; use it as a context manager from `Session.step`."""

    def __init__(self, session: Session, tool: str | None, args: Any, side_effect: bool,
                 compensation: tuple[str, Any] | None, snapshot: bool, text: str | None,
                 context: Any = None):
        self.session = session
        self.budget = budget_record(context)
        """Token breakdown of the context the agent built for this step, if given."""
        self.tool = tool
        self.args = canonicalize(args if args is not None else {}, "args")
        self.fingerprint = fingerprint(tool, self.args)
        self.side_effect = side_effect
        self.compensation = None
        if compensation is not None:
            if (not isinstance(compensation, (tuple, list)) or len(compensation) != 2
                    or not isinstance(compensation[0], str) or not compensation[0]):
                raise TypeError("compensation must be a (handler name, args) pair")
            self.compensation = (compensation[0], canonicalize(compensation[1], "compensation"))
        self._snapshot = snapshot
        self.text = text
        self.n: int | None = None
        """Step number, known once the step began."""
        self.snapshot_id: str | None = None
        """Write-ahead snapshot taken before the step."""
        self.verdict: Verdict | None = None
        """The detector's verdict, known once the step ended."""
        self.late = False
        """True when the session was rolled back while this step ran."""
        self._outcome: dict | None = None
        self._result: Any = None
        self._ticket = None

    def __enter__(self) -> StepCall:
        s = self.session
        label = f"before {self.tool or 'agent turn'}"
        self._ticket = s._engine.store.begin_step(
            s.id,
            {
                "tool": self.tool, "args": canonical_json(self.args),
                "fingerprint": self.fingerprint, "side_effect": self.side_effect,
                "compensation": None if self.compensation is None
                else json.dumps(list(self.compensation), ensure_ascii=False, sort_keys=True),
                "text": self.text,
            },
            label if self._snapshot else None,
            s._engine.clock(),
            s._engine.retention,
        )
        self.n = self._ticket.n
        self.snapshot_id = self._ticket.snapshot
        s._sync_epoch(self._ticket.epoch, exclude=self.n)
        return self

    def ok(self, result: Any = None) -> None:
        """Record success with the tool's result."""
        if self._outcome is not None:
            raise StepError(f"step {self.n} was already finished as {self._outcome['status']}")
        result_digest, preview = _preview(result)
        self._result = result
        self._outcome = {"status": "ok", "result_digest": result_digest,
                         "result_preview": preview}

    def fail(self, error: str | BaseException) -> None:
        """Record failure with the error text (or exception)."""
        if self._outcome is not None:
            raise StepError(f"step {self.n} was already finished as {self._outcome['status']}")
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        self._outcome = {"status": "error", "error": text or "error"}

    def __exit__(self, exc_type, exc, tb) -> bool:
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

    def __init__(self, engine: Engine, info: SessionInfo, on_loop: str):
        if on_loop not in LOOP_POLICIES:
            raise ValueError(f"on_loop must be one of {', '.join(LOOP_POLICIES)}, not {on_loop!r}")
        self._engine = engine
        self.id = info.id
        self.on_loop = on_loop
        self._epoch: int | None = None
        self._detector = engine.detector_factory()
        self._observed: list[int] = []  # detector index - offset -> step number
        self._count = 0  # steps the detector has observed since its last reset
        self._memory = None

    # -- reading ----------------------------------------------------------------------------
    def info(self) -> SessionInfo:
        """The session's summary as stored now."""
        return self._engine._require(self.id)

    def state(self) -> State:
        """The live state: messages, variables, head snapshot, status."""
        store = self._engine.store
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
        return self._engine.store.snapshots(self.id)

    def steps(self, *, live_only: bool = False, last: int | None = None) -> list[StepRecord]:
        """Step records, live and abandoned, each saying which line it is on."""
        return self._engine.store.steps(self.id, live_only=live_only, last=last)

    def messages(self) -> list[MessageRecord]:
        """Every message ever written, live and abandoned, with its branch."""
        return self._engine.store.all_messages(self.id)

    def branches(self) -> list[BranchInfo]:
        """Abandoned branches left by rollbacks."""
        return self._engine.store.branches(self.id)

    @property
    def memory(self):
        """The session's memory (short and long term), rolled back with the session."""
        if self._memory is None:
            from engine.memory import SessionMemory

            self._memory = SessionMemory(self)
        return self._memory

    # -- writing ----------------------------------------------------------------------------
    def append_message(self, role: str, content: Any, **extra: Any) -> None:
        """Append a chat message to the live history.

        Raises:
            ValueError: empty or non-string role. TypeError: content not representable as JSON.
        """
        msg = _message(role, content, extra)
        self._sync_epoch(self._engine.store.append_messages(self.id, [msg], self._engine.clock()))

    def append_messages(self, messages: list[dict]) -> None:
        """Append several chat messages in one atomic write."""
        msgs = []
        for m in messages:
            if not isinstance(m, dict) or "role" not in m:
                raise ValueError(f"a message must be a dict with a role, not {m!r}")
            extra = {k: v for k, v in m.items() if k not in ("role", "content")}
            msgs.append(_message(m["role"], m.get("content"), extra))
        if msgs:
            self._sync_epoch(
                self._engine.store.append_messages(self.id, msgs, self._engine.clock())
            )

    def set_var(self, key: str, value: Any) -> None:
        """Set a session variable (plain data); rolled back with the session."""
        self.set_vars({key: value})

    def set_vars(self, values: dict[str, Any]) -> None:
        """Set several variables atomically. A value of None deletes the variable."""
        clean = {}
        for key, value in values.items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"a variable name must be a non-empty string, not {key!r}")
            clean[key] = canonicalize(value, key)
        if clean:
            self._sync_epoch(self._engine.store.put(self.id, "var", clean, self._engine.clock()))

    def del_var(self, key: str) -> None:
        """Delete a variable."""
        self.set_vars({key: None})

    def snapshot(self, label: str | None = None) -> str:
        """Take a snapshot of the live state and make it the head. Returns its id."""
        if label is not None and not isinstance(label, str):
            raise TypeError("a snapshot label must be a string")
        node = self._engine.store.take_snapshot(
            self.id, label, "manual", self._engine.clock(), self._engine.retention
        )
        return node.id

    def step(self, tool: str, args: Any = None, *, side_effect: bool = False,
             compensation: tuple[str, Any] | None = None, snapshot: bool = True,
             context: Any = None) -> StepCall:
        """Guard one tool call: write-ahead snapshot, record, loop check.

        Use as ``with s.step("tool", {...}) as call: call.ok(result)`` (or ``call.fail(err)``).
        An exception inside the block is recorded as the failure and re-raised. `context` (the
        `Context` the agent built for this turn) records its token breakdown with the step.

        Raises:
            TypeError: args or compensation args cannot be represented as JSON.
            LoopDetected: (on leaving the block) the detector flagged a loop; with the default
                policy the session was already rolled back and a notice injected.
        """
        if not isinstance(tool, str) or not tool:
            raise ValueError("a step needs a tool name; use agent_turn() for a plain message")
        return StepCall(self, tool, args, side_effect, compensation, snapshot, None, context)

    def agent_turn(self, text: str | None, context: Any = None,
                   error: str | None = None) -> Verdict:
        """Record an agent message turn without a tool call and run the loop check on it.

        `error` records a failed model call (e.g. "context length exceeded"), so repeated
        context overflows are caught too.

        Raises:
            LoopDetected: as for `step`.
        """
        call = StepCall(self, None, None, False, None, False, text, context)
        with call:
            call.fail(error) if error else call.ok(None)
        return call.verdict

    def stop(self) -> None:
        """Mark the session stopped (it stays readable)."""
        self._engine.store.set_status(self.id, "stopped", None, self._engine.clock())

    # -- rollback and notices ---------------------------------------------------------------
    def suggested_target(self) -> str | None:
        """The last healthy snapshot: before the flagged loop if the session is looping, else
        before the trailing run of failed steps, else the head."""
        info = self.info()
        before = None
        if info.status == "looping" and info.last_verdict:
            before = info.last_verdict.get("loop_start_step")
        if before is None:
            recent = self.steps(live_only=True, last=self._detector.horizon)
            streak = None
            for rec in reversed(recent):
                if rec.status == "error":
                    streak = rec.n
                elif rec.status == "ok":
                    break
            before = streak
        return self._engine.store.restorable_snapshot(self.id, before)

    def preview_rollback(self, to: str | None = None) -> RollbackPreview:
        """What `rollback(to)` would take off the live line and which compensations it queues."""
        target = to or self.suggested_target()
        if target is None:
            raise NothingToRollBack(f"session {self.id!r} has no restorable snapshot")
        node = next((n for n in self.tree() if n.id == target), None)
        if node is None:
            from engine.errors import UnknownSnapshot

            raise UnknownSnapshot(f"session {self.id!r} has no snapshot {target!r}")
        live = self._engine.store.live_messages(self.id)
        leaving = [s for s in self.steps(live_only=True) if s.n >= node.next_step]
        comps = [(s.n, s.compensation[0], s.compensation[1]) for s in reversed(leaving)
                 if s.side_effect and s.compensation and s.status == "ok"]
        return RollbackPreview(session=self.id, target=target, messages=live[node.messages:],
                               steps=leaving, compensations=comps)

    def rollback(self, to: str | None = None, actor: Any = "system", reason: str = "",
                 notice: bool | str = True) -> RollbackResult:
        """Roll the live line back to snapshot `to` (None: the last healthy snapshot).

        What leaves the live line is kept as an abandoned branch labelled with actor, reason and
        time; compensations of side-effecting steps on it are queued; `notice` (True: the default
        template for the session's locale, a string: that text, False: none) is appended.

        Raises:
            UnknownSnapshot, SnapshotNotRestorable, NothingToRollBack.
        """
        return self._engine.rollback(self.id, to=to, actor=actor, reason=reason, notice=notice)

    def inject_notice(self, text: str | None = None, actor: Any = "system") -> str:
        """Append a recovery notice (None: the default template for the session's locale).
        `actor` is a name or an `Actor` (a viewer is refused)."""
        return self._engine.notice(self.id, text, actor=actor)

    # -- internals --------------------------------------------------------------------------
    def _sync_epoch(self, epoch: int, exclude: int | None = None) -> None:
        """Rebuild the detector window from the live steps when the epoch moved."""
        if self._epoch == epoch:
            return
        self._epoch = epoch
        self._detector.reset()
        self._observed = []
        self._count = 0
        for rec in self.steps(live_only=True, last=self._detector.horizon):
            if rec.n == exclude or rec.status == "running":
                continue
            self._observe(rec.n, _detector_step(rec))

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

    def _finish_step(self, call: StepCall) -> None:
        out = call._outcome
        step = Step(
            tool=call.tool, args=call.args, ok=out["status"] == "ok", error=out.get("error"),
            result=out.get("result_digest"), text=call.text, side_effect=call.side_effect,
        )
        verdict = self._observe(call.n, step)
        stored = None
        if verdict.looping and self.on_loop != "off":
            stored = verdict_record(verdict, self._step_number, self._engine.clock())
        engine = self._engine
        late = engine.store.end_step(
            self.id, call._ticket, {**out, "verdict": stored, "budget": call.budget},
            engine.clock(),
        )
        call.verdict = verdict
        if late:
            call.late = True
            self._epoch = None  # force a rebuild on the next call
            return
        if stored is None:
            return
        engine._loop_flagged(self, verdict, call.tool)
        if self.on_loop == "flag":
            return
        if verdict.remedy == "stop":
            # A budget ran out: there is no healthy point to return to, only a stop.
            self.stop()
            raise LoopDetected(verdict, None)
        if self.on_loop == "nudge_then_rollback" and verdict.flag_count <= 1:
            advice = verdict.advice or NUDGE_TEXT.format(explanation=verdict.explanation)
            self.append_message("system", f"Rewind: {advice}", rewind_nudge=True)
            return
        start = stored.get("loop_start_step")
        target = engine.store.restorable_snapshot(self.id, start) if start is not None else None
        result = None
        if target is not None:
            result = engine.rollback(
                self.id, to=target, actor="rewind",
                reason=f"loop detected ({verdict.rule}): {verdict.explanation}", notice=True,
                automatic=True, rule=verdict.rule,
            )
        raise LoopDetected(verdict, result)


def _detector_step(rec: StepRecord) -> Step:
    return Step(tool=rec.tool, args=rec.args, ok=rec.status == "ok", error=rec.error,
                result=rec.result_digest, text=rec.text, side_effect=rec.side_effect)


BUDGET_KEYS = ("system", "dialogue", "memories", "reserve", "dropped", "total", "max_tokens")


def budget_record(context: Any) -> dict | None:
    """The token breakdown to store with a step, from a `Context` or a breakdown dict."""
    if context is None:
        return None
    breakdown = getattr(context, "breakdown", context)
    if not isinstance(breakdown, dict):
        raise TypeError("context must be a Context from ContextBuilder.build or a breakdown dict")
    record = {k: int(v) for k, v in breakdown.items() if k in BUDGET_KEYS and v is not None}
    for attr in ("tokens", "max_tokens"):
        value = getattr(context, attr, None)
        if isinstance(value, int):
            record["total" if attr == "tokens" else attr] = value
    return record


def verdict_record(verdict: Verdict, step_number, now: float) -> dict:
    """The JSON form of a verdict, with detector indexes mapped to session step numbers."""
    return {
        "rule": verdict.rule,
        "explanation": verdict.explanation,
        "evidence_steps": [n for n in (step_number(i) for i in verdict.evidence) if n is not None],
        "loop_start_step": step_number(verdict.loop_start),
        "details": canonicalize(verdict.details or {}, "details"),
        "at": now,
    }
