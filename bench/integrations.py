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

Then the integrations' own reads and writes against the SDKs' own stores, same run, both at
their default settings, at 10, 100 and 1,000 items (or checkpoints) of history:

- `RewindSession` vs the Agents SDK's `SQLiteSession` (a file each): ``get_items(limit=20)``,
  ``pop_item``, ``add_items`` of one item, and the stored bytes per item (the row text);
- `RewindSaver` vs LangGraph's `SqliteSaver`: ``put`` (median of the last 10) and reading the
  latest checkpoint with a fresh saver object (cold cache) on both sides (bench/langgraph.py's
  plan: a ReAct thread whose message list grows by one message per checkpoint).

    python bench/integrations.py [--calls N] [--store URL] [--no-history]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
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


HISTORY_SIZES = (10, 100, 1_000)
"""Items (or checkpoints) of history at which the integrations' reads are compared."""


def _median_us(fn: Callable[[], Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e6


def _sdk_items(n: int) -> list[dict]:
    return [{"role": "user" if i % 2 else "assistant",
             "content": f"turn {i}: " + lookup_result(f"A-{i}") * 3} for i in range(n)]


def bench_sessions_vs_sdk(tmp: str, repeat: int) -> list[list[str]] | None:
    """RewindSession vs the SDK's SQLiteSession: rows of the table (None: SDK not installed)."""
    try:
        from agents import SQLiteSession

        from engine.integrations.openai_agents import RewindSession
    except ImportError:
        return None
    rows = []
    for n in HISTORY_SIZES:
        items = _sdk_items(n)
        engine = Engine.open(f"sqlite:///{tmp}/rewind-session-{n}.db")
        sides = {
            "RewindSession": RewindSession(engine, f"chat-{n}"),
            "SQLiteSession": SQLiteSession(f"chat-{n}", f"{tmp}/sdk-session-{n}.db"),
        }
        figures = {}
        for name, session in sides.items():
            for i in range(0, n, 100):
                asyncio.run(session.add_items(items[i:i + 100]))
            get = _median_us(lambda s=session: asyncio.run(s.get_items(limit=20)), repeat)
            extra = iter(_sdk_items(repeat))
            add = _median_us(lambda s=session, e=extra: asyncio.run(s.add_items([next(e)])),
                             repeat)
            pops = min(repeat, n)
            pop = _median_us(lambda s=session: asyncio.run(s.pop_item()), pops)
            figures[name] = (get, pop, add)
        with sqlite3.connect(f"{tmp}/rewind-session-{n}.db") as db:
            (rewind_bytes,) = db.execute(
                "SELECT SUM(LENGTH(body)) FROM messages WHERE session = ?", (f"chat-{n}",)
            ).fetchone()
        with sqlite3.connect(f"{tmp}/sdk-session-{n}.db") as db:
            sdk_bytes, sdk_count = db.execute(
                "SELECT SUM(LENGTH(message_data)), COUNT(*) FROM agent_messages").fetchone()
        engine.close()
        count = n + repeat  # Rewind keeps every item added (a pop hides one); the SDK deletes
        (rg, rp, ra), (sg, sp, sa) = figures["RewindSession"], figures["SQLiteSession"]
        rows.append([f"{n:,}", f"{rg:.0f}", f"{sg:.0f}", f"{rg / sg:.1f}x", f"{rp:.0f}",
                     f"{sp:.0f}", f"{rp / sp:.1f}x", f"{ra:.0f}", f"{sa:.0f}",
                     f"{rewind_bytes / count:.0f}", f"{sdk_bytes / sdk_count:.0f}",
                     f"{(rewind_bytes / count) / (sdk_bytes / sdk_count):.2f}x"])
    return rows


def bench_savers(tmp: str) -> list[list[str]] | None:
    """RewindSaver vs LangGraph's SqliteSaver: rows of the table (None: LangGraph missing)."""
    import importlib.util

    try:
        spec = importlib.util.spec_from_file_location(
            "bench_langgraph", os.path.join(HERE, "langgraph.py"))
        assert spec is not None and spec.loader is not None
        lg = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(lg)
    except ImportError:
        return None
    rows = []
    for n in HISTORY_SIZES:
        plan = lg.checkpoints(n)
        rewind_file = os.path.join(tmp, f"rewind-saver-{n}.db")
        rewind = lg.bench_rewind(f"sqlite:///{rewind_file}", f"thread-{n}", plan, rewind_file)
        sqlite = lg.bench_sqlite_saver(os.path.join(tmp, f"lg-saver-{n}.db"), f"thread-{n}", plan)
        rp = statistics.median(rewind["times"][-10:]) * 1e6
        sp = statistics.median(sqlite["times"][-10:]) * 1e6
        rl, sl = rewind["latest"] * 1e6, sqlite["latest"] * 1e6
        rows.append([f"{n:,}", f"{rp:.0f}", f"{sp:.0f}", f"{rp / sp:.2f}x", f"{rl:.0f}",
                     f"{sl:.0f}", f"{rl / sl:.2f}x"])
    return rows


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))


def history_tables(repeat: int) -> None:
    """The integrations' reads against the SDKs' own stores, by history length."""
    with tempfile.TemporaryDirectory() as tmp:
        sessions = bench_sessions_vs_sdk(tmp, repeat)
        if sessions is None:
            print("\nRewindSession vs SQLiteSession: skipped (openai-agents is not installed)")
        else:
            print(f"\nRewindSession vs the Agents SDK's SQLiteSession, default settings, "
                  f"median µs of {repeat}; bytes: stored row text per item")
            print_table(["items", "get(20) rw", "get(20) sdk", "ratio", "pop rw", "pop sdk",
                         "ratio", "add rw", "add sdk", "B/item rw", "B/item sdk", "ratio"],
                        sessions)
        savers = bench_savers(tmp)
        if savers is None:
            print("\nRewindSaver vs SqliteSaver: skipped (langgraph is not installed)")
        else:
            print("\nRewindSaver vs LangGraph's SqliteSaver, default settings, µs; put: median "
                  "of the last 10; latest: a fresh saver reads the newest checkpoint (median of 5)")
            print_table(["checkpoints", "put rw", "put lg", "ratio", "latest rw", "latest lg",
                         "ratio"], savers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400, help="calls per integration")
    parser.add_argument("--store", default=None, help="store URL (default: a SQLite file)")
    parser.add_argument("--no-history", action="store_true",
                        help="skip the SDK-store comparisons by history length")
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
    if not args.no_history:
        history_tables(repeat=20)
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
