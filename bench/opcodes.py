"""Bytecode instructions per `LoopDetector.observe` step: the detector's cost per step as a count,
not a time, so two checkouts compare exactly on a busy machine (the timings of
``bench/detector.py --cost-only`` move by a third from run to run when other work shares the
CPU; this count does not move at all).

The same count is taken, in the same run, of the check a user would write instead
(``bench/detector.py``'s `SimpleWindowDetector`: a bounded deque of the window's keys with a
Counter), keyed as a user keys it and keyed by the detector's own normalization.

Run: ``.venv/bin/python bench/opcodes.py [--steps 4000]`` in each checkout (it measures the
engine of the checkout it sits in) and compare the rows. The streams are
``bench/detector.py``'s healthy and looping streams; the regular-expression and key caches are
warmed first, as in the timed bench. Counting traces every instruction, so it is slow (about
3 s for 4,000 steps of each stream).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from collections.abc import Callable  # noqa: E402

from detector import SimpleWindowDetector, healthy_stream, looping_stream  # noqa: E402

from engine.loops.detector import LoopDetector  # noqa: E402


def opcodes_per_step(steps: list, make: Callable[[], Any] | None = None) -> float:
    """Bytecode instructions executed per observe call over `steps`, on a fresh detector
    (`make()`, by default the production `LoopDetector`)."""
    make = make or (lambda: LoopDetector(max_steps=None))
    warm = make()
    for step in steps[:500]:
        warm.observe(step)
    detector = make()
    count = 0

    def tracer(frame: FrameType, event: str, arg: Any):
        nonlocal count
        frame.f_trace_opcodes = True
        if event == "opcode":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        for step in steps:
            detector.observe(step)
    finally:
        sys.settrace(None)
    return count / len(steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000, help="steps per stream")
    opts = parser.parse_args()
    window = LoopDetector().horizon
    detectors = {
        f"rewind (window {window})": None,
        "base: deque+Counter": lambda: SimpleWindowDetector(window),
        "base, normalized": lambda: SimpleWindowDetector(window, normalized=True),
    }
    streams = {name: list(stream(opts.steps))
               for name, stream in (("healthy", healthy_stream), ("looping", looping_stream))}
    counts = {label: {name: opcodes_per_step(steps, make) for name, steps in streams.items()}
              for label, make in detectors.items()}
    base = counts["base: deque+Counter"]
    print(f"opcodes per observe step ({opts.steps} steps of each stream; base: the check a user "
          "would write, a bounded deque of the window's keys with a Counter)")
    print(f"{'detector':22} {'healthy':>9} {'×base':>6} {'looping':>9} {'×base':>6}")
    for label, row in counts.items():
        print(f"{label:22} {row['healthy']:9.1f} {row['healthy'] / base['healthy']:5.1f}x "
              f"{row['looping']:9.1f} {row['looping'] / base['looping']:5.1f}x")


if __name__ == "__main__":
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
