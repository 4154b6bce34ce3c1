"""Running a bench as its command line does, at a tiny size, and reading the section it wrote.

The bench runs in a process of its own (``python bench/<name> ...``, through
`bench.common.run_recorded` as a user runs it) with ``$REWIND_BENCH_RESULTS`` pointing at a file
of the test's, so the checkout's bench/RESULTS.md is never touched. Tests of the benches check
what a run writes (its section, its baseline beside each figure), never how fast it ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.paths import ROOT


def run_bench(name: str, *args: str, results: Path, timeout: float = 600,
              env: dict[str, str] | None = None) -> str:
    """Run ``bench/<name> args`` and return the section it wrote into `results`.

    Raises:
        AssertionError: the bench failed, or wrote no section of its own.
    """
    environ = {**os.environ, **(env or {}), "REWIND_BENCH_RESULTS": str(results),
               "REWIND_BENCH_RECORD": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                          os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, str(ROOT / "bench" / name), *args], cwd=ROOT,
                          env=environ, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (
        f"bench/{name} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return section(results.read_text(encoding="utf-8"), name, args)


def section(text: str, name: str, args: tuple[str, ...] | list[str]) -> str:
    """The section of bench/RESULTS.md that ``bench/<name> args`` wrote (between its markers)."""
    start = f"<!-- bench/{name} {' '.join(args)}".rstrip() + " -->\n"
    at = text.find(start)
    assert at >= 0, f"no section for bench/{name} {' '.join(args)} in:\n{text[:2000]}"
    end = text.index("<!-- end -->", at)
    body = text[at + len(start):end]
    assert f"## `python bench/{name}" in body and "```" in body
    return body


def printed(section: str) -> str:
    """What the bench printed, inside a section (without the command line above it)."""
    return section.split("```")[1]
