"""What `rewind mcp-proxy` costs a tool call, against a plain relay, with a real upstream server.

Three paths to the same upstream MCP server (``tests/mcp_servers/receipts.py``, its ``echo``
tool, started over stdio as a process of its own), each a client connected over stdio as a
desktop assistant connects to its servers:

- ``direct``: the client starts the upstream itself (no hop);
- ``relay`` (the baseline): the client starts a plain relay (this file with ``--relay``: the
  SDK's lowlevel server whose tools/list and tools/call forward to an SDK client of the
  upstream, nothing else), which starts the upstream;
- ``proxy``: the client starts ``rewind mcp-proxy --store sqlite:///... -- python receipts.py``
  as users run it (default settings, a SQLite file store), which starts the upstream.

Each of N calls (new arguments each, so no loop) goes through the three paths in turn, so they
share the machine's load. Printed: the median and p90 round trip per path, and the proxy's cost
over the relay (the median of the per-call differences) and as a ratio.

    python bench/mcp_proxy.py [--calls N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
UPSTREAM = os.path.join(ROOT, "tests", "mcp_servers", "receipts.py")
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [ROOT,
                                                                os.environ.get("PYTHONPATH")]))}


async def relay(command: list[str]) -> None:
    """A plain MCP relay on stdio: tools/list and tools/call forwarded to the upstream started
    by `command`, with the SDK's own pieces only (what a user writes to put a hop between a
    client and a server)."""
    import mcp_types as types
    from mcp import Client, StdioServerParameters
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(ENV))
    async with Client(params) as upstream:

        async def on_list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return await upstream.list_tools()

        async def on_call_tool(ctx: Any, params: types.CallToolRequestParams
                               ) -> types.CallToolResult:
            return await upstream.call_tool(params.name, dict(params.arguments or {}))

        server: Server[Any] = Server("relay", on_list_tools=on_list_tools,
                                     on_call_tool=on_call_tool)
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())


async def measure(calls: int, store: str) -> dict[str, list[float]]:
    """Round-trip seconds of `calls` echo calls on each path, the paths called in turn."""
    from contextlib import AsyncExitStack

    from mcp import Client, StdioServerParameters

    upstream = [sys.executable, UPSTREAM]
    paths = {
        "direct": StdioServerParameters(command=sys.executable, args=[UPSTREAM], env=ENV),
        "relay": StdioServerParameters(command=sys.executable,
                                       args=[os.path.abspath(__file__), "--relay", "--", *upstream],
                                       env=ENV),
        "proxy": StdioServerParameters(command=sys.executable,
                                       args=["-m", "engine.cli", "mcp-proxy", "--store", store,
                                             "--session", "bench-mcp", "--", *upstream],
                                       env=ENV, cwd=ROOT),
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    async with AsyncExitStack() as stack:
        clients = {name: await stack.enter_async_context(Client(params))
                   for name, params in paths.items()}
        for client in clients.values():
            await client.list_tools()
            for i in range(20):  # warm-up: imports, the store's first writes, page caches
                await client.call_tool("echo", {"text": f"warm {i}"})
        for i in range(calls):
            for name, client in clients.items():
                t0 = time.perf_counter()
                result = await client.call_tool("echo", {"text": f"order A-{i}"})
                times[name].append(time.perf_counter() - t0)
                if result.is_error:
                    raise SystemExit(f"{name}: the call failed: {result.content}")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--relay", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("command", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.relay:
        asyncio.run(relay(args.command))
        return 0
    with tempfile.TemporaryDirectory(prefix="rewind-bench-mcp-") as tmp:
        times = asyncio.run(measure(args.calls, f"sqlite:///{tmp}/mcp.db"))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{args.calls} tools/call round trips per path over stdio, the paths in turn, a real "
          f"upstream process (tests/mcp_servers/receipts.py echo); {os.cpu_count()} cores, "
          f"load average {load}; base: a plain relay (the SDK's server forwarding to its client)")
    base = statistics.median(times["relay"])
    print(f"{'path':<8} {'median ms':>10} {'p90 ms':>8} {'×base':>7}")
    for name, samples in times.items():
        ordered = sorted(samples)
        median = statistics.median(ordered)
        p90 = ordered[int(0.9 * len(ordered))]
        print(f"{name:<8} {median * 1000:10.2f} {p90 * 1000:8.2f} {median / base:6.2f}x")
    over = statistics.median(p - r for p, r in zip(times["proxy"], times["relay"], strict=True))
    print(f"\nthe proxy over the relay, median of the per-call differences: {over * 1000:.2f} ms")
    return 0


if __name__ == "__main__":
    if "--relay" in sys.argv:
        raise SystemExit(main())
    sys.path.insert(0, ROOT)
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
