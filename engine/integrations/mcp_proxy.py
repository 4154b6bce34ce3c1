"""`rewind mcp-proxy`: an MCP server that fronts MCP servers and guards their tools with Rewind.

    rewind mcp-proxy --store sqlite:///.rewind/rewind.db -- python my_server.py
    rewind mcp-proxy --upstream http://127.0.0.1:9000/mcp --http 8765
    rewind mcp-proxy --config mcp.json          # {"mcpServers": {name: {command, args} | {url}}}

Any MCP client (a desktop assistant, an IDE agent) talks to the proxy instead of the server; the
proxy forwards ``tools/list`` and ``tools/call`` (and resources and prompts) to the upstream
servers, built on the official ``mcp`` SDK, and records every tool call as a step of a Rewind
session, so the client shows in the console with no code change.

**Sessions.** One per client connection: on stdio the proxy process serves one client, and its
session is ``mcp-<random>`` unless ``--session`` names it; on streamable HTTP a stateful
(handshake-era) connection gets ``mcp-<its Mcp-Session-Id>``, while stateless requests (the
2026-07-28 protocol has no connection) share the proxy's session. A call whose ``_meta`` carries
``rewind/session`` (or ``rewind_session``) is recorded in that session instead, so a client that
knows its conversation id keeps one session across connections and proxies.

**Loops.** The session's loop detector sees every call. The call that completes a loop has
already run: its result goes back with Rewind's explanation appended, the session is rolled back
to the snapshot before the loop (the engine's policy) and the loop's calls are blocked for the
session: a call that would continue the loop (the same tool with the same arguments) is answered
at once with an ``isError`` result saying plainly what to do instead, and the upstream tool is
not called. A quarantined tool (``engine.ToolQuarantined``, when the engine has fleet
quarantines) is refused the same way.

**Rollback for clients that own their history.** The proxy cannot rewrite what an MCP client
keeps in its own context. A rollback (by the detector, or by an operator from the console or the
CLI) moves the session's recorded state: its steps leave the live line and the console shows the
session as rolled back. The client learns about it from the notice, returned with the next tool
result of that session (an extra text block ``Rewind notice: …``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

try:
    import mcp_types as types
    from mcp import Client, StdioServerParameters
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("the MCP proxy needs the MCP SDK: pip install 'agent-rewind[mcp]'") from exc

from engine import errors
from engine.engine import Engine
from engine.errors import LoopDetected
from engine.loops.fingerprint import canonicalize, fingerprint
from engine.sessions.notices import NOTICE_FLAG
from engine.sessions.session import Session

__all__ = ["META_SESSION_KEYS", "McpProxy", "Upstream", "load_config", "serve"]

log = logging.getLogger("rewind.mcp_proxy")

META_SESSION_KEYS = ("rewind/session", "rewind_session")
"""Keys of a call's ``_meta`` naming the Rewind session the call belongs to."""

BLOCKED_DOCS = "mcp_proxy"
"""Document namespace of a session holding the fingerprints of the calls the proxy blocks (not
versioned: a rollback does not unblock a loop)."""

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


def _quarantine_errors() -> tuple[type[BaseException], ...]:
    found = getattr(errors, "ToolQuarantined", None)
    return (found,) if isinstance(found, type) and issubclass(found, BaseException) else ()


@dataclass
class Upstream:
    """One upstream MCP server: a command on stdio or a streamable HTTP URL."""

    command: Sequence[str] = ()
    """The command line of a stdio server (empty for an HTTP one)."""
    url: str | None = None
    """The streamable HTTP endpoint of an HTTP server."""
    env: dict[str, str] | None = None
    """Extra environment of a stdio server (the SDK passes only a safe default set otherwise)."""
    client: Any = field(default=None, repr=False)
    """The connected `mcp.Client`, while the proxy runs."""

    @property
    def name(self) -> str:
        return self.url or " ".join(self.command)

    def target(self) -> Any:
        if self.url:
            return self.url
        env = None
        if self.env:
            from mcp.client.stdio import get_default_environment

            env = {**get_default_environment(), **self.env}
        return StdioServerParameters(command=self.command[0], args=list(self.command[1:]), env=env)


def load_config(path: str) -> list[Upstream]:
    """The upstream servers of a config file, in the format MCP clients use::

        {"mcpServers": {"files": {"command": "python", "args": ["files.py"], "env": {}},
                        "search": {"url": "http://10.0.0.5:9000/mcp"}}}

    Raises:
        ValueError: the file is not such a JSON document (the message says what is wrong).
    """
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the MCP config {path}: {exc}") from exc
    servers = doc.get("mcpServers") if isinstance(doc, dict) else None
    if not isinstance(servers, dict) or not servers:
        raise ValueError(f'{path}: expected {{"mcpServers": {{name: {{command|url …}}}}}}')
    upstreams = []
    for name, spec in servers.items():
        if isinstance(spec, dict) and isinstance(spec.get("url"), str):
            upstreams.append(Upstream(url=spec["url"]))
        elif isinstance(spec, dict) and isinstance(spec.get("command"), str):
            args = [str(a) for a in spec.get("args") or []]
            env = {str(k): str(v) for k, v in (spec.get("env") or {}).items()}
            upstreams.append(Upstream(command=[spec["command"], *args], env=env or None))
        else:
            raise ValueError(f"{path}: server {name!r} needs a command or a url")
    return upstreams


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


class McpProxy:
    """The proxy's logic, independent of the transport it is served on.

    Args:
        engine: the engine that records the calls.
        upstreams: the servers fronted (tools, resources and prompts are routed by name; the
            first server listing a name wins).
        session: the Rewind session of the connection (None: ``mcp-<random>``).
        meta: metadata of the sessions the proxy creates (default channel ``mcp``).
    """

    def __init__(
        self,
        engine: Engine,
        upstreams: Sequence[Upstream],
        *,
        session: str | None = None,
        meta: dict | None = None,
    ):
        if not upstreams:
            raise ValueError("the proxy needs at least one upstream server")
        self.engine = engine
        self.upstreams = list(upstreams)
        self.default_session = session or f"mcp-{uuid.uuid4().hex[:12]}"
        self.meta = {"channel": "mcp", **(meta or {})}
        self._sessions: dict[str, Session] = {}
        self._flag_only: dict[str, Session] = {}
        self._epochs: dict[str, int] = {}
        self._tools: dict[str, Upstream] = {}
        self._prompts: dict[str, Upstream] = {}

    # -- lifecycle --------------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def connected(self) -> AsyncIterator[McpProxy]:
        """Connect every upstream for the time of the block."""
        async with contextlib.AsyncExitStack() as stack:
            for upstream in self.upstreams:
                upstream.client = await stack.enter_async_context(Client(upstream.target()))
            try:
                yield self
            finally:
                for upstream in self.upstreams:
                    upstream.client = None

    def server(self) -> Server[Any]:
        """The lowlevel MCP server whose handlers are this proxy's."""
        return Server(
            "rewind-mcp-proxy",
            instructions="Tools behind this server are guarded by Rewind against call loops.",
            on_list_tools=self.on_list_tools,
            on_call_tool=self.on_call_tool,
            on_list_resources=self.on_list_resources,
            on_read_resource=self.on_read_resource,
            on_list_prompts=self.on_list_prompts,
            on_get_prompt=self.on_get_prompt,
        )

    # -- sessions ---------------------------------------------------------------------------
    def session_for(self, ctx: Any, meta: Any = None) -> Session:
        """The Rewind session of a request: named in its ``_meta``, else its connection's."""
        sid = None
        if isinstance(meta, dict):
            sid = next((meta[k] for k in META_SESSION_KEYS if isinstance(meta.get(k), str)), None)
        if not sid:
            sid = self._connection_session(ctx)
        found = self._sessions.get(sid)
        if found is None:
            found = self.engine.session(sid, meta=self.meta)
            self._sessions[sid] = found
        return found

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
        found = self.engine.get_documents(session.id, BLOCKED_DOCS, [f"blocked:{fp}"])
        return found.get(f"blocked:{fp}")

    def _block(self, session: Session, fps: set[str], loop: LoopDetected) -> None:
        record = {"rule": loop.verdict.rule, "explanation": loop.verdict.explanation}
        self.engine.put_documents(
            session.id, BLOCKED_DOCS, {f"blocked:{fp}": record for fp in fps}
        )

    def _pending_notice(self, session: Session) -> str | None:
        """The notice of a rollback this proxy has not told the client about yet."""
        epoch = session.info().epoch
        seen = self._epochs.get(session.id)
        self._epochs[session.id] = epoch
        if seen is None or seen == epoch:
            return None
        for message in reversed(session.state().messages):
            if message.get(NOTICE_FLAG):
                return str(message.get("content") or "")
        return None

    # -- tools ------------------------------------------------------------------------------
    async def on_list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        tools: list[types.Tool] = []
        routes: dict[str, Upstream] = {}
        for upstream in self.upstreams:
            listed = await upstream.client.list_tools()
            for tool in listed.tools:
                if tool.name in routes:
                    log.warning(
                        "tool %s of %s is hidden by %s's",
                        tool.name,
                        upstream.name,
                        routes[tool.name].name,
                    )
                    continue
                routes[tool.name] = upstream
                tools.append(tool)
        self._tools = routes
        return types.ListToolsResult(tools=tools)

    async def _route(self, name: str) -> Upstream | None:
        if name not in self._tools:
            await self.on_list_tools(None, None)
        return self._tools.get(name)

    async def on_call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        """Forward one tool call as a guarded step (see the module doc)."""
        name, args = params.name, dict(params.arguments or {})
        meta = params.meta if isinstance(params.meta, dict) else getattr(ctx, "meta", None)
        session = self.session_for(ctx, meta)
        notice = self._pending_notice(session)
        result = await self.call(session, name, args)
        if notice:
            result = _with_text(result, f"Rewind notice: {notice}")
        self._epochs[session.id] = session.info().epoch
        return result

    async def call(self, session: Session, name: str, args: dict) -> types.CallToolResult:
        """Run one tool call of `session` through the guard."""
        fp = fingerprint(name, canonicalize(args, "args"))
        blocked = self._blocked(session, fp)
        if blocked is not None:
            refusal = REFUSAL.format(tool=name, explanation=_clause(blocked.get("explanation")))
            flag_only = self._flag_only.get(session.id)
            if flag_only is None:  # refusals are recorded but never roll the session back again
                flag_only = self._flag_only[session.id] = self.engine.session(
                    session.id, on_loop="flag"
                )
            with flag_only.step(name, args, snapshot=False) as step:
                step.fail(f"refused by Rewind: repeats a loop ({blocked.get('rule')})")
            return _refusal(refusal)
        upstream = await self._route(name)
        if upstream is None:
            return _refusal(f"Unknown tool {name}: no upstream server lists it.")
        step = session.step(name, args)
        try:
            step.__enter__()
        except _quarantine_errors() as refused:
            return _refusal(QUARANTINED.format(tool=name, reason=refused))
        try:
            result = await upstream.client.call_tool(name, args)
        except Exception as exc:  # noqa: BLE001 - the client gets it as a tool error
            result = _refusal(f"The upstream server failed: {type(exc).__name__}: {exc}")
        if result.is_error:
            step.fail(_text(result) or "error")
        else:
            step.ok(
                result.structured_content
                if result.structured_content is not None
                else _text(result)
            )
        try:
            step.__exit__(None, None, None)
        except LoopDetected as loop:
            last = session.info().last_verdict
            numbers = set(last["evidence_steps"]) if last else set()
            evidence = {s.fingerprint for s in session.steps(last=50) if s.n in numbers}
            self._block(session, evidence | {fp}, loop)
            result = _with_text(
                result, LOOP_NOTE.format(explanation=_clause(loop.verdict.explanation))
            )
            if loop.rollback is not None and loop.rollback.notice:
                result = _with_text(result, f"Rewind notice: {loop.rollback.notice}")
        return result

    # -- resources and prompts (passed through) ------------------------------------------------
    async def on_list_resources(self, ctx: Any, params: Any) -> types.ListResourcesResult:
        resources: list[types.Resource] = []
        for upstream in self.upstreams:
            with contextlib.suppress(Exception):
                resources += (await upstream.client.list_resources()).resources
        return types.ListResourcesResult(resources=resources)

    async def on_read_resource(
        self, ctx: Any, params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        last: Exception | None = None
        for upstream in self.upstreams:
            try:
                return await upstream.client.read_resource(params.uri)
            except Exception as exc:  # noqa: BLE001 - try the next server
                last = exc
        raise last or ValueError(f"no upstream server has {params.uri}")

    async def on_list_prompts(self, ctx: Any, params: Any) -> types.ListPromptsResult:
        prompts: list[types.Prompt] = []
        self._prompts = {}
        for upstream in self.upstreams:
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


async def serve(
    engine: Engine,
    upstreams: Sequence[Upstream],
    *,
    session: str | None = None,
    http_port: int | None = None,
    host: str = "127.0.0.1",
) -> None:
    """Run the proxy until the client disconnects (stdio) or the process is stopped (HTTP)."""
    proxy = McpProxy(engine, upstreams, session=session)
    server = proxy.server()
    async with proxy.connected():
        if http_port is None:
            async with stdio_server() as (read, write):
                await server.run(read, write, server.create_initialization_options())
            return
        import uvicorn

        app = server.streamable_http_app(host=host)
        config = uvicorn.Config(app, host=host, port=http_port, log_level="warning")
        await uvicorn.Server(config).serve()


def main(
    store: str | None,
    command: Sequence[str],
    upstream_urls: Sequence[str],
    *,
    session: str | None = None,
    http_port: int | None = None,
    config: str | None = None,
) -> int:
    """The `rewind mcp-proxy` command (see `engine.cli`)."""
    import anyio

    upstreams = ([Upstream(command=list(command))] if command else []) + [
        Upstream(url=u) for u in upstream_urls
    ]
    if config:
        try:
            upstreams += load_config(config)
        except ValueError as exc:
            print(f"rewind mcp-proxy: {exc}", file=sys.stderr)
            return 2
    if not upstreams:
        print(
            "rewind mcp-proxy: give an upstream: -- COMMAND [ARGS…], --upstream URL or "
            "--config FILE",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    with Engine.open(store) as engine:
        anyio.run(lambda: serve(engine, upstreams, session=session, http_port=http_port))
    return 0


def describe(result: types.CallToolResult) -> str:
    """A one-line summary of a tool result (for logs and examples)."""
    return json.dumps(
        {"is_error": bool(result.is_error), "text": _text(result)[:200]}, ensure_ascii=False
    )
