"""The Redis store: guarded steps per second with 1, 2 and 4 worker processes on one Redis and on a
3-master Redis Cluster (SQLite on the same machine as the baseline), round trips per guarded
step, Redis memory of a 1,000-step session against the bytes of its history, and snapshot and
rollback cost from 10 to 10,000 messages of history (a full-copy snapshot on the same Redis as the
baseline). Starts its own redis-server processes on free loopback ports.

Machines here are noisy: read the ratios, not the absolute times.

Each figure has its baseline from the same run beside it: steps per second as a ratio to SQLite's
on the same machine, requests per guarded step beside the floor of two round trips (the
two bare transactions of ``bench/snapshots.py``), memory as a ratio to the history's bytes,
snapshot and rollback beside a full copy.

    python bench/redis_store.py [--quick] [--seconds S] [--lengths 10,100] [--memory-steps N]
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from common import message, timed  # noqa: E402

from engine import Engine  # noqa: E402
from engine.store.redis import keys  # noqa: E402


# -- throughput ---------------------------------------------------------------------------------
def worker(url: str, sid: str, seconds: float) -> None:
    """Guarded steps in a loop for `seconds`; prints how many."""
    engine = Engine.open(url)
    s = engine.session(sid, meta={"tenant": "bench", "scenario": "throughput"}, on_loop="off")
    n, t_end = 0, time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        if n % 50 == 0:  # a new task every 50 steps, as an agent's: under the hard step budget
            s.new_task()
        with s.step("search", {"q": f"query {n}"}) as call:
            call.ok({"hits": n})
        n += 1
    engine.close()
    print(n, flush=True)


def throughput(url: str, processes: int, seconds: float) -> float:
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--worker", url, f"w{i}", str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(processes)
    ]
    total = 0
    for p in procs:
        out, _ = p.communicate(timeout=seconds + 120)
        total += int(out.strip().splitlines()[-1])
    return total / seconds


# -- round trips --------------------------------------------------------------------------------
def round_trips(url: str, steps: int) -> tuple[float, float]:
    """(requests on the agent's path, all requests incl. the fleet outbox thread) per step."""
    import redis

    engine = Engine.open(url, store_options={"health_check_interval": 0})
    s = engine.session("rt", on_loop="off")
    for i in range(5):
        with s.step("search", {"q": i}) as call:
            call.ok(i)
    engine.store.flush()
    counts: collections.Counter = collections.Counter()
    original = redis.connection.AbstractConnection.send_packed_command
    handshake = {b"CLIENT", b"HELLO", b"AUTH", b"SELECT", b"READONLY", b"PING"}

    def counting(self, command, check_health=True):
        data = b"".join(command) if isinstance(command, list) else bytes(command)
        if data.split(b"\r\n")[2].upper() not in handshake:
            counts[threading.current_thread() is threading.main_thread()] += 1
        return original(self, command, check_health)

    redis.connection.AbstractConnection.send_packed_command = counting
    try:
        for i in range(steps):
            with s.step("search", {"q": i + 10}) as call:
                call.ok(i)
        engine.store.flush()
    finally:
        redis.connection.AbstractConnection.send_packed_command = original
    engine.close()
    main = counts[True] - (1 if counts[True] > 2 * steps else 0)  # the final flush()
    return main / steps, (counts[True] + counts[False]) / steps


# -- memory -------------------------------------------------------------------------------------
def memory(url: str, steps: int) -> dict:
    """A session of `steps` guarded steps, each followed by a ~400-char tool message, a variable
    set every 10 steps. Redis MEMORY USAGE of its keys against the JSON bytes of its history."""
    engine = Engine.open(url)
    store = engine.store
    s = engine.session("mem", meta={"tenant": "bench"}, on_loop="off")
    for i in range(steps):
        if i % 50 == 0:  # a new task every 50 steps, under the hard step budget
            s.new_task()
        with s.step("search", {"q": f"query {i}"}) as call:
            call.ok({"hits": i, "top": f"result {i}"})
        s.append_message(**message(i))
        if i % 10 == 0:
            s.set_var("cursor", i)
    store.flush()
    history = sum(len(json.dumps(m.message, ensure_ascii=False)) for m in s.messages())
    step_bytes = sum(len(json.dumps(dataclasses.asdict(r), ensure_ascii=False)) for r in s.steps())
    r = store._r
    base = keys.session_base("mem", store.prefix)
    session_keys = list(r.scan_iter(match=base.replace("{", "[{]").replace("}", "[}]") + "*"))
    used = sum(r.memory_usage(k, samples=0) or 0 for k in session_keys)
    feed = (
        r.memory_usage(
            keys.session_events(keys.fleet_base(store.prefix), keys.encode("mem")), samples=0
        )
        or 0
    )
    engine.close()
    return {
        "steps": steps,
        "history": history,
        "step_records": step_bytes,
        "redis": used,
        "keys": len(session_keys),
        "feed": feed,
    }


# -- snapshot and rollback cost -----------------------------------------------------------------
class FullCopyBaseline:
    """What many checkpointers do: every snapshot SETs a copy of the whole history."""

    def __init__(self, client, prefix: str):
        self.r, self.prefix, self.n = client, prefix, 0
        self.history: list[dict] = []

    def snapshot(self) -> None:
        self.n += 1
        self.r.set(f"{self.prefix}:copy:{self.n}", json.dumps(self.history))

    def rollback(self) -> None:
        self.history = json.loads(self.r.get(f"{self.prefix}:copy:{self.n}"))


def costs(url: str, lengths: list[int], repeat: int, server=None) -> list[dict]:
    rows = []
    for n in lengths:
        engine = Engine.open(url)
        s = engine.session(f"len-{n}", on_loop="off")
        history = [message(i) for i in range(n)]
        for i in range(0, n, 500):
            s.append_messages(history[i:i + 500])
        snap = timed(lambda s=s: s.snapshot("bench"), repeat)

        def rollback(s=s):
            target = s.snapshot("before tail")
            s.append_messages([message(i) for i in range(10)])
            t0 = time.perf_counter()
            s.rollback(to=target, actor="bench", reason="bench", notice=False)
            return time.perf_counter() - t0

        server_us = None
        if server is not None:
            server.client().config_resetstat()
        rb = statistics.median(rollback() for _ in range(repeat))
        if server is not None:  # server-side time per script call (snapshot, append, rollback)
            server_us = server.client().info("commandstats")["cmdstat_evalsha"]["usec_per_call"]
        base = FullCopyBaseline(engine.store._r, f"{engine.store.prefix}:baseline:{n}")
        base.history = history
        base_snap = timed(base.snapshot, max(3, repeat // 5))
        base_rb = timed(base.rollback, max(3, repeat // 5))
        rows.append(
            {
                "messages": n,
                "snapshot_us": snap * 1e6,
                "rollback_us": rb * 1e6,
                "server_us": server_us,
                "copy_snapshot_us": base_snap * 1e6,
                "copy_rollback_us": base_rb * 1e6,
            }
        )
        engine.close()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs, fewer repeats")
    parser.add_argument("--seconds", type=float, help="seconds of each throughput run")
    parser.add_argument("--processes", default="1,2,4", help="worker processes per run")
    parser.add_argument("--lengths", default="10,100,1000,10000",
                        help="messages of history at which snapshot and rollback are timed")
    parser.add_argument("--memory-steps", type=int, default=1000,
                        help="guarded steps of the memory table's session")
    parser.add_argument("--round-trips", type=int, default=200,
                        help="guarded steps whose requests are counted")
    parser.add_argument(
        "--worker", nargs=3, metavar=("URL", "SID", "SECONDS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], args.worker[1], float(args.worker[2]))
        return 0
    from support.redis_servers import RedisCluster, RedisServer, have_redis

    if not have_redis():
        print("redis-server and redis-cli are needed (scripts/install --test)")
        return 1
    seconds = args.seconds or (2.0 if args.quick else 5.0)
    repeat = 15 if args.quick else 40
    server = RedisServer().start()
    cluster = RedisCluster(3).start()
    tmp = tempfile.mkdtemp(prefix="rewind-bench-")
    try:
        urls = {
            "redis": server.url(prefix="bench"),
            "cluster": cluster.url(prefix="bench"),
            "sqlite": f"sqlite:///{tmp}/bench.db",
        }
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"Guarded steps per second, {seconds:.0f} s per run, {os.cpu_count()} cores, "
              f"load average {load}")
        print("(×sqlite: the store's rate over SQLite's on this machine, same run)")
        print(f"{'processes':>10} {'redis':>10} {'×sqlite':>8} {'cluster':>10} {'×sqlite':>8} "
              f"{'sqlite':>10}")
        tput = {}
        for procs in (int(p) for p in args.processes.split(",")):
            row = {name: throughput(url, procs, seconds) for name, url in urls.items()}
            tput[procs] = row
            server.cli("FLUSHALL")
            cluster.flushall()
            print(
                f"{procs:>10} {row['redis']:>10.0f} {row['redis'] / row['sqlite']:>7.2f}x "
                f"{row['cluster']:>10.0f} {row['cluster'] / row['sqlite']:>7.2f}x "
                f"{row['sqlite']:>10.0f}"
            )

        rt = {name: round_trips(urls[name], args.round_trips) for name in ("redis", "cluster")}
        print(f"\nRequests per guarded step (socket-level count, {args.round_trips} steps; "
              "floor: the two round trips of two bare transactions)")
        print(f"{'store':>10} {'agent path':>11} {'×floor':>7} {'all':>6}")
        for name, (path, total) in rt.items():
            print(f"{name:>10} {path:>11.2f} {path / 2:>6.2f}x {total:>6.2f}")

        mem = {name: memory(urls[name], args.memory_steps) for name in ("redis", "cluster")}
        print(
            f"\nMemory of a {args.memory_steps:,}-step session (a ~400-char message per step, a "
            "variable every 10 steps, a write-ahead snapshot per step)"
        )
        m = mem["redis"]
        print(
            f"  history as the engine returns it: messages {m['history']:,} B + step records "
            f"{m['step_records']:,} B = {m['history'] + m['step_records']:,} B"
        )
        for name, m in mem.items():
            total = m["history"] + m["step_records"]
            print(
                f"  {name:>8}: MEMORY USAGE of its {m['keys']} keys {m['redis']:,} B "
                f"= {m['redis'] / total:.2f}x history (its feed in the fleet slot: "
                f"{m['feed']:,} B)"
            )

        lengths = [int(x) for x in args.lengths.split(",")]
        rows = {
            "redis": costs(urls["redis"], lengths, repeat, server),
            "cluster": costs(urls["cluster"], lengths, repeat),
        }
        for name, rs in rows.items():
            print(
                f"\nSnapshot and rollback (10 messages leave) by history length, {name} "
                "(median microseconds, client side; ratio: the full copy's time over Rewind's)"
            )
            extra = " server/script" if name == "redis" else ""
            print(
                f"{'messages':>9} {'snapshot':>9} {'full-copy snap':>15} {'ratio':>7} "
                f"{'rollback':>9} {'full-copy rollback':>19} {'ratio':>7}{extra}"
            )
            for r in rs:
                server_col = f" {r['server_us']:>13.1f}" if r["server_us"] is not None else ""
                print(
                    f"{r['messages']:>9} {r['snapshot_us']:>9.0f} {r['copy_snapshot_us']:>15.0f} "
                    f"{r['copy_snapshot_us'] / r['snapshot_us']:>6.1f}x {r['rollback_us']:>9.0f} "
                    f"{r['copy_rollback_us']:>19.0f} "
                    f"{r['copy_rollback_us'] / r['rollback_us']:>6.2f}x{server_col}"
                )

        print("\nTargets")
        checks = []
        for name in ("redis", "cluster"):
            rs = rows[name]
            snap_flat = rs[-1]["snapshot_us"] / rs[0]["snapshot_us"]
            rb_flat = rs[-1]["rollback_us"] / rs[0]["rollback_us"]
            first, last = f"{lengths[0]:,}", f"{lengths[-1]:,}"
            checks += [
                (f"{name}: snapshot at {last} within 2x of at {first}", snap_flat,
                 snap_flat <= 2),
                (f"{name}: rollback at {last} within 2x of at {first}", rb_flat, rb_flat <= 2),
                (
                    f"{name}: round trips per guarded step on the agent's path <= 2",
                    rt[name][0],
                    rt[name][0] <= 2.0,
                ),
            ]
            m = mem[name]
            ratio = m["redis"] / (m["history"] + m["step_records"])
            checks.append(
                (f"{name}: memory of a {args.memory_steps:,}-step session <= 2x its history",
                 ratio, ratio <= 2.0)
            )
        for name, value, ok in checks:
            print(f"  [{'ok' if ok else 'MISS'}] {name}: {value:.2f}")
    finally:
        server.remove()
        cluster.stop()
    return 0


if __name__ == "__main__":
    if "--worker" in sys.argv:  # a worker process of the throughput runs: nothing to record
        raise SystemExit(main())
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
