"""bench/detector.py and bench/opcodes.py write their cost tables into the results file, the
detector beside the check a user would write (a bounded deque with a Counter)."""

from __future__ import annotations

import sys

from support.bench import run_bench
from support.paths import ROOT


def test_the_detector_cost_table_has_the_deque_and_counter_base(tmp_path):
    section = run_bench("detector.py", "--cost-only", "--steps", "2500",
                        "--memory-steps", "500,2000", results=tmp_path / "RESULTS.md")
    assert "×base" in section
    for stream in ("healthy", "looping"):
        for label in ("rewind (window", "base: deque+Counter", "base, normalized"):
            assert any(line.startswith(f"{stream:8} {label}") for line in section.splitlines())
    assert "after 2,000 steps" in section


def test_the_simple_check_flags_a_repeat_in_its_window_only():
    sys.path.insert(0, str(ROOT / "bench"))
    from detector import SimpleWindowDetector

    from engine.loops.step import Step

    check = SimpleWindowDetector(window=4)
    crop = Step(tool="crop", args={"x": 1}, ok=False, error="invalid slice")
    other = [Step(tool="read", args={"n": i}, result=str(i)) for i in range(4)]
    assert [check.observe(s) for s in (crop, crop)] == [False, False]
    assert [check.observe(s) for s in other] == [False] * 4  # the two crops left the window
    assert [check.observe(crop) for _ in range(3)] == [False, False, True]


def test_the_opcodes_bench_counts_the_base_too(tmp_path):
    section = run_bench("opcodes.py", "--steps", "600", results=tmp_path / "RESULTS.md")
    assert "×base" in section and "base: deque+Counter" in section
    assert "rewind (window" in section
