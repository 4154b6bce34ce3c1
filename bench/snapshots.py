"""Snapshot and rollback cost against history length, bytes stored, and guarded-step latency.

Compares Rewind's SQLite store with a full-copy baseline (deepcopy of the history per snapshot,
stored as JSON in the same kind of SQLite file) in the same run. Machines here are noisy: read the
ratios, not the absolute times.

    python bench/snapshots.py [--quick]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import message, timed  # noqa: E402

from engine import Engine, LoopDetector  # noqa: E402


class FullCopyBaseline:
    """What many checkpointers do: every snapshot stores a deep copy of the whole history."""

    def __init__(self, path: str):
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute("CREATE TABLE snaps (id INTEGER PRIMARY KEY, body TEXT)")
        self.history: list[dict] = []

    def snapshot(self) -> int:
        body = json.dumps(copy.deepcopy(self.history))
        cur = self.db.execute("INSERT INTO snaps(body) VALUES (?)", (body,))
        return cur.lastrowid

    def rollback(self, sid: int) -> None:
        (body,) = self.db.execute("SELECT body FROM snaps WHERE id = ?", (sid,)).fetchone()
        self.history = json.loads(body)

    def bytes(self) -> int:
        return self.db.execute("SELECT SUM(pgsize) FROM dbstat WHERE name = 'snaps'").fetchone()[0]


def table_bytes(path: str, tables: tuple[str, ...]) -> int:
    db = sqlite3.connect(path)
    marks = ",".join("?" * len(tables))
    total = db.execute(
        f"SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN ({marks})", tables
    ).fetchone()[0]
    db.close()
    return total


def bench_lengths(tmp: str, lengths: list[int], repeat: int) -> list[dict]:
    rows = []
    for n in lengths:
        url = f"sqlite:///{tmp}/rewind-{n}.db"
        engine = Engine.open(url)
        s = engine.session(f"bench-{n}")
        history = [message(i) for i in range(n)]
        for i in range(0, n, 500):
            s.append_messages(history[i:i + 500])
        base = FullCopyBaseline(f"{tmp}/baseline-{n}.db")
        base.history = list(history)

        snap_cost = timed(lambda s=s: s.snapshot("bench"), repeat)
        base_cost = timed(base.snapshot, max(3, repeat // 10) if n >= 5000 else repeat)

        def rewind_rollback(s=s):
            target = s.snapshot("before tail")
            s.append_messages([message(i) for i in range(10)])
            t0 = time.perf_counter()
            s.rollback(to=target, actor="bench", reason="bench", notice=False)
            return time.perf_counter() - t0

        rb_cost = statistics.median(rewind_rollback() for _ in range(repeat))
        base_target = base.snapshot()
        base_rb = timed(lambda b=base, t=base_target: b.rollback(t), max(3, repeat // 10))
        rows.append({
            "messages": n, "snapshot_us": snap_cost * 1e6, "baseline_snapshot_us": base_cost * 1e6,
            "rollback_us": rb_cost * 1e6, "baseline_rollback_us": base_rb * 1e6,
        })
        engine.close()
    return rows


def bench_space(tmp: str, steps: int) -> dict:
    """A session of `steps` guarded steps, each followed by a ~400-char tool message."""
    path = f"{tmp}/space.db"
    # the hard step budget (500 by default) would stop this long session: lift it
    engine = Engine.open(f"sqlite:///{path}",
                         detector_factory=lambda: LoopDetector(max_steps=None))
    s = engine.session("space")
    durations = []
    for i in range(steps):
        t0 = time.perf_counter()
        with s.step("search", {"q": f"query {i}"}) as call:
            call.ok({"hits": i})
        durations.append(time.perf_counter() - t0)
        s.append_message(**message(i))
    engine.close()
    history = table_bytes(path, ("messages",))
    snapshots = table_bytes(path, ("snapshots", "snapshots_seq", "snapshots_restorable"))
    steps_bytes = table_bytes(path, ("steps", "steps_seq"))
    raw = sum(len(json.dumps(message(i))) for i in range(steps))
    return {
        "steps": steps, "history_bytes": history, "raw_history_bytes": raw,
        "snapshot_bytes": snapshots, "step_bytes": steps_bytes,
        "step_median_us": statistics.median(durations) * 1e6,
        "step_p99_us": sorted(durations)[int(len(durations) * 0.99)] * 1e6,
        "baseline_snapshot_bytes": raw * (steps + 1) // 2,  # full copies: 1 + 2 + … + n messages
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    args = parser.parse_args()
    repeat = 20 if args.quick else 60
    with tempfile.TemporaryDirectory() as tmp:
        rows = bench_lengths(tmp, [10, 100, 1_000, 10_000], repeat)
        space = bench_space(tmp, 2_000)

    print("\nSnapshot and rollback cost by history length (median, microseconds)")
    print(f"{'messages':>9} {'rewind snap':>12} {'full-copy snap':>15} {'ratio':>8} "
          f"{'rewind rollback':>16} {'full-copy rollback':>19}")
    for r in rows:
        print(f"{r['messages']:>9} {r['snapshot_us']:>12.1f} {r['baseline_snapshot_us']:>15.1f} "
              f"{r['baseline_snapshot_us'] / r['snapshot_us']:>7.0f}x {r['rollback_us']:>16.1f} "
              f"{r['baseline_rollback_us']:>19.1f}")
    flat = rows[-1]["snapshot_us"] / rows[0]["snapshot_us"]
    rb_flat = rows[-1]["rollback_us"] / rows[0]["rollback_us"]
    cheaper = rows[-1]["baseline_snapshot_us"] / rows[-1]["snapshot_us"]
    ratio = space["snapshot_bytes"] / space["history_bytes"]
    print(f"\nSpace, {space['steps']}-step session (one guarded step + one 400-char message each)")
    print(f"  history (messages table)     {space['history_bytes']:>12,} bytes "
          f"(raw JSON {space['raw_history_bytes']:,})")
    print(f"  all {space['steps']} step snapshots     {space['snapshot_bytes']:>12,} bytes")
    print(f"  step records                 {space['step_bytes']:>12,} bytes")
    print(f"  full-copy snapshots would be {space['baseline_snapshot_bytes']:>12,} bytes")
    print(f"\nGuarded step (snapshot + record + loop check): median "
          f"{space['step_median_us']:.0f} us, p99 {space['step_p99_us']:.0f} us")
    print("\nTargets")
    checks = [
        ("snapshot cost at 10,000 within 2x of cost at 10", flat, flat <= 2.0),
        ("rollback cost at 10,000 within 2x of cost at 10", rb_flat, rb_flat <= 2.0),
        ("at 10,000 messages >= 100x cheaper than full copy", cheaper, cheaper >= 100),
        ("snapshots of a 2,000-step session <= 2x history bytes", ratio, ratio <= 2.0),
        ("guarded step median < 500 us", space["step_median_us"],
         space["step_median_us"] < 500),
    ]
    for name, value, ok in checks:
        print(f"  [{'ok' if ok else 'MISS'}] {name}: {value:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
