"""First-visit loop tally at fleet scale: the console's "loops over time" after a restart.

`engine.fleet.queries.LoopTally` starts cold in a fresh process (engine opened, nothing cached) and
reads the last day's loop episodes, as the console's first visit does, two ways on the same
store:

- index: the store's ``loop`` events, read by time (`Store.loops`), then the feed from the
  cursor it read them at (what the console does);
- scan: every event of the day from the window's start (the way the tally worked before, and
  what it still does on a store an older release wrote within the window).

Stores are seeded as `bench/console.py` seeds them (same file names under ``--out``, so either
bench reuses the other's): one session in 40 loops once and is flagged, most of those recover.
The table prints each way's median over ``--runs`` cold starts at each size, its ratio to the
smallest size, and the events each read, all from the same run.

    python bench/tally.py                     # 1,000 vs 10,000 sessions (10 steps each)
    python bench/tally.py --scale             # 10,000 vs 100,000 sessions, 1,000,000 steps
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]  # this checkout, not an installed copy

from common import table as text_table  # noqa: E402
from console import seed  # noqa: E402  (bench/console.py: the console bench's seeded fleets)

HORIZON_S = 86400.0


class FeedOnly:
    """The engine without its store: the tally can only scan the feed."""

    def __init__(self, engine) -> None:
        self._engine = engine

    def events(self, since=0, limit=1000, session=None):
        return self._engine.events(since=since, limit=limit, session=session)

    def get_session(self, sid):
        return self._engine.get_session(sid)


def _cold_tally(url: str, way: str, queue) -> None:
    """In a fresh process: one first visit's tally; puts (seconds, events read, episodes)."""
    from engine import Engine
    from engine.fleet.queries import LoopTally

    engine = Engine.open(url)
    newest = engine.events(since=engine.store.last_event_id() - 1, limit=1)
    now = (newest[0].at if newest else time.time()) + 1.0  # the seed's day, whenever it ran
    source = engine if way == "index" else FeedOnly(engine)
    started = time.perf_counter()
    tally = LoopTally(source, horizon_s=HORIZON_S, clock=lambda: now)
    tally.refresh()
    found = tally.episodes(since=now - HORIZON_S)
    took = time.perf_counter() - started
    assert tally.indexed == (way == "index"), "the store could not answer from its index"
    queue.put((took, tally.scanned, [(e.at, e.session) for e in found]))
    engine.close()


def measure(url: str, way: str, runs: int) -> tuple[float, int, list]:
    ctx = mp.get_context("spawn")
    times, read, found = [], 0, []
    for _ in range(runs):
        queue = ctx.Queue()
        proc = ctx.Process(target=_cold_tally, args=(url, way, queue))
        proc.start()
        took, read, found = queue.get(timeout=1800)
        proc.join()
        times.append(took)
    return statistics.median(times), read, found


def table(rows: list[dict]) -> str:
    base = rows[0]
    headers = ["sessions", "steps", "episodes", "index", "×base", "per episode", "events read",
               "scan", "×base", "events read", "scan/index"]
    lines = [[f"{r['sessions']:,}", f"{r['steps']:,}", f"{r['episodes']:,}",
              f"{r['index'][0] * 1000:,.1f} ms", f"{r['index'][0] / base['index'][0]:.2f}",
              f"{r['index'][0] / max(r['episodes'], 1) * 1e6:,.0f} us",
              f"{r['index'][1]:,}",
              f"{r['scan'][0] * 1000:,.0f} ms", f"{r['scan'][0] / base['scan'][0]:.2f}",
              f"{r['scan'][1]:,}", f"{r['scan'][0] / r['index'][0]:.0f}x"] for r in rows]
    return text_table(headers, lines, rule=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000, help="the larger fleet")
    parser.add_argument("--steps", type=int, default=100_000, help="steps of the larger fleet")
    parser.add_argument("--stages", default="0.1,1",
                        help="fractions of the larger fleet; the first is the baseline")
    parser.add_argument("--runs", type=int, default=3, help="cold starts per way and size")
    parser.add_argument("--workers", type=int, default=max(2, os.cpu_count() or 2))
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--scale", action="store_true",
                        help="10,000 against 100,000 sessions (1,000,000 steps at the larger)")
    args = parser.parse_args(argv)
    if args.scale:
        args.sessions, args.steps = 100_000, 1_000_000
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    for fraction in (float(f) for f in args.stages.split(",")):
        sessions = max(2, round(args.sessions * fraction))
        steps = round(args.steps * fraction)
        path = args.out / f"console-{sessions}-{steps}.db"
        if not Path(f"{path}.seeded").exists():
            print(f"seeding {sessions:,} sessions, {steps:,} steps -> {path.name}", flush=True)
            print(f"    seeded in {seed(path, sessions, steps, args.workers):.0f} s", flush=True)
        url = f"sqlite:///{path}"
        index = measure(url, "index", args.runs)
        scan = measure(url, "scan", args.runs)
        assert index[2] == scan[2], "the two ways found different episodes"
        rows.append({"sessions": sessions, "steps": steps, "episodes": len(index[2]),
                     "index": index[:2], "scan": scan[:2]})
        print(f"measured {sessions:,} sessions", flush=True)
    print("\nfirst-visit loop tally (cold process, last day), median of "
          f"{args.runs} cold starts; the same episodes both ways")
    print(table(rows))
    return 0


if __name__ == "__main__":
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
