"""The labelled sample of the real-runs corpus: which runs, which split, and a reader's view.

The sample is drawn without looking at any detector: 30 runs per framework, uniformly at random
with a fixed seed, then split 50/50 into ``tuned`` and ``heldout`` with another fixed seed
(stratified by framework). The held-out half must never be used to tune the detector.

The enriched set (not random, reported apart): every other run with a stretch that a plain
repetition listing points at (3+ turns in a row without a tool call, the same call 3+ times in a
row, or the same call 8+ times in the run), found without the detector; labelled by hand like the
sample, by the same rule.

    python bench/corpora/sample.py ids            # the sample with its split
    python bench/corpora/sample.py enriched       # the enriched candidates
    python bench/corpora/sample.py show RUN_ID    # one line per step, for the human labeller
"""

from __future__ import annotations

import gzip
import json
import random
import sys
from pathlib import Path

CORPUS = Path(__file__).with_name("realruns.jsonl.gz")
SAMPLE_SEED = 20261130
SPLIT_SEED = 12
PER_FRAMEWORK = 30


def load_runs(path: Path = CORPUS) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def draw_sample(runs: list[dict]) -> dict[str, str]:
    """Run id -> split ("tuned" or "heldout")."""
    frameworks = sorted({r["framework"] for r in runs})
    picked: dict[str, str] = {}
    sampler = random.Random(SAMPLE_SEED)
    splitter = random.Random(SPLIT_SEED)
    for fw in frameworks:
        ids = sorted(r["id"] for r in runs if r["framework"] == fw)
        chosen = sorted(sampler.sample(ids, PER_FRAMEWORK))
        order = chosen[:]
        splitter.shuffle(order)
        half = len(order) // 2
        for i, run_id in enumerate(order):
            picked[run_id] = "tuned" if i < half else "heldout"
    return dict(sorted(picked.items()))


def enriched_candidates(runs: list[dict], exclude: set[str]) -> list[str]:
    """Runs outside `exclude` with a repetition worth a close read (see the module docstring)."""
    out = []
    for run in runs:
        if run["id"] in exclude:
            continue
        steps = run["steps"]
        turns = longest = 0
        streak = same = 1
        counts: dict[str, int] = {}
        for i, st in enumerate(steps):
            turns = turns + 1 if st.get("tool") is None else 0
            longest = max(longest, turns)
            if st.get("tool") and st["tool"] != "TodoWrite":
                key = json.dumps([st["tool"], st.get("args")], sort_keys=True)
                counts[key] = counts.get(key, 0) + 1
            if i and st.get("tool") and st["tool"] == steps[i - 1].get("tool"):
                streak = streak + 1 if st.get("args") == steps[i - 1].get("args") else 1
            else:
                streak = 1
            same = max(same, streak)
        if longest >= 3 or same >= 3 or max(counts.values(), default=0) >= 8:
            out.append(run["id"])
    return out


def _short(value, n: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 1] + "…"


def show(run: dict) -> None:
    print(f"# {run['id']}  {run['framework']}  {run['model']}  resolved={run['resolved']}")
    for i, st in enumerate(run["steps"]):
        if st.get("tool") is None:
            print(f"{i:3d} TURN  {_short(st.get('text') or '', 150)}")
            continue
        args = st.get("args")
        if isinstance(args, dict) and set(args) <= {"command", "description", "timeout"}:
            args = args.get("command")
        mark = "ok " if st.get("ok", True) else "ERR"
        out = st.get("result") if st.get("ok", True) else st.get("error")
        print(f"{i:3d} {mark} {st['tool'][:10]:10} {_short(args, 150)}")
        print(f"            -> {_short(out or '', 130)}")


def main() -> None:
    runs = load_runs()
    sample = draw_sample(runs)
    if sys.argv[1:2] == ["ids"]:
        for run_id, split in sample.items():
            print(split, run_id)
    elif sys.argv[1:2] == ["enriched"]:
        for run_id in enriched_candidates(runs, set(sample)):
            print(run_id)
    elif sys.argv[1:2] == ["show"]:
        by_id = {r["id"]: r for r in runs}
        for run_id in sys.argv[2:]:
            show(by_id[run_id])
            print()
    else:
        print(__doc__)


if __name__ == "__main__":
    main()
