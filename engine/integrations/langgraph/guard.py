"""The loop guard for tool calls in a LangGraph graph.

`RewindToolNode` is a drop-in `ToolNode`; `LoopGuard` is the same guard as a ``wrap_tool_call`` /
``awrap_tool_call`` pair for a `ToolNode` you build yourself.

Every tool call becomes a Rewind step of the thread's session (write-ahead snapshot, canonical
args, outcome), and the session's loop detector sees it. A call fails when the tool raised, when
the `ToolNode` turned the exception into an error `ToolMessage` (``status="error"``), or when
`error_when` says so for the message.

A call to a tool an operator quarantined (`Engine.quarantine`) does not run: the guard returns
an error `ToolMessage` that quotes the `ToolQuarantined` message (tool, reason, who, until when),
so the model reads why and picks another way; the refusal is on the session's timeline.

When the detector flags a loop (default policy ``rollback``):

1. the session is rolled back to the snapshot of the last healthy checkpoint: the checkpoint before
   the model turn that started the loop (found through the checkpoint each guarded call ran under,
   see `saver.healthy_checkpoint`; the engine's suggested target when that is unknown), with the
   recovery notice appended to the session (actor ``rewind``);
2. the tool node raises `LoopDetected`, which ends the graph run: LangGraph stores no checkpoint
   after a failed super-step, and `RewindSaver` treats any checkpoint of the aborted run that still
   arrives as late, so it never becomes the thread's latest;
3. on the next invocation `RewindSaver` returns the healthy checkpoint with the notice appended to
   its messages as an `AIMessage` flagged ``rewind_notice``: nothing from the loop is in the state.

The caller catches `LoopDetected` (``.verdict`` says why, ``.rollback`` what was done) and invokes
the graph again (new user input, or ``None`` to let the agent continue).

Policies (``on_loop``; default the engine's, which is a freeze's while one is in force, see
`engine.freeze`): ``rollback`` as above; ``nudge_then_rollback`` appends the detector's advice to
the looping tool's result on the first flag of a loop and rolls back when the same loop is flagged
again; ``flag`` makes the session wait for on-call (below); ``off`` records steps only. A
verdict whose remedy is ``stop`` (a step budget ran out, under every policy) stops the
session and raises `LoopDetected` without a rollback, as the engine does. The state rollback
needs `RewindSaver` as the graph's checkpointer on the same store; with another checkpointer the
session is still rolled back and `LoopDetected` raised, but the graph's state is not restored.

**On-call** (policy ``flag``, the session's or a declared freeze's): the call that completes the
loop makes the session wait for a person (`engine.recovery.oncall`), and the tool node raises a
LangGraph `interrupt` whose value says so (``{"rewind": "waiting for on-call", "session",
"since", "rule", "explanation", "decide"}``): the thread shows as interrupted to every LangGraph
tool (``graph.get_state(config).interrupts``, ``result["__interrupt__"]``). No tool call of the
thread runs while it waits. Once an operator has decided (``rewind rollback|release|stop``),
resume with ``graph.invoke(Command(resume=decision), config)`` (any value; the guard reads the
decision from the store, and interrupts again when there is none yet):

- released: the held call is not run again; its tool message says the operator released the
  conversation, with the operator's note, and the graph continues;
- rolled back: the thread's latest checkpoint is the one before the loop (with the notice); the
  resumed run ends with `LoopDetected` (as the ``rollback`` policy does) and the next invocation
  continues from the rolled-back state;
- stopped: the resumed run ends with `SessionStopped`.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.messages import ToolMessage
from langgraph.errors import GraphBubbleUp
from langgraph.prebuilt import ToolNode
from langgraph.prebuilt.tool_node import TOOL_CALL_ERROR_TEMPLATE
from langgraph.types import interrupt

from engine.engine import Engine
from engine.errors import (
    LoopDetected,
    LoopWaiting,
    SessionStopped,
    SnapshotNotRestorable,
    ToolQuarantined,
    UnknownSession,
    UnknownSnapshot,
)
from engine.freeze import PolicyChoice
from engine.integrations.langgraph import layout
from engine.integrations.langgraph.saver import RewindSaver, healthy_checkpoint, session_id
from engine.integrations.langgraph.threads import live_checkpoint
from engine.recovery.policy import respond
from engine.sessions.session import Session, StepCall
from engine.types import LoopPolicy, checked_policy

log = logging.getLogger("rewind.langgraph")

ACTOR = "rewind"
"""Actor of automatic rollbacks in the audit log (the same as the engine's own)."""

CHECKPOINTER_KEY = "__pregel_checkpointer"
DURABILITY_KEY = "__pregel_durability"
"""LangGraph's task config keys for the run's checkpointer and durability mode."""

INTERRUPTED = "interrupted"
"""Result recorded for a tool call that raised a LangGraph interrupt."""

HELD = "held/"
"""Document key prefix (namespace `layout.DOCS`) of a tool call held for on-call: the resumed
node finds it and does not run the call again."""

Compensator = Callable[[dict], tuple[str, Any]]
"""Builds the (handler name, args) compensation of a side-effecting tool call from its args."""


@dataclass
class _Call:
    session: Session
    lock: threading.Lock
    step: StepCall
    root: str | None
    """The root checkpoint the call ran under."""


class LoopGuard:
    """Records tool calls as Rewind steps and rolls the thread back on a loop.

    Args:
        rewind: the `RewindSaver` of the graph, or the `Engine` on the same store.
        on_loop: rollback, nudge_then_rollback, flag or off (default: the engine's policy); a
            declared freeze's policy applies instead while it lasts, unless `freeze_exempt`.
        freeze_exempt: the thread's sessions keep `on_loop` during a freeze.
        side_effects: names of tools that change the outside world, or a mapping from such a name
            to a function building its compensation ``(handler, args)`` from the call's args
            (None: no compensation). A rollback queues the compensations of the side-effecting
            calls it abandons.
        error_when: ``f(message) -> str | bool | None`` deciding that a successful `ToolMessage`
            is a failure (a string is the error text), for tools that report errors as results.
        checkpoint_wait: seconds a tool call waits for the checkpoint it runs under to be stored
            by `RewindSaver` (LangGraph stores checkpoints in the background by default); the
            wait keeps the session's steps and snapshots in the graph's order.

    Raises:
        ValueError: unknown policy.
    """

    def __init__(self, rewind: Engine | RewindSaver, *, on_loop: LoopPolicy | None = None,
                 side_effects: Mapping[str, Compensator | None] | Iterable[str] = (),
                 error_when: Callable[[ToolMessage], str | bool | None] | None = None,
                 checkpoint_wait: float = 10.0, freeze_exempt: bool = False):
        self.engine: Engine = rewind.engine if isinstance(rewind, RewindSaver) else rewind
        self._on_loop: LoopPolicy | None = checked_policy(on_loop)
        self.freeze_exempt = freeze_exempt
        self.side_effects: dict[str, Compensator | None] = (
            dict(side_effects) if isinstance(side_effects, Mapping)
            else dict.fromkeys(side_effects))
        self.error_when = error_when
        self.checkpoint_wait = checkpoint_wait
        self._lock = threading.Lock()
        self._sessions: dict[str, tuple[Session, threading.Lock]] = {}
        self._users_seen: dict[str, int] = {}
        """User messages in each thread's graph state at its last tool call (task starts)."""

    @property
    def on_loop(self) -> LoopPolicy:
        """The policy in effect now: a freeze's while one is in force (unless
        `freeze_exempt`), else the one given, else the engine's."""
        return self.engine.fleet.loop_policy(on_loop=self._on_loop,
                                       freeze_exempt=self.freeze_exempt).policy

    # -- ToolNode hooks ---------------------------------------------------------------------
    def wrap_tool_call(self, request: Any, execute: Callable[[Any], Any]) -> Any:
        """``ToolNode(wrap_tool_call=…)`` hook: run one tool call as a guarded step.

        Raises:
            LoopDetected: this call completed a loop (policy rollback); the thread is rolled back.
            GraphInterrupt: (a LangGraph interrupt) the session waits for on-call.
        """
        held = self._held(request)
        if held is not None:
            return self._wait(request, *held)
        try:
            call = self._begin(request)
        except ToolQuarantined as exc:
            return _refusal(request, exc)
        except LoopWaiting as waiting:
            return self._wait(request, *self._hold(request, waiting))
        if call is None:
            return execute(request)
        try:
            result = execute(request)
        except GraphBubbleUp:  # an interrupt: the call waits for a human, it did not fail
            self._finish(call, INTERRUPTED, None)
            raise
        except Exception as exc:
            try:
                self._finish(call, None, exc)
            except LoopWaiting as waiting:
                return self._wait(request, *self._hold(request, waiting))
            raise
        try:
            return self._finish(call, result, None)
        except LoopWaiting as waiting:
            return self._wait(request, *self._hold(request, waiting))

    async def awrap_tool_call(self, request: Any, execute: Callable[[Any], Any]) -> Any:
        """``ToolNode(awrap_tool_call=…)`` hook, the async twin of `wrap_tool_call`."""
        held = await asyncio.to_thread(self._held, request)
        if held is not None:  # interrupt() reads the run's context: called on the loop's task
            return self._wait(request, *held)
        try:
            call = await asyncio.to_thread(self._begin, request)
        except ToolQuarantined as exc:
            return _refusal(request, exc)
        except LoopWaiting as waiting:
            return self._wait(request, *await asyncio.to_thread(self._hold, request, waiting))
        if call is None:
            return await execute(request)
        try:
            result = await execute(request)
        except GraphBubbleUp:
            await asyncio.to_thread(self._finish, call, INTERRUPTED, None)
            raise
        except Exception as exc:
            try:
                await asyncio.to_thread(self._finish, call, None, exc)
            except LoopWaiting as waiting:
                return self._wait(request, *await asyncio.to_thread(self._hold, request, waiting))
            raise
        try:
            return await asyncio.to_thread(self._finish, call, result, None)
        except LoopWaiting as waiting:
            return self._wait(request, *await asyncio.to_thread(self._hold, request, waiting))

    # -- steps ------------------------------------------------------------------------------
    def _session(self, thread_id: Any) -> tuple[Session, threading.Lock]:
        sid = session_id(thread_id)
        with self._lock:
            found = self._sessions.get(sid)
        if found is None:
            # The handle records each verdict with the policy in effect; the guard acts on it
            # (it picks the rollback target from the graph's checkpoints).
            session = self.engine.session(sid, on_loop=self._on_loop,
                                          freeze_exempt=self.freeze_exempt)
            session.acts_on_loops = False
            found = (session, threading.Lock())
            with self._lock:
                found = self._sessions.setdefault(sid, found)
        return found

    def _mark_task(self, session: Session, request: Any) -> None:
        """A new graph invocation with a new user message starts a new task: the hard step
        budget counts per task, never per thread lifetime. Seen as more user messages in the
        graph's state than at this thread's previous tool call."""
        users = _user_messages(getattr(request, "state", None))
        if users is None:
            return
        before = self._users_seen.get(session.id)
        self._users_seen[session.id] = users
        if before is not None and users > before:
            session.new_task()

    def _begin(self, request: Any) -> _Call | None:
        configurable = _configurable(request)
        thread_id = configurable.get("thread_id")
        if thread_id is None:
            return None  # not a checkpointed run: nothing to guard it with
        tool_call = request.tool_call
        name, args = tool_call["name"], tool_call.get("args") or {}
        compensation = None
        side_effect = name in self.side_effects
        compensator = self.side_effects.get(name)
        if compensator is not None:
            compensation = compensator(args)
        root = (configurable.get("checkpoint_map") or {}).get("")
        saver = configurable.get(CHECKPOINTER_KEY)
        rewind_checkpoints = isinstance(saver, RewindSaver) and bool(root) and (
            saver.engine.url == self.engine.url)
        if (isinstance(saver, RewindSaver) and root and rewind_checkpoints
                and configurable.get(DURABILITY_KEY) != "exit"):
            if not saver.wait_for_checkpoint(thread_id, root, self.checkpoint_wait):
                log.warning("checkpoint %s of thread %s was not stored within %.1f s; the "
                            "tool call is recorded anyway", root, thread_id, self.checkpoint_wait)
        for attempt in (1, 2):
            session, lock = self._session(thread_id)
            self._mark_task(session, request)
            step = session.step(name, args, side_effect=side_effect, compensation=compensation,
                                turn=_turn_of(getattr(request, "state", None), tool_call.get("id")))
            try:
                with lock:
                    step.__enter__()
                break
            except UnknownSession:  # the thread was deleted since: start its session again
                with self._lock:
                    self._sessions.pop(session.id, None)
                if attempt == 2:
                    raise
        if rewind_checkpoints and step.n is not None:
            self.engine.documents.put(
                session.id, layout.DOCS,
                {layout.step_key(step.n): {"checkpoint": root, "call": tool_call.get("id")}})
        return _Call(session, lock, step, root)

    def _finish(self, call: _Call, result: Any, error: BaseException | None) -> Any:
        step = call.step
        with call.lock:
            if error is not None:
                step.__exit__(type(error), error, error.__traceback__)
            else:
                failure = self._failure(result)
                if failure is not None:
                    step.fail(failure)
                else:
                    step.ok(_result_of(result))
                step.__exit__(None, None, None)
        verdict = step.verdict
        if verdict is None or not verdict.looping or step.late:
            return result
        # The engine's one rule for what follows a loop verdict (`engine.recovery.policy`); the
        # guard only carries it out its own way (the nudge rides on the tool's result, the
        # rollback goes to the graph's healthy checkpoint).
        choice = step.policy or PolicyChoice(self.on_loop, "session")
        response = respond(verdict, choice)
        if response.action == "flag" and call.session.info().waiting:
            raise LoopWaiting(verdict, call.session.info().waiting_since or 0.0,
                              call.session.id) from error
        if response.action in ("none", "flag"):
            return result
        session = call.session
        if response.action == "stop":
            session.stop()
            raise LoopDetected(verdict, None) from error
        if response.action == "nudge":
            return _nudge(result, f"Rewind: {response.nudge}")
        last = session.info().last_verdict
        start = last["loop_start_step"] if last else None
        rollback = self._roll_back(session, verdict, start, call.root)
        raise LoopDetected(verdict, rollback) from error

    # -- on-call ----------------------------------------------------------------------------
    def _held(self, request: Any) -> tuple[str, dict] | None:
        """(session, interrupt value) of this tool call when the guard held it for on-call
        before (the node runs again on resume), else None."""
        configurable = _configurable(request)
        thread_id = configurable.get("thread_id")
        call_id = request.tool_call.get("id")
        if thread_id is None or not call_id or not _resuming(configurable):
            return None  # a first run of the node: no call of it was held (no store read)
        sid = session_id(thread_id)
        try:
            found = self.engine.documents.get(sid, layout.DOCS, [HELD + str(call_id)])
        except (UnknownSession, ValueError):
            return None
        value = found.get(HELD + str(call_id))
        return (sid, value) if isinstance(value, dict) else None

    def _hold(self, request: Any, waiting: LoopWaiting) -> tuple[str, dict]:
        """Remember this tool call as held for on-call; (session, interrupt value)."""
        verdict = waiting.verdict
        value = {
            "rewind": "waiting for on-call", "session": waiting.session,
            "since": waiting.since, "rule": verdict.rule, "explanation": verdict.explanation,
            "decide": f"rewind rollback|release|stop {waiting.session} --actor A --reason R, "
                      "then resume the thread with Command(resume=...)",
        }
        call_id = request.tool_call.get("id")
        if call_id:
            self.engine.documents.put(waiting.session, layout.DOCS, {HELD + str(call_id): value})
        return waiting.session, value

    def _wait(self, request: Any, sid: str, value: dict) -> ToolMessage:
        """Interrupt the thread while session `sid` waits for on-call; once resumed after a
        decision, the tool message that says it (the held call is not run), or LoopDetected
        (rolled back) or SessionStopped (stopped)."""
        while True:
            interrupt(value)  # raises GraphInterrupt until the thread is resumed
            info = self.engine.session_info(sid)
            if info is None or not info.waiting:
                break  # resumed while it still waits: the next interrupt() holds it again
        session, _lock = self._session(sid)
        call_id = request.tool_call.get("id")
        if call_id:
            self.engine.documents.put(sid, layout.DOCS, {HELD + str(call_id): None})
        decision = session.wait_for_decision(timeout=0)
        explanation = str(value.get("explanation") or "a loop").rstrip(".")
        if decision.kind == "stopped":
            raise SessionStopped(f"session {sid!r} was stopped by {decision.actor}: "
                                 f"{decision.reason}")
        if decision.kind == "rolled_back":
            from engine.loops.detector import Verdict

            raise LoopDetected(Verdict(looping=True, rule=value.get("rule"),
                                       explanation=explanation))
        note = f" Their note: {decision.note}" if decision.note else ""
        return ToolMessage(
            content=(f"Rewind: this call repeated a loop ({explanation}) and was not run "
                     f"again. An operator ({decision.actor}) released the conversation.{note} "
                     "Do not repeat the call: change the arguments, use another tool or "
                     "answer the user."),
            name=request.tool_call["name"], tool_call_id=call_id or "", status="error")

    def _failure(self, result: Any) -> str | None:
        if not isinstance(result, ToolMessage):
            return None
        if result.status == "error":
            return _text(result.content) or "error"
        if self.error_when is not None:
            said = self.error_when(result)
            if said:
                return said if isinstance(said, str) else (_text(result.content) or "error")
        return None

    def _roll_back(self, session: Session, verdict: Any, start: int | None, root: str | None):
        """Roll the session back to the healthy checkpoint's snapshot (else the engine's
        suggestion) and fence off the checkpoints of the aborted run."""
        targets = []
        healthy = healthy_checkpoint(self.engine, session.id, start)
        if healthy is not None and healthy.get("snap"):
            targets.append(healthy["snap"])
        suggested = session.suggested_target()
        if suggested is not None:
            targets.append(suggested)
        reason = f"loop detected ({verdict.rule}): {verdict.explanation}"
        for target in targets:
            try:
                result = self.engine.rollback(session.id, to=target, actor=ACTOR, reason=reason,
                                              notice=True, automatic=True, rule=verdict.rule)
            except (UnknownSnapshot, SnapshotNotRestorable):
                continue
            if root:
                live = live_checkpoint(self.engine, session.id)
                base = live["id"] if live is not None else None
                self.engine.documents.put_values(session.id, layout.HEAD,
                                       {layout.FENCE: {"base": base, "until": root}})
            return result
        return None


class RewindToolNode(ToolNode):
    """A `ToolNode` whose tool calls are guarded by a `LoopGuard` (see the module doc).

    ``RewindToolNode(tools, saver)`` where ``saver`` is the graph's `RewindSaver`. Keyword
    arguments are `LoopGuard`'s (on_loop, side_effects, error_when) and `ToolNode`'s. A
    ``wrap_tool_call`` of your own runs inside the guard. `handle_tool_errors` keeps its meaning
    except that it never turns `LoopDetected` into a tool message.

    Raises:
        LoopDetected: from the graph run in which a tool call completed a loop.
    """

    def __init__(self, tools: Sequence[Any], rewind: Engine | RewindSaver | LoopGuard, *,
                 on_loop: LoopPolicy | None = None,
                 side_effects: Mapping[str, Compensator | None] | Iterable[str] = (),
                 error_when: Callable[[ToolMessage], str | bool | None] | None = None,
                 handle_tool_errors: Any = None,
                 wrap_tool_call: Callable | None = None,
                 awrap_tool_call: Callable | None = None,
                 **kwargs: Any):
        guard = rewind if isinstance(rewind, LoopGuard) else LoopGuard(
            rewind, on_loop=on_loop, side_effects=side_effects, error_when=error_when)
        if handle_tool_errors is None:
            handle_tool_errors = inspect.signature(ToolNode.__init__).parameters[
                "handle_tool_errors"].default
        sync_wrap = guard.wrap_tool_call
        async_wrap: Any = guard.awrap_tool_call
        if wrap_tool_call is not None:
            def sync_wrap(request, execute):
                return guard.wrap_tool_call(request, lambda r: wrap_tool_call(r, execute))

            async_wrap = None  # ToolNode then runs the sync chain in async runs too
        if awrap_tool_call is not None:
            async def async_wrap(request, execute):
                async def inner(r):
                    return await awrap_tool_call(r, execute)

                return await guard.awrap_tool_call(request, inner)

        super().__init__(tools, handle_tool_errors=let_loops_through(handle_tool_errors),
                         wrap_tool_call=sync_wrap, awrap_tool_call=async_wrap, **kwargs)
        self.guard = guard


def let_loops_through(flag: Any) -> Any:
    """A `ToolNode` ``handle_tool_errors`` value that handles what `flag` handles, the same way,
    but lets `LoopDetected` and `SessionStopped` end the run (True would turn them into a tool
    message, and the model would call on)."""
    if not flag:
        return flag
    template = TOOL_CALL_ERROR_TEMPLATE.format
    if isinstance(flag, bool):
        handled: tuple[type[BaseException], ...] = (Exception,)

        def render(e):
            return template(error=repr(e))
    elif isinstance(flag, str):
        handled = (Exception,)

        def render(e):
            return flag
    elif isinstance(flag, type) and issubclass(flag, Exception):
        handled = (flag,)

        def render(e):
            return template(error=repr(e))
    elif isinstance(flag, tuple):
        handled = flag

        def render(e):
            return template(error=repr(e))
    else:
        handled = _handled_types(flag)
        render = flag

    def handle_tool_error(error: Exception) -> str:
        if isinstance(error, (LoopDetected, SessionStopped)) or not isinstance(error, handled):
            raise error
        return render(error)

    return handle_tool_error


def _handled_types(handler: Callable) -> tuple[type[BaseException], ...]:
    try:  # the exception types the handler is annotated with, as ToolNode reads them
        from langgraph.prebuilt.tool_node import _infer_handled_types

        return _infer_handled_types(handler)
    except Exception:  # noqa: BLE001 - older or newer ToolNode: handle everything, like it
        return (Exception,)


def _refusal(request: Any, exc: ToolQuarantined) -> ToolMessage:
    """The tool message the model sees for a call refused by a quarantine (the tool never
    ran; the refusal is already on the session's timeline)."""
    tool_call = request.tool_call
    return ToolMessage(
        content=f"Rewind refused this call: {exc}",
        name=tool_call["name"],
        tool_call_id=tool_call.get("id") or "",
        status="error",
    )


def _resuming(configurable: Mapping) -> bool:
    """Whether this task runs with resume values (`Command(resume=...)`), from LangGraph's
    scratchpad; True when it cannot tell (look in the store then)."""
    pad = configurable.get("__pregel_scratchpad")
    if pad is None:
        return True
    try:
        return bool(getattr(pad, "resume", None)) or pad.get_null_resume(False) is not None
    except Exception:  # noqa: BLE001 - another LangGraph: look in the store
        return True


def _configurable(request: Any) -> dict:
    runtime = getattr(request, "runtime", None)
    config = getattr(runtime, "config", None) or {}
    return config.get("configurable") or {}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p if isinstance(p, str) else str(p.get("text", p)) for p in content)
    return str(content)


def _result_of(result: Any) -> Any:
    """What the detector compares between successful calls."""
    if isinstance(result, ToolMessage):
        return result.content
    return repr(result)[:2000]


def _nudge(result: Any, text: str) -> Any:
    """The tool's result with the nudge appended, so the model reads it with the result."""
    if not isinstance(result, ToolMessage):
        return result
    content = result.content
    if isinstance(content, str):
        content = f"{content}\n\n{text}" if content else text
    else:
        content = [*content, {"type": "text", "text": text}]
    return result.model_copy(update={"content": content})


def _turn_of(state: Any, call_id: Any) -> str | None:
    """The id of the AI message in the graph state that holds the tool call `call_id` (the model
    response that issued it: its calls are judged as one attempt); None when unknown."""
    messages = state.get("messages") if isinstance(state, Mapping) else getattr(
        state, "messages", None)
    if not call_id or not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        return None
    for m in reversed(messages):
        calls = m.get("tool_calls") if isinstance(m, Mapping) else getattr(m, "tool_calls", None)
        if calls and any((c.get("id") if isinstance(c, Mapping) else None) == call_id
                         for c in calls):
            turn = m.get("id") if isinstance(m, Mapping) else getattr(m, "id", None)
            return turn if isinstance(turn, str) and turn else None
    return None


def _user_messages(state: Any) -> int | None:
    """How many user (human) messages the graph state holds; None when it holds no message
    list this guard can read."""
    messages = state.get("messages") if isinstance(state, Mapping) else getattr(
        state, "messages", None)
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes)):
        return None
    count = 0
    for m in messages:
        role = m.get("role") if isinstance(m, Mapping) else getattr(m, "type", None)
        count += role in ("human", "user")
    return count
