"""Helpers shared by the benchmarks: the synthetic message, a median timer, text tables, and
`run_recorded`, which keeps what a bench printed in bench/RESULTS.md."""

from __future__ import annotations

import datetime as dt
import io
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

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


def sdk_session_class(synchronous: str = "NORMAL") -> type:
    """The Agents SDK's `SQLiteSession` with its connections at ``PRAGMA synchronous``
    `synchronous` (it sets WAL, leaves SQLite's default, FULL, and offers no setting), so that
    it pays what a Rewind file at the same level pays for a commit. Needs openai-agents."""
    import sqlite3

    from agents import SQLiteSession

    class Session(SQLiteSession):
        @staticmethod
        def _configure_connection(conn: sqlite3.Connection) -> None:
            SQLiteSession._configure_connection(conn)
            conn.execute(f"PRAGMA synchronous = {synchronous}")

    return Session


SCORED_AGAIN = "[held-out half, scored again after later tuning: read it as tuned]"
"""The mark of a held-out half that earlier rounds of rules were already scored on: its figure
no longer says how the rules do on text they were not written for. A fresh held-out half needs
new data, labelled before anything runs on it."""


ROOT = Path(__file__).resolve().parents[1]
"""The checkout the benches belong to."""

RESULTS = Path(os.environ.get("REWIND_BENCH_RESULTS") or ROOT / "bench" / "RESULTS.md")
"""Where the benches keep the tables they printed, one section per bench and arguments
(``$REWIND_BENCH_RESULTS`` names another file: the tests of the benches write there)."""

_PREAMBLE = """# Benchmark results

Written by the benches themselves: each section is what one run printed, tables against their
baselines measured in the same run, with the command, the commit and the machine's load. Run a
bench again to replace its section (``REWIND_BENCH_RECORD=0`` leaves this file alone). Ratios hold
across runs on these shared 2-core machines; absolute times do not.
"""


class _Tee(io.TextIOBase):
    def __init__(self, out: TextIO) -> None:
        self.out, self.seen = out, io.StringIO()

    def write(self, text: str) -> int:
        self.seen.write(text)
        return self.out.write(text)

    def flush(self) -> None:
        self.out.flush()


def _section(name: str, argv: list[str], text: str) -> str:
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", ".",
                            ":(exclude)bench/RESULTS.md"],  # the sections earlier benches wrote
                           capture_output=True, text=True).stdout.strip()
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    command = " ".join(["python", name, *argv])
    state = " (with uncommitted changes)" if dirty else ""
    return (f"## `{command}`\n\nAt commit {commit}{state}, {when}, load average {load} on "
            f"{os.cpu_count()} cores.\n\n```\n{text.rstrip()}\n```\n")


def _relative(text: str) -> str:
    """`text` with no machine's folders: paths under the checkout (and beside it, where the
    shared data sets live) written relative to it."""
    return text.replace(f"{ROOT}{os.sep}", "").replace(f"{ROOT.parent}{os.sep}", f"..{os.sep}")


def record(name: str, argv: list[str], text: str) -> None:
    """Put `text` (what bench `name` printed when run with `argv`) in its section of
    `RESULTS.md`, replacing the section an earlier run with the same arguments wrote."""
    argv, text = [_relative(a) for a in argv], _relative(text)
    start, end = f"<!-- {name} {' '.join(argv)}".rstrip() + " -->", "<!-- end -->"
    body = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else _PREAMBLE
    block = f"{start}\n{_section(name, argv, text)}{end}\n"
    at = body.find(start + "\n")
    if at >= 0:
        stop = body.index(end, at) + len(end) + 1
        body = body[:at] + block + body[stop:]
    else:
        body = body.rstrip() + "\n\n" + block
    RESULTS.write_text(body, encoding="utf-8")


def run_recorded(main: Callable[[], int | None], listings: tuple[str, ...] = ()) -> int:
    """Run a bench's `main` as its command line does, printing as usual, and record what it
    printed in `RESULTS.md` when it finished well (exit status 0), unless one of `listings`
    (options that print a diagnostic listing rather than figures) was given."""
    tee = _Tee(sys.stdout)
    sys.stdout = tee  # type: ignore[assignment]
    try:
        status = main() or 0
    finally:
        sys.stdout = tee.out
    listing = any(a.split("=")[0] in listings for a in sys.argv[1:])
    if status == 0 and not listing and os.environ.get("REWIND_BENCH_RECORD", "1") != "0":
        name = Path(sys.argv[0]).resolve().relative_to(ROOT).as_posix()
        record(name, sys.argv[1:], tee.seen.getvalue())
    return int(status)
