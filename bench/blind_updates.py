"""The default contradiction judge on the blind update corpus (``blind_updates.jsonl``).

The corpus was written by a helper on this team who did not see the rules (so: data *we* wrote,
blind to the rules, not data others wrote; `bench/updates.py` is the figure on data others
wrote). Each row is a pair of memories, older then newer, labelled as a real update or a hard
non-update, in English or Chinese, and assigned to a ``tuned`` or ``held-out`` split by its
writer. Each pair is fed the way `bench/updates.py` feeds its pairs (`pair_flagged`: one fresh
session on the in-memory engine, ``s.memory.add(old)`` then ``s.memory.add(new)`` with the
default `MemoryConfig` rules judge); a pair is flagged when a memory was invalidated.

Printed: precision and recall of "flagged" on updates against non-updates, per split and per
language. ``--show N`` lists misses and false positives of the *tuned* split only; held-out rows
are never printed (tune on the tuned split, report the held-out split as run).

Run: ``python bench/blind_updates.py [--data CORPUS]... [--show N]``; by default both blind
corpora (``blind_updates.jsonl``, and ``blind_v3.jsonl``, mostly hard non-updates); skips a corpus
cleanly (exit 0) when it is absent.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from updates import TARGET_P, TARGET_R, _ratio, judge_engine, pair_flagged  # noqa: E402

from bench.common import SCORED_AGAIN  # noqa: E402

DATA = ROOT / "bench" / "corpora" / "blind_updates.jsonl"
DATA_V3 = ROOT / "bench" / "corpora" / "blind_v3.jsonl"
"""A second blind corpus, mostly hard non-updates, by another helper (``BLIND_V3.md``)."""
SPLITS = ("tuned", "held-out")
_OLD = ("old", "older", "before", "first", "a")
_NEW = ("new", "newer", "after", "second", "b")


def _field(row: dict, names: Sequence[str]) -> str:
    for name in names:
        if isinstance(row.get(name), str):
            return row[name]
    raise KeyError(f"none of {list(names)} in row {sorted(row)}")


def is_update(row: dict) -> bool:
    """The row's label: a bool ``update`` / ``is_update``, or a ``label`` string."""
    for name in ("update", "is_update"):
        if isinstance(row.get(name), bool):
            return row[name]
    label = str(row.get("label", "")).lower().replace("_", "-")
    if label in {"update", "1", "true", "yes", "supersedes"}:
        return True
    if label in {"non-update", "not-update", "no-update", "0", "false", "no", "other"}:
        return False
    raise ValueError(f"unknown label {row.get('label')!r}")


def language(row: dict) -> str:
    lang = row.get("lang") or row.get("language")
    if lang:
        return "zh" if str(lang).lower().startswith(("zh", "ch", "cn")) else "en"
    return "zh" if re.search(r"[\u4e00-\u9fff]", _field(row, _OLD) + _field(row, _NEW)) else "en"


def load(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return [r for r in rows if r.get("split") in SPLITS]


def measure(rows: Sequence[dict], show: int = 0) -> dict:
    """Counts per language (and ``all``); misses and false positives only when ``show``."""
    engine = judge_engine()
    counts = {k: {"tp": 0, "fp": 0, "pos": 0, "neg": 0} for k in ("en", "zh", "all")}
    missed: list[str] = []
    false: list[str] = []
    try:
        for n, row in enumerate(rows):
            old, new = _field(row, _OLD), _field(row, _NEW)
            want, lang = is_update(row), language(row)
            flagged = pair_flagged(engine, f"blind-{n}", old, new)
            for key in (lang, "all"):
                c = counts[key]
                c["pos" if want else "neg"] += 1
                c["tp"] += want and flagged
                c["fp"] += flagged and not want
            if want and not flagged and len(missed) < show:
                missed.append(f"{old!r} -> {new!r}")
            if flagged and not want and len(false) < show:
                false.append(f"{old!r} -> {new!r}")
    finally:
        engine.close()
    return {"counts": counts, "missed": missed, "false": false}


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", type=Path, action="append", default=None,
        help="a corpus (repeatable; default: blind_updates.jsonl and blind_v3.jsonl)",
    )
    parser.add_argument("--show", type=int, default=0, help="misses / false positives (tuned)")
    parser.add_argument("--split", choices=[*SPLITS, "both"], default="both")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    missed_target = read = False
    for path in args.data or [DATA, DATA_V3]:
        if not path.is_file():
            out(f"blind corpus not found at {path}: skipped")
            continue
        read = True
        missed_target |= _report(path, args, out)
    if read:
        out(f"target: precision >= {TARGET_P:.2f} and recall >= {TARGET_R:.2f}")
    return 1 if args.check and missed_target else 0


def _report(path: Path, args: argparse.Namespace, out: Callable[[str], None]) -> bool:
    """Print one corpus's table; True when it misses a target."""
    rows = load(path)
    out(f"{path.name}: data written by a helper on this team, blind to the rules")
    out(
        f"{'split':<10}{'lang':<6}{'updates':>8}{'others':>8}{'tp/fp':>8}{'precision':>11}{'recall':>8}"
    )
    missed_target = False
    for split in SPLITS if args.split == "both" else [args.split]:
        part = [r for r in rows if r["split"] == split]
        got = measure(part, args.show if split == "tuned" else 0)
        tag = f"  {SCORED_AGAIN}" if split == "held-out" else ""
        for lang in ("en", "zh", "all"):
            c = got["counts"][lang]
            if not c["pos"] + c["neg"]:
                continue
            p, r = _ratio(c["tp"], c["tp"] + c["fp"]), _ratio(c["tp"], c["pos"])
            out(
                f"{split:<10}{lang:<6}{c['pos']:>8}{c['neg']:>8}{c['tp']:>5}/{c['fp']:<2}"
                f"{p:>11.3f}{r:>8.3f}{tag}"
            )
            if lang == "all" and (r < TARGET_R or (c["tp"] + c["fp"] and p < TARGET_P)):
                missed_target = True
        for line in got["missed"]:
            out(f"  MISS {line}")
        for line in got["false"]:
            out(f"  FP   {line}")
    return missed_target


if __name__ == "__main__":
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
