"""Benchmark of replay: how fast stored steps go through a detector, in memory and as users
have it (`Engine.replay` on a SQLite store, reads included).

Run: ``.venv/bin/python bench/replay.py [--steps 1000000] [--session 400] [--stages 1]``

Baseline, in memory: builds sessions of stored step records (`StepRecord`, result digests as the
store keeps them) from the detector bench's healthy stream (distinct work that is never flagged,
so every step is replayed) with a looping session every tenth, and times
`engine.loops.replay.first_flag` over them under the production defaults, then `compare` against
``repeat_threshold=4`` (two replays per session). Building the records is not timed.

End to end: the public ``Engine.replay({"repeat_threshold": 4})`` (the fleet listed, every
session's steps and user messages read, two replays a session, the summary) on a SQLite store of
`--steps` stored steps in 100,000 sessions per million (ten steps a session, one in 40 looping
once, one 5,000-step session that loops and is rolled back ten times: the store of
``bench/console.py --scale``, seeded by its `seed` through the public API's batch path). Each
stage (`--stages`, fractions of `--steps`; ``0.2,0.5,1`` shows how the time grows) runs in a
fresh process, which reports its peak resident memory (VmHWM). Stores are kept in
bench/results/ (git-ignored; ``--out`` names another folder) under the console bench's names
and seeded once (`--reseed` seeds afresh; `--stages ""` skips the end-to-end run).

Baseline, in the same run, both in memory and end to end: the replay a user would write
instead, ``bench/detector.py``'s `SimpleWindowDetector` (the last steps' keys in a bounded deque
with a Counter, flagging a key seen 3 times, and 4 for the tried setting) over the same records,
twice a session; end to end it reads the fleet through the public API (`Engine.sessions`, each
session's `steps()`) in a fresh process of its own. ``×base`` is each row's time over its
baseline's.

Target: 1,000,000 stored steps replay end to end in under a minute.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

# the engine of this checkout, not whichever one is installed
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from console import LONG_STEPS, seed  # noqa: E402
from detector import SimpleWindowDetector, healthy_stream, looping_stream  # noqa: E402

from engine import Engine, LoopDetector  # noqa: E402
from engine.loops.normalize import result_digest  # noqa: E402
from engine.loops.replay import compare, first_flag, step_of  # noqa: E402
from engine.loops.step import Step  # noqa: E402
from engine.records import StepRecord  # noqa: E402
from engine.types import StepStatus  # noqa: E402

TARGET_SECONDS = 60.0
BASE_THRESHOLDS = (3, 4)
"""The simple replay's two passes: a key seen 3 times (as the defaults), and 4 (`TRIED`)."""
TRIED = {"repeat_threshold": 4}
"""The configuration tried against the production defaults, in memory and end to end."""
SESSIONS_PER_MILLION = 100_000
RESULTS = Path(__file__).resolve().parent / "results"


def records_of(steps: list[Step]) -> list[StepRecord]:
    """Step records as the store keeps them (numbered from 1, digests for results)."""
    out = []
    for n, step in enumerate(steps, 1):
        out.append(
            StepRecord(
                n=n,
                tool=step.tool,
                args=step.args,
                fingerprint="",
                status=StepStatus.OK if step.ok else StepStatus.ERROR,
                error=step.error,
                result_digest=None if step.result is None else result_digest(step.result),
                result_preview=None,
                started_at=float(n),
                ended_at=float(n),
                side_effect=step.side_effect,
                compensation=None,
                verdict=None,
                on_live_line=True,
                branch=None,
                text=step.text,
            )
        )
    return out


def simple_replay(records: list[StepRecord], window: int,
                  thresholds: tuple[int, ...] = BASE_THRESHOLDS) -> list[int | None]:
    """The baseline: a deque+Counter check per threshold over the finished steps of `records`;
    the first step each flags (None: none)."""
    firsts: list[int | None] = []
    for threshold in thresholds:
        check = SimpleWindowDetector(window, threshold=threshold)
        first = None
        for record in records:
            if record.status != StepStatus.RUNNING and check.observe(step_of(record)):
                first = record.n
                break
        firsts.append(first)
    return firsts


def peak_rss_mb() -> float:
    """This process's peak resident memory, MB: VmHWM (Linux), which starts afresh at exec, so a
    child started by the bench does not report the pages of the bench it forked from (ru_maxrss
    would); ru_maxrss elsewhere."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def in_memory(steps: int, per_session: int) -> list[dict]:
    """The in-memory rows: `first_flag` and `compare` over records already in memory, and the
    simple replay over the same records, one pass and two."""
    count = max(1, steps // per_session)
    healthy = list(healthy_stream(per_session * 8))
    looping = list(looping_stream(per_session))
    sessions = {}
    for i in range(count):
        if i % 10 == 9:
            steps_of = looping
        else:
            start = (i * 37) % (len(healthy) - per_session)
            steps_of = healthy[start : start + per_session]
        sessions[f"s{i}"] = records_of(steps_of)
    total = sum(len(r) for r in sessions.values())

    # The records stand for what the store hands over one session at a time; a million of them
    # held at once would make every garbage collection of the replay walk them all.
    gc.collect()
    gc.freeze()
    t0 = time.perf_counter()
    flagged = 0
    for records in sessions.values():
        flag = first_flag(records)
        flagged += flag is not None
    one = time.perf_counter() - t0

    t0 = time.perf_counter()
    _, summary = compare(sessions, TRIED)
    two = time.perf_counter() - t0

    window = LoopDetector().horizon
    t0 = time.perf_counter()
    base_flagged = sum(simple_replay(records, window, BASE_THRESHOLDS[:1])[0] is not None
                       for records in sessions.values())
    base_one = time.perf_counter() - t0
    t0 = time.perf_counter()
    for records in sessions.values():
        simple_replay(records, window)
    base_two = time.perf_counter() - t0
    gc.unfreeze()
    rss = peak_rss_mb()
    note = f"{flagged} flagged; {summary.no_longer_flagged} no longer, {summary.later} later"
    common = {"stored": total, "sessions": count, "rss_mb": rss}
    return [
        {**common, "mode": "in memory: base, deque+Counter (1 pass)", "seconds": base_one,
         "base": base_one, "note": f"{base_flagged} flagged"},
        {**common, "mode": "in memory: first_flag, defaults", "seconds": one, "base": base_one,
         "note": note},
        {**common, "mode": "in memory: base, deque+Counter (2 passes)", "seconds": base_two,
         "base": base_two, "note": ""},
        {**common, "mode": "in memory: compare (2 replays)", "seconds": two, "base": base_two,
         "note": ""},
    ]


def store_path(steps: int, out: Path = RESULTS) -> tuple[Path, int]:
    """Where the store of `steps` stored steps is kept, and its session count (the names of
    bench/console.py, so a store seeded by either bench serves both)."""
    sessions = max(2, round(steps * SESSIONS_PER_MILLION / 1_000_000))
    steps = max(LONG_STEPS + sessions, steps)
    return out / f"console-{sessions}-{steps}.db", sessions


def end_to_end(path: Path) -> dict:
    """In this (fresh) process: `Engine.replay(TRIED)` over the whole store at `path`, timed;
    the seconds, the sessions replayed, the summary and the peak resident memory."""
    engine = Engine.open(f"sqlite:///{path}")
    base = peak_rss_mb()
    t0 = time.perf_counter()
    replay = engine.replay(TRIED)
    seconds = time.perf_counter() - t0
    peak = peak_rss_mb()
    engine.close()
    return {
        "seconds": seconds,
        "sessions": len(replay.sessions),
        "rss_mb": peak,
        "rss_before_mb": base,
        "summary": replay.summary.as_dict(),
    }


def end_to_end_base(path: Path) -> dict:
    """In this (fresh) process: the simple replay over the whole store at `path`, read through
    the public API (every session listed, its steps read), timed as `end_to_end` is."""
    engine = Engine.open(f"sqlite:///{path}")
    window = LoopDetector().horizon
    base = peak_rss_mb()
    t0 = time.perf_counter()
    sessions, flagged, page = 0, 0, 500
    while True:
        batch = engine.sessions(limit=page, offset=sessions)
        for info in batch:
            flagged += simple_replay(engine.get_session(info.id).steps(), window)[0] is not None
        sessions += len(batch)
        if len(batch) < page:
            break
    seconds = time.perf_counter() - t0
    peak = peak_rss_mb()
    engine.close()
    return {"seconds": seconds, "sessions": sessions, "rss_mb": peak, "rss_before_mb": base,
            "flagged": flagged}


def _child(mode: str, path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, mode, str(path)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.splitlines()[-1])


def end_to_end_row(steps: int, reseed: bool, workers: int, out: Path = RESULTS) -> list[dict]:
    """Seed the store of `steps` steps if needed, then time `end_to_end` (and the simple replay)
    in a fresh process each."""
    path, sessions = store_path(steps, out)
    out.mkdir(parents=True, exist_ok=True)
    if reseed or not Path(f"{path}.seeded").exists():
        print(f"seeding {path.name} ({sessions:,} sessions)...", flush=True)
        took = seed(path, sessions, steps, workers)
        print(f"    seeded in {took:.0f} s ({steps / took:,.0f} steps/s)", flush=True)
    base = _child("--child-base", path)
    got = _child("--child", path)
    summary = got["summary"]
    return [
        {
            "mode": "end to end: base, deque+Counter (2 passes)",
            "stored": steps,
            "sessions": base["sessions"],
            "seconds": base["seconds"],
            "base": base["seconds"],
            "rss_mb": base["rss_mb"],
            "note": f"{base['flagged']} flagged; {base['rss_before_mb']:.0f} MB before",
        },
        {
            "mode": "end to end: Engine.replay",
            "stored": steps,
            "sessions": got["sessions"],
            "seconds": got["seconds"],
            "base": base["seconds"],
            "rss_mb": got["rss_mb"],
            "note": f"{summary['no_longer_flagged']} no longer, {summary['later']} later; "
            f"{got['rss_before_mb']:.0f} MB before",
        },
    ]


def table(rows: list[dict]) -> str:
    """The rows as a text table; ``s per 1M``: seconds for 1,000,000 stored steps at this rate."""
    head = (
        "mode",
        "stored steps",
        "sessions",
        "seconds",
        "stored steps/s",
        "s per 1M",
        "×base",
        "peak RSS",
        "",
    )
    lines = [head]
    for r in rows:
        rate = r["stored"] / r["seconds"]
        lines.append(
            (
                r["mode"],
                f"{r['stored']:,}",
                f"{r['sessions']:,}",
                f"{r['seconds']:.1f}",
                f"{rate:,.0f}",
                f"{1_000_000 / rate:.1f}",
                f"{r['seconds'] / r['base']:.2f}x",
                f"{r['rss_mb']:,.0f} MB",
                r["note"],
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000, help="stored steps in all")
    parser.add_argument("--session", type=int, default=400, help="steps per session, in memory")
    parser.add_argument(
        "--stages",
        default="1",
        help="end-to-end stores, as fractions of --steps (comma-separated; "
        '"" skips the end-to-end run)',
    )
    parser.add_argument("--reseed", action="store_true", help="seed the stores afresh")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the stores are kept")
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count() or 2, help="seeding processes"
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-base", type=Path, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        print(json.dumps(end_to_end(opts.child)))
        return
    if opts.child_base:
        print(json.dumps(end_to_end_base(opts.child_base)))
        return

    rows = in_memory(opts.steps, opts.session)
    print(
        f"replay: {rows[0]['sessions']:,} sessions in memory ({opts.session} steps a session); "
        f"end to end on SQLite, {TRIED} against the production defaults",
        flush=True,
    )
    for fraction in (float(f) for f in opts.stages.split(",") if f.strip()):
        rows += end_to_end_row(round(opts.steps * fraction), opts.reseed, opts.workers,
                               opts.out)
    print(table(rows))
    ends = [r for r in rows if r["mode"] == "end to end: Engine.replay"]
    if len(ends) > 1:
        rates = [r["stored"] / r["seconds"] for r in ends]
        print(
            "end to end, stored steps/s from the smallest store to the largest: "
            + " -> ".join(f"{x:,.0f}" for x in rates)
            + f" ({rates[-1] / rates[0]:.2f}x; 1.00x is linear)"
        )
    top = max(ends or rows[1:2], key=lambda r: r["stored"])
    per_million = top["seconds"] * 1_000_000 / top["stored"]
    measured = (
        "measured" if top["stored"] >= 1_000_000 else (f"extrapolated from {top['stored']:,}")
    )
    verdict = "PASS" if per_million < TARGET_SECONDS else "FAIL"
    print(
        f"target: 1,000,000 stored steps, {top['mode']}, in under {TARGET_SECONDS:.0f} s: "
        f"{per_million:.1f} s ({measured}), {verdict}"
    )
    # the machine is shared: say how busy it was
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    if "--child" in sys.argv or "--child-base" in sys.argv:  # a measuring child: its parent
        raise SystemExit(main())  # records the table
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
