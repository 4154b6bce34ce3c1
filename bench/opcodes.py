"""Bytecode instructions per `LoopDetector.observe` step: the detector's cost per step as a count,
not a time, so two checkouts compare exactly on a busy machine (the timings of
``bench/detector.py --cost-only`` move by a third from run to run when other work shares the
CPU; this count does not move at all).

Run: ``.venv/bin/python bench/opcodes.py [--steps 4000]`` in each checkout (it measures the
engine of the checkout it sits in) and compare the two lines. The streams are
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

from detector import healthy_stream, looping_stream  # noqa: E402

from engine.loops.detector import LoopDetector  # noqa: E402


def opcodes_per_step(steps: list) -> float:
    """Bytecode instructions executed per observe call over `steps`, on a fresh detector."""
    warm = LoopDetector(max_steps=None)
    for step in steps[:500]:
        warm.observe(step)
    detector = LoopDetector(max_steps=None)
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
    cells = [
        f"{name} {opcodes_per_step(list(stream(opts.steps))):.1f}"
        for name, stream in (("healthy", healthy_stream), ("looping", looping_stream))
    ]
    print(f"opcodes per observe step ({opts.steps} steps): " + ", ".join(cells))


if __name__ == "__main__":
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
