"""The default contradiction judge on update pairs written by others (LongMemEval's
knowledge-update evidence; protocol in ``bench/corpora/LME_UPDATES.md``).

Two feedings, both through ``s.memory.add`` with the default rules judge, one fresh session each:

- **pairs**: an update pair (old value, new value) or a hard non-update pair (two consecutive
  evidence turns of another question type), old then new. Flagged when a memory was invalidated.
  Precision and recall of "flagged" on update pairs against non-update pairs.
- **chats**: every user turn of a question's oracle sessions, in date order. A hit is the old
  evidence turn of an update question superseded by its new evidence turn; every other
  invalidation is a false positive. Printed: precision, recall, and the share of the other
  (non-update) turns invalidated.

Figures per split: ``tuned`` (rules may be changed looking at it) and ``held-out`` (reported as
is). The issue's target: precision >= 0.90 and recall >= 0.40 on pairs written by others.

Run: ``python bench/updates.py [--git $MIRRORS/hussainzs+Memoria/repo] [--show N]``; skips
cleanly (exit 0) when the snapshot is absent. ``--show`` lists misses and false positives of the
tuned split only.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "corpora"))

from cdconv import judge_engine  # noqa: E402  (bench/corpora)
from lme_updates import GIT, REPO, Question, available, load  # noqa: E402

from bench.common import SCORED_AGAIN  # noqa: E402

SPLITS = ("tuned", "held-out")
TARGET_P, TARGET_R = 0.90, 0.40


def _ratio(a: int, b: int) -> float:
    return a / b if b else 0.0


def pair_flagged(engine, name: str, old: str, new: str) -> bool:
    """Feed ``old`` then ``new`` to a fresh session of ``engine`` through ``s.memory.add``;
    whether any memory was invalidated."""
    s = engine.session(name)
    s.memory.add(old)
    s.memory.add(new)
    return any(not m.valid for m in s.memory.items(include_invalid=True))


def measure_pairs(questions: Sequence[Question], show: int = 0) -> dict:
    engine = judge_engine()
    tp = fp = pos = neg = 0
    missed: list[str] = []
    false: list[str] = []
    try:
        n = 0
        for q in questions:
            pairs = [(q.update, True)] if q.update else []
            pairs += [(p, False) for p in q.non_update_pairs]
            for (a, b), is_update in pairs:
                n += 1
                flagged = pair_flagged(engine, f"pair-{n}", q.turns[a], q.turns[b])
                if is_update:
                    pos += 1
                    tp += flagged
                    if not flagged and len(missed) < show:
                        missed.append(f"{q.qid}: {q.turns[a][:160]!r} -> {q.turns[b][:160]!r}")
                else:
                    neg += 1
                    fp += flagged
                    if flagged and len(false) < show:
                        false.append(f"{q.qid}: {q.turns[a][:160]!r} -> {q.turns[b][:160]!r}")
    finally:
        engine.close()
    return {
        "tp": tp,
        "fp": fp,
        "pos": pos,
        "neg": neg,
        "missed": missed,
        "false": false,
        "precision": _ratio(tp, tp + fp),
        "recall": _ratio(tp, pos),
    }


def measure_chats(questions: Sequence[Question], show: int = 0) -> dict:
    engine = judge_engine()
    tp = fp = pos = turns = other_turns = 0
    false: list[str] = []
    try:
        for q in questions:
            s = engine.session(f"chat-{q.qid}")
            ids = [s.memory.add(text) for text in q.turns]
            turns += len(ids)
            upd = q.update
            if upd:
                pos += 1
            other_turns += len(ids) - (1 if upd else 0)
            by_id = {m.id: m for m in s.memory.items(include_invalid=True)}
            for i, mid in enumerate(ids):
                m = by_id.get(mid)
                if m is None or m.valid:
                    continue
                if upd and i == upd[0] and m.superseded_by == ids[upd[1]]:
                    tp += 1
                    continue
                fp += 1
                if len(false) < show:
                    by = by_id.get(m.superseded_by or "")
                    false.append(
                        f"{q.qid} ({q.qtype}): {m.text[:140]!r} <- "
                        f"{(by.text if by else '?')[:140]!r} [{m.invalid_reason}]"
                    )
    finally:
        engine.close()
    return {
        "tp": tp,
        "fp": fp,
        "pos": pos,
        "turns": turns,
        "false": false,
        "precision": _ratio(tp, tp + fp),
        "recall": _ratio(tp, pos),
        "other_invalidated": _ratio(fp, other_turns),
        "other_turns": other_turns,
    }


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git", type=Path, default=GIT, help=f"bare git dir of {REPO}")
    parser.add_argument("--show", type=int, default=0, help="misses / false positives (tuned)")
    parser.add_argument("--split", choices=[*SPLITS, "both"], default="both")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    if not available(args.git):
        out(f"snapshot of {REPO} not found at {args.git}: skipped (fetch it, or pass --git)")
        return 0
    questions = load(args.git)
    missed_target = False
    out(
        f"{'split':<10}{'feeding':<7}{'updates':>8}{'others':>8}{'tp/fp':>8}{'precision':>11}"
        f"{'recall':>8}{'others invalidated':>20}"
    )
    for split in SPLITS if args.split == "both" else [args.split]:
        part = [q for q in questions if q.split == split]
        show = args.show if split == "tuned" else 0
        p = measure_pairs(part, show)
        c = measure_chats(part, show)
        tag = f"  {SCORED_AGAIN}" if split == "held-out" else ""
        rows = (
            ("pairs", p["pos"], p["neg"], p, _ratio(p["fp"], p["neg"])),
            ("chats", c["pos"], c["other_turns"], c, c["other_invalidated"]),
        )
        for feeding, ups, others, r, share in rows:
            hits = f"{r['tp']}/{r['fp']}"
            out(
                f"{split:<10}{feeding:<7}{ups:>8}{others:>8}{hits:>8}{r['precision']:>11.3f}"
                f"{r['recall']:>8.3f}{share:>19.2%}{tag}"
            )
        for line in p["missed"]:
            out(f"  MISS {line}")
        for line in p["false"] + c["false"]:
            out(f"  FP   {line}")
        for r in (p, c):
            if r["recall"] < TARGET_R or (r["tp"] + r["fp"] and r["precision"] < TARGET_P):
                missed_target = True
    out(f"target: precision >= {TARGET_P:.2f} and recall >= {TARGET_R:.2f} on both feedings")
    return 1 if args.check and missed_target else 0


if __name__ == "__main__":
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
