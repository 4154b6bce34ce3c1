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

Then the integrations' own reads and writes against the SDKs' own stores, as their users run
them, same run, calls alternating between the two sides: both on a SQLite file in WAL mode at
the same ``synchronous`` level (NORMAL, Rewind's default; ``--synchronous FULL`` runs both at
FULL), both sides' objects reused (warm) or both opened anew (fresh):

- `RewindSaver` vs LangGraph's `SqliteSaver` on threads of 10, 100 and 1,000 checkpoints:
  bench/langgraph.py's table (put, warm read, open + read, bytes stored), measured by that
  bench's code;
- `RewindSession` vs the Agents SDK's `SQLiteSession` (a file each) at 10 to 10,000 items:
  ``get_items(limit=20)``, ``get_items()`` (the whole history), ``pop_item``, ``add_items`` of
  one item, and the stored bytes per item (the row text), on chat items; then full reads of
  histories shaped as the SDK's `Runner` stores them (per tool turn: the user's message, a
  function call, its output, the answer as an output message) at 1,000 and 10,000 items.

The tables are printed, and kept in bench/RESULTS.md in this bench's section
(``REWIND_BENCH_RECORD=0``: not).

    python bench/integrations.py [--calls N] [--store URL] [--no-history] [--repeat N]
    python bench/integrations.py --history-only {all,sessions,savers} [--synchronous FULL]
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
            self.tool_call: dict[str, Any] = {
                "name": "lookup", "args": {"order": f"A-{i}"}, "id": f"c{i}"}
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

        from engine.integrations.mcp import McpProxy, Upstream
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


SESSION_SIZES = (10, 100, 1_000, 10_000)
"""Items of history at which the sessions are compared (10,000: a full read of a long chat)."""

def _interleaved_us(a: Callable[[], Any], b: Callable[[], Any], repeat: int
                    ) -> tuple[float, float]:
    """Median µs of `a` and of `b`, called alternately so both see the same machine load."""
    sa, sb = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        a()
        t1 = time.perf_counter()
        b()
        t2 = time.perf_counter()
        sa.append(t1 - t0)
        sb.append(t2 - t1)
    return statistics.median(sa) * 1e6, statistics.median(sb) * 1e6


def _sdk_items(n: int, tag: str = "turn") -> list[dict]:
    return [{"role": "user" if i % 2 else "assistant",
             "content": f"{tag} {i}: " + lookup_result(f"A-{i}") * 3} for i in range(n)]


def _runner_items(n: int) -> list[dict]:
    """`n` items shaped as the SDK's `Runner` stores them, a tool turn at a time: the user's
    message, the model's function call, the tool's output, the model's answer (an output
    message whose content is a list of parts)."""
    out: list[dict] = []
    for i in range(n // 4 + 1):
        text = lookup_result(f"A-{i}")
        out += [
            {"role": "user", "content": f"where is order A-{i}? " + text},
            {"type": "function_call", "call_id": f"call_{i}", "name": "lookup",
             "arguments": f'{{"order": "A-{i}"}}', "id": f"fc_{i}", "status": "completed"},
            {"type": "function_call_output", "call_id": f"call_{i}", "output": text * 2},
            {"id": f"msg_{i}", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": f"It left: {text}", "annotations": [],
                          "logprobs": []}]},
        ]
    return out[:n]


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def _us(value: float) -> str:
    return f"{value:,.0f}"


async def _ainterleaved_us(a: Callable[[], Awaitable[Any]], b: Callable[[], Awaitable[Any]],
                           repeat: int) -> tuple[float, float]:
    """`_interleaved_us` for coroutines, in the running event loop."""
    sa, sb = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        await a()
        t1 = time.perf_counter()
        await b()
        t2 = time.perf_counter()
        sa.append(t1 - t0)
        sb.append(t2 - t1)
    return statistics.median(sa) * 1e6, statistics.median(sb) * 1e6


async def _session_figures(rw: Any, sdk: Any, n: int, repeat: int
                           ) -> list[tuple[float, float]]:
    """(get(20), get all, pop, add one) median µs of both sessions after `n` items, in one
    event loop (the SDK's session runs SQLite in the loop's executor threads, each with its
    connection: a loop per call would pay a new thread and connection every time)."""
    items: Any = _sdk_items(n)
    for i in range(0, n, 500):
        await rw.add_items(items[i:i + 500])
        await sdk.add_items(items[i:i + 500])
    get = await _ainterleaved_us(lambda: rw.get_items(limit=20),
                                 lambda: sdk.get_items(limit=20), repeat)
    full = await _ainterleaved_us(rw.get_items, sdk.get_items,
                                  max(3, min(repeat, 200_000 // max(n, 1))))
    ra, sa = iter(_sdk_items(repeat, "more")), iter(_sdk_items(repeat, "more"))
    add = await _ainterleaved_us(lambda: rw.add_items([next(ra)]),
                                 lambda: sdk.add_items([next(sa)]), repeat)
    pop = await _ainterleaved_us(rw.pop_item, sdk.pop_item, min(repeat, n))
    return [get, full, pop, add]


RUNNER_SIZES = (1_000, 10_000)
"""Items of the Runner-shaped histories whose full reads are compared."""


def bench_runner_reads(tmp: str, repeat: int, synchronous: str = "NORMAL"
                       ) -> list[list[str]] | None:
    """Full reads of Runner-shaped histories (`_runner_items`), RewindSession vs SQLiteSession:
    rows of the table (None: SDK not installed)."""
    try:
        from bench.common import sdk_session_class
        from engine.integrations.openai_agents import RewindSession

        sdk_session = sdk_session_class(synchronous)
    except ImportError:
        return None

    async def figures(rw: Any, sdk: Any, items: list[dict]) -> tuple[float, float]:
        for i in range(0, len(items), 500):
            await rw.add_items(items[i:i + 500])
            await sdk.add_items(items[i:i + 500])
        assert await rw.get_items() == await sdk.get_items()
        return await _ainterleaved_us(rw.get_items, sdk.get_items,
                                      max(3, min(repeat, 200_000 // len(items))))

    rows = []
    for n in RUNNER_SIZES:
        rewind_file, sdk_file = f"{tmp}/rs-runner-{n}.db", f"{tmp}/sdk-runner-{n}.db"
        engine = Engine.open(f"sqlite:///{rewind_file}?synchronous={synchronous}")
        full = asyncio.run(figures(RewindSession(engine, f"run-{n}"),
                                   sdk_session(f"run-{n}", sdk_file), _runner_items(n)))
        engine.close()
        with sqlite3.connect(rewind_file) as db:
            (rewind_bytes,) = db.execute("SELECT SUM(LENGTH(body)) FROM messages").fetchone()
        with sqlite3.connect(sdk_file) as db:
            (sdk_bytes,) = db.execute(
                "SELECT SUM(LENGTH(message_data)) FROM agent_messages").fetchone()
        rows.append([f"{n:,}", _us(full[0]), _us(full[1]), _ratio(*full),
                     f"{rewind_bytes / n:.0f}", f"{sdk_bytes / n:.0f}",
                     _ratio(rewind_bytes, sdk_bytes)])
    return rows


def bench_sessions_vs_sdk(tmp: str, repeat: int, synchronous: str = "NORMAL"
                          ) -> list[list[str]] | None:
    """RewindSession vs the SDK's SQLiteSession: rows of the table (None: SDK not installed)."""
    try:
        from bench.common import sdk_session_class
        from engine.integrations.openai_agents import RewindSession

        sdk_session = sdk_session_class(synchronous)
    except ImportError:
        return None
    rows = []
    for n in SESSION_SIZES:
        rewind_file, sdk_file = f"{tmp}/rs-{n}.db", f"{tmp}/sdk-{n}.db"
        engine = Engine.open(f"sqlite:///{rewind_file}?synchronous={synchronous}")
        get, full, pop, add = asyncio.run(_session_figures(
            RewindSession(engine, f"chat-{n}"), sdk_session(f"chat-{n}", sdk_file), n, repeat))
        engine.close()
        with sqlite3.connect(rewind_file) as db:
            (rewind_bytes,) = db.execute(
                "SELECT SUM(LENGTH(body)) FROM messages WHERE session = ?", (f"chat-{n}",)
            ).fetchone()
        with sqlite3.connect(sdk_file) as db:
            sdk_bytes, sdk_count = db.execute(
                "SELECT SUM(LENGTH(message_data)), COUNT(*) FROM agent_messages").fetchone()
        # Rewind keeps every item added (a pop hides one); the SDK deletes popped rows
        per_rw, per_sdk = rewind_bytes / (n + repeat), sdk_bytes / sdk_count
        rows.append([f"{n:,}",
                     _us(get[0]), _us(get[1]), _ratio(*get),
                     _us(full[0]), _us(full[1]), _ratio(*full),
                     _us(pop[0]), _us(pop[1]), _ratio(*pop),
                     _us(add[0]), _us(add[1]), _ratio(*add),
                     f"{per_rw:.0f}", f"{per_sdk:.0f}", _ratio(per_rw, per_sdk)])
    return rows


def _bench_langgraph_module() -> Any:
    """bench/langgraph.py (its name would shadow the package if imported as a module)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_langgraph",
                                                  os.path.join(HERE, "langgraph.py"))
    assert spec is not None and spec.loader is not None
    lg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(lg)
    return lg


def bench_savers(tmp: str, repeat: int, synchronous: str = "NORMAL"
                 ) -> list[list[str]] | None:
    """RewindSaver vs LangGraph's SqliteSaver: rows of bench/langgraph.py's table (None:
    LangGraph missing), measured by that bench's `compare` (one implementation of the
    comparison: the same threads, calls alternating, SqliteSaver on one reused connection)."""
    try:
        lg = _bench_langgraph_module()
    except ImportError:
        return None
    return [lg.row(lg.compare(tmp, n, repeat, synchronous)) for n in lg.SIZES]  # timings


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))


RUNNER_HEADERS = ["items", "get all rw", "get all sdk", "ratio", "B/item rw", "B/item sdk",
                  "ratio"]
SESSION_HEADERS = ["items", "get(20) rw", "get(20) sdk", "ratio", "get all rw", "get all sdk",
                   "ratio", "pop rw", "pop sdk", "ratio", "add rw", "add sdk", "ratio",
                   "B/item rw", "B/item sdk", "ratio"]

def history_tables(repeat: int, only: str | None = None, synchronous: str = "NORMAL") -> None:
    """The integrations against the SDKs' own stores, by history length, at equal durability
    (both WAL, both at `synchronous`)."""
    print(f"\nBoth sides WAL + synchronous={synchronous}, calls alternating, µs (medians). Ratio: "
          "Rewind / the SDK's store (under 1: Rewind is faster).")
    with tempfile.TemporaryDirectory() as tmp:
        if only in (None, "savers"):
            savers = bench_savers(tmp, repeat, synchronous)
            if savers is None:
                print("\nRewindSaver vs SqliteSaver: skipped (langgraph is not installed)")
            else:
                title = ("RewindSaver (rw) vs LangGraph's SqliteSaver (lg), as bench/langgraph.py "
                         f"measures them; reads: median of {repeat}")
                print(f"\n{title}")
                print_table(_bench_langgraph_module().HEADERS, savers)
        if only in (None, "sessions"):
            sessions = bench_sessions_vs_sdk(tmp, repeat, synchronous)
            if sessions is None:
                print("\nRewindSession vs SQLiteSession: skipped (openai-agents is not installed)")
            else:
                title = ("RewindSession (rw) vs the Agents SDK's SQLiteSession (sdk), one event "
                         f"loop, median of {repeat} (get all: fewer at 10,000 items); B/item: "
                         "stored row text per item")
                print(f"\n{title}")
                print_table(SESSION_HEADERS, sessions)
            runner = bench_runner_reads(tmp, repeat, synchronous)
            if runner is not None:
                print("\nThe same, full reads of histories shaped as the Runner stores them (per "
                      "tool turn: the user's message, a function call, its output, the answer as "
                      "an output message)")
                print_table(RUNNER_HEADERS, runner)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400, help="calls per integration")
    parser.add_argument("--store", default=None, help="store URL (default: a SQLite file)")
    parser.add_argument("--no-history", action="store_true",
                        help="skip the SDK-store comparisons by history length")
    parser.add_argument("--history-only", choices=["all", "sessions", "savers"], default=None,
                        help="only the SDK-store comparisons (all, or one of the two tables)")
    parser.add_argument("--repeat", type=int, default=21, help="repeats per history figure")
    parser.add_argument("--synchronous", choices=["NORMAL", "FULL"], default="NORMAL",
                        help="the synchronous level of both sides' SQLite files")
    args = parser.parse_args(argv)
    if args.history_only:
        print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        history_tables(args.repeat, None if args.history_only == "all" else args.history_only,
                       args.synchronous)
        print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
        return 0
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
        history_tables(args.repeat, None, args.synchronous)
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
