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
bench/results/ (git-ignored) under the console bench's names and seeded once (`--reseed` seeds
afresh; `--stages ""` skips the end-to-end run).

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
from detector import healthy_stream, looping_stream  # noqa: E402

from engine import Engine  # noqa: E402
from engine.loops.normalize import result_digest  # noqa: E402
from engine.loops.replay import compare, first_flag  # noqa: E402
from engine.loops.step import Step  # noqa: E402
from engine.records import StepRecord  # noqa: E402
from engine.types import StepStatus  # noqa: E402

TARGET_SECONDS = 60.0
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
    """The baseline rows: `first_flag` and `compare` over records already in memory."""
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
    replayed = 0
    for records in sessions.values():
        flag = first_flag(records)
        flagged += flag is not None
        replayed += len(records) if flag is None else flag.step
    one = time.perf_counter() - t0

    t0 = time.perf_counter()
    _, summary = compare(sessions, TRIED)
    two = time.perf_counter() - t0
    gc.unfreeze()
    rss = peak_rss_mb()
    note = f"{flagged} flagged; {summary.no_longer_flagged} no longer, {summary.later} later"
    return [
        {
            "mode": "in memory: first_flag, defaults",
            "stored": total,
            "sessions": count,
            "replayed": replayed,
            "seconds": one,
            "rss_mb": rss,
            "note": note,
        },
        {
            "mode": "in memory: compare (2 replays)",
            "stored": total,
            "sessions": count,
            "replayed": 2 * total,
            "seconds": two,
            "rss_mb": rss,
            "note": "",
        },
    ]


def store_path(steps: int) -> tuple[Path, int]:
    """Where the store of `steps` stored steps is kept, and its session count (the names of
    bench/console.py, so a store seeded by either bench serves both)."""
    sessions = max(2, round(steps * SESSIONS_PER_MILLION / 1_000_000))
    steps = max(LONG_STEPS + sessions, steps)
    return RESULTS / f"console-{sessions}-{steps}.db", sessions


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


def end_to_end_row(steps: int, reseed: bool, workers: int) -> dict:
    """Seed the store of `steps` steps if needed, then time `end_to_end` in a fresh process."""
    path, sessions = store_path(steps)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if reseed or not Path(f"{path}.seeded").exists():
        print(f"seeding {path} ({sessions:,} sessions)...", flush=True)
        took = seed(path, sessions, steps, workers)
        print(f"    seeded in {took:.0f} s ({steps / took:,.0f} steps/s)", flush=True)
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    got = json.loads(out.stdout.splitlines()[-1])
    summary = got["summary"]
    return {
        "mode": "end to end: Engine.replay",
        "stored": steps,
        "sessions": got["sessions"],
        "replayed": 2 * steps,
        "seconds": got["seconds"],
        "rss_mb": got["rss_mb"],
        "note": f"{summary['no_longer_flagged']} no longer, {summary['later']} later; "
        f"{got['rss_before_mb']:.0f} MB before",
    }


def table(rows: list[dict]) -> str:
    """The rows as a text table; ``s per 1M``: seconds for 1,000,000 stored steps at this rate."""
    head = (
        "mode",
        "stored steps",
        "sessions",
        "seconds",
        "stored steps/s",
        "s per 1M",
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
    parser.add_argument(
        "--workers", type=int, default=os.cpu_count() or 2, help="seeding processes"
    )
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        print(json.dumps(end_to_end(opts.child)))
        return

    rows = in_memory(opts.steps, opts.session)
    print(
        f"replay: {rows[0]['sessions']:,} sessions in memory ({opts.session} steps a session); "
        f"end to end on SQLite, {TRIED} against the production defaults",
        flush=True,
    )
    for fraction in (float(f) for f in opts.stages.split(",") if f.strip()):
        rows.append(end_to_end_row(round(opts.steps * fraction), opts.reseed, opts.workers))
    print(table(rows))
    ends = [r for r in rows if r["mode"].startswith("end to end")]
    if len(ends) > 1:
        rates = [r["stored"] / r["seconds"] for r in ends]
        print(
            "end to end, stored steps/s from the smallest store to the largest: "
            + " -> ".join(f"{x:,.0f}" for x in rates)
            + f" ({rates[-1] / rates[0]:.2f}x; 1.00x is linear)"
        )
    top = max(ends or rows[:1], key=lambda r: r["stored"])
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
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
