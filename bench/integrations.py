"""Overhead of a guarded tool call through each integration, against the bare call, same run.

For each integration the same tool is called N times bare and N times through Rewind's guard,
interleaved (bare, guarded, bare, …) so both see the same machine load; each call has new
arguments, so no loop is flagged and every guarded call takes the full path: write-ahead
snapshot, step record, loop check, outcome. ``overhead`` is the median guarded call minus the
median bare call (target: under 1 ms on SQLite).

- engine: ``with session.step(...)`` around a plain function (the core every integration uses);
- LangGraph: `LoopGuard.wrap_tool_call` around a `ToolNode`-style executor (the hook
  `RewindToolNode` installs), for a checkpointed thread;
- OpenAI Agents SDK: a `function_tool`'s ``on_invoke_tool`` guarded by `ToolGuard` vs the
  tool's own;
- MCP proxy: `McpProxy.call` vs the upstream client's ``call_tool``, the upstream an in-process
  MCP server (no subprocess, so the figure is the proxy's own cost, not the pipe's).

    python bench/integrations.py [--calls N] [--store URL]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
# bench/langgraph.py sits beside this file: keep `import langgraph` from finding it.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
sys.path.insert(0, os.path.dirname(HERE))

from engine import Engine  # noqa: E402

Row = tuple[str, list[float], list[float]]


def lookup_result(order: str) -> str:
    return f"order {order}: shipped on 2025-01-0{len(order) % 9 + 1}, 2 parcels, DHL"


def interleave(calls: int, bare: Callable[[int], Any], guarded: Callable[[int], Any]):
    b, g = [], []
    for i in range(calls):
        t0 = time.perf_counter()
        bare(i)
        t1 = time.perf_counter()
        guarded(i)
        t2 = time.perf_counter()
        b.append(t1 - t0)
        g.append(t2 - t1)
    return b, g


async def ainterleave(
    calls: int, bare: Callable[[int], Awaitable[Any]], guarded: Callable[[int], Awaitable[Any]]
):
    b, g = [], []
    for i in range(calls):
        t0 = time.perf_counter()
        await bare(i)
        t1 = time.perf_counter()
        await guarded(i)
        t2 = time.perf_counter()
        b.append(t1 - t0)
        g.append(t2 - t1)
    return b, g


PER_SESSION = 200
"""Calls per session (a session's hard step budget stops it at 500)."""


def bench_engine(engine: Engine, calls: int) -> Row:
    sessions = [engine.session(f"bench-engine-{k}") for k in range(calls // PER_SESSION + 1)]

    def guarded(i: int) -> None:
        with sessions[i // PER_SESSION].step("lookup", {"order": f"A-{i}"}) as call:
            call.ok(lookup_result(f"A-{i}"))

    return ("engine step", *interleave(calls, lambda i: lookup_result(f"A-{i}"), guarded))


def bench_langgraph(engine: Engine, calls: int) -> Row | None:
    try:
        from langchain_core.messages import ToolMessage

        from engine.integrations.langgraph import LoopGuard
    except ImportError:
        return None
    guard = LoopGuard(engine)

    class Request:  # what ToolNode hands its wrap_tool_call hook
        def __init__(self, i: int):
            self.tool_call = {"name": "lookup", "args": {"order": f"A-{i}"}, "id": f"c{i}"}
            self.runtime = type(
                "Runtime",
                (),
                {"config": {"configurable": {"thread_id": f"bench-langgraph-{i // PER_SESSION}"}}},
            )()

    def execute(request: Request) -> ToolMessage:
        order = request.tool_call["args"]["order"]
        return ToolMessage(lookup_result(order), tool_call_id=request.tool_call["id"])

    return (
        "LangGraph LoopGuard",
        *interleave(
            calls,
            lambda i: execute(Request(i)),
            lambda i: guard.wrap_tool_call(Request(i), execute),
        ),
    )


def bench_openai_agents(engine: Engine, calls: int) -> Row | None:
    try:
        from agents import function_tool
        from agents.tool_context import ToolContext

        from engine.integrations.openai_agents import RewindSession, ToolGuard
    except ImportError:
        return None

    @function_tool
    def lookup(order: str) -> str:
        """Look an order up."""
        return lookup_result(order)

    guarded_tools = [
        ToolGuard(RewindSession(engine, f"bench-openai-agents-{k}")).tool(lookup)
        for k in range(calls // PER_SESSION + 1)
    ]

    def ctx(i: int) -> tuple[Any, str]:
        arguments = f'{{"order": "A-{i}"}}'
        return ToolContext(
            context=None, tool_name="lookup", tool_call_id=f"c{i}", tool_arguments=arguments
        ), arguments

    async def bare(i: int) -> Any:
        return await lookup.on_invoke_tool(*ctx(i))

    async def guarded(i: int) -> Any:
        return await guarded_tools[i // PER_SESSION].on_invoke_tool(*ctx(i))

    return ("OpenAI Agents ToolGuard", *asyncio.run(ainterleave(calls, bare, guarded)))


def bench_mcp(engine: Engine, calls: int) -> Row | None:
    try:
        from mcp import Client
        from mcp.server.mcpserver import MCPServer

        from engine.integrations.mcp_proxy import McpProxy, Upstream
    except ImportError:
        return None
    server = MCPServer("bench")

    @server.tool()
    def lookup(order: str) -> str:
        """Look an order up."""
        return lookup_result(order)

    async def run() -> tuple[list[float], list[float]]:
        async with Client(server) as client:
            proxy = McpProxy(engine, [Upstream(client=client)])
            sessions = [engine.session(f"bench-mcp-{k}") for k in range(calls // PER_SESSION + 1)]
            await proxy.on_list_tools(None, None)

            async def bare(i: int) -> Any:
                return await client.call_tool("lookup", {"order": f"A-{i}"})

            async def guarded(i: int) -> Any:
                return await proxy.call(sessions[i // PER_SESSION], "lookup", {"order": f"A-{i}"})

            return await ainterleave(calls, bare, guarded)

    return ("MCP proxy", *asyncio.run(run()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400, help="calls per integration")
    parser.add_argument("--store", default=None, help="store URL (default: a SQLite file)")
    args = parser.parse_args(argv)
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        url = args.store or f"sqlite:///{tmp}/bench.db"
        rows: list[Row] = []
        with Engine.open(url) as engine:
            for bench in (bench_engine, bench_langgraph, bench_openai_agents, bench_mcp):
                row = bench(engine, args.calls)
                if row is None:
                    print(f"{bench.__name__}: skipped (the integration's extra is not installed)")
                    continue
                rows.append(row)
            store = engine.store.url
    headers = [
        "integration",
        "bare µs",
        "guarded µs",
        "overhead µs",
        "p90 guarded µs",
        "under 1 ms",
    ]
    table = []
    for name, bare, guarded in rows:
        overhead = statistics.median(guarded) - statistics.median(bare)
        p90 = statistics.quantiles(guarded, n=10)[-1]
        table.append(
            [
                name,
                f"{statistics.median(bare) * 1e6:.0f}",
                f"{statistics.median(guarded) * 1e6:.0f}",
                f"{overhead * 1e6:.0f}",
                f"{p90 * 1e6:.0f}",
                "yes" if overhead < 1e-3 else "NO",
            ]
        )
    widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(headers)]
    print(f"\n{args.calls} calls per integration on {store}; medians, same run\n")
    print(
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w)
            for i, (h, w) in enumerate(zip(headers, widths, strict=True))
        )
    )
    for r in table:
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
