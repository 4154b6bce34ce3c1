"""Benchmark of replay (engine/replay.py): how fast stored steps go through a detector.

Run: ``.venv/bin/python bench/replay.py [--steps 1000000] [--session 400]``

Builds sessions of stored step records (`StepRecord`, result digests as the store keeps them) from
the detector bench's healthy stream (distinct work that is never flagged, so every step is
replayed) with a looping session every tenth, and times `engine.replay.first_flag` over them
under the production defaults, then `compare` against ``repeat_threshold=4`` (two replays per
session). Building the records is not timed: they come from the store. Target: 1,000,000 steps
in under a minute.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

# the engine of this checkout, not whichever one is installed
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from detector import healthy_stream, looping_stream  # noqa: E402

from engine.loops.normalize import result_digest  # noqa: E402
from engine.loops.step import Step  # noqa: E402
from engine.records import StepRecord  # noqa: E402
from engine.replay import compare, first_flag  # noqa: E402
from engine.types import StepStatus  # noqa: E402

TARGET_SECONDS = 60.0


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1_000_000, help="stored steps in all")
    parser.add_argument("--session", type=int, default=400, help="steps per session")
    opts = parser.parse_args()
    count = max(1, opts.steps // opts.session)
    healthy = list(healthy_stream(opts.session * 8))
    looping = list(looping_stream(opts.session))
    sessions = {}
    for i in range(count):
        if i % 10 == 9:
            steps = looping
        else:
            start = (i * 37) % (len(healthy) - opts.session)
            steps = healthy[start : start + opts.session]
        sessions[f"s{i}"] = records_of(steps)
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
    _, summary = compare(sessions, {"repeat_threshold": 4})
    two = time.perf_counter() - t0

    print(f"replay: {count} sessions, {total:,} stored steps ({opts.session} a session)")
    print(
        f"first_flag, production defaults: {replayed:,} steps replayed in {one:.1f} s "
        f"({replayed / one:,.0f} steps/s; {flagged} sessions flagged)"
    )
    print(
        f"compare with repeat_threshold=4 (two replays a session): {two:.1f} s "
        f"({summary.no_longer_flagged} no longer flagged, {summary.later} later)"
    )
    per_million = 1_000_000 / (replayed / one)
    verdict = "PASS" if per_million < TARGET_SECONDS else "FAIL"
    print(
        f"target: 1,000,000 steps in under {TARGET_SECONDS:.0f} s: {per_million:.1f} s, {verdict}"
    )
    # the machine is shared: say how busy it was
    print(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
