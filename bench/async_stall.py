"""The event loop's longest stall with Rewind's async integrations, against the Agents SDK's own
`SQLiteSession`, same run.

C coroutines (default 50) share one event loop with a heartbeat task that sleeps 1 ms at a time
and records the longest gap between two of its ticks: the longest time the loop could not run
anything else. Each coroutine makes R calls (default 5) of:

- ``get_items()`` of a session holding N items (default 1,000): `RewindSession` vs
  `SQLiteSession` (a file each, same items, both WAL at the same ``synchronous`` level, NORMAL
  by default, both sessions reused as their users hold them; the SDK's session runs its SQLite
  work through ``asyncio.to_thread``);
- ``add_items`` of one item: `RewindSession` vs `SQLiteSession`;
- `RewindStore.abatch` of a ``GetOp`` (LangGraph), beside the same ``SQLiteSession.get_items``
  figure for scale;
- `McpProxy.on_call_tool` of an in-process MCP server's tool (no subprocess).

The two sessions' cases run in K rounds (default 3), alternating which side goes first; a stall
is one long gap, so one round is at the mercy of the machine's scheduler. The table gives, per
case, the median round's longest stall and the longest of all rounds, the median gap, the wall
time of all calls and the garbage collector's full passes during the case (a full pass holds the
GIL, so it stalls the loop whichever thread triggers it; with the Agents SDK imported one takes
hundreds of ms on a small machine, so a case that allocates enough to trigger one shows it as
its longest stall); ``ratio`` is the median longest stall over `SQLiteSession`'s for the same
kind of call (target: at most 3x).

The table is printed, and kept in bench/RESULTS.md in this bench's section
(``REWIND_BENCH_RECORD=0``: not).

    python bench/async_stall.py [--coroutines C] [--calls R] [--items N] [--rounds K]
                                [--synchronous {NORMAL,FULL}] [--store URL] [--gc-freeze]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
# bench/langgraph.py must not shadow the langgraph package: this folder off the path, the root on
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
sys.path.insert(0, os.path.dirname(HERE))

from bench.common import message, sdk_session_class, table  # noqa: E402
from engine import Engine  # noqa: E402

GEN2: list[float] = []
"""Durations of the full (generation 2) garbage collections of the case running."""
_STARTED = [0.0]


def _gen2(phase: str, info: dict) -> None:
    if info["generation"] != 2:
        return
    if phase == "start":
        _STARTED[0] = time.perf_counter()
    else:
        GEN2.append(time.perf_counter() - _STARTED[0])


async def stalls(coroutines: int, calls: int, make: Callable[[int], Awaitable[Any]]
                 ) -> tuple[float, float, float, list[float]]:
    """(longest gap, median gap, wall seconds, full collections' seconds) while `coroutines`
    tasks each await `make(i)` `calls` times."""
    gaps: list[float] = []
    gc.collect()  # every case starts from the same collector state
    GEN2.clear()
    done = asyncio.Event()

    async def heartbeat() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async def worker(i: int) -> None:
        for _ in range(calls):
            await make(i)

    beat = asyncio.create_task(heartbeat())
    await asyncio.sleep(0.01)
    t0 = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(coroutines)))
    wall = time.perf_counter() - t0
    done.set()
    await beat
    return max(gaps), statistics.median(gaps), wall, list(GEN2)


def sdk_items(n: int) -> list[dict]:
    return [{"role": m["role"] if m["role"] != "tool" else "user", "content": m["content"]}
            for m in (message(i) for i in range(n))]


Found = tuple[float, float, float, list[float]]
"""(longest gap, median gap, wall seconds, full collections' seconds) of one case."""


async def main_async(args: argparse.Namespace, folder: str) -> list[list[str]]:
    from engine.integrations.openai_agents import RewindSession

    rows: list[list[str]] = []
    url = args.store or f"sqlite:///{folder}/rewind.db?synchronous={args.synchronous}"
    items = sdk_items(args.items)
    with Engine.open(url) as engine:
        ours = RewindSession(engine, f"stall-{uuid.uuid4().hex[:8]}")
        theirs = sdk_session_class(args.synchronous)("stall", os.path.join(folder, "sdk.db"))
        for chunk in range(0, len(items), 100):
            await ours.add_items(items[chunk:chunk + 100])
            await theirs.add_items(items[chunk:chunk + 100])
        if args.gc_freeze:
            for optional in ("langgraph.store.base", "engine.integrations.langgraph", "mcp",
                             "mcp.server.mcpserver", "engine.integrations.mcp"):
                with contextlib.suppress(ImportError):
                    importlib.import_module(optional)
            gc.collect()
            gc.freeze()

        c, r = args.coroutines, args.calls
        sides = {"SQLiteSession": theirs, "RewindSession": ours}
        one = [{"role": "user", "content": "one more"}]
        gets: dict[str, list[Found]] = {side: [] for side in sides}
        adds: dict[str, list[Found]] = {side: [] for side in sides}
        # every read round before the first write, so that each reads the same N items
        for kind, found in (("get", gets), ("add", adds)):
            for k in range(args.rounds):
                for side in (sides if k % 2 == 0 else reversed(sides)):
                    session = sides[side]

                    def call(i: int, s: Any = session, read: bool = kind == "get"
                             ) -> Awaitable[Any]:
                        return s.get_items() if read else s.add_items(one)

                    found[side].append(await stalls(c, r, call))
        sdk_get = combined(gets["SQLiteSession"])
        sdk_add = combined(adds["SQLiteSession"])
        for side in sides:
            rows.append(cells(f"get_items ({args.items} items)", side, combined(gets[side]),
                              sdk_get[0]))
        for side in sides:
            rows.append(cells("add_items (1 item)", side, combined(adds[side]), sdk_add[0]))

        try:
            from langgraph.store.base import GetOp, PutOp

            from engine.integrations.langgraph import RewindStore
        except ImportError as exc:
            print(f"RewindStore skipped: {exc}", file=sys.stderr)
        else:
            store = RewindStore(engine.session(f"stall-store-{uuid.uuid4().hex[:8]}"))
            await store.abatch([PutOp(("users", f"u{i}"), "home", {"text": f"city {i}"})
                                for i in range(c)])
            rows.append(cells(
                "RewindStore.abatch (get)", "RewindStore",
                combined([await stalls(c, r, lambda i: store.abatch([GetOp(("users", f"u{i}"),
                                                                             "home")]))]),
                sdk_get[0]))

        try:
            rows.extend(await mcp_rows(engine, c, r, sdk_get[0]))
        except ImportError as exc:
            print(f"McpProxy skipped: {exc}", file=sys.stderr)
    return rows


async def mcp_rows(engine: Engine, c: int, r: int, base: float) -> list[list[str]]:
    import mcp_types as types
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    from engine.integrations.mcp import McpProxy, Upstream

    server = MCPServer("shop")

    @server.tool()
    def lookup(order: str) -> str:
        """Look an order up."""
        return f"order {order}: shipped"

    async with Client(server) as client:
        proxy = McpProxy(engine, [Upstream(client=client)],
                         session=f"stall-mcp-{uuid.uuid4().hex[:6]}")
        counter = iter(range(10**9))

        def one(i: int) -> Awaitable[Any]:
            params = types.CallToolRequestParams(
                name="lookup", arguments={"order": f"A-{next(counter)}"},
                _meta={"rewind/session": f"{proxy.default_session}-{i}"})
            return proxy.on_call_tool(None, params)

        found = await stalls(c, r, one)
    return [cells("McpProxy.on_call_tool", "McpProxy", combined([found]), base)]


def combined(rounds: list[Found]) -> tuple[float, float, float, float, list[float]]:
    """(median round's longest gap, longest gap of all, median gap, median wall seconds, every
    full collection's seconds) of a case's rounds."""
    return (statistics.median(f[0] for f in rounds), max(f[0] for f in rounds),
            statistics.median(f[1] for f in rounds), statistics.median(f[2] for f in rounds),
            [g for f in rounds for g in f[3]])


def cells(case: str, side: str, found: tuple[float, float, float, float, list[float]],
          base: float) -> list[str]:
    longest, worst, median, wall, full = found
    return [case, side, f"{longest * 1000:.1f}", f"{worst * 1000:.1f}", f"{median * 1000:.2f}",
            f"{wall:.2f}", f"{longest / base:.1f}x" if base else "-",
            f"{len(full)} ({max(full) * 1000:.0f} ms)" if full else "0"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--coroutines", type=int, default=50)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the two sessions' cases, alternating which goes first")
    parser.add_argument("--synchronous", choices=["NORMAL", "FULL"], default="NORMAL",
                        help="the synchronous level of both sides' SQLite files")
    parser.add_argument("--store", default=None, help="Rewind store URL (default: a temp SQLite)")
    parser.add_argument("--gc-freeze", action="store_true",
                        help="gc.freeze() after loading (what long-running servers often do): "
                        "full collections then skip the modules' objects, so the stalls left "
                        "are the calls' own")
    args = parser.parse_args(argv)
    gc.callbacks.append(_gen2)
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as folder:
        rows = asyncio.run(main_async(args, folder))
    t0 = time.perf_counter()
    gc.collect()
    full = time.perf_counter() - t0
    store = args.store or f"SQLite files, both WAL + synchronous={args.synchronous}"
    print(f"{args.coroutines} coroutines x {args.calls} calls, {args.rounds} rounds of the "
          f"sessions' cases (alternating which goes first); {store}; the loop's stalls in ms. "
          f"longest: the median round's longest stall; worst: the longest of all rounds; ratio: "
          f"longest / SQLiteSession's for get_items or add_items (RewindStore and McpProxy: one "
          f"round, against SQLiteSession's get_items); full GCs: the collector's full passes "
          f"during the case, which stop every thread (one takes {full * 1000:.0f} ms in this "
          f"process, the SDKs loaded)")
    print(table(["case", "side", "longest ms", "worst ms", "median ms", "wall s", "ratio",
                 "full GCs"], rows, rule=True))
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
