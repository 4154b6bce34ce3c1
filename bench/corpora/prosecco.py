"""The default contradiction judge on ProSeCCo (English self-contradictions by one speaker, labelled
by others), fed through session memory as a user would feed it.

ProSeCCo (``henrikebeyer/ProSeCCo``, CC BY-SA 4.0, read from a fetched snapshot at `COMMIT`,
never copied into the repository) pairs two things one speaker said in a debate, a panel or a
forum (sources QT30, QT50, US2016), labelled ``self-contradiction`` or ``no self-contradiction``
by its authors. Nobody on this project wrote or labelled it; nothing was tuned on it: all of it is
held-out. One fresh session per pair: ``"<speaker>: <locution 1>"`` then ``"<speaker>: <locution
2>"`` through `s.memory.add` with the default `MemoryConfig` judge. A pair is flagged when a memory
was invalidated. Printed: precision and recall of "flagged" on self-contradictions against the
rest, and the share of turns invalidated.

What to expect: these are argumentative inconsistencies ("I find a reason not to be in the
room" / "I'm five minutes from where things are happening"), not stated changes; a judge of stated
changes should flag almost none. The figure that matters is that it flags no non-contradiction.
First run (default `RulesJudge`): 0 of 1,327 pairs flagged, as locutions and as propositions (642
non-contradictions: no false alarm; 685 self-contradictions: recall 0, none is a stated change).

Run: ``python bench/corpora/prosecco.py --git $MIRRORS/henrikebeyer+ProSeCCo/repo``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cdconv import judge_engine  # noqa: E402  (bench/corpora, this script's folder)

COMMIT = "eeffc009228c67b704346ea1221ee176c8ddc785"
FILE = "data/ProSeCCo_final_corpus/ProSeCCo_final.json"


def load(git: str) -> list[dict]:
    """The pairs (one JSON object a line)."""
    raw = subprocess.run(
        ["git", f"--git-dir={git}", "show", f"{COMMIT}:{FILE}"], capture_output=True, check=True
    ).stdout.decode("utf-8")
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def measure(git: str, field: str = "locution", show: int = 0) -> dict:
    engine = judge_engine()
    tp = fp = positives = negatives = invalid = turns = 0
    shown: list[str] = []
    try:
        for n, row in enumerate(load(git)):
            s = engine.session(f"prosecco-{n}")
            for i in (1, 2):
                s.memory.add(f"{row['speaker_id']}: {row[f'{field}_{i}']}", importance=0.8)
            k = sum(not m.valid for m in s.memory.items(include_invalid=True))
            turns += 2
            invalid += k
            if row["label"] == "self-contradiction":
                positives += 1
                tp += k > 0
            else:
                negatives += 1
                fp += k > 0
            if k and len(shown) < show:
                shown.append(f"{row['label']}: {row[f'{field}_1']} | {row[f'{field}_2']}")
    finally:
        engine.close()
    return {
        "pairs": positives + negatives,
        "precision": tp / (tp + fp) if tp + fp else None,
        "recall": tp / max(1, positives),
        "tp": tp,
        "fp": fp,
        "positives": positives,
        "negatives": negatives,
        "invalidated_share": invalid / max(1, turns),
        "shown": shown,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git", required=True, help="bare git dir of henrikebeyer/ProSeCCo")
    parser.add_argument("--show", type=int, default=0, help="print the first N flagged pairs")
    args = parser.parse_args()
    for field in ("locution", "proposition"):
        r = measure(args.git, field, args.show)
        precision = "n/a (nothing flagged)" if r["precision"] is None else f"{r['precision']:.3f}"
        print(
            f"ProSeCCo {field}s [held-out]: {r['pairs']} pairs ({r['positives']} "
            f"self-contradictions); flagged {r['tp']} / {r['fp']} (contradiction / not); "
            f"precision {precision}, recall {r['recall']:.3f}; turns invalidated "
            f"{r['invalidated_share']:.2%}"
        )
        for line in r["shown"]:
            print("  flagged", line)


if __name__ == "__main__":
    main()
