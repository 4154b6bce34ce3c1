"""The upstream MCP servers of `rewind mcp-proxy`: how each is started, held and read.

Each upstream is held by a task of its own (`Upstream.hold`), so whatever happens to one server
(it exits, its transport fails) ends that connection only: the proxy keeps serving, and calls to
the lost server get an error result saying what happened (`Upstream.failure`).

A stdio server inherits the proxy's whole environment (as ``env``, ``timeout`` and ``sudo -E``
pass theirs on), with the variables its config entry sets on top: an MCP client configured the
proxy's environment for the server behind it.

What an upstream sends is read defensively (`repairing`): a line the SDK cannot parse (a lone
surrogate such as ``"\\ud800"``, which has no UTF-8 form, a byte that is not UTF-8, or a result
that is not an object) would be dropped by the SDK and leave its call waiting forever; it
becomes a JSON-RPC error for that request instead, naming what was wrong (see `wire`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from engine.integrations.mcp.wire import error_for, unreadable

__all__ = ["Upstream", "load_config", "repairing"]

log = logging.getLogger("rewind.mcp_proxy")


class _Params(StdioServerParameters):
    """The SDK's stdio parameters, decoding with ``surrogateescape`` (its own field allows only
    strict, ignore or replace): a byte that is not UTF-8 then reaches `repairing` as a lone
    surrogate, which tells it apart from one the server escaped itself, instead of killing the
    SDK's reader (strict) or passing for text (replace)."""

    encoding_error_handler: str = "surrogateescape"  # type: ignore[assignment]


class _Repairing:
    """A read stream that turns an unparseable response into a JSON-RPC error for its request."""

    def __init__(self, inner: Any, name: str):
        self._inner = inner
        self._name = name

    def _fix(self, item: Any) -> Any:
        if not isinstance(item, Exception):
            return item
        found = unreadable(item)
        if found is None or found.id is None:
            return item  # no request waits for it: the SDK logs it and reads on
        message = f"the upstream server {self._name} answered with {found.what}"
        return SessionMessage(error_for(found.id, types.INTERNAL_ERROR, message))

    async def receive(self) -> Any:
        return self._fix(await self._inner.receive())

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _Repairing:
        return self

    async def __anext__(self) -> Any:
        return self._fix(await self._inner.__anext__())

    async def __aenter__(self) -> _Repairing:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@contextlib.asynccontextmanager
async def repairing(transport: Any, name: str) -> AsyncIterator[Any]:
    """`transport` (an SDK transport) whose read stream is `_Repairing`."""
    async with transport as (read, write):
        yield _Repairing(read, name), write


@dataclass
class Upstream:
    """One upstream MCP server: a command on stdio or a streamable HTTP URL."""

    command: Sequence[str] = ()
    """The command line of a stdio server (empty for an HTTP one)."""
    url: str | None = None
    """The streamable HTTP endpoint of an HTTP server."""
    env: dict[str, str] | None = None
    """Environment of a stdio server on top of the proxy's own (which it inherits whole)."""
    client: Any = field(default=None, repr=False)
    """The connected `mcp.Client`, while the proxy runs."""
    failure: str | None = None
    """Why the connection ended, once it did (None while it serves)."""
    stale: bool = True
    """True until the proxy listed this server's tools, and again after it said its list
    changed (notifications/tools/list_changed)."""
    on_tools_changed: Callable[[], Awaitable[None]] | None = field(default=None, repr=False)
    """Awaited when the server says its tool list changed (the proxy tells its clients)."""
    _closing: anyio.Event | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.url or " ".join(self.command)

    def target(self) -> Any:
        """What the SDK's `Client` connects to: the URL, or the stdio parameters."""
        if self.url:
            return self.url
        env = {**os.environ, **(self.env or {})}
        return _Params(command=self.command[0], args=list(self.command[1:]), env=env)

    def transport(self) -> Any:
        """The SDK transport to this server, read through `repairing`."""
        target = self.target()
        if isinstance(target, str):
            inner = streamable_http_client(target)
        else:
            from mcp.client.stdio import stdio_client

            inner = stdio_client(target)
        return repairing(inner, self.name)

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.stale = True
            if self.on_tools_changed is not None:
                await self.on_tools_changed()

    async def hold(self, timeout: float | None, ready: anyio.Event) -> None:
        """Connect, set `ready`, and keep the connection until `close` (run as a task of its
        own: a failure ends this connection, never the proxy). Records `failure`."""
        self._closing = anyio.Event()
        try:
            async with Client(
                self.transport(), read_timeout_seconds=timeout, message_handler=self._on_message
            ) as client:
                self.client = client
                ready.set()
                await self._closing.wait()
        except Exception as exc:  # noqa: BLE001 - kept as what the calls report
            if self.failure is None and ready.is_set():  # lost while serving (a failed start
                self._lost_while_serving(describe_failure(self, exc))  # is reported by name)
            self.failure = self.failure or describe_failure(self, exc)
        finally:
            self.client = None
            if self.failure is None:
                self.failure = "the proxy closed the connection"
            ready.set()

    def close(self) -> None:
        """End `hold`."""
        if self._closing is not None:
            self._closing.set()

    def lost(self, exc: BaseException) -> None:
        """Record that the connection was lost, as `exc` says."""
        if self.failure is None:
            self._lost_while_serving(describe_failure(self, exc))

    def _lost_while_serving(self, failure: str) -> None:
        """Record `failure` and say it once on stderr: the client only sees the calls fail, and
        an operator reading the proxy's log (a desktop assistant keeps it) needs the cause."""
        self.failure = failure
        log.warning("%s; its tools answer with an error saying so until rewind mcp-proxy is "
                    "restarted", failure)


def describe_failure(upstream: Upstream, exc: BaseException) -> str:
    """One sentence on why the connection to `upstream` failed, for people."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError):
        return (f"cannot start the upstream server `{upstream.name}`: {exc.strerror or exc} "
                f"({upstream.command[0] if upstream.command else upstream.name!r}); is it "
                "installed and on PATH?")
    if isinstance(exc, PermissionError):
        return f"cannot start the upstream server `{upstream.name}`: {exc}"
    code = getattr(getattr(exc, "error", None), "code", None)
    if code == types.CONNECTION_CLOSED:
        if upstream.url:
            return f"the upstream server {upstream.url} closed the connection"
        return (f"the upstream server `{upstream.name}` exited or closed its output (its own "
                "messages, if any, are on the proxy's stderr)")
    return f"the connection to the upstream server `{upstream.name}` failed: " + (
        f"{type(exc).__name__}: {exc}")


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
