"""The default contradiction judge on CDConv, fed through session memory as a user would feed it
(protocol in ``bench/corpora/CDCONV.md``, fixed before the first run).

Run::

    python bench/corpora/cdconv.py --git $MIRRORS/thu-coai+CDConv/repo [--split dev]

Prints, per split: chats, precision and recall of "a memory was invalidated" on label 3 against
label 0, the flag rate of labels 1 and 2, and the share of all turns invalidated; with
``--show N`` the first N flagged label-0 chats and missed label-3 chats of the *dev* split (the
held-out split is never shown).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine import Engine  # noqa: E402
from engine.memory.embeddings import HashingEmbedder  # noqa: E402
from engine.memory.session import MemoryConfig  # noqa: E402

COMMIT = "2e88d215b2986a3719f9f63508e10a2e0fe72bfe"
FILES = {"dev": "codes/data/cdconv/4class_dev.tsv", "held-out": "codes/data/cdconv/4class_test.tsv"}
SPEAKERS = ("user", "bot", "user", "bot")


def load(git: str, split: str) -> list[tuple[list[str], int]]:
    """The chats of a split: (four turns, label)."""
    raw = subprocess.run(
        ["git", f"--git-dir={git}", "show", f"{COMMIT}:{FILES[split]}"],
        capture_output=True, check=True,
    ).stdout.decode("utf-8")
    out = []
    for line in raw.splitlines():
        cells = line.split("\t")
        if len(cells) == 5 and cells[4].strip().isdigit():
            out.append((cells[:4], int(cells[4])))
    return out


def feed(engine: Engine, n: int, turns: list[str]) -> tuple[int, list[str]]:
    """Add the chat's turns to a fresh session; (memories invalidated, their texts)."""
    s = engine.session(f"cdconv-{n}")
    for speaker, text in zip(SPEAKERS, turns, strict=True):
        if text.strip():
            s.memory.add(f"{speaker}: {text}", importance=0.8)
    invalid = [m.text for m in s.memory.items(include_invalid=True) if not m.valid]
    return len(invalid), invalid


def judge_engine() -> Engine:
    """An in-memory engine whose clock moves one second a memory, with the hashing embedder:
    the default rules judge, as a judge corpus bench (this one, `prosecco.py`) runs it."""
    clock = [1_800_000_000.0]

    def tick() -> float:
        clock[0] += 1.0
        return clock[0]

    return Engine.open(
        "sqlite:///:memory:", memory=MemoryConfig(embedder=HashingEmbedder()), clock=tick
    )


def measure(git: str, split: str, show: int = 0) -> dict:
    chats = load(git, split)
    engine = judge_engine()
    flagged = {0: 0, 1: 0, 2: 0, 3: 0}
    count = {0: 0, 1: 0, 2: 0, 3: 0}
    turns = invalid = 0
    shown_fp: list[str] = []
    shown_fn: list[str] = []
    try:
        for n, (chat, label) in enumerate(chats):
            k, texts = feed(engine, n, chat)
            count[label] += 1
            flagged[label] += k > 0
            turns += sum(1 for t in chat if t.strip())
            invalid += k
            if show and split == "dev":
                if label == 0 and k and len(shown_fp) < show:
                    shown_fp.append(" | ".join(chat) + f"  -> invalid: {texts}")
                if label == 3 and not k and len(shown_fn) < show:
                    shown_fn.append(" | ".join(chat))
    finally:
        engine.close()
    tp, fp = flagged[3], flagged[0]
    return {
        "split": split,
        "chats": len(chats),
        "precision": tp / max(1, tp + fp),
        "recall": tp / max(1, count[3]),
        "tp": tp,
        "fp": fp,
        "positives": count[3],
        "negatives": count[0],
        "flag_rate_1": flagged[1] / max(1, count[1]),
        "flag_rate_2": flagged[2] / max(1, count[2]),
        "invalidated_share": invalid / max(1, turns),
        "turns": turns,
        "shown_fp": shown_fp,
        "shown_fn": shown_fn,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--git", required=True, help="bare git dir of thu-coai/CDConv")
    parser.add_argument("--split", choices=[*FILES, "both"], default="both")
    parser.add_argument("--show", type=int, default=0)
    args = parser.parse_args()
    splits = list(FILES) if args.split == "both" else [args.split]
    print(f"{'split':<10}{'chats':>7}{'P(3 vs 0)':>11}{'R(3)':>8}{'tp/fp':>10}"
          f"{'flag 1':>8}{'flag 2':>8}{'turns invalid':>15}")
    for split in splits:
        r = measure(args.git, split, args.show)
        tag = " [held-out]" if split == "held-out" else ""
        print(f"{split:<10}{r['chats']:>7}{r['precision']:>11.3f}{r['recall']:>8.3f}"
              f"{str(r['tp']) + '/' + str(r['fp']):>10}{r['flag_rate_1']:>8.3f}"
              f"{r['flag_rate_2']:>8.3f}{r['invalidated_share']:>14.2%}{tag}")
        for line in r["shown_fp"]:
            print("  FP", line)
        for line in r["shown_fn"]:
            print("  FN", line)


if __name__ == "__main__":
    main()
