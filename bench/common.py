"""Helpers shared by the benchmarks: the synthetic message and a median timer."""

from __future__ import annotations

import statistics
import time

MSG_CHARS = 400
"""Length of one synthetic history message (the issue's ~400 characters)."""


def message(i: int) -> dict:
    """The i-th synthetic chat message, about `MSG_CHARS` characters long."""
    body = f"turn {i}: " + ("lorem ipsum dolor sit amet " * 20)
    return {"role": "tool" if i % 2 else "assistant", "content": body[:MSG_CHARS]}


def timed(fn, repeat: int) -> float:
    """Median seconds of `fn()` over `repeat` runs."""
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)
