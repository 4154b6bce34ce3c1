"""LoCoMo turn-level evidence retrieval: BM25 alone, dense alone, hybrid (and naive baselines).

Protocol: one index per conversation over its turns rendered ``"Speaker: text"``; each question is
a query; gold = its evidence turn ids ``D<session>:<turn>``. recall@k is the share of a question's
gold turns found in the top k, averaged over questions; MRR is the mean reciprocal rank of the
first gold turn within the top 100. The data set is read from ``../shared/data/locomo10.json``
relative to the repository root (it is never copied into the repository).

Run: ``.venv/bin/python bench/retrieval.py [--data PATH] [--check]`` (about 2 minutes on two
cores, most of it embedding 5,882 turns with all-MiniLM-L6-v2).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.memory.retrieval import (  # noqa: E402
    BM25Index,
    HybridIndex,
    weighted_rrf,
)

DATA = ROOT.parent / "shared" / "data" / "locomo10.json"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
KS = (5, 10, 20)
MRR_DEPTH = 100


def normalize_evidence(evidence: Sequence[str]) -> list[str]:
    """Gold ids as ``D<s>:<t>``; fixes the data set's few malformed ids (``D:11:26``, ``D30:05``,
    several ids in one string). Ids that still match no turn count as misses."""
    out = []
    for item in evidence:
        for part in re.split(r"[;,\s]+", item):
            m = re.fullmatch(r"D:?(\d+):0*(\d+)", part)
            if m:
                out.append(f"D{m[1]}:{m[2]}")
    return out


def load(path: Path) -> list[dict]:
    """Conversations as ``{"turns": [(id, "Speaker: text")], "questions": [(q, gold, cat)]}``."""
    raw = json.loads(path.read_text(encoding="utf-8"))
    conversations = []
    for sample in raw:
        conv = sample["conversation"]
        sessions = sorted(
            (k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k[8:])
        )
        turns = [
            (turn["dia_id"], f"{turn['speaker']}: {turn['text']}")
            for key in sessions
            for turn in conv[key]
        ]
        questions = [
            (q["question"], normalize_evidence(q.get("evidence", [])), int(q["category"]))
            for q in sample["qa"]
        ]
        conversations.append({"turns": turns, "questions": questions})
    return conversations


def score(ranked: list[str], gold: list[str]) -> dict[str, float]:
    """recall@k for each k and reciprocal rank of one ranking."""
    g = set(gold)
    out = {f"R@{k}": len(g & set(ranked[:k])) / len(g) for k in KS}
    rr = 0.0
    for i, doc in enumerate(ranked[:MRR_DEPTH], start=1):
        if doc in g:
            rr = 1.0 / i
            break
    out["MRR"] = rr
    return out


def mean(rows: list[dict[str, float]]) -> dict[str, float]:
    """Column means."""
    if not rows:
        return {}
    return {key: sum(r[key] for r in rows) / len(rows) for key in rows[0]}


def naive_tokens(text: str) -> list[str]:
    """Baseline tokenizer: lowercase word characters, nothing else."""
    return re.findall(r"\w+", text.lower())


def run(path: Path) -> tuple[dict[str, dict[int, list[dict[str, float]]]], dict[str, float]]:
    """Rank every question with every system; returns per-system, per-category scores."""
    systems: dict[str, dict[int, list[dict[str, float]]]] = {}
    timing = {"index_s": 0.0, "query_s": 0.0, "queries": 0}

    def record(name: str, cat: int, ranked: list[str], gold: list[str]) -> None:
        systems.setdefault(name, {}).setdefault(cat, []).append(score(ranked, gold))

    for conv in load(path):
        t0 = time.perf_counter()
        hybrid = HybridIndex()  # the shipped default: all-MiniLM-L6-v2, weights, feedback
        hybrid.add_many(conv["turns"])
        hybrid.dense.flush()  # embed all turns in one batch
        naive = BM25Index(tokenizer=naive_tokens, k1=1.5, b=0.75)  # rank-bm25 defaults
        naive.add_many(conv["turns"])
        timing["index_s"] += time.perf_counter() - t0
        for question, gold, cat in conv["questions"]:
            if not gold:
                continue
            t1 = time.perf_counter()
            hits = hybrid.search_detailed(question, MRR_DEPTH)
            timing["query_s"] += time.perf_counter() - t1
            timing["queries"] += 1
            bm25 = [d for d, _ in hybrid.bm25.search(question, hybrid.depth)]
            dense = [d for d, _ in hybrid.dense.search(question, hybrid.depth)]
            record(
                "BM25 naive (\\w+, k1=1.5 b=0.75)",
                cat,
                [d for d, _ in naive.search(question, MRR_DEPTH)],
                gold,
            )
            record("BM25", cat, bm25, gold)
            record("dense (MiniLM)", cat, dense, gold)
            equal = weighted_rrf([bm25, dense], (1.0, 1.0))
            record("RRF equal, no feedback", cat, [d for d, _ in equal], gold)
            weighted = weighted_rrf([bm25, dense], hybrid.weights)
            record(f"RRF {hybrid.weights}, no feedback", cat, [d for d, _ in weighted], gold)
            record("hybrid (default)", cat, [h.id for h in hits], gold)
    return systems, timing


def table(title: str, rows: dict[str, dict[str, float]], n: int) -> str:
    """A fixed-width table, one row per system."""
    cols = [f"R@{k}" for k in KS] + ["MRR"]
    width = max(len(name) for name in rows) + 2
    lines = [f"{title}  (n={n})", f"{'system':<{width}}" + "".join(f"{c:>8}" for c in cols)]
    for name, metrics in rows.items():
        lines.append(f"{name:<{width}}" + "".join(f"{metrics[c]:>8.3f}" for c in cols))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, out: Callable[[str], None] = print) -> int:
    """Run the benchmark and print the tables.

    Returns:
        0, or 1 with ``--check`` when a target is missed.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        out(f"LoCoMo not found at {args.data}: pass --data PATH")
        return 2
    t0 = time.perf_counter()
    systems, timing = run(args.data)
    overall = {
        name: mean([s for cat_rows in cats.values() for s in cat_rows])
        for name, cats in systems.items()
    }
    n_all = sum(len(v) for v in next(iter(systems.values())).values())
    out(table("LoCoMo turn-level evidence retrieval, all questions", overall, n_all))
    for cat, label in CATEGORIES.items():
        rows = {name: mean(cats.get(cat, [])) for name, cats in systems.items()}
        n = len(next(iter(systems.values())).get(cat, []))
        if n:
            out("")
            out(table(f"category {cat} ({label})", rows, n))
    out("")
    out(
        f"hybrid query latency: {timing['query_s'] / timing['queries'] * 1000:.1f} ms mean over "
        f"{timing['queries']} queries (indexes of 369-689 turns); indexing + embedding "
        f"{timing['index_s']:.1f} s; total {time.perf_counter() - t0:.1f} s; load average "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
    )

    hybrid = overall["hybrid (default)"]
    singles = [overall["BM25"], overall["dense (MiniLM)"]]
    failures = []
    for metric in hybrid:
        best = max(s[metric] for s in singles)
        verdict = "ok" if hybrid[metric] >= best else "WORSE"
        if verdict != "ok":
            failures.append(metric)
        out(f"target hybrid >= best single, {metric}: {hybrid[metric]:.3f} vs {best:.3f} {verdict}")
    r10 = hybrid["R@10"]
    out(f"target hybrid R@10 >= 0.60: {r10:.3f} {'ok' if r10 >= 0.60 else 'MISSED'}")
    if r10 < 0.60:
        failures.append("R@10 target")
    worst = []
    for cat in CATEGORIES:
        for metric in hybrid:
            h = mean(systems["hybrid (default)"].get(cat, [])).get(metric)
            b = max(
                mean(systems[s].get(cat, [])).get(metric, 0) for s in ("BM25", "dense (MiniLM)")
            )
            if h is not None and h < b:
                worst.append(f"cat {cat} {metric} {h - b:+.3f}")
    out("per-category metrics where hybrid trails the best single: " + (", ".join(worst) or "none"))
    return 1 if (args.check and failures) else 0


if __name__ == "__main__":
    raise SystemExit(main())
