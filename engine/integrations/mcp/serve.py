"""Serving `McpProxy` on stdio or streamable HTTP, and the `rewind mcp-proxy` command.

Over HTTP every request must carry ``Authorization: Bearer <token>`` when a token is set
(``--token`` or $REWIND_MCP_TOKEN); the proxy refuses to listen on an address other than
loopback without one, since anyone who reaches it could write steps and trigger rollbacks.

On stdio, a request the SDK cannot parse (a lone surrogate, a line that is not JSON) is answered
with a JSON-RPC error saying what was wrong, and a line on stderr; the SDK alone would drop it,
and the client would wait for an answer forever.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from engine.engine import Engine
from engine.errors import InvalidSessionId
from engine.ids import validate_session_id
from engine.integrations.mcp.proxy import DEFAULT_TIMEOUT_S, McpProxy, UpstreamUnavailable, _text
from engine.integrations.mcp.upstream import Upstream, load_config
from engine.integrations.mcp.wire import error_for, unreadable

__all__ = ["TOKEN_ENV", "bearer_guard", "describe", "is_loopback", "main", "serve"]

log = logging.getLogger("rewind.mcp_proxy")

TOKEN_ENV = "REWIND_MCP_TOKEN"
"""Environment variable holding the bearer token of ``rewind mcp-proxy --http``."""


def is_loopback(host: str) -> bool:
    """True when `host` (a name or an address) can be reached from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


CANNOT_READ = "rewind mcp-proxy cannot read this request: it holds {what}. {advice}"
UNICODE_ADVICE = ("Send the text as valid Unicode (a lone surrogate is half of a character, "
                  "such as an emoji cut in two).")
LINE_ADVICE = "Send one JSON-RPC 2.0 message per line, as MCP's stdio transport does."


class _AnsweringUnreadable:
    """The read stream of the proxy's own stdio server, answering each request the SDK could
    not parse with a JSON-RPC error (the SDK drops such a line without a word, and its client
    waits forever); everything else passes through unchanged."""

    def __init__(self, inner: Any, write: Any):
        self._inner = inner
        self._write = write

    async def _answered(self, item: Any) -> bool:
        if not isinstance(item, Exception):
            return False
        found = unreadable(item)
        if found is None or (found.id is None and found.code != types.PARSE_ERROR):
            return False  # a notification: nothing waits for an answer
        log.warning("a client request could not be read: it holds %s", found.what)
        advice = UNICODE_ADVICE if "surrogate" in found.what or "UTF-8" in found.what else (
            LINE_ADVICE)
        message = CANNOT_READ.format(what=found.what, advice=advice)
        await self._write.send(SessionMessage(error_for(found.id, found.code, message)))
        return True

    async def receive(self) -> Any:
        while True:
            item = await self._inner.receive()
            if not await self._answered(item):
                return item

    def __aiter__(self) -> _AnsweringUnreadable:
        return self

    async def __anext__(self) -> Any:
        while True:
            item = await self._inner.__anext__()
            if not await self._answered(item):
                return item

    async def __aenter__(self) -> _AnsweringUnreadable:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __getattr__(self, name: str) -> Any:  # aclose, close, last_context: the inner stream's
        return getattr(self._inner, name)


def _one_line_per_stray_line(record: logging.LogRecord) -> bool:
    """A logging filter for the SDK's stdio client: a line an upstream wrote to stdout that is
    no JSON-RPC (a banner, a debug print) is logged as one line quoting it, not a traceback of
    fifteen lines per stray line. Keeps every record."""
    exc = record.exc_info[1] if record.exc_info else None
    if exc is None or "parse JSONRPC" not in str(record.msg):
        return True
    errors = getattr(exc, "errors", None)
    try:
        given = errors()[0].get("input") if callable(errors) else None
    except (IndexError, TypeError, AttributeError, ValueError):
        given = None
    if not isinstance(given, str):
        return True
    found = unreadable(exc)
    what = found.what if found is not None else "a line that is not JSON-RPC"
    record.msg = "an upstream server wrote %s to stdout, which carries only MCP messages: %r%s"
    record.args = (what, given[:200], " (its request gets an error)" if found and found.id
                   is not None else " (ignored)")
    record.exc_info = record.exc_text = None
    return True


def bearer_guard(app: Any, token: str) -> Any:
    """The ASGI app `app` answering 401 to an HTTP request without ``Authorization: Bearer
    <token>`` (compared in constant time); lifespan and other scopes pass through."""
    expected = f"Bearer {token}".encode()
    body = json.dumps({"error": "unauthorized: send Authorization: Bearer <token>, the token "
                       "given to rewind mcp-proxy (--token or $REWIND_MCP_TOKEN)"}).encode()

    async def guarded(scope: dict, receive: Any, send: Any) -> None:
        if scope.get("type") in ("http", "websocket"):
            given = b""
            for key, value in scope.get("headers") or []:
                if key.lower() == b"authorization":
                    given = value
            if not hmac.compare_digest(given, expected):
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b'Bearer realm="rewind-mcp-proxy"')]})
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


async def serve(
    engine: Engine,
    upstreams: Sequence[Upstream],
    *,
    session: str | None = None,
    http_port: int | None = None,
    host: str = "127.0.0.1",
    timeout: float | None = DEFAULT_TIMEOUT_S,
    session_prefix: str | None = None,
    token: str | None = None,
) -> None:
    """Run the proxy until the client disconnects (stdio) or the process is stopped (HTTP).

    Raises:
        UpstreamUnavailable: an upstream server could not be started or connected.
        ValueError: HTTP on an address other than loopback without a `token`.
    """
    if http_port is not None and not token and not is_loopback(host):
        raise ValueError(f"refusing to serve MCP on {host} without a bearer token: anyone who "
                         f"reaches it could write steps and roll sessions back. Give --token "
                         f"or set ${TOKEN_ENV}")
    proxy = McpProxy(engine, upstreams, session=session, timeout=timeout,
                     session_prefix=session_prefix)
    server = proxy.server()
    async with proxy.connected():
        # Where it records: a desktop assistant starts the proxy in a folder of its own
        # choosing, where a relative default store is not the console's.
        sessions = (f"session {proxy.default_session}" if http_port is None else
                    f"one session per connection (else {proxy.default_session})")
        print(f"rewind mcp-proxy: recording the tool calls of {sessions} into "
              f"{_store_name(engine.url)}; serving {', '.join(u.name for u in upstreams)}",
              file=sys.stderr, flush=True)
        if http_port is None:
            async with stdio_server() as (read, write):
                await server.run(_AnsweringUnreadable(read, write), write,
                                 server.create_initialization_options())
            return
        import uvicorn

        app = server.streamable_http_app(host=host)
        if token:
            app = bearer_guard(app, token)
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
    host: str = "127.0.0.1",
    timeout: float | None = DEFAULT_TIMEOUT_S,
    session_prefix: str | None = None,
    token: str | None = None,
) -> int:
    """The `rewind mcp-proxy` command (see `engine.cli`); returns the exit code."""
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
    if session:
        try:  # here, not on every call: each would fail with "Internal server error"
            validate_session_id(session)
        except InvalidSessionId as exc:
            print(f"rewind mcp-proxy: --session: {exc}", file=sys.stderr)
            return 2
    token = token or os.environ.get(TOKEN_ENV) or None
    if http_port is not None and not token and not is_loopback(host):
        print(f"rewind mcp-proxy: refusing to serve MCP on {host} without a bearer token: "
              f"anyone who reaches it could write steps and roll sessions back. Give --token or "
              f"set ${TOKEN_ENV}", file=sys.stderr)
        return 2
    if http_port is not None and not token:
        print(f"rewind mcp-proxy: warning: no bearer token (--token or ${TOKEN_ENV}); any "
              f"program on this machine can call the tools behind {host}:{http_port}",
              file=sys.stderr)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("mcp.client.stdio").addFilter(_one_line_per_stray_line)
    with Engine.open(store) as engine:
        try:
            anyio.run(lambda: serve(engine, upstreams, session=session, http_port=http_port,
                                    host=host, timeout=timeout, session_prefix=session_prefix,
                                    token=token))
        except UpstreamUnavailable as exc:
            print(f"rewind mcp-proxy: {exc}", file=sys.stderr)
            return 1
    return 0


def _store_name(url: str) -> str:
    """The store's URL (the password masked already), with the folder a relative SQLite path
    starts from: a desktop assistant picks the proxy's working folder."""
    lowered = url.lower()
    if lowered.startswith("sqlite:///") and not lowered.startswith("sqlite:////") and (
            ":memory:" not in lowered):
        return f"{url} (a path relative to {os.getcwd()})"
    return url


def describe(result: types.CallToolResult) -> str:
    """A one-line summary of a tool result (for logs and examples)."""
    return json.dumps(
        {"is_error": bool(result.is_error), "text": _text(result)[:200]}, ensure_ascii=False
    )
