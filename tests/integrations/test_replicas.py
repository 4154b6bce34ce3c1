"""Two of each process on one Redis store take the same fleet, as a platform runs them behind a
load balancer: two MCP proxies serving one conversation's calls in turn, and two OTLP receivers
each getting part of one agent's spans. Each process has its own engine on the store (no memory
shared but the store)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from support.redis_servers import REDIS_BACKENDS

from engine import Engine


@pytest.fixture(params=[pytest.param(name, marks=pytest.mark.redis) for name in REDIS_BACKENDS])
def redis_url(request, tmp_path) -> str:
    return REDIS_BACKENDS[request.param](tmp_path, request)


def two(open_engine: Callable[..., Engine], url: str) -> tuple[Engine, Engine]:
    return open_engine(url, freeze=None), open_engine(url, freeze=None)


# -- two MCP proxies ----------------------------------------------------------------------------
def test_two_mcp_proxies_take_one_conversation_in_turn(redis_url, open_engine):
    """The calls of one conversation, answered by either proxy: one session with every call in
    order, the loop flagged once at the third identical failure whichever proxy saw it, the call
    that would continue it refused by the other proxy too (the tool not called), and the notice
    given once."""
    pytest.importorskip("mcp")
    import mcp_types as types
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    from engine.integrations.mcp import McpProxy, Upstream

    server = MCPServer("images")
    calls: list[dict] = []

    @server.tool()
    def image_crop(x: int) -> str:
        """Crop an image."""
        calls.append({"x": x})
        raise ValueError("invalid slice")

    first, second = two(open_engine, redis_url)
    sid = "mcp-shared"

    async def scenario() -> list[Any]:
        async with Client(server) as client:
            proxies = [McpProxy(first, [Upstream(client=client)], session="mcp-a"),
                       McpProxy(second, [Upstream(client=client)], session="mcp-b")]
            params = types.CallToolRequestParams(name="image_crop", arguments={"x": 10},
                                                 _meta={"rewind/session": sid})
            return [await proxies[i % 2].on_call_tool(None, params) for i in range(5)]

    results = asyncio.run(scenario())
    assert all(r.is_error for r in results)
    text = ["\n".join(c.text for c in r.content) for r in results]
    assert "completed a loop" in text[2]  # the third identical failure, its second on proxy A
    assert all(t.startswith("Rewind refused this call") for t in text[3:])  # also proxy B
    # the client hears of the rollback once, with the call that completed the loop, not again
    # from the other proxy
    assert [i for i, t in enumerate(text) if "Rewind notice:" in t] == [2]
    assert len(calls) == 3  # the refused calls never reached the tool
    for engine in (first, second):  # both processes see one session and one loop
        steps = engine.get_session(sid).steps()
        assert [(s.n, s.tool, str(s.status.value)) for s in steps] == [
            (1, "image_crop", "error"), (2, "image_crop", "error"), (3, "image_crop", "error"),
            (4, "image_crop", "refused"), (5, "image_crop", "refused")]
        assert [s.n for s in steps if s.verdict] == [3]
        assert steps[2].verdict["evidence_steps"] == [1, 2, 3]
        assert [a.actor for a in engine.audit(session=sid, action="rollback")] == ["rewind"]
        [info] = [i for i in engine.sessions() if i.id == sid]
        assert info.loops == 1 and info.rollbacks == 1


# -- two OTLP receivers -------------------------------------------------------------------------
def test_two_otlp_receivers_take_one_agents_spans(redis_url, open_engine):
    """An agent's exporter load-balanced over two receivers: each gets every other span of one
    conversation; the session holds every tool call once, in start order, flagged once."""
    pytest.importorskip("opentelemetry.proto")
    from support.otlp_spans import gen_ai_tool, send

    from engine.integrations.otlp import IngestConfig, Receiver, ServerConfig

    first, second = two(open_engine, redis_url)
    config = IngestConfig(settle_s=0.0)
    with Receiver(first, ServerConfig(address="127.0.0.1", port=0), config) as a, \
            Receiver(second, ServerConfig(address="127.0.0.1", port=0), config) as b:
        for n in range(1, 6):
            send(a if n % 2 else b, gen_ai_tool(n, error="invalid slice"))
        send(a, gen_ai_tool(1, error="invalid slice"))  # a redelivery, to the other receiver
    for engine in (first, second):  # both processes see one session, one loop
        assert [(s.id, s.loops) for s in engine.sessions()] == [("otel-conv-1", 1)]
        steps = engine.get_session("otel-conv-1").steps()
        assert [(s.n, s.tool, s.error) for s in steps] == [
            (n, "image_crop", "ValueError: invalid slice") for n in range(1, 6)]
        assert [(s.n, s.verdict["rule"]) for s in steps if s.verdict] == [(3, "exact_repeat")]
