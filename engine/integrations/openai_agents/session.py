"""Rewind for the OpenAI Agents SDK: a session that keeps the conversation in Rewind, and a loop
guard for function tools.

    from agents import Agent, Runner
    from engine import Engine, LoopDetected
    from engine.integrations.openai_agents import RewindSession, ToolGuard

    session = RewindSession(Engine.open(), "chat-42", meta={"tenant": "acme"})
    guard = ToolGuard(session, side_effects={"charge": lambda a: ("refund", a)})
    agent = Agent(name="clerk", tools=guard.tools([lookup, charge]))
    try:
        result = await Runner.run(agent, "hello", session=session)
    except LoopDetected as loop:   # a ToolLoopDetected: also the SDK's AgentsException
        ...                        # the session was rolled back; the notice is its last item

**Items are session messages.** Every item the SDK stores (`add_items`) becomes one message of
the Rewind session: ``role`` and a readable ``content`` for the console, the item itself under
``sdk_item``, so `get_items` hands back exactly what was stored. An item whose text is a plain
string (a chat message's ``content``, a tool output's ``output``) keeps that text once, as the
message's content, and the rest of the item, if any, under ``sdk_rest`` (a chat message has none:
it reads back flat and becomes its item in place, one dict per item as the SDK's own read).
Messages written by Rewind (the recovery notice, a nudge) come back as plain chat items
(``{"role": "assistant", "content": …}``).
`pop_item` and `clear_session` never delete: history is append-only in Rewind, so they hide
messages through two session variables (``openai_agents.hidden``: ranges of hidden positions,
``openai_agents.start``) that a rollback restores with everything else.

**Runs are bracketed by snapshots.** The first `get_items` of a run takes a snapshot
``run start`` when the history changed since the last one; an `add_items` that ends with an
assistant message (the run's answer) takes ``run end``.

**Rollback wins.** A rollback from the console, the CLI or the detector moves the live line;
`get_items` reads the live line, so the next run sees neither the loop's items nor anything after
the rollback target, and sees the notice. Items that a run still in flight tries to store after
its session was rolled back (its epoch moved since the run's `get_items`) are dropped: they were
built on the abandoned context.

**The tool guard** (`ToolGuard`) makes every function tool call a Rewind step of the session:
write-ahead snapshot, the call's JSON arguments, the outcome (the exception the tool raised, even
when the SDK turns it into a message for the model, or what ``error_when`` calls a failure), the
side-effect flag and compensation declared per tool. When the detector flags a loop the engine
rolls the session back to the snapshot before the loop began and appends the notice (default
policy ``rollback``), and the guard stops the run with `ToolLoopDetected`, a `LoopDetected` that is
also the SDK's `AgentsException`, so `Runner.run` raises it as is. A quarantined tool (when the
engine has fleet quarantines: ``engine.ToolQuarantined``) is not called; the model gets a plain
refusal as the tool's output.

**On-call.** Under the ``flag`` policy (the session's or a declared freeze's) the call that
completes a loop makes the session wait for a person, and the run stops with `ToolLoopWaiting`
(a `LoopWaiting`, also the SDK's `AgentsException`): no traceback from the SDK, no further tool
call. Wait for the decision with ``await session.rewind.await_decision()`` (rolled back,
released with the operator's note, or stopped), then run again on the same session: after a
rollback or a release the run goes on (the note is among the items), after a stop the guarded
calls raise `ToolSessionStopped`.

The ``async`` methods keep the event loop free: their store work runs in a worker thread (as the
SDK's own `SQLiteSession` does with `asyncio.to_thread`), one call at a time per session handle
(`engine.integrations.threads`); ``bench/async_stall.py`` measures the loop's longest stall
against `SQLiteSession`. A `RewindSession` serves one run at a time, like the SDK's
own sessions. Needs ``pip install 'agent-rewind[openai-agents]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import copy
import dataclasses
import json
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

try:
    from agents import Agent, AgentsException, FunctionTool
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the OpenAI Agents integration needs the SDK: pip install 'agent-rewind[openai-agents]'"
    ) from exc

from engine import errors
from engine.engine import Engine
from engine.errors import LoopDetected, LoopWaiting, SessionStopped
from engine.integrations.threads import handle_lock, off_loop
from engine.sessions.session import Session
from engine.types import LoopPolicy

__all__ = ["ITEM_KEY", "RewindSession", "ToolGuard", "ToolLoopDetected", "item_message"]

log = logging.getLogger("rewind.openai_agents")

ITEM_KEY = "sdk_item"
"""Message key holding the SDK item a message was stored from."""

REST_KEY = "sdk_rest"
"""Message key holding the SDK item without its text, when the message's ``content`` is that
text (stored once, not twice): the item is ``rest`` plus ``content`` under `TEXT_KEY`'s field
(and, for an item with a role, the message's role). Absent when the item has nothing else (a
chat message: its role and its text), so that the message reads back as a flat dict."""

TEXT_KEY = "sdk_text"
"""Message key naming the item field (``content`` or ``output``) that the content restores."""

READ_CHUNK = 1000
"""Most messages read and decoded at once by a full read: one decode holds the interpreter's
lock (no other thread, the event loop's included, runs during it), so a long history is read in
spans of this many, each one query and one decode."""

HIDDEN_VAR = "openai_agents.hidden"
"""Session variable: live-line positions of messages `pop_item` removed, as sorted, disjoint
``[start, end)`` ranges (a run of pops is one range, however long; a plain position, as stored
before ranges, still reads)."""

START_VAR = "openai_agents.start"
"""Session variable: live-line position where the visible history starts (`clear_session`)."""

CHAT_ROLES = ("user", "assistant", "system", "developer")
"""Roles a message without an SDK item can be handed to the model with."""

Compensator = Callable[[dict], tuple[str, Any]]
"""Builds the (handler name, args) compensation of a side-effecting tool call from its args."""


def _quarantine_errors() -> tuple[type[BaseException], ...]:
    """The engine's quarantine error, when this engine has fleet quarantines (a seam: the guard
    honours `engine.ToolQuarantined` as soon as it exists)."""
    found = getattr(errors, "ToolQuarantined", None)
    return (found,) if isinstance(found, type) and issubclass(found, BaseException) else ()


class ToolLoopDetected(LoopDetected, AgentsException):
    """A guarded tool call completed a loop; the run stops with this exception.

    It is Rewind's `LoopDetected` (``.verdict``, ``.rollback``) and the SDK's `AgentsException`,
    so `Runner.run` raises it unchanged (the SDK wraps other tool exceptions in `UserError`).
    """

    def __init__(self, verdict: Any, rollback: Any = None, tool: str | None = None):
        LoopDetected.__init__(self, verdict, rollback)
        self.run_data = None
        self.tool = tool
        """Name of the tool whose call completed the loop."""


class ToolLoopWaiting(ToolLoopDetected, LoopWaiting):
    """The session waits for on-call (loop policy ``flag``, the session's or a freeze's): the
    run stops with this exception, raised by the call that completed the loop, or by a later
    call before its tool runs. It is Rewind's `LoopWaiting` (``.verdict``, ``.since``) and the
    SDK's `AgentsException`, so `Runner.run` raises it unchanged. Wait for the operator's
    decision (``await session.rewind.await_decision()``), then run again on the same session.
    """

    def __init__(self, verdict: Any, since: float, session: str, tool: str | None = None):
        LoopWaiting.__init__(self, verdict, since, session)
        self.run_data = None
        self.tool = tool


class ToolSessionStopped(SessionStopped, AgentsException):
    """An operator stopped the session: a guarded call refuses to run and the run stops with
    this exception (Rewind's `SessionStopped`, the SDK's `AgentsException`)."""

    def __init__(self, message: str):
        SessionStopped.__init__(self, message)
        self.run_data = None


# -- items <-> messages ------------------------------------------------------------------------
def _plain(item: Any) -> dict:
    if isinstance(item, Mapping):
        return dict(item)
    dump = getattr(item, "model_dump", None)
    if callable(dump):
        return dict(dump(exclude_unset=True, mode="json"))
    raise TypeError(f"a session item must be a dict, not {type(item).__name__}")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping):
                parts.append(
                    str(part.get("text") or part.get("refusal") or f"[{part.get('type', 'part')}]")
                )
            else:
                parts.append(str(part))
        return " ".join(parts)
    return "" if content is None else json.dumps(content, ensure_ascii=False, default=str)


def item_message(item: Any) -> dict:
    """The Rewind chat message for an SDK item: a role, a readable content, the item itself.

    Raises:
        TypeError: the item is neither a dict nor a pydantic model.
    """
    plain = _plain(item)
    kind = plain.get("type")
    role = plain.get("role")
    if isinstance(role, str) and role:
        content = _text(plain.get("content"))
    elif kind == "function_call":
        role = "assistant"
        content = f"{plain.get('name')}({plain.get('arguments') or ''})"
    elif isinstance(kind, str) and kind.endswith("_output"):
        role = "tool"
        content = _text(plain.get("output"))
    else:
        role = "assistant"
        content = f"[{kind or 'item'}]"
    text_field = None
    if isinstance(plain.get("role"), str) and plain["role"] and isinstance(
            plain.get("content"), str):
        text_field = "content"
    elif isinstance(kind, str) and kind.endswith("_output") and isinstance(
            plain.get("output"), str):
        text_field = "output"
    if text_field is None:
        return {"role": role, "content": content, ITEM_KEY: plain}
    # The text is the message's content already: keeping it twice doubled what a chat costs.
    rest = {k: v for k, v in plain.items()
            if k != text_field and not (text_field == "content" and k == "role")}
    if not rest:  # a chat message: read back flat, and rebuilt in place (`_items`)
        return {"role": role, "content": content, TEXT_KEY: text_field}
    return {"role": role, "content": content, REST_KEY: rest, TEXT_KEY: text_field}


def _message_item(message: dict) -> dict | None:
    """The SDK item a live message stands for (None: nothing the model can be given). The
    message was just decoded from the store, so its item is handed over as is, not copied."""
    stored = message.get(ITEM_KEY)
    if isinstance(stored, dict):
        return stored
    rest, field = message.get(REST_KEY, {}), message.get(TEXT_KEY)
    if isinstance(rest, dict) and field in ("content", "output"):
        item = dict(rest)
        if field == "content":
            item["role"] = message.get("role")
        item[field] = message.get("content")
        return item
    role = message.get("role")
    if role not in CHAT_ROLES:
        return None
    return {"role": role, "content": _text(message.get("content"))}


def _items(messages: list[dict], since: int = 0, positions: list[int] | None = None
           ) -> list[dict]:
    """The items the messages read from position `since` stand for, oldest first; their
    positions appended to `positions` when given.

    A chat message's message (its role, its text and `TEXT_KEY`, nothing else) becomes its
    item in place: the read decoded it for this call only, and a full history then costs one
    dict per item, as the SDK's own decode does, not three (and no dict holding another, which
    the garbage collector would have to track); an item kept whole is handed over as decoded.
    Others go through `_message_item`."""
    out: list[dict] = []
    append = out.append
    for offset, message in enumerate(messages):
        field = message.get(TEXT_KEY)
        if field == "content" and len(message) == 3:
            del message[TEXT_KEY]  # {"role", "content"} left: the item
            append(message)
        elif field is None and type(stored := message.get(ITEM_KEY)) is dict:
            append(stored)  # an item kept whole
        elif field == "content" and len(message) == 4 and message.get(REST_KEY) == {}:
            # a chat message as written before REST_KEY was left out when empty
            del message[TEXT_KEY], message[REST_KEY]
            append(message)
        else:
            item = _message_item(message)
            if item is None:
                continue
            append(item)
        if positions is not None:
            positions.append(since + offset)
    return out


def _ranges(stored: Any) -> list[list[int]]:
    """The hidden ranges of `HIDDEN_VAR` (``[start, end)``, sorted, disjoint, merged); plain
    positions (stored before ranges) become ranges of one."""
    spans = sorted([int(x), int(x) + 1] if isinstance(x, int) else [int(x[0]), int(x[1])]
                   for x in stored or ())
    out: list[list[int]] = []
    for a, b in spans:
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def _hide(hidden: list[list[int]], position: int) -> list[list[int]]:
    """`hidden` with `position` hidden too."""
    return _ranges([*hidden, [position, position + 1]])


def _spans(hidden: list[list[int]], start: int, total: int) -> list[tuple[int, int]]:
    """The visible ``[since, until)`` spans of positions `start` to `total`, oldest first."""
    spans = []
    at = start
    for a, b in hidden:
        if b <= at:
            continue
        if a >= total:
            break
        if a > at:
            spans.append((at, a))
        at = b
    if at < total:
        spans.append((at, total))
    return spans


def _ends_run(items: Sequence[dict]) -> bool:
    """Whether stored items end with the run's answer (an assistant message, no call after)."""
    if not items:
        return False
    last = items[-1]
    return last.get("role") == "assistant" and last.get("type", "message") == "message"


# -- the session ------------------------------------------------------------------------------
class RewindSession:
    """The SDK's session protocol on a Rewind session (see the module doc).

    Args:
        engine: the engine whose store keeps the conversation.
        session_id: the Rewind session id (1–200 printable characters).
        meta: session metadata merged on open (tenant, scenario, prompt_version, locale, …).
        session_settings: the SDK's `SessionSettings` (its ``limit`` caps `get_items`).
        on_loop: the loop policy of guarded tool calls (default: the engine's).

    Raises:
        InvalidSessionId: bad id.
    """

    def __init__(
        self,
        engine: Engine,
        session_id: str,
        *,
        meta: dict | None = None,
        session_settings: Any = None,
        on_loop: LoopPolicy | None = None,
    ):
        self.engine = engine
        self.session_id = session_id
        self.session_settings = session_settings
        self.rewind: Session = engine.session(session_id, meta=meta, on_loop=on_loop)
        """The Rewind session handle (steps, tree, rollback, memory)."""
        self._run_epoch: int | None = None
        self._run_key: int | None = None
        self._snapshot_seq: tuple[int, int] | None = None

    # -- the SDK's protocol ------------------------------------------------------------------
    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[dict]:
        """The visible history, oldest first; `limit`: only the newest N items."""
        return await off_loop(self.rewind, self._get_items, limit, wrapper)

    def _get_items(self, limit: int | None, wrapper: Any) -> list[dict]:
        if limit is None and self.session_settings is not None:
            limit = getattr(self.session_settings, "limit", None)
        # one read serves the run check, the run-start snapshot and, for a limit, the items
        epoch, total, variables, tail = self._read(0 if limit is None else max(limit, 0))
        self._begin_run(wrapper, epoch, total)
        if limit is not None and limit <= 0:
            return []
        return self._visible(variables, total, limit, tail)[0]

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        """Append items to the history (one atomic write); dropped when the session was rolled
        back since this run read it."""
        await off_loop(self.rewind, self._add_items, items, wrapper)

    def _add_items(self, items: list[Any], wrapper: Any) -> None:
        if not items:
            return
        info = self.rewind.info()
        if (
            self._run_epoch is not None
            and info.epoch != self._run_epoch
            and (wrapper is None or self._run_key in (None, id(wrapper)))
        ):
            log.warning(
                "session %s was rolled back during the run; %d item(s) of the run are not stored",
                self.session_id,
                len(items),
            )
            return
        plain = [_plain(item) for item in items]
        messages = [item_message(item) for item in plain]
        if not _ends_run(plain):
            self.rewind.append_messages(messages)
            return
        # the run's answer: its snapshot in the same write (the history just grew, so it
        # differs from the last snapshot taken here: no read to check it)
        self.rewind.append_messages(messages, snapshot="run end")
        self._snapshot_seq = (info.epoch, info.messages + len(messages))

    async def pop_item(self, *, wrapper: Any = None) -> dict | None:
        """Remove and return the newest visible item (None when there is none). The message
        stays in Rewind's history; it is hidden from the SDK (restored by a rollback)."""
        return await off_loop(self.rewind, self._pop_item)

    def _pop_item(self) -> dict | None:
        _, total, variables, tail = self._read(1)
        visible, positions, hidden = self._visible(variables, total, 1, tail, positions=True)
        if not visible:
            return None
        self.rewind.set_var(HIDDEN_VAR, _hide(hidden, positions[-1]))
        return visible[-1]

    async def clear_session(self, *, wrapper: Any = None) -> None:
        """Hide every item stored so far (the messages stay in Rewind's history)."""
        await off_loop(self.rewind, self._clear_session)

    def _clear_session(self) -> None:
        self.rewind.set_vars({START_VAR: self.rewind.info().messages, HIDDEN_VAR: None})

    # -- Rewind --------------------------------------------------------------------------------
    def guard(self, agent: Any, **options: Any) -> Any:
        """A clone of `agent` whose function tools are guarded by a `ToolGuard` on this session
        (options: `ToolGuard`'s)."""
        return ToolGuard(self, **options).agent(agent)

    def _read(self, last: int) -> tuple[int, int, dict[str, Any], list[dict]]:
        """(epoch, live message count, session variables, the `last` newest live messages) in
        one store read.

        Raises:
            UnknownSession: the session was deleted."""
        while (found := self.engine.documents.live_tail(self.session_id, "var", last)) is None:
            self.rewind.info()  # raises UnknownSession (unless it was created again since)
        return found

    def _visible(self, variables: dict[str, Any], total: int, newest: int | None = None,
                 tail: list[dict] | None = None, *, positions: bool = False
                 ) -> tuple[list[dict], list[int], list[list[int]]]:
        """The visible items, oldest first: all of them, or only the `newest` N; their
        live-line positions (with `positions`, else []); and the hidden ranges. `variables`,
        `total`: the session's variables and live line length, as just read; `tail`: the last
        messages of the live line when they were read with them.

        A full read reads each visible span `READ_CHUNK` messages at a time. A `newest` read
        reads only the visible spans of the tail, newest first, each for as many messages as
        are still wanted (twice as many as the last read when messages without an item left
        it short), so it costs about what it returns, however many items were popped; what
        `tail` holds is not read again."""
        start = variables.get(START_VAR) or 0
        hidden = _ranges(variables.get(HIDDEN_VAR))
        live = self.engine.documents.live_messages
        sid = self.session_id
        at: list[int] | None = [] if positions else None
        if newest is None:
            out: list[dict] = []
            for since, until in _spans(hidden, start, total):
                for first in range(since, until, READ_CHUNK):
                    out += _items(live(sid, since=first, until=min(until, first + READ_CHUNK)),
                                  first, at)
            return out, at or [], hidden
        tail = tail or []
        held = total - len(tail)  # the position of tail[0]
        chunks: list[tuple[list[dict], list[int] | None]] = []
        found = read = 0
        for since, until in reversed(_spans(hidden, start, total)):
            while until > since and found < newest:
                first = max(since, until - min(READ_CHUNK, max(newest - found, 2 * read)))
                # what the tail holds is taken from it (each message once: reads do not
                # overlap), the rest read
                messages = tail[max(first - held, 0):max(until - held, 0)]
                if first < held:
                    messages = live(sid, since=first, until=min(until, held)) + messages
                count = len(messages)
                where: list[int] | None = [] if positions else None
                chunk = _items(messages, first, where)
                chunks.append((chunk, where))
                found += len(chunk)
                read = count if len(chunk) < count else 0
                until = first
            if found >= newest:
                break
        if not newest:
            return [], [], hidden
        out = [item for chunk, _ in reversed(chunks) for item in chunk][-newest:]
        if positions:
            at = [p for _, where in reversed(chunks) for p in where or ()][-newest:]
        return out, at or [], hidden

    def _begin_run(self, wrapper: Any, epoch: int, messages: int) -> None:
        key = id(wrapper) if wrapper is not None else None
        if key is not None and key == self._run_key:
            return  # the same run reading again (limits, compaction)
        self._run_key = key
        self._run_epoch = epoch
        if (epoch, messages) != self._snapshot_seq:  # else nothing was written since the last
            self.rewind.snapshot(label="run start")
            self._snapshot_seq = (epoch, messages)


# -- the tool guard ---------------------------------------------------------------------------
_CAUGHT: contextvars.ContextVar[list[BaseException] | None] = contextvars.ContextVar(
    "rewind_openai_agents_caught", default=None
)
"""Where the capturing layer puts the exception a tool raised, for the guard around it."""


class ToolGuard:
    """Records every function tool call as a Rewind step of a session and stops loops.

    Args:
        session: the `RewindSession` (or Rewind `Session`) the calls belong to.
        side_effects: names of tools that change the outside world, or a mapping from such a
            name to a function building its compensation ``(handler, args)`` from the call's
            args (None: no compensation). A rollback queues the compensations of the
            side-effecting calls it abandons.
        error_when: ``f(tool_name, output) -> str | bool | None`` deciding that a tool's output
            is a failure (a string is the error text), for tools that report errors as results.
    """

    def __init__(
        self,
        session: RewindSession | Session,
        *,
        side_effects: Mapping[str, Compensator | None] | Iterable[str] = (),
        error_when: Callable[[str, Any], str | bool | None] | None = None,
    ):
        self.session: Session = session.rewind if isinstance(session, RewindSession) else session
        self.side_effects: dict[str, Compensator | None] = (
            dict(side_effects) if isinstance(side_effects, Mapping) else dict.fromkeys(side_effects)
        )
        self.error_when = error_when
        # turns: the SDK hands a tool no response id, but the calls of one model response see
        # the run's model request count (`ctx.usage.requests`) at one value
        self._turn_prefix = uuid.uuid4().hex[:8]
        self._usage: Any = None
        self._runs = 0

    def _turn(self, ctx: Any) -> str | None:
        """The model response that issued this call: the run and its model request count."""
        usage = getattr(ctx, "usage", None)
        requests = getattr(usage, "requests", None)
        if type(requests) is not int or requests < 1:
            return None
        if usage is not self._usage:  # another run (each has its own usage)
            self._usage, self._runs = usage, self._runs + 1
        return f"{self._turn_prefix}.{self._runs}.{requests}"

    def tools(self, tools: Iterable[Any]) -> list[Any]:
        """The tools with every `FunctionTool` guarded (others are returned unchanged)."""
        return [self.tool(t) if isinstance(t, FunctionTool) else t for t in tools]

    def agent(self, agent: Agent[Any]) -> Agent[Any]:
        """A clone of `agent` with guarded tools."""
        return agent.clone(tools=self.tools(agent.tools))

    def tool(self, tool: FunctionTool) -> FunctionTool:
        """A copy of `tool` whose calls are guarded steps."""
        if isinstance(tool.on_invoke_tool, _GuardedInvoker):
            tool = tool.on_invoke_tool.tool
        guarded = dataclasses.replace(tool, on_invoke_tool=_capturing(tool.on_invoke_tool))
        guarded.on_invoke_tool = _GuardedInvoker(self, tool, guarded.on_invoke_tool)
        return guarded

    # -- one call ---------------------------------------------------------------------------
    async def call(
        self, tool: FunctionTool, invoke: Callable[[Any, str], Any], ctx: Any, arguments: str
    ) -> Any:
        """Run one call of `tool` (through `invoke`) as a guarded step.

        Raises:
            ToolLoopDetected: this call completed a loop (the session was rolled back).
        """
        name = tool.name
        try:
            args = json.loads(arguments) if arguments else {}
        except ValueError:
            args = {"raw_arguments": arguments}
        side_effect = name in self.side_effects
        compensator = self.side_effects.get(name)
        compensation = (
            compensator(args) if compensator is not None and isinstance(args, dict) else None
        )
        step = self.session.step(name, args, side_effect=side_effect, compensation=compensation,
                                 turn=self._turn(ctx))
        try:
            await off_loop(self.session, step.__enter__)
        except _quarantine_errors() as refused:
            return (
                f"Rewind: the tool {name} is quarantined and was not called ({refused}). "
                "Do not call it again; use another tool or tell the user it is unavailable."
            )
        except LoopWaiting as waiting:  # the tool is not called while the session waits
            raise ToolLoopWaiting(waiting.verdict, waiting.since, waiting.session,
                                  name) from None
        except SessionStopped as stopped:
            raise ToolSessionStopped(str(stopped)) from None
        except asyncio.CancelledError:  # the step began in its thread: end it, as below
            if step.n is not None:
                with handle_lock(self.session), contextlib.suppress(LoopDetected):
                    step.fail("CancelledError: the call did not finish")
                    step.__exit__(None, None, None)
            raise
        caught: list[BaseException] = []
        token = _CAUGHT.set(caught)
        try:
            output = await invoke(ctx, arguments)
        except Exception as exc:
            raised = exc
            await off_loop(self.session, self._finish, step, lambda: step.fail(raised), name, exc)
            raise
        except BaseException as exc:  # cancelled (a timeout, the run stopping): record, go on
            with handle_lock(self.session), contextlib.suppress(LoopDetected):
                step.fail(f"{type(exc).__name__}: the call did not finish")
                step.__exit__(None, None, None)
            raise
        finally:
            _CAUGHT.reset(token)
        failure: str | BaseException | None = caught[-1] if caught else None
        if failure is None and self.error_when is not None:
            said = self.error_when(name, output)
            if said:
                failure = said if isinstance(said, str) else (_text(output) or "error")
        if failure is not None:
            reason = failure
            await off_loop(self.session, self._finish, step, lambda: step.fail(reason), name, None)
        else:
            await off_loop(self.session, self._finish, step, lambda: step.ok(_result_of(output)),
                           name, None)
        return output

    def _finish(
        self, step: Any, outcome: Callable[[], None], name: str, error: BaseException | None
    ) -> None:
        outcome()
        try:
            step.__exit__(None, None, None)
        except LoopWaiting as waiting:
            raise ToolLoopWaiting(waiting.verdict, waiting.since, waiting.session,
                                  name) from (error or waiting)
        except LoopDetected as loop:
            raise ToolLoopDetected(loop.verdict, loop.rollback, name) from (error or loop)


class _GuardedInvoker:
    """The `on_invoke_tool` of a guarded tool: the step around the tool's own invoker."""

    def __init__(self, guard: ToolGuard, tool: FunctionTool, inner: Any):
        self.guard = guard
        self.tool = tool
        """The tool as it was before guarding."""
        self.inner = inner

    async def __call__(self, ctx: Any, arguments: str) -> Any:
        return await self.guard.call(self.tool, self.inner, ctx, arguments)

    def __agents_bind_function_tool__(self, function_tool: FunctionTool) -> _GuardedInvoker:
        # The SDK rebinds an invoker to each copy of its tool; keep the guard around the rebind.
        bind = getattr(self.inner, "__agents_bind_function_tool__", None)
        inner = bind(function_tool) if callable(bind) else self.inner
        return self if inner is self.inner else _GuardedInvoker(self.guard, self.tool, inner)


def _capturing(invoker: Any) -> Any:
    """The tool's invoker with its implementation wrapped so the exception it raises reaches the
    guard, even when the SDK turns it into a message for the model (its failure handler). When
    the SDK's invoker has another shape, the invoker is returned as is and failures are known
    only from exceptions that escape it and from ``error_when``."""
    impl = getattr(invoker, "_invoke_tool_impl", None)
    if not callable(impl):
        return invoker

    async def capture(ctx: Any, arguments: str) -> Any:
        try:
            return await impl(ctx, arguments)
        except Exception as exc:
            caught = _CAUGHT.get()
            if caught is not None:
                caught.append(exc)
            raise

    capture.__dict__.update(getattr(impl, "__dict__", {}))  # the SDK's markers on the function
    wrapped = copy.copy(invoker)
    wrapped._invoke_tool_impl = capture
    return wrapped


def _result_of(output: Any) -> Any:
    """What the detector compares between successful calls."""
    if isinstance(output, (str, int, float, bool)) or output is None:
        return output
    dump = getattr(output, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    try:
        json.dumps(output)
    except (TypeError, ValueError):
        return repr(output)[:2000]
    return output
