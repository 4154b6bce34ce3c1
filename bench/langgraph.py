"""LangGraph checkpointers on a growing message list: bytes stored and put latency.

One thread, N steps; every step appends one message (a tool call, then its ~400-character
result, alternately) and stores a checkpoint, the way a ReAct agent's checkpointer sees it. The
same checkpoints go to Rewind's `RewindSaver` (SQLite file; also ``--store URL``, e.g. Redis) and,
in the same run, to LangGraph's `SqliteSaver` (SQLite file) and `InMemorySaver`.

Columns: ``stored`` is what the checkpointer keeps for the thread: for RewindSaver the JSON of its
documents (the same on every backend), for SqliteSaver the bytes of its rows, for InMemorySaver the
serialized bytes it holds. ``x history`` divides it by one serialized copy of the final message
list. ``file`` is the SQLite file after a WAL checkpoint (for RewindSaver it also holds the session:
snapshots, the mirrored conversation, events). ``latest`` is the time a fresh saver (cold cache)
takes to read the latest checkpoint back (median of 5). Machines here are noisy (the load average
is printed): read the ratios.

    python bench/langgraph.py [--quick] [--store redis://localhost:6379/0]
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime

HERE = os.path.dirname(os.path.abspath(__file__))
# This file is named after the package it measures: keep `import langgraph` from finding it.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
sys.path.insert(0, os.path.dirname(HERE))

from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langgraph.checkpoint.base import Checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402

from engine import Engine  # noqa: E402
from engine.integrations.langgraph import RewindSaver, layout  # noqa: E402

RESULT = ("Row 17: invoice A-{i} | customer ACME GmbH | amount 1,204.50 EUR | due 2025-01-31 | "
          "status open | notes: partial payment received on 2024-12-02, reminder sent twice, "
          "contact finance@acme.example for the remittance advice; the PDF scan is attached "
          "as receipt-{i}.png (2480x3508, 300 dpi).")


def message(i: int):
    call = f"call_{i // 2}"
    if i % 2 == 0:
        return AIMessage("", id=f"ai-{i}", tool_calls=[
            {"name": "lookup_invoice", "args": {"invoice": f"A-{i // 2}", "fields": ["amount"]},
             "id": call}])
    return ToolMessage(RESULT.format(i=i // 2), tool_call_id=call, id=f"tool-{i}")


def checkpoints(steps: int) -> list[tuple[Checkpoint, dict, dict]]:
    """(checkpoint, metadata, new_versions) for each step, prebuilt so building is not timed."""
    versions = InMemorySaver()
    out: list = []
    messages: list = []
    version = None
    for i in range(steps):
        messages = [*messages, message(i)]
        version = versions.get_next_version(version, None)
        turn = versions.get_next_version(None, None)
        checkpoint = Checkpoint(
            v=4, id=str(uuid6(clock_seq=i)), ts=datetime.now(UTC).isoformat(),
            channel_values={"messages": messages, "branch:to:agent": None},
            channel_versions={"messages": version, "branch:to:agent": turn},
            versions_seen={"agent": {"messages": version}}, updated_channels=["messages"])
        out.append((checkpoint, {"source": "loop", "step": i, "parents": {}},
                    {"messages": version, "branch:to:agent": turn}))
    return out


def run_puts(saver, thread: str, plan) -> list[float]:
    """Put every checkpoint of `plan` as a chain; seconds per put."""
    times, parent = [], None
    for checkpoint, metadata, new_versions in plan:
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        if parent:
            config["configurable"]["checkpoint_id"] = parent
        t0 = time.perf_counter()
        saver.put(config, checkpoint, metadata, new_versions)
        times.append(time.perf_counter() - t0)
        parent = checkpoint["id"]
    return times


def read_latest(make_saver, thread: str, repeat: int = 5) -> float:
    """Median seconds for a fresh saver to read the thread's latest checkpoint."""
    samples = []
    for _ in range(repeat):
        saver = make_saver()
        t0 = time.perf_counter()
        tup = saver.get_tuple({"configurable": {"thread_id": thread}})
        samples.append(time.perf_counter() - t0)
        assert tup is not None and tup.checkpoint["channel_values"]["messages"]
    return statistics.median(samples)


def file_bytes(path: str) -> int:
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return os.path.getsize(path)


def bench_rewind(url: str, thread: str, plan, file: str | None) -> dict:
    engine = Engine.open(url)
    saver = RewindSaver(engine)
    times = run_puts(saver, thread, plan)
    docs = engine.store.doc_scan(thread, layout.DOCS, "")
    stored = sum(len(k) + len(json.dumps(v, separators=(",", ":"))) for k, v in docs.items())
    latest = read_latest(lambda: RewindSaver(engine), thread)
    engine.close()
    return {"times": times, "stored": stored, "file": file_bytes(file) if file else None,
            "latest": latest}


def bench_sqlite_saver(path: str, thread: str, plan) -> dict:
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    times = run_puts(saver, thread, plan)
    (stored,) = conn.execute(
        "SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata) + LENGTH(checkpoint_id) "
        "+ LENGTH(thread_id)), 0) FROM checkpoints").fetchone()
    latest = read_latest(lambda: SqliteSaver(sqlite3.connect(path, check_same_thread=False)),
                         thread)
    conn.close()
    return {"times": times, "stored": stored, "file": file_bytes(path), "latest": latest}


def bench_memory_saver(thread: str, plan) -> dict:
    saver = InMemorySaver()
    times = run_puts(saver, thread, plan)
    stored = sum(len(c[1]) + len(m[1]) for ns in saver.storage[thread].values()
                 for c, m, _parent in ns.values())
    stored += sum(len(v[1]) for k, v in saver.blobs.items() if k[0] == thread)
    latest = read_latest(lambda: saver, thread)
    return {"times": times, "stored": stored, "file": None, "latest": latest}


def mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.2f} MB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="50 and 200 steps")
    parser.add_argument("--store", default=None,
                        help="also run RewindSaver on this store URL (e.g. redis://host:port/0)")
    args = parser.parse_args()
    sizes = [50, 200] if args.quick else [200, 1000]
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    serde = JsonPlusSerializer()
    rows = []
    with tempfile.TemporaryDirectory(prefix="rewind-bench-lg-") as tmp:
        for steps in sizes:
            plan = checkpoints(steps)
            history = len(serde.dumps_typed(plan[-1][0]["channel_values"]["messages"])[1])
            thread = f"bench-{steps}"
            results = {}
            rewind_file = os.path.join(tmp, f"rewind-{steps}.db")
            results["RewindSaver (SQLite)"] = bench_rewind(f"sqlite:///{rewind_file}", thread,
                                                           plan, rewind_file)
            if args.store:
                results["RewindSaver (--store)"] = bench_rewind(
                    args.store, f"{thread}-{time.time():.0f}", plan, None)
            results["SqliteSaver"] = bench_sqlite_saver(os.path.join(tmp, f"lg-{steps}.db"),
                                                        thread, plan)
            results["InMemorySaver"] = bench_memory_saver(thread, plan)
            for name, r in results.items():
                times = sorted(r["times"])
                rows.append([
                    str(steps), name, mb(r["stored"]), f"{r['stored'] / history:,.1f}",
                    mb(r["file"]), f"{statistics.median(times) * 1e3:.2f}",
                    f"{times[int(len(times) * 0.95) - 1] * 1e3:.2f}",
                    f"{times[-1] * 1e3:.2f}", f"{sum(times):.2f}", f"{r['latest'] * 1e3:.1f}",
                ])
            rows.append([str(steps), "(one copy of the history)", mb(history), "1.0", "", "", "",
                         "", "", ""])
    headers = ["steps", "checkpointer", "stored", "x history", "file", "put p50 ms",
               "put p95 ms", "put max ms", "puts s", "latest ms"]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(h.rjust(w) if i != 1 else h.ljust(w)
                    for i, (h, w) in enumerate(zip(headers, widths, strict=True))))
    for row in rows:
        print("  ".join(c.rjust(w) if i != 1 else c.ljust(w)
                        for i, (c, w) in enumerate(zip(row, widths, strict=True))))
    print(f"load average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
