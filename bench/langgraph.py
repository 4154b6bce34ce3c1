"""RewindSaver against LangGraph's SqliteSaver as its users run it, on threads of 10, 100 and
1,000 checkpoints: put, reading the latest checkpoint warm and fresh, and bytes stored.

Every step of a thread appends one message (a tool call, then its ~400-character result,
alternately) and stores a checkpoint, the way a ReAct agent's checkpointer sees it. Both sides
get the same checkpoints, at equal durability: a SQLite file each, WAL, at the same
``synchronous`` level (NORMAL, Rewind's default; ``--synchronous FULL`` runs both at FULL).
SqliteSaver runs as its users run it: ``SqliteSaver(sqlite3.connect(path,
check_same_thread=False))``, one connection reused for every call. Calls alternate between the
two sides (which one goes first alternates too), so both see the same machine load.

- ``put``: the median of the timed puts (a short thread is timed over several threads, each
  from its first checkpoint; a long thread over its last 10 puts);
- ``warm read``: ``get_tuple`` of a thread's latest checkpoint on the savers in use;
- ``open+read``: ``Engine.open`` + a new RewindSaver vs ``sqlite3.connect`` + a new SqliteSaver,
  then ``get_tuple`` of the latest checkpoint, then closing, as a service that opens per request
  runs it: a closed engine leaves its connection idle for the next open of the file in the
  process (engine/store/sqlite/tx.py), so Rewind's open takes it; ``first open`` is the same
  with no idle connection (the first request of a process), SqliteSaver's side unchanged;
- ``stored``: bytes a thread's checkpoints take (RewindSaver: its documents, key and value;
  SqliteSaver: its checkpoint and write rows), and ``file``: the SQLite file per thread after a
  WAL checkpoint (Rewind's file also holds the session: its snapshots, the mirrored
  conversation, the feed).

Ratios are Rewind / SqliteSaver (under 1: Rewind is cheaper). The machines here are shared: read
the ratios, not the times. The table is kept in bench/RESULTS.md (``REWIND_BENCH_RECORD=0``:
not).

    python bench/langgraph.py [--quick] [--repeat N] [--synchronous FULL]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
# This file is named after the package it measures: keep `import langgraph` from finding it.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
sys.path.insert(0, os.path.dirname(HERE))

from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langgraph.checkpoint.base import Checkpoint  # noqa: E402
from langgraph.checkpoint.base.id import uuid6  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402

from engine import Engine  # noqa: E402
from engine.integrations.langgraph import RewindSaver  # noqa: E402
from engine.store.sqlite.tx import IDLE  # noqa: E402

SIZES = (10, 100, 1_000)
"""Checkpoints per thread at which the savers are compared."""

PUTS_PER_SIZE = 300
"""Checkpoints put per size and side: a short thread is timed over several threads."""

LONG_TAIL = 10
"""A thread longer than this is timed over its last this many puts."""

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


def interleaved(a: Callable[[], Any], b: Callable[[], Any], repeat: int
                ) -> tuple[list[float], list[float]]:
    """Seconds of each call of `a` and of `b`, `repeat` times each, alternating which goes
    first, so both see the same machine load."""
    sa: list[float] = []
    sb: list[float] = []
    for i in range(repeat):
        for fn, into in ((a, sa), (b, sb)) if i % 2 == 0 else ((b, sb), (a, sa)):
            t0 = time.perf_counter()
            fn()
            into.append(time.perf_counter() - t0)
    return sa, sb


def _config(thread: str, parent: str | None) -> Any:
    config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    if parent:
        config["configurable"]["checkpoint_id"] = parent
    return config


def put_threads(rw: Any, sq: Any, plan: list, threads: list[str]
                ) -> tuple[list[float], list[float]]:
    """Put `plan` as a chain on every thread, both sides alternately (which side goes first
    alternates too); the timed puts' seconds (every put of a short thread, the last
    `LONG_TAIL` of a long one)."""
    rw_puts: list[float] = []
    sq_puts: list[float] = []
    timed_from = max(0, len(plan) - LONG_TAIL)
    turn = 0
    for thread in threads:
        parent = None
        for i, (checkpoint, metadata, new_versions) in enumerate(plan):
            config = _config(thread, parent)
            sides = [(rw, rw_puts), (sq, sq_puts)]
            if turn % 2:
                sides.reverse()
            turn += 1
            for saver, into in sides:
                t0 = time.perf_counter()
                saver.put(config, checkpoint, metadata, new_versions)
                if i >= timed_from:
                    into.append(time.perf_counter() - t0)
            parent = checkpoint["id"]
    return rw_puts, sq_puts


def stored_bytes(rw_file: str, lg_file: str) -> tuple[int, int]:
    """Bytes of every thread's checkpoint data: Rewind's documents, SqliteSaver's rows."""
    with sqlite3.connect(rw_file) as db:
        (rw,) = db.execute(
            "SELECT COALESCE(SUM(LENGTH(CAST(key AS BLOB)) + LENGTH(CAST(value AS BLOB))), 0) "
            "FROM docs WHERE ns = 'langgraph'").fetchone()
    db.close()
    with sqlite3.connect(lg_file) as db:
        (lg,) = db.execute(
            "SELECT (SELECT COALESCE(SUM(LENGTH(checkpoint) + LENGTH(metadata) "
            "+ LENGTH(checkpoint_id) + LENGTH(thread_id)), 0) FROM checkpoints) + "
            "(SELECT COALESCE(SUM(LENGTH(value)), 0) FROM writes)").fetchone()
    db.close()
    return rw, lg


def file_bytes(path: str) -> int:
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    return os.path.getsize(path)


def compare(tmp: str, n: int, repeat: int, synchronous: str = "NORMAL") -> dict[str, Any]:
    """One size: both savers on files of their own in `tmp`, the same threads of `n`
    checkpoints; the timings (µs medians) and bytes."""
    plan = checkpoints(n)
    threads = [f"thread-{n}-{k}" for k in range(max(1, PUTS_PER_SIZE // n))]
    rw_file, lg_file = f"{tmp}/rewind-{n}.db", f"{tmp}/langgraph-{n}.db"
    rw_url = f"sqlite:///{rw_file}?synchronous={synchronous}"

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(lg_file, check_same_thread=False)
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        return conn

    engine = Engine.open(rw_url)
    rw = RewindSaver(engine)
    sq = SqliteSaver(connect())
    sq.setup()  # WAL, as SqliteSaver sets it on first use
    rw_puts, sq_puts = put_threads(rw, sq, plan, threads)

    latest = [{"configurable": {"thread_id": t}} for t in threads]
    turn = {"rw": 0, "sq": 0}

    def config(side: str) -> Any:
        turn[side] += 1
        return latest[turn[side] % len(latest)]

    def fresh_rw() -> None:
        with Engine.open(rw_url) as fresh:
            assert RewindSaver(fresh).get_tuple(config("rw")) is not None

    def first_rw() -> None:
        IDLE.close_all()
        t0 = time.perf_counter()
        fresh_rw()
        first_times.append(time.perf_counter() - t0)

    first_times: list[float] = []

    def fresh_sq() -> None:
        conn = connect()
        assert SqliteSaver(conn).get_tuple(config("sq")) is not None
        conn.close()

    warm = interleaved(lambda: rw.get_tuple(config("rw")), lambda: sq.get_tuple(config("sq")),
                       repeat)
    fresh = interleaved(fresh_rw, fresh_sq, repeat)
    first = interleaved(first_rw, fresh_sq, repeat)  # timed inside: not the close_all
    engine.close()
    sq.conn.close()
    stored = stored_bytes(rw_file, lg_file)
    files = (file_bytes(rw_file), file_bytes(lg_file))
    us = lambda xs: statistics.median(xs) * 1e6  # noqa: E731
    return {"n": n, "threads": len(threads),
            "put": (us(rw_puts), us(sq_puts)), "warm": (us(warm[0]), us(warm[1])),
            "fresh": (us(fresh[0]), us(fresh[1])), "first": (us(first_times), us(first[1])),
            "stored": (stored[0] / len(threads), stored[1] / len(threads)),
            "file": (files[0] / len(threads), files[1] / len(threads))}


HEADERS = ["checkpoints", "threads", "put rw", "put lg", "ratio", "warm read rw", "warm read lg",
           "ratio", "open+read rw", "open+read lg", "ratio", "first open rw", "lg", "ratio"]
"""The timings table (`row`)."""

BYTES_HEADERS = ["checkpoints", "stored rw", "stored lg", "ratio", "file rw", "file lg", "ratio"]
"""The bytes table (`bytes_row`), per thread."""


def _pair(r: dict[str, Any], key: str, fmt: Callable[[float], str]) -> list[str]:
    a, b = r[key]
    return [fmt(a), fmt(b), f"{a / b:.2f}x" if b else "-"]


def row(r: dict[str, Any]) -> list[str]:
    """The timings of `compare`'s result, a line of the `HEADERS` table."""
    def us(x: float) -> str:
        return f"{x:,.0f}"

    return [f"{r['n']:,}", str(r["threads"]), *_pair(r, "put", us), *_pair(r, "warm", us),
            *_pair(r, "fresh", us), *_pair(r, "first", us)]


def bytes_row(r: dict[str, Any]) -> list[str]:
    """The bytes of `compare`'s result, a line of the `BYTES_HEADERS` table."""
    def kb(x: float) -> str:
        return f"{x / 1e3:,.1f} kB"

    return [f"{r['n']:,}", *_pair(r, "stored", kb), *_pair(r, "file", kb)]


def print_table(headers: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10 and 100 checkpoints only")
    parser.add_argument("--repeat", type=int, default=41, help="reads per figure")
    parser.add_argument("--synchronous", choices=["NORMAL", "FULL"], default="NORMAL",
                        help="the synchronous level of both sides' SQLite files")
    args = parser.parse_args(argv)
    sizes = SIZES[:2] if args.quick else SIZES
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"\nRewindSaver (rw) vs LangGraph's SqliteSaver (lg): both WAL + synchronous="
          f"{args.synchronous}, SqliteSaver on one reused connection, calls alternating; µs "
          f"(medians; put over {PUTS_PER_SIZE} puts a size, the last {LONG_TAIL} of a long "
          f"thread; reads {args.repeat} each). Ratio: rw / lg.")
    with tempfile.TemporaryDirectory(prefix="rewind-bench-lg-") as tmp:
        results = [compare(tmp, n, args.repeat, args.synchronous) for n in sizes]
    print_table(HEADERS, [row(r) for r in results])
    print("\nBytes per thread: stored (the checkpoints' documents; SqliteSaver's rows) and the "
          "SQLite file after a WAL checkpoint (Rewind's also holds the session).")
    print_table(BYTES_HEADERS, [bytes_row(r) for r in results])
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
