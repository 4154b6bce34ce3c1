"""Helpers shared by the benchmarks: the synthetic message, a median timer and text tables."""

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


def table(headers: list[str], rows: list[list[str]], *, rule: bool = False) -> str:
    """Right-aligned columns as wide as their widest cell; `rule` adds a dashed line under the
    headers."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    out = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    if rule:
        out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)
