"""Snapshot and rollback cost against history length, bytes stored, and guarded-step latency.

Compares Rewind's SQLite store with a full-copy baseline (deepcopy of the history per snapshot,
stored as JSON in the same kind of SQLite file) in the same run. Machines here are noisy: read the
ratios, not the absolute times.

The guarded step (``with s.step(...)``, default settings: a write-ahead snapshot each step) is
timed at 10, 1,000, 10,000 and 100,000 steps of history, on SQLite and on Redis, against a bare
two-transaction floor on the same store (SQLite: two ``BEGIN IMMEDIATE`` … ``COMMIT`` with one
row written each, on the store's own connection: same file, pragmas and page cache; Redis: two
MULTI/EXEC round trips). Step and floor samples alternate, so both see the same machine load.
The history grows through the step path itself (a user message every 50 steps, a new task), one
session per store.

The space table's full-copy figure is computed from the same run's history (1 + 2 + … + n
messages of raw JSON; storing it would take hundreds of megabytes); the guarded steps of that
session are timed beside the same two-transaction floor.

    python bench/snapshots.py [--quick] [--no-redis] [--steps-only] [--lengths 10,1000]
                              [--messages 10,100] [--samples N] [--space-steps N]
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests"))

from common import message, timed  # noqa: E402

from engine import Engine  # noqa: E402


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
    """A session of `steps` guarded steps, each followed by a ~400-char tool message; the floor
    (`sqlite_floor`) is timed beside each step."""
    path = f"{tmp}/space.db"
    engine = Engine.open(f"sqlite:///{path}")  # default settings, the step budget included
    floor = sqlite_floor(engine)
    s = engine.session("space")
    durations, floors = [], []
    for i in range(steps):
        if i % 50 == 0:  # a new run every 50 steps: the budget counts per task (no extra rows)
            s.new_task()
        t0 = time.perf_counter()
        floor()
        t1 = time.perf_counter()
        with s.step("search", {"q": f"query {i}"}) as call:
            call.ok({"hits": i})
        durations.append(time.perf_counter() - t1)
        floors.append(t1 - t0)
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
        "floor_median_us": statistics.median(floors) * 1e6,
        "baseline_snapshot_bytes": raw * (steps + 1) // 2,  # full copies: 1 + 2 + … + n messages
    }


STEP_LENGTHS = (10, 1_000, 10_000, 100_000)
"""Steps of history at which the guarded step is timed."""

ROLLBACKS = 20
"""On-call rollbacks (preview, then rollback to the suggested target) timed at each length."""


def sqlite_floor(engine: Engine):
    """Two bare write transactions on the store's own connection: the same file, pragmas and
    page cache as the step.

    A second connection would not be a fair floor: in WAL mode a connection drops its page
    cache when it sees another connection's commit, so the floor and the step, alternating,
    would each find the other's commit and read their pages afresh every sample (measured:
    +15-20 us on the step, +4 us on the floor). An agent alone on its store keeps its cache.
    """
    db = engine.store._db.conn  # type: ignore[attr-defined]  # this thread's connection
    db.execute("CREATE TABLE IF NOT EXISTS floor (id INTEGER PRIMARY KEY, v TEXT)")
    counter = iter(range(10**9))

    def two_transactions() -> None:
        i = next(counter)
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO floor(id, v) VALUES (?, ?)", (i, "running"))
        db.execute("COMMIT")
        db.execute("BEGIN IMMEDIATE")
        db.execute("UPDATE floor SET v = ? WHERE id = ?", ("ok", i))
        db.execute("COMMIT")

    return two_transactions


def redis_floor(url: str):
    """Two bare MULTI/EXEC round trips (a hash field and a list push each) on the same server."""
    import redis

    r = redis.Redis.from_url(url.split("?")[0])
    counter = iter(range(10**9))

    def two_transactions() -> None:
        i = next(counter)
        for status in ("running", "ok"):
            pipe = r.pipeline(transaction=True)
            pipe.hset("bench-floor:h", str(i), status)
            pipe.rpush("bench-floor:l", i)
            pipe.execute()

    return two_transactions


def _wal_checkpoint(conn: sqlite3.Connection, mode: str) -> int:
    """Run a checkpoint and return the WAL's frame count; retried while the checkpointer
    thread's own checkpoint keeps this one from running (SQLite answers -1 then)."""
    for _ in range(200):
        busy, frames, _done = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        if frames >= 0 and not busy:
            return frames
        time.sleep(0.001)
    raise RuntimeError(f"the {mode} checkpoint never ran")


def sqlite_writes(engine: Engine, call, calls: int = 40) -> tuple[float, float]:
    """(statements, WAL frames) per `call()`, counted on the store's connection.

    A RESTART checkpoint first makes the next commit write the WAL from its start, so the WAL's
    frame count afterwards is what the calls wrote; they run back to back, well inside the
    checkpointer thread's delay, which restarts the WAL only once writes pause.
    """
    conn = engine.store._db.conn  # type: ignore[attr-defined]
    _wal_checkpoint(conn, "RESTART")
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        for _ in range(calls):
            call()
    finally:
        conn.set_trace_callback(None)
    return len(statements) / calls, _wal_checkpoint(conn, "PASSIVE") / calls


def _quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1e6, ordered[int(len(ordered) * 0.99)] * 1e6


def bench_guarded_step(url: str, make_floor, lengths: tuple[int, ...], samples: int
                       ) -> list[dict]:
    """Median and p99 of the guarded step at each history length, with the floor beside it
    (`make_floor(engine)` gives the floor's two transactions)."""
    # Default settings, the hard step budget included: it counts per task, and the user
    # message every 50 steps below starts a new one, as it does for an agent.
    engine = Engine.open(url)
    floor = make_floor(engine)
    s = engine.session("long-session", meta={"tenant": "bench"})
    done = 0
    rows = []

    def one_step(i: int) -> None:
        with s.step(f"tool_{i % 7}", {"q": f"task {i // 50} part {i % 50}"}) as call:
            call.ok({"answer": i})

    for length in lengths:
        while done < length:  # grow the history through the step path
            if done % 50 == 0:
                s.append_message("user", f"task {done // 50}")
            one_step(done)
            done += 1
        steps, floors = [], []
        for _ in range(samples):
            if done % 50 == 0:
                s.append_message("user", f"task {done // 50}")
            t0 = time.perf_counter()
            floor()
            t1 = time.perf_counter()
            one_step(done)
            t2 = time.perf_counter()
            done += 1
            floors.append(t1 - t0)
            steps.append(t2 - t1)
        step_med, step_p99 = _quantiles(steps)
        floor_med, floor_p99 = _quantiles(floors)
        # what on-call runs: preview, then roll back to the suggested target (no target named;
        # the last step's write-ahead snapshot here), as the console and the CLI do it
        rollbacks = []
        for _ in range(ROLLBACKS):
            one_step(done)
            done += 1
            t0 = time.perf_counter()
            s.preview_rollback()
            s.rollback(actor="bench", reason="bench", notice=False)
            rollbacks.append(time.perf_counter() - t0)
        rb_med = statistics.median(rollbacks) * 1e6
        rows.append({"history": length, "median_us": step_med, "p99_us": step_p99,
                     "floor_median_us": floor_med, "floor_p99_us": floor_p99,
                     "rollback_us": rb_med})
        print(f"  {url.split(':')[0]:>6} {length:>8,} steps: median {step_med:6.0f} us, "
              f"p99 {step_p99:6.0f} us (floor {floor_med:.0f} / {floor_p99:.0f}), "
              f"preview + rollback {rb_med:.0f} us", flush=True)
    if url.startswith("sqlite:"):
        counter = iter(range(done, 10**9))
        step_writes = sqlite_writes(engine, lambda: one_step(next(counter)))
        floor_writes = sqlite_writes(engine, floor)
        print(f"  sqlite writes per guarded step: {step_writes[0]:.1f} statements, "
              f"{step_writes[1]:.1f} WAL frames (floor: {floor_writes[0]:.1f} statements, "
              f"{floor_writes[1]:.1f} WAL frames)", flush=True)
    engine.close()
    return rows


def guarded_step_tables(tmp: str, lengths: tuple[int, ...], samples: int,
                        use_redis: bool) -> list[tuple[str, bool, float]]:
    """Run the guarded-step bench on SQLite (and Redis), print its table; returns the checks."""
    results = {}
    print("\nGuarded step by steps of history (seeding as it goes) ...", flush=True)
    path = f"{tmp}/steps.db"
    results["sqlite"] = bench_guarded_step(f"sqlite:///{path}", sqlite_floor, lengths, samples)
    if use_redis:
        from support.redis_servers import RedisServer, have_redis

        if not have_redis():
            print("  redis: skipped (redis-server is not installed)")
        else:
            server = RedisServer().start()
            try:
                url = server.url(prefix="bench")
                floor = lambda _engine, url=url: redis_floor(url)  # noqa: E731
                results["redis"] = bench_guarded_step(url, floor, lengths, samples)
            finally:
                server.remove()
    print(f"\nGuarded step (`with s.step(...)`, default settings), {samples} samples per row, "
          "microseconds; floor: two bare transactions, same store, same run; rollback: median "
          f"of {ROLLBACKS} on-call rollbacks (preview, then back to the suggested target)")
    print(f"{'store':>7} {'history':>8} {'median':>8} {'p99':>8} {'floor med':>10} "
          f"{'floor p99':>10} {'med/floor':>10} {'p99/floor':>10} {'rollback':>9}")
    checks = []
    for name, rows in results.items():
        for r in rows:
            print(f"{name:>7} {r['history']:>8,} {r['median_us']:>8.0f} {r['p99_us']:>8.0f} "
                  f"{r['floor_median_us']:>10.0f} {r['floor_p99_us']:>10.0f} "
                  f"{r['median_us'] / r['floor_median_us']:>9.1f}x "
                  f"{r['p99_us'] / r['floor_p99_us']:>9.1f}x {r['rollback_us']:>9.0f}")
        flat = rows[-1]["median_us"] / rows[0]["median_us"]
        rb_flat = rows[-1]["rollback_us"] / rows[0]["rollback_us"]
        worst_med = max(r["median_us"] / r["floor_median_us"] for r in rows)
        worst_p99 = max(r["p99_us"] / r["floor_p99_us"] for r in rows)
        longest = f"{rows[-1]['history']:,}"
        # the same ratio measured against the floor of its own row: what is left when the
        # machine's load moved both (the floor runs beside the step, on the same store)
        flat_vs_floor = ((rows[-1]["median_us"] / rows[-1]["floor_median_us"])
                         / (rows[0]["median_us"] / rows[0]["floor_median_us"]))
        checks += [
            (f"{name}: step median at {longest} <= 1.2x at {rows[0]['history']}", flat,
             flat <= 1.2),
            (f"{name}: the same, each median divided by its row's floor", flat_vs_floor,
             flat_vs_floor <= 1.2),
            (f"{name}: step median <= 5x the floor (worst row)", worst_med, worst_med <= 5),
            (f"{name}: step p99 <= 10x the floor p99 (worst row)", worst_p99, worst_p99 <= 10),
            (f"{name}: preview + rollback at {longest} <= 1.5x at {rows[0]['history']}",
             rb_flat, rb_flat <= 1.5),
        ]
    return checks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="fewer repeats; guarded steps up to 10,000 steps of history")
    parser.add_argument("--no-redis", action="store_true", help="guarded steps on SQLite only")
    parser.add_argument("--steps-only", action="store_true",
                        help="only the guarded step by history length")
    parser.add_argument("--lengths", help="steps of history at which the guarded step is timed "
                        "(comma-separated; default 10 to 100,000, 10,000 with --quick)")
    parser.add_argument("--messages", default="10,100,1000,10000",
                        help="messages of history at which snapshot and rollback are timed")
    parser.add_argument("--samples", type=int, help="guarded steps timed per history length")
    parser.add_argument("--space-steps", type=int, default=2_000,
                        help="guarded steps of the space table's session")
    args = parser.parse_args()
    repeat = 20 if args.quick else 60
    lengths = STEP_LENGTHS[:-1] if args.quick else STEP_LENGTHS
    if args.lengths:
        lengths = tuple(int(x) for x in args.lengths.split(","))
    messages = [int(x) for x in args.messages.split(",")]
    samples = args.samples or (300 if args.quick else 1000)
    print(f"load average at start: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        step_checks = guarded_step_tables(tmp, lengths, samples, not args.no_redis)
        if args.steps_only:
            print("\nTargets")
            for name, value, ok in step_checks:
                print(f"  [{'ok' if ok else 'MISS'}] {name}: {value:.2f}")
            return 0
        rows = bench_lengths(tmp, messages, repeat)
        space = bench_space(tmp, args.space_steps)

    print("\nSnapshot and rollback cost by history length (median, microseconds)")
    print("(ratio: the full copy's time over Rewind's; above 1, Rewind is cheaper)")
    print(f"{'messages':>9} {'rewind snap':>12} {'full-copy snap':>15} {'ratio':>8} "
          f"{'rewind rollback':>16} {'full-copy rollback':>19} {'ratio':>8}")
    for r in rows:
        print(f"{r['messages']:>9} {r['snapshot_us']:>12.1f} {r['baseline_snapshot_us']:>15.1f} "
              f"{r['baseline_snapshot_us'] / r['snapshot_us']:>7.1f}x {r['rollback_us']:>16.1f} "
              f"{r['baseline_rollback_us']:>19.1f} "
              f"{r['baseline_rollback_us'] / r['rollback_us']:>7.2f}x")
    flat = rows[-1]["snapshot_us"] / rows[0]["snapshot_us"]
    rb_flat = rows[-1]["rollback_us"] / rows[0]["rollback_us"]
    cheaper = rows[-1]["baseline_snapshot_us"] / rows[-1]["snapshot_us"]
    ratio = space["snapshot_bytes"] / space["history_bytes"]
    print(f"\nSpace, {space['steps']}-step session (one guarded step + one 400-char message each)")
    print(f"  history (messages table)     {space['history_bytes']:>12,} bytes "
          f"(raw JSON {space['raw_history_bytes']:,})")
    print(f"  all {space['steps']} step snapshots     {space['snapshot_bytes']:>12,} bytes")
    print(f"  step records                 {space['step_bytes']:>12,} bytes")
    print(f"  full-copy snapshots would be {space['baseline_snapshot_bytes']:>12,} bytes "
          f"({space['baseline_snapshot_bytes'] / space['snapshot_bytes']:.0f}x; computed: "
          "1 + 2 + … + n messages of raw JSON)")
    print(f"\nGuarded step (snapshot + record + loop check): median "
          f"{space['step_median_us']:.0f} us, p99 {space['step_p99_us']:.0f} us; floor (two "
          f"bare transactions, same store, in turn) {space['floor_median_us']:.0f} us, "
          f"{space['step_median_us'] / space['floor_median_us']:.1f}x")
    print("\nTargets")
    first, last = f"{rows[0]['messages']:,}", f"{rows[-1]['messages']:,}"
    checks = [
        (f"snapshot cost at {last} within 2x of cost at {first}", flat, flat <= 2.0),
        (f"rollback cost at {last} within 2x of cost at {first}", rb_flat, rb_flat <= 2.0),
        (f"at {last} messages >= 100x cheaper than full copy", cheaper, cheaper >= 100),
        (f"snapshots of a {space['steps']:,}-step session <= 2x history bytes", ratio,
         ratio <= 2.0),
        ("guarded step median < 500 us", space["step_median_us"],
         space["step_median_us"] < 500),
        *step_checks,
    ]
    for name, value, ok in checks:
        print(f"  [{'ok' if ok else 'MISS'}] {name}: {value:.2f}")
    return 0


if __name__ == "__main__":
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
