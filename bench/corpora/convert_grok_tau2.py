"""Convert the Grok tau2-bench simulations of ``blakeelias/tau2-bench`` into the detector's Step
vocabulary (a second conversational corpus), and list the runs a reader must open to label it.

Source: ``blakeelias/tau2-bench`` (a fork of tau2-bench, MIT licence), branch ``addendum`` at
commit `COMMIT`, every ``data/simulations/*.json`` file there: simulations its author ran with
Grok 3, Grok 3 mini, Grok 4 and Grok 4 fast as the agent (and as the simulated customer), on
the airline domain (also with a stricter or a relaxed policy of his) and on telecom. Files of 4
MiB and more are not in the snapshot and are left out. A simulation that appears in several
files is kept once (the first file, in name order). These are other people's agent runs:
evaluate on them, never copy them into the project (the converter, the rule and the labels are
committed; the runs are written beside the checkout).

The mapping is `convert_tau2.convert`'s (one step per tool call with ``turn`` the message's
position, an agent turn per message without a call, ``{"user": ...}`` for the customer).

Run (with a git snapshot of the repository in $MIRRORS):

    python bench/corpora/convert_grok_tau2.py convert \\
        --git $MIRRORS/blakeelias+tau2-bench/repo --out ../shared/data/grok_tau2.jsonl.gz
    python bench/corpora/convert_grok_tau2.py listing --runs ../shared/data/grok_tau2.jsonl.gz
    python bench/corpora/convert_grok_tau2.py label --runs ../shared/data/grok_tau2.jsonl.gz \\
        --out bench/corpora/grok_tau2_labels.json

Each output line is one run: ``id`` (``<set>/<task>/<simulation id prefix>``), ``set``
(``<agent model>/<domain>``), ``source`` (repo, commit, path), ``resolved`` (reward 1.0),
``termination``, ``steps``.
"""

from __future__ import annotations

import collections
import difflib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from corpus_kit import add_label, commands, read_runs, split_halves, write_labels, write_runs

REPO = "blakeelias/tau2-bench"
COMMIT = "cf95bf5acba69b67e31b79fc7a7255307cb446bc"
FOLDER = "data/simulations"


def _tau2():
    path = Path(__file__).with_name("convert_tau2.py")
    spec = importlib.util.spec_from_file_location("rewind_convert_tau2", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "--git-dir", str(repo), *args], capture_output=True, text=True)


def convert(repo: Path, out: Path) -> None:
    tau2 = _tau2()
    names = _git(repo, "ls-tree", "-r", "--name-only", COMMIT, FOLDER).stdout.split("\n")
    seen: set[str] = set()
    runs: list[dict[str, Any]] = []
    for name in sorted(n for n in names if n.endswith(".json")):
        shown = _git(repo, "show", f"{COMMIT}:{name}")
        if shown.returncode:  # not in the snapshot (4 MiB or more)
            continue
        data = json.loads(shown.stdout)
        info = data.get("info") or {}
        model = ((info.get("agent_info") or {}).get("llm") or "?").split("/")[-1]
        domain = (info.get("environment_info") or {}).get("domain_name") or "?"
        for sim in data.get("simulations") or []:
            if sim["id"] in seen:
                continue
            seen.add(sim["id"])
            reward = (sim.get("reward_info") or {}).get("reward")
            runs.append(
                {
                    "id": f"{model}-{domain}/{sim['task_id']}/{sim['id'][:8]}",
                    "set": f"{model}/{domain}",
                    "source": {"repo": REPO, "commit": COMMIT, "path": name},
                    "resolved": reward == 1.0 if reward is not None else None,
                    "termination": sim.get("termination_reason"),
                    "steps": tau2.convert(sim),
                }
            )
    write_runs(runs, out, f"{len(runs)} runs")


def _head(text: Any) -> str:
    return " ".join(str(text or "").split())[:60]


def candidates(steps: list[dict]) -> list[str]:
    """Why a reader must open this run (TAU2_LABELS.md's listing; not the detector): the same
    tool and arguments 3+ times, the same tool and error head 3+ times, one tool failing 4+
    times, 3 agent turns in a row with nearly the same text (user turns skipped)."""
    calls = collections.Counter()
    errors = collections.Counter()
    fails = collections.Counter()
    why = []
    texts: list[str] = []
    for s in steps:
        if "user" in s:
            continue
        if s.get("tool") is None:
            texts.append(s.get("text") or "")
            if len(texts) >= 3 and all(
                difflib.SequenceMatcher(None, texts[-1], t).ratio() > 0.8 for t in texts[-3:-1]
            ):
                why.append("3 similar turns")
            continue
        texts = []
        calls[(s["tool"], json.dumps(s.get("args"), sort_keys=True))] += 1
        if s.get("ok") is False:
            errors[(s["tool"], _head(s.get("error")))] += 1
            fails[s["tool"]] += 1
    why += [f"same call x{n}: {k[0]}" for k, n in calls.items() if n >= 3]
    why += [f"same error x{n}: {k[0]}" for k, n in errors.items() if n >= 3]
    why += [f"{t} failed x{n}" for t, n in fails.items() if n >= 4]
    return sorted(set(why))


def listing(runs_path: Path) -> None:
    runs = read_runs(runs_path)
    picked = [(r["id"], candidates(r["steps"])) for r in runs]
    for run_id, why in picked:
        if why:
            print(run_id, "; ".join(why))
    print(f"{sum(bool(w) for _, w in picked)} of {len(runs)} runs to read")


SEED = 20261207
"""Seed of the tuned / held-out split, fixed before any run was scored."""

LOOPS: dict[str, tuple[int, int]] = {
    # transfer_to_human_agents re-issued in four responses in a row, "Transfer successful" each
    # time, nothing between: the same call, the same outcome, a 3rd time at step 10
    "grok-4-airline_tighter_policy/32/66a12f4f": (8, 10),
}
"""The runs read in full and labelled looping: id -> (loop_start, flag_at), step indexes
without the customer's turns (GROK_TAU2_LABELS.md)."""


def label(runs_path: Path, out: Path) -> None:
    """The labels: `LOOPS` looping, every other run healthy; per set, shuffled with `SEED`,
    the first half (rounded up) tuned, the rest held out."""
    runs = read_runs(runs_path)
    by_set: dict[str, list[str]] = {}
    for run in runs:
        by_set.setdefault(run["set"], []).append(run["id"])
    labels: dict[str, dict[str, Any]] = {}
    for run_id, half in split_halves(by_set, SEED).items():
        start, flag = LOOPS.get(run_id, (None, None))
        labels[run_id] = {
            "split": half,
            "looping": run_id in LOOPS,
            "loop_start": start,
            "flag_at": flag,
        }
    write_labels(labels, out)


def main(argv: list[str]) -> None:
    parser, sub = commands(__doc__)
    c = sub.add_parser("convert")
    c.add_argument("--git", type=Path, required=True)
    c.add_argument("--out", type=Path, required=True)
    lst = sub.add_parser("listing")
    lst.add_argument("--runs", type=Path, required=True)
    add_label(sub)
    args = parser.parse_args(argv)
    if args.cmd == "convert":
        convert(args.git, args.out)
    elif args.cmd == "listing":
        listing(args.runs)
    else:
        label(args.runs, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
