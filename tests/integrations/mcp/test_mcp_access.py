"""Who may reach what through `rewind mcp-proxy`: a call's ``_meta`` reaches only sessions an MCP
proxy created (or those under the operator's ``--session-prefix``), HTTP needs the bearer token,
and the proxy refuses to listen off loopback without one. Also: a call both loop-blocked and
quarantined gets a refusal."""

from __future__ import annotations

import asyncio
import sys
import urllib.error
import urllib.request

import pytest
from support.paths import ROOT

pytest.importorskip("mcp", reason="needs the mcp extra")

from mcp import Client  # noqa: E402
from test_mcp_proxy import (  # noqa: E402
    CROP,
    SERVER,
    free_port,
    process,
    proxy_params,
    texts,
)

from engine import Engine  # noqa: E402

ROOT = str(ROOT)


def _victim(store: str) -> None:
    with Engine.open(store) as engine:
        victim = engine.session("victim-chat-42", meta={"tenant": "acme"})
        victim.append_message("user", "my order please")


def test_meta_reaches_only_sessions_a_proxy_created(tmp_path):
    store = f"sqlite:///{tmp_path}/meta.db"
    _victim(store)

    async def scenario(*extra: str):
        async with Client(proxy_params(store, "--session", "own", *extra, "--", sys.executable,
                                       SERVER)) as client:
            out = []
            for i, sid in enumerate(
                    ("victim-chat-42", "mcp-new-conversation", "own", "mcp-new-conversation")):
                out.append(await client.call_tool("echo", {"text": f"{sid} {extra} {i}"},
                                                  meta={"rewind/session": sid}))
            return out

    victim, new, own, again = asyncio.run(scenario())
    assert victim.is_error and texts(victim)[0].startswith("Rewind refused this call")
    assert "victim-chat-42" in texts(victim)[0] and "--session-prefix" in texts(victim)[0]
    assert not new.is_error and not own.is_error and not again.is_error
    with Engine.open(store) as engine:
        assert engine.get_session("victim-chat-42").steps() == []
        assert len(engine.get_session("mcp-new-conversation").steps()) == 2

    # a session another proxy created stays reachable to the next proxy (one conversation
    # across connections); a foreign one only when the operator opts in by prefix
    victim, new, _, _ = asyncio.run(scenario("--session-prefix", "victim-"))
    assert not victim.is_error and not new.is_error
    with Engine.open(store) as engine:
        assert [s.tool for s in engine.get_session("victim-chat-42").steps()] == ["echo"]
        assert len(engine.get_session("mcp-new-conversation").steps()) == 4


def _post(url: str, token: str | None) -> int:
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    headers = {"content-type": "application/json",
               "accept": "application/json, text/event-stream"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_http_needs_the_bearer_token(tmp_path):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    store = f"sqlite:///{tmp_path}/http.db"
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"

    async def scenario():
        http = httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret"})
        async with http, Client(streamable_http_client(url, http_client=http)) as client:
            return await client.call_tool("echo", {"text": "with the token"})

    with process("-m", "engine.cli", "mcp-proxy", "--store", store, "--session", "h",
                 "--token", "s3cret", "--http", str(port), "--", sys.executable, SERVER,
                 port=port):
        assert _post(url, None) == 401
        assert _post(url, "wrong") == 401
        echoed = asyncio.run(scenario())
    assert not echoed.is_error and "with the token" in texts(echoed)[0]
    with Engine.open(store) as engine:
        assert [s.tool for s in engine.get_session("h").steps()] == ["echo"]


def test_http_off_loopback_needs_a_token(tmp_path, capsys, monkeypatch):
    from engine.cli.parser import main

    monkeypatch.delenv("REWIND_MCP_TOKEN", raising=False)
    code = main(["mcp-proxy", "--store", f"sqlite:///{tmp_path}/x.db", "--http", "8765",
                 "--address", "0.0.0.0", "--", sys.executable, SERVER])
    assert code == 2
    err = capsys.readouterr().err
    assert "refusing to serve MCP on 0.0.0.0 without a bearer token" in err
    assert "--token" in err and "REWIND_MCP_TOKEN" in err


def test_a_call_both_loop_blocked_and_quarantined_is_refused(tmp_path):
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from engine.integrations.mcp import McpProxy, Upstream

    server = MCPServer("receipts")

    @server.tool()
    def image_crop(x: int, y: int, width: int, height: int) -> str:
        """Crop."""
        raise ToolError("invalid slice")

    async def scenario():
        async with Client(server) as client:
            with Engine.open(f"sqlite:///{tmp_path}/bq.db") as engine:
                proxy = McpProxy(engine, [Upstream(client=client)], session="bq")
                session = proxy.session_for(None)
                for _ in range(3):  # the third completes the loop: the call is blocked now
                    await proxy.call(session, "image_crop", CROP)
                engine.quarantine("image_crop", actor="alice", reason="broken crops")
                return await proxy.call(session, "image_crop", CROP)

    refused = asyncio.run(scenario())
    assert refused.is_error and texts(refused)[0].startswith("Rewind refused this call")


def test_meta_naming_an_invalid_session_id_is_refused_with_the_reason(tmp_path):
    """Under --session-prefix, a _meta id no store takes (over 200 characters) got "Internal
    server error"; it is refused, saying what is wrong with the id, and the proxy serves on."""
    store = f"sqlite:///{tmp_path}/invalid.db"

    async def scenario():
        async with Client(proxy_params(store, "--session", "own", "--session-prefix", "mcp-",
                                       "--", sys.executable, SERVER)) as client:
            bad = await client.call_tool("echo", {"text": "x"},
                                         meta={"rewind/session": "mcp-" + "x" * 300})
            good = await client.call_tool("echo", {"text": "y"})
            return bad, good

    bad, good = asyncio.run(scenario())
    assert bad.is_error and texts(bad)[0].startswith(
        "Rewind refused this call: the session named in _meta is not a session id (a session "
        "id must be at most 200 characters")
    assert not good.is_error
