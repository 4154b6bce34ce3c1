"""What the corpus converters share: reading a bare git snapshot, the runs file (gzip JSON Lines,
written whole or not at all), the labels file with its per-split summary, and the pieces of the
labelling rules that are the same in every corpus (whitespace folding, the ABABA cycle, a loop's
label, a step's line in a listing). Each converter keeps its own rule; only these pieces are here.

The converters run as scripts (their folder is then on ``sys.path``) and import this module by
its name; whoever loads a converter by its path puts this folder on ``sys.path`` first
(``tests/support/converters.py``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any


def git(repo: Path, *args: str) -> str:
    """What ``git --git-dir repo args`` prints (an error when git fails)."""
    return subprocess.run(
        ["git", "--git-dir", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout


def json_or_text(text: str) -> Any:
    """A JSON object or array as its value; any other text (other JSON included) as it is."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (dict, list)) else text


def read_runs(path: Path) -> list[dict]:
    """Every run of a runs file, in order."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def write_runs(runs: list[dict], out: Path, summary: str | None = None) -> None:
    """Write `runs` one line each (keys sorted) to `out`, through a temporary file so that no
    half-written file is left, and print `summary` (by default how many runs and steps) and
    where."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as fh:
        for run in runs:
            fh.write(json.dumps(run, sort_keys=True) + "\n")
    tmp.replace(out)
    if summary is None:
        summary = f"{len(runs)} runs, {sum(len(r['steps']) for r in runs)} steps"
    print(f"{summary} -> {out}")


def write_labels(labels: dict[str, dict], out: Path) -> None:
    """Write the labels (run id -> split and label) to `out` through a temporary file, and print
    how many runs and loops each split has."""
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(labels, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(out)
    for name in ("tuned", "heldout"):
        part = [v for v in labels.values() if v["split"] == name]
        print(f"{name}: {len(part)} runs, {sum(v['looping'] for v in part)} loops")


def split_halves(
    groups: dict[str, list[str]], seed: int, order: Callable[[str], Any] | None = None
) -> dict[str, str]:
    """Id -> ``tuned`` / ``heldout``: group by group (in name order), the ids sorted (by
    `order` when given) and shuffled with one generator seeded with `seed`; the first half,
    rounded up, tuned."""
    rng = random.Random(seed)
    split: dict[str, str] = {}
    for group in sorted(groups):
        ids = sorted(groups[group], key=order)
        rng.shuffle(ids)
        for k, one in enumerate(ids):
            split[one] = "tuned" if k < (len(ids) + 1) // 2 else "heldout"
    return split


def to_read(
    runs: list[dict],
    which: str,
    label_run: Callable[[list[dict]], dict],
    near_misses: Callable[[list[dict]], list[str]],
) -> list[tuple[dict, str]]:
    """The runs a listing shows with its head line: those `label_run` labels looping
    (``loops``), or those it labels healthy that `near_misses` points at (``near``)."""
    chosen = []
    for run in runs:
        lab = label_run(run["steps"])
        if which == "loops" and lab["looping"]:
            head = f"LOOP {lab['reason']}: start {lab['loop_start']}, flag {lab['flag_at']}"
        elif which == "near" and not lab["looping"] and near_misses(run["steps"]):
            head = "healthy; " + ", ".join(near_misses(run["steps"]))
        else:
            continue
        chosen.append((run, f"\n{run['id']} resolved={run['resolved']} {head}"))
    return chosen


def fold(v: Any) -> Any:
    """A value with the whitespace in its strings collapsed (at any depth)."""
    if isinstance(v, str):
        return " ".join(v.split())
    if isinstance(v, dict):
        return {k: fold(x) for k, x in v.items()}
    if isinstance(v, list):
        return [fold(x) for x in v]
    return v


def find_cycle(calls: list[tuple[int, str]]) -> tuple[int, int] | None:
    """(start, end) step indexes when the last entries of `calls` (step index, key) repeat a
    block of 2 to 5 different keys for two rounds and the head of a third (ABABA), else None."""
    for period in range(2, 6):
        span = 2 * period + 1
        if len(calls) < span:
            break
        keys = [k for _, k in calls[-span:]]
        if len(set(keys[:period])) == period and all(
            keys[j] == keys[j + period] for j in range(span - period)
        ):
            return calls[-span][0], calls[-1][0]
    return None


def loop(start: int, flag: int, reason: str) -> dict:
    """The label of a looping run: where the loop starts, where the rule flags it, which clause."""
    return {"looping": True, "loop_start": start, "flag_at": flag, "reason": reason}


def commands(doc: str) -> tuple[argparse.ArgumentParser, Any]:
    """A converter's command line (described by its docstring's first line) and its
    sub-commands, to which `add_convert` and `add_label` add the usual two."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    return parser, parser.add_subparsers(dest="cmd", required=True)


def add_convert(sub: Any, repo: str) -> None:
    """``convert --repo <bare git snapshot of repo> --out <runs file>``."""
    c = sub.add_parser("convert")
    c.add_argument("--repo", type=Path, required=True, help="bare git snapshot of " + repo)
    c.add_argument("--out", type=Path, required=True)


def add_listing(sub: Any) -> argparse.ArgumentParser:
    """``listing --runs <runs file> [--which loops|near]`` (returned, for more options)."""
    li = sub.add_parser("listing")
    li.add_argument("--runs", type=Path, required=True)
    li.add_argument("--which", choices=("loops", "near"), default="loops")
    return li


def add_label(sub: Any) -> None:
    """``label --runs <runs file> --out <labels file>``."""
    lab = sub.add_parser("label")
    lab.add_argument("--runs", type=Path, required=True)
    lab.add_argument("--out", type=Path, required=True)
