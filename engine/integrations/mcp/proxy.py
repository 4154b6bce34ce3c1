"""`McpProxy`: the logic of `rewind mcp-proxy`, independent of the transport it is served on
(see `engine.integrations.mcp` for what the proxy does and how it is run).

Every tool call the proxy forwards is a step it opens, and every step it opens ends: ok, error
(the upstream's error, a result too large to record, an answer that is not UTF-8, no answer
within the timeout, a lost server) or cancelled (the client gave up, the proxy stopped). Calls the
proxy refuses itself (a loop it blocked) are recorded with `Engine.documents.record_refusal`,
which the loop detector never counts: a refusal is never evidence of a loop.

The engine's store work of a request runs in a worker thread, one request's at a time (`_io`), so
a slow store write never stalls the event loop that serves every client and upstream.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.server.lowlevel import NotificationOptions, Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ToolsListChanged

from engine.engine import Engine
from engine.errors import (
    InvalidSessionId,
    LoopDetected,
    LoopWaiting,
    NothingToRollBack,
    RollbackConflict,
    SessionStopped,
    SizeLimitExceeded,
    SnapshotNotRestorable,
    StoreError,
    ToolQuarantined,
    UnknownSession,
    UnknownSnapshot,
)
from engine.ids import validate_session_id
from engine.integrations.mcp.upstream import Upstream
from engine.integrations.threads import off_loop
from engine.loops.fingerprint import canonicalize, fingerprint
from engine.recovery.notices import NOTICE_FLAG
from engine.sessions.session import NUDGE_TEXT, Session, StepCall

__all__ = ["DEFAULT_TIMEOUT_S", "META_SESSION_KEYS", "McpProxy", "UpstreamUnavailable"]

log = logging.getLogger("rewind.mcp_proxy")

T = TypeVar("T")

KEPT_HANDLES = 1_000
"""Session handles the proxy keeps open (least recently used go first)."""
KEPT_SESSIONS = 100_000
"""Sessions whose last call and last epoch heard of the proxy remembers (a few hundred bytes
each)."""
KEPT_CLIENTS = 1_000
"""Client connections the proxy remembers, to tell when an upstream's tool list changes."""
NOTIFY_WAIT_S = 5.0
"""At most this long to hand the clients the news that the tool list changed."""

IDLE_TASK_S = 300.0
"""A tools/call after this many idle seconds starts a new task (the step budget counts per task)."""

META_SESSION_KEYS = ("rewind/session", "rewind_session")
"""Keys of a call's ``_meta`` naming the Rewind session the call belongs to."""

DOCS = "mcp_proxy"
"""Document namespace of a session holding what the proxy keeps about it (not versioned: a
rollback neither unblocks a loop nor forgets who created the session): ``blocked:<fingerprint>``
for each call it blocks, ``origin`` on the sessions an MCP proxy created."""
BLOCKED_DOCS = DOCS
ORIGIN = "origin"
TOLD = "told:"
"""Document key prefix: ``told:<epoch>`` once a proxy gave the client the notice of the rollback
that made that epoch, so another proxy serving the session does not give it again."""

ACTOR = "rewind"
"""Actor of the proxy's own rollbacks and notices in the audit log (as the engine's)."""

DEFAULT_TIMEOUT_S = 120.0
"""Seconds the proxy waits for an upstream's answer to one request (``--timeout``)."""

REFUSAL = (
    "Rewind refused this call: {tool} with these arguments repeats a loop ({explanation}). "
    "The tool was not called. Do not call {tool} with the same arguments again: change the "
    "arguments, use another tool, or ask the user how to continue."
)
LOOP_NOTE = (
    "Rewind: this call completed a loop ({explanation}). Stop repeating it: change the "
    "arguments, use another tool, or ask the user."
)
QUARANTINED = (
    "Rewind refused this call: the tool {tool} is quarantined ({reason}). The tool was not "
    "called. Do not call it again; use another tool or tell the user it is unavailable."
)
ROLLED_BACK_NOTICE = (
    "Rewind stopped a loop of {tool} calls in this conversation and set its records back to "
    "the point before the loop. Rewind cannot change what you already hold in your context: "
    "treat the results of the repeated calls as unreliable, do not repeat them, and change the "
    "arguments, use another tool or ask the user how to continue."
)
"""The notice of the proxy's own rollbacks: it can move the session's records, not the
client's context, so it says what the client should do instead of claiming a reset."""
PAUSED_NOTICE = (
    "Rewind paused the tool calls of this conversation: its {tool} calls stopped making "
    "progress. Do not call more tools; tell the user what happened and ask how to continue."
)
"""The notice when the loop's remedy is to stop (a step budget ran out): nothing to go back to."""
SESSION_REFUSED = (
    "Rewind refused this call: the session {sid!r} named in _meta was not created by an MCP "
    "proxy, and this proxy may reach only its own sessions (an operator can allow a prefix with "
    "rewind mcp-proxy --session-prefix). The tool was not called."
)
INVALID_SESSION = (
    "Rewind refused this call: the session named in _meta is not a session id ({problem}). "
    "The tool was not called; name the session with 1-200 printable characters."
)
TOO_LARGE = (
    "The upstream server's result for {tool} was not passed on: {detail} Ask for less (a page, "
    "a filter, a summary) instead of repeating the call."
)
UNREADABLE = (
    "The upstream server's result for {tool} was not passed on: {detail}. The server is broken "
    "or hostile; do not repeat the call, tell the user."
)
TIMED_OUT = (
    "The upstream server did not answer {tool} within {timeout:g} s (rewind mcp-proxy "
    "--timeout), so the call was abandoned; it may still complete on the server. Do not repeat "
    "it blindly: check its effect first, or ask the user."
)
WAITING = (
    "Rewind refused this call: this conversation is {waiting}. The tool was not called. Do "
    "not call tools now; tell the user that a person is looking at it."
)
"""A call on a session waiting for on-call (the ``flag`` policy): it never reaches the
upstream until an operator rolls the session back, releases or stops it."""
NOW_WAITING = (
    "Rewind: this call completed a loop ({explanation}); the conversation now waits for "
    "on-call: further tool calls are refused until a person decides."
)
STOPPED = (
    "Rewind refused this call: an operator stopped this conversation ({reason}). The tool was "
    "not called. Do not call tools; tell the user."
)
GONE = "The upstream server is not available: {failure}. The tool was not called."
LOST = "The upstream server failed during the call: {failure}. The call did not complete."
CANCELLED = "cancelled: the client gave up on the call (or the proxy stopped) before it ended"
STORE_DOWN = (
    "Rewind could not reach its store, so the tool was not called: {failure}. Try again in a "
    "moment; if it keeps failing, tell the user."
)
NOT_RECORDED = (
    "Rewind could not record this call in its store ({failure}): the tool ran and this is its "
    "result, but the session's records miss the call."
)


class UpstreamUnavailable(ConnectionError):
    """An upstream server could not be started or connected when the proxy started; the message
    says what happened."""


def _keep(kept: OrderedDict[str, Any], key: str, value: Any, bound: int) -> None:
    """Set `kept[key]` as the most recently used entry, dropping the least recently used past
    `bound`: a proxy up all day meets ever new sessions, and must not grow with them."""
    kept[key] = value
    kept.move_to_end(key)
    while len(kept) > bound:
        kept.popitem(last=False)


def _by_digest(args: dict) -> dict:
    """What is recorded of arguments over the engine's size limit: their digest and size (as
    `rewind otlp` records such spans), the same for the same arguments."""
    text = json.dumps(args, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                      default=str).encode("utf-8", "replace")
    return {"digest": hashlib.sha256(text).hexdigest(), "bytes": len(text)}


def _clause(explanation: Any) -> str:
    """An explanation sentence to quote inside another one."""
    return str(explanation or "a loop").strip().rstrip(".")


def _text(result: Any) -> str:
    parts = []
    for block in getattr(result, "content", None) or []:
        parts.append(getattr(block, "text", None) or f"[{getattr(block, 'type', 'content')}]")
    return "\n".join(parts)


def _refusal(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _with_text(result: types.CallToolResult, text: str) -> types.CallToolResult:
    content = [*result.content, types.TextContent(type="text", text=text)]
    return result.model_copy(update={"content": content})


class _ProxyServer(Server[Any]):
    """The SDK's lowlevel server, saying in its handshake that its tool list can change (the
    upstreams' can): a client then lists the tools again when the proxy tells it to."""

    def create_initialization_options(self, notification_options: NotificationOptions | None = None,
                                      *args: Any, **kwargs: Any) -> Any:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True), *args, **kwargs)


class _SessionRefused(Exception):
    """A call's ``_meta`` named a session this proxy may not reach."""


class McpProxy:
    """The proxy's logic, independent of the transport it is served on.

    Args:
        engine: the engine that records the calls.
        upstreams: the servers fronted (tools, resources and prompts are routed by name; the
            first server listing a name wins).
        session: the Rewind session of the connection (None: ``mcp-<random>``).
        meta: metadata of the sessions the proxy creates (default channel ``mcp``).
        timeout: seconds to wait for an upstream's answer to one request (None: no limit).
        session_prefix: sessions whose id starts with it may be named in ``_meta`` although no
            MCP proxy created them (None: only the proxies' own sessions).
    """

    def __init__(
        self,
        engine: Engine,
        upstreams: Sequence[Upstream],
        *,
        session: str | None = None,
        meta: dict | None = None,
        timeout: float | None = DEFAULT_TIMEOUT_S,
        session_prefix: str | None = None,
    ):
        if not upstreams:
            raise ValueError("the proxy needs at least one upstream server")
        self.engine = engine
        self.upstreams = list(upstreams)
        self.default_session = session or f"mcp-{uuid.uuid4().hex[:12]}"
        self.meta = {"channel": "mcp", **(meta or {})}
        self.timeout = timeout
        self.session_prefix = session_prefix or None
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        """Open handles, the most recently used last (at most `KEPT_HANDLES`: a handle costs
        tens of kilobytes, and a proxy up all day meets a new session per connection or per
        conversation; a handle opened again rebuilds its detector from the store)."""
        self._epochs: OrderedDict[str, int] = OrderedDict()
        """The epoch each session's client has heard of (a rollback since: a notice is due)."""
        self._last_call: OrderedDict[str, float] = OrderedDict()
        """Monotonic time of each session's last tools/call (a new task after `IDLE_TASK_S`)."""
        self._turns: dict[str, tuple[str, int]] = {}
        """Per session with calls in flight: the turn they belong to and how many there are."""
        self._tools: dict[str, Upstream] = {}
        self._prompts: dict[str, Upstream] = {}
        self._clients: OrderedDict[str, Any] = OrderedDict()
        """The latest request session of each client connection (by its Rewind session):
        a handshake-era client hears of a changed tool list through it."""
        self._events = InMemorySubscriptionBus()
        """Where a 2026-07-28 client's subscriptions/listen stream hears of it."""
        for upstream in self.upstreams:
            upstream.on_tools_changed = self._tools_changed

    async def _io(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` (the engine's store work of a request) on the proxy's worker thread,
        one at a time (the handles' loop detectors and the proxy's bookkeeping are never
        touched by two threads at once): a slow store write stalls no other client's request on
        the event loop."""
        return await off_loop(self, fn, *args)

    # -- lifecycle --------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def connected(self) -> AsyncIterator[McpProxy]:
        """Connect every upstream (each held by a task of its own) for the time of the block.

        Raises:
            UpstreamUnavailable: a server could not be started or connected (nothing served).
        """
        failure = None
        async with anyio.create_task_group() as tasks:
            waiting = []
            for upstream in self.upstreams:
                if upstream.client is None:
                    ready = anyio.Event()
                    waiting.append(ready)
                    tasks.start_soon(upstream.hold, self.timeout, ready)
            for ready in waiting:
                await ready.wait()
            failed = [u.failure for u in self.upstreams if u.client is None]
            if failed:
                failure = "; ".join(str(f) for f in failed)
                for upstream in self.upstreams:
                    upstream.close()
            else:
                try:
                    yield self
                finally:
                    for upstream in self.upstreams:
                        upstream.close()
        if failure is not None:
            raise UpstreamUnavailable(failure)

    def server(self) -> Server[Any]:
        """The lowlevel MCP server whose handlers are this proxy's."""
        return _ProxyServer(
            "rewind-mcp-proxy",
            instructions="Tools behind this server are guarded by Rewind against call loops.",
            on_list_tools=self.on_list_tools,
            on_call_tool=self.on_call_tool,
            on_list_resources=self.on_list_resources,
            on_read_resource=self.on_read_resource,
            on_list_prompts=self.on_list_prompts,
            on_get_prompt=self.on_get_prompt,
            on_subscriptions_listen=ListenHandler(self._events),
        )

    def _heard_from(self, ctx: Any) -> None:
        """Remember the connection of request `ctx`, to tell it when the tool list changes."""
        session = getattr(ctx, "session", None)
        if session is None or not hasattr(session, "send_tool_list_changed"):
            return
        _keep(self._clients, self._connection_session(ctx), session, KEPT_CLIENTS)

    async def _tools_changed(self) -> None:
        """An upstream's tool list changed: tell every client, a handshake-era one by
        notifications/tools/list_changed, a 2026-07-28 one on its subscriptions/listen stream
        (the SDK sends each only where it belongs), so it lists the tools again."""
        # bounded as a whole: this runs on the upstream's reader, which waits for it
        with anyio.move_on_after(NOTIFY_WAIT_S):
            await self._events.publish(ToolsListChanged())
            for session in list(self._clients.values()):
                with contextlib.suppress(Exception):
                    await session.send_tool_list_changed()

    # -- sessions ---------------------------------------------------------------------------
    def session_for(self, ctx: Any, meta: Any = None) -> Session:
        """The Rewind session of a request: named in its ``_meta``, else its connection's.

        Raises:
            _SessionRefused: ``_meta`` names a session this proxy may not reach.
        """
        named = None
        if isinstance(meta, dict):
            named = next((meta[k] for k in META_SESSION_KEYS if isinstance(meta.get(k), str)), None)
        sid = named or self._connection_session(ctx)
        found = self._sessions.get(sid)
        if found is None:
            if named:
                try:
                    validate_session_id(named)
                except InvalidSessionId as exc:
                    raise _SessionRefused(INVALID_SESSION.format(problem=exc)) from exc
            if named and not self._may_name(named):
                raise _SessionRefused(SESSION_REFUSED.format(sid=named[:200]))
            found = self._open(sid)
        _keep(self._sessions, sid, found, KEPT_HANDLES)
        return found

    def _may_name(self, sid: str) -> bool:
        """True when `_meta` may name session `sid`: a session an MCP proxy created (or will
        create now), the proxy's own, or one under the operator's ``--session-prefix``."""
        if sid == self.default_session:
            return True
        if self.session_prefix is not None and sid.startswith(self.session_prefix):
            return True
        try:
            if self.engine.session_info(sid) is None:
                return True
        except InvalidSessionId:
            return False
        return ORIGIN in self.engine.documents.get(sid, DOCS, [ORIGIN])

    def _open(self, sid: str) -> Session:
        new = self.engine.session_info(sid) is None
        # The proxy acts on loops itself: its notice must fit a client whose context it cannot
        # touch, so the handle only stores each verdict with the policy in effect.
        session = self.engine.session(sid, meta=self.meta)
        session.acts_on_loops = False
        if new:
            self.engine.documents.put(sid, DOCS, {ORIGIN: {"by": "rewind mcp-proxy"}})
        return session

    def _connection_session(self, ctx: Any) -> str:
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        transport_id = headers.get("mcp-session-id") if headers is not None else None
        if transport_id:
            return f"mcp-{transport_id}"[:200]
        # stdio: the proxy process is the connection; stateless HTTP (the 2026-07-28 protocol)
        # has no connection to tell clients apart, so its calls share the proxy's session
        return self.default_session

    def _blocked(self, session: Session, fp: str) -> dict | None:
        found = self.engine.documents.get(session.id, DOCS, [f"blocked:{fp}"])
        return found.get(f"blocked:{fp}")

    def _block(self, session: Session, fps: set[str], verdict: Any) -> None:
        record = {"rule": verdict.rule, "explanation": verdict.explanation}
        self.engine.documents.put(session.id, DOCS, {f"blocked:{fp}": record for fp in fps})

    def _pending_notice(self, session: Session) -> str | None:
        """The notice of a rollback this proxy has not told the client about yet, unless
        another proxy on the store told it already (several proxies may serve one session)."""
        epoch = session.info().epoch
        seen = self._epochs.get(session.id)
        _keep(self._epochs, session.id, epoch, KEPT_SESSIONS)
        if seen is None or seen == epoch:
            return None
        told = f"{TOLD}{epoch}"
        if told in self.engine.documents.get(session.id, DOCS, [told]):
            return None
        self.engine.documents.put(session.id, DOCS, {told: True})
        for message in reversed(session.state().messages):
            if message.get(NOTICE_FLAG):
                return str(message.get("content") or "")
        return None

    # -- tools ------------------------------------------------------------------------------
    async def on_list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        self._heard_from(ctx)
        return types.ListToolsResult(tools=await self._list_tools())

    async def _list_tools(self) -> list[types.Tool]:
        tools: list[types.Tool] = []
        routes: dict[str, Upstream] = {}
        for upstream in self.upstreams:
            if upstream.client is None or upstream.failure:
                continue
            try:
                listed = await upstream.client.list_tools()
            except Exception as exc:  # noqa: BLE001 - one broken server hides only its tools
                log.warning("cannot list the tools of %s: %s", upstream.name, exc)
                continue
            upstream.stale = False
            for tool in listed.tools:
                if tool.name in routes:
                    log.warning("tool %s of %s is hidden by %s's", tool.name, upstream.name,
                                routes[tool.name].name)
                    continue
                routes[tool.name] = upstream
                tools.append(tool)
        self._tools = routes
        return tools

    async def _route(self, name: str) -> Upstream | None:
        # Re-list only when a server has not been listed yet or said its list changed: an
        # unknown name must not cost a round trip to every server on each call.
        if name not in self._tools and any(u.stale for u in self.upstreams if not u.failure):
            await self._list_tools()
        return self._tools.get(name)

    async def on_call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """Forward one tool call as a guarded step (see the module doc)."""
        self._heard_from(ctx)
        name, args = params.name, dict(params.arguments or {})
        meta = params.meta if isinstance(params.meta, dict) else getattr(ctx, "meta", None)
        for attempt in (1, 2):
            try:
                session = await self._io(self.session_for, ctx, meta)
                notice = await self._io(self._pending_notice, session)
                result = await self.call(session, name, args)
                break
            except _SessionRefused as refused:
                return _refusal(str(refused))
            except UnknownSession:
                # Retention (`rewind purge`) removed the session while its client stayed
                # connected: forget the handle and start the session again, once. `call`
                # raises it only before the tool was called, so the retry calls it once.
                if attempt == 2:
                    raise
                self._forget(self._requested_session(ctx, meta))
            except StoreError as exc:
                log.warning("cannot reach the store, %s was not called: %s", name, exc)
                return _refusal(STORE_DOWN.format(failure=exc))
        if notice:
            result = _with_text(result, f"Rewind notice: {notice}")
        with contextlib.suppress(StoreError, UnknownSession):
            epoch = (await self._io(session.info)).epoch
            if epoch != self._epochs.get(session.id):  # this call's own rollback, told with it
                await self._io(self.engine.documents.put, session.id, DOCS,
                               {f"{TOLD}{epoch}": True})
            _keep(self._epochs, session.id, epoch, KEPT_SESSIONS)
        return result

    def _requested_session(self, ctx: Any, meta: Any) -> str:
        if isinstance(meta, dict):
            for key in META_SESSION_KEYS:
                if isinstance(meta.get(key), str):
                    return str(meta[key])
        return self._connection_session(ctx)

    def _forget(self, sid: str) -> None:
        """Drop what the proxy holds of session `sid` (it is opened again on its next call)."""
        for kept in (self._sessions, self._epochs, self._last_call):
            kept.pop(sid, None)

    async def call(self, session: Session, name: str, args: dict) -> types.CallToolResult:
        """Run one tool call of `session` through the guard; the step it opens always ends.

        Raises:
            StoreError, UnknownSession: the store failed, or lost the session, before the tool
                was called (after, the result goes back saying the records miss it).
        """
        turn = self._join_turn(session.id)
        try:
            return await self._call(session, name, args, turn)
        finally:
            self._leave_turn(session.id)

    def _join_turn(self, sid: str) -> str:
        """The turn of a call arriving now: the turn of the calls of `sid` still in flight, or a
        new one. A client that waits for each result before its model asks again never overlaps
        two calls; calls that overlap were issued together by one model response (parallel
        tool calls), and the detector judges them as one attempt."""
        turn, flying = self._turns.get(sid) or (f"mcp-{uuid.uuid4().hex[:16]}", 0)
        self._turns[sid] = (turn, flying + 1)
        return turn

    def _leave_turn(self, sid: str) -> None:
        turn, flying = self._turns.pop(sid, ("", 1))
        if flying > 1:
            self._turns[sid] = (turn, flying - 1)

    async def _call(self, session: Session, name: str, args: dict,
                    turn: str) -> types.CallToolResult:
        fp = fingerprint(name, canonicalize(args, "args"))
        blocked = await self._io(self._blocked, session, fp)
        if blocked is not None:
            reason = f"this call repeats a loop ({blocked.get('rule')}); the tool was not called"
            try:
                await self._io(self.engine.documents.record_refusal, session.id, name, args,
                               reason)
            except SizeLimitExceeded:  # recorded by digest, as the calls it repeats
                await self._io(self.engine.documents.record_refusal, session.id, name,
                               _by_digest(args), reason)
            return _refusal(
                REFUSAL.format(tool=name, explanation=_clause(blocked.get("explanation"))))
        upstream = await self._route(name)
        if upstream is None:
            return _refusal(f"Unknown tool {name}: no upstream server lists it.")
        now = time.monotonic()
        if now - self._last_call.get(session.id, now) >= IDLE_TASK_S:
            # The client came back after a pause: a new task, so a client connected all day is
            # never stopped by the step budget for being connected long (loops still count).
            await self._io(session.new_task)
        _keep(self._last_call, session.id, now, KEPT_SESSIONS)
        try:
            step = session.step(name, args, turn=turn)
        except SizeLimitExceeded:
            # Arguments too large to record whole (a file an IDE agent writes): the call still
            # goes through, recorded by their digest, so the detector still sees a repeat.
            step = session.step(name, _by_digest(args), turn=turn)
        try:
            await self._io(step.__enter__)
        except ToolQuarantined as refused:
            return _refusal(QUARANTINED.format(tool=name, reason=refused))
        except LoopWaiting as waiting:
            return _refusal(WAITING.format(waiting=str(waiting).split(": loop detected")[0]))
        except SessionStopped as stopped:
            return _refusal(STOPPED.format(reason=str(stopped).split(". It runs")[0]))
        try:
            result = await self._forward(upstream, name, args)
        except BaseException:  # cancelled: the client gave up, or the proxy is stopping
            step.fail(CANCELLED)
            with contextlib.suppress(StoreError, UnknownSession), anyio.CancelScope(shield=True):
                await self._io(self._end, session, step, fp, None)
            raise
        result = self._record(step, name, result)
        try:
            return await self._io(self._end, session, step, fp, result)
        except (StoreError, UnknownSession) as exc:
            # The tool ran: its result goes back, saying that the records miss it.
            log.warning("cannot record the end of %s in the store: %s", name, exc)
            return _with_text(result, NOT_RECORDED.format(failure=exc))

    async def _forward(self, upstream: Upstream, name: str, args: dict) -> types.CallToolResult:
        """The upstream's result, or an error result saying why there is none. Raises only
        when cancelled."""
        if upstream.failure or upstream.client is None:
            return _refusal(GONE.format(failure=upstream.failure or "it is not connected"))
        try:
            return await upstream.client.call_tool(name, args, read_timeout_seconds=self.timeout)
        except MCPError as exc:
            code = exc.error.code
            if code == types.REQUEST_TIMEOUT:
                return _refusal(TIMED_OUT.format(tool=name, timeout=self.timeout or 0))
            if code == types.CONNECTION_CLOSED:
                upstream.lost(exc)
                return _refusal(LOST.format(failure=upstream.failure))
            if code == types.INTERNAL_ERROR and exc.error.message.startswith("the upstream server"):
                return _refusal(UNREADABLE.format(tool=name, detail=exc.error.message))
            return _refusal(f"The upstream server failed: {exc.error.message}")
        except Exception as exc:  # noqa: BLE001 - the client gets it as a tool error
            return _refusal(f"The upstream server failed: {type(exc).__name__}: {exc}")

    def _record(self, step: StepCall, name: str, result: types.CallToolResult
                ) -> types.CallToolResult:
        """Finish `step` with `result`; a result the engine cannot record (over its size limit,
        no JSON form) becomes an error result, recorded as the step's error."""
        if result.is_error:
            step.fail(_text(result) or "error")
            return result
        value = result.structured_content if result.structured_content is not None else _text(
            result)
        try:
            step.ok(value)
        except SizeLimitExceeded as exc:
            result = _refusal(TOO_LARGE.format(tool=name, detail=str(exc).split(". ")[0] + "."))
            step.fail(_text(result))
        except (ValueError, TypeError) as exc:
            result = _refusal(UNREADABLE.format(tool=name, detail=f"it cannot be recorded ({exc})"))
            step.fail(_text(result))
        return result

    def _end(self, session: Session, step: StepCall, fp: str,
             result: types.CallToolResult | None) -> types.CallToolResult:
        """End `step` and act on its verdict as the loop policy says (see the module doc of
        `engine.recovery.policy`): block the loop's calls, roll back or pause, with a notice."""
        out = result if result is not None else _refusal(CANCELLED)
        try:
            step.__exit__(None, None, None)
        except LoopDetected as loop:
            # A handle the caller made, which acts on loops itself: the engine has rolled back
            # already, with its own notice.
            out = self._block_loop(session, fp, loop.verdict, out)
            if loop.rollback is not None and loop.rollback.notice:
                out = _with_text(out, f"Rewind notice: {loop.rollback.notice}")
            return out
        verdict, choice = step.verdict, step.policy
        if verdict is None or not verdict.looping or step.late or choice is None:
            return out
        if choice.policy == "off" and verdict.remedy != "stop":
            return out
        if choice.policy == "flag" and verdict.remedy != "stop":  # a budget stops under flag too
            return _with_text(out, NOW_WAITING.format(explanation=_clause(verdict.explanation)))
        if choice.policy == "nudge_then_rollback" and verdict.flag_count <= 1 and (
                verdict.remedy != "stop"):
            advice = verdict.advice or NUDGE_TEXT.format(explanation=verdict.explanation)
            return _with_text(out, f"Rewind: {advice}")
        out = self._block_loop(session, fp, verdict, out)
        tool = step.tool or "tool"
        if verdict.remedy == "stop":
            session.stop()
            notice: str | None = session.inject_notice(PAUSED_NOTICE.format(tool=tool),
                                                       actor=ACTOR)
        else:
            notice = self._roll_back(session, verdict, choice,
                                     ROLLED_BACK_NOTICE.format(tool=tool))
        if notice:
            out = _with_text(out, f"Rewind notice: {notice}")
        return out

    def _block_loop(self, session: Session, fp: str, verdict: Any,
                    out: types.CallToolResult) -> types.CallToolResult:
        """Block the calls of the loop just flagged (its evidence and this call); `out` with
        Rewind's explanation."""
        last = session.info().last_verdict
        numbers = set(last["evidence_steps"]) if last else set()
        evidence = {s.fingerprint for s in session.steps(last=50) if s.n in numbers}
        self._block(session, evidence | {fp}, verdict)
        return _with_text(out, LOOP_NOTE.format(explanation=_clause(verdict.explanation)))

    def _roll_back(self, session: Session, verdict: Any, choice: Any, notice: str) -> str | None:
        """Roll `session` back to before the loop with `notice`; the notice given, or None when
        there is nothing to go back to (the session stays flagged for on-call)."""
        target = session.suggested_target()
        if target is None:
            return None
        reason = f"loop detected ({verdict.rule}): {verdict.explanation}; {choice}"
        try:
            done = self.engine.rollback(session.id, to=target, actor=ACTOR, reason=reason,
                                        notice=notice, automatic=True, rule=verdict.rule)
        except (NothingToRollBack, RollbackConflict, SnapshotNotRestorable, UnknownSnapshot):
            return None
        return done.notice or None

    # -- resources and prompts (passed through) ------------------------------------------------
    def _live(self) -> list[Upstream]:
        return [u for u in self.upstreams if u.client is not None and not u.failure]

    async def on_list_resources(self, ctx: Any, params: Any) -> types.ListResourcesResult:
        resources: list[types.Resource] = []
        for upstream in self._live():
            with contextlib.suppress(Exception):
                resources += (await upstream.client.list_resources()).resources
        return types.ListResourcesResult(resources=resources)

    async def on_read_resource(
        self, ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        last: Exception | None = None
        for upstream in self._live():
            try:
                return await upstream.client.read_resource(params.uri)
            except Exception as exc:  # noqa: BLE001 - try the next server
                last = exc
        raise last or ValueError(f"no upstream server has {params.uri}")

    async def on_list_prompts(self, ctx: Any, params: Any) -> types.ListPromptsResult:
        prompts: list[types.Prompt] = []
        self._prompts = {}
        for upstream in self._live():
            with contextlib.suppress(Exception):
                for prompt in (await upstream.client.list_prompts()).prompts:
                    if prompt.name not in self._prompts:
                        self._prompts[prompt.name] = upstream
                        prompts.append(prompt)
        return types.ListPromptsResult(prompts=prompts)

    async def on_get_prompt(
        self, ctx: Any, params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        if params.name not in self._prompts:
            await self.on_list_prompts(ctx, None)
        upstream = self._prompts.get(params.name) or self.upstreams[0]
        return await upstream.client.get_prompt(params.name, dict(params.arguments or {}))
