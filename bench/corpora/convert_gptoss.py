"""Convert the gpt-oss tool-calling trials into the detector's Step vocabulary, and label them.

Source: ``aldehir/gpt-oss-tool-calling-notebook`` (public GitHub repository, read from a bare git
snapshot; nothing is downloaded here), folder ``experiments/provider=llama.cpp``: 380 trials of
gpt-oss-20b served by llama.cpp, each asked to "get the weather for the following cities and
tabulate the results" for 1, 3, 5, 10 or 15 cities, with the model's chain of thought kept in
the history (``cot=true``) or dropped (``cot=false``), in three batches (``n=5``, ``n=10``,
``n=25`` trials per setting). Each ``trial-K.md`` prints, per model call ("Turn"), the whole
prompt in the harmony format plus what the model generated; the last Turn holds the whole run.
Its "Results" block says whether the trial passed (every city asked, the answer given).

Mapping to `engine.loops.detector.Step` fields (plain dicts in the output, ``None`` fields left
out): a message to ``functions.X`` is a call of tool ``X`` with ``args`` its JSON (the raw text
when it is no JSON object) and ``result`` the tool's answer that follows it (a call without an
answer is a failure, ``error`` "no answer"); ``turn`` is the call's position (the model issues
one call per response). A ``final`` message, or a last response that ends in its analysis
without calling anything, is an agent turn (``tool`` null, ``text``). Analysis messages before
a call are the call's reasoning, not steps. The system, developer and user messages are not
steps (the request is the run's task; no user speaks during the run).

Labels (``label``): the rule written in ``GPTOSS_LABELS.md`` before the detector was run on
any of these runs, applied to the calls' arguments; the detector is not imported here.

Run (with a git snapshot of the repository in $MIRRORS):

    python bench/corpora/convert_gptoss.py convert \\
        --repo $MIRRORS/aldehir+gpt-oss-tool-calling-notebook/repo \\
        --out ../shared/data/gptoss_weather.jsonl.gz
    python bench/corpora/convert_gptoss.py label \\
        --runs ../shared/data/gptoss_weather.jsonl.gz --out bench/corpora/gptoss_labels.json

Each output line is one run: ``id``, ``source`` (repo, commit, path), ``setting`` (batch,
cities, cot), ``resolved`` (the trial passed), ``steps``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from corpus_kit import (
    add_convert,
    add_label,
    commands,
    find_cycle,
    git,
    read_runs,
    split_halves,
    write_labels,
    write_runs,
)

REPO = "aldehir/gpt-oss-tool-calling-notebook"
FOLDER = "experiments/provider=llama.cpp"
SEED = 20261207
"""Seed of the tuned / held-out split, fixed before any run was scored."""

_MESSAGE = re.compile(
    r"<\|start\|>(.*?)<\|message\|>(.*?)(?:<\|end\|>|<\|call\|>|<\|return\|>|$)", re.S
)
_TURN = re.compile(r"^### Turn \d+\s*$", re.M)
_TRIAL = re.compile(r"n=(\d+)/cities=(\d+)/cot=(true|false)/trial-(\d+)\.md$")


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_trial(text: str) -> tuple[list[dict], bool]:
    """The steps of one trial (its last Turn) and whether it passed."""
    turns = _TURN.split(text)
    last = turns[-1]
    body, _, results = last.partition("## Results")
    passed = re.search(r"pass:\s*(\d)", results)
    steps: list[dict] = []
    pending: dict | None = None
    analysis: str | None = None
    calls = 0
    for header, content in _MESSAGE.findall(body):
        role = header.split("<|", 1)[0].split()[0] if header.strip() else ""
        recipient = re.search(r"to=functions\.(\w+)", header)
        channel = re.search(r"<\|channel\|>(\w+)", header)
        content = content.strip()
        if role == "assistant" and recipient:
            if pending is not None:  # a call left without an answer
                steps.append({**pending, "ok": False, "error": "no answer"})
            pending = {"tool": recipient.group(1), "args": _value(content), "turn": str(calls)}
            calls += 1
            analysis = None
        elif role.startswith("functions.") and pending is not None:
            steps.append({**pending, "result": _value(content)})
            pending = None
        elif role == "assistant" and channel and channel.group(1) == "final":
            if pending is not None:  # answered without waiting for the call's result
                steps.append({**pending, "ok": False, "error": "no answer"})
                pending = None
            steps.append({"tool": None, "text": content})
            analysis = None
        elif role == "assistant":
            analysis = content
    if pending is not None:
        steps.append({**pending, "ok": False, "error": "no answer"})
    if analysis is not None:  # the run ends in reasoning: a turn that called nothing
        steps.append({"tool": None, "text": analysis})
    return steps, bool(passed and passed.group(1) == "1")


def convert(repo: Path, out: Path) -> None:
    commit = git(repo, "rev-parse", "HEAD").strip()
    names = [n for n in git(repo, "ls-tree", "-r", "--name-only", "HEAD", FOLDER).split("\n")]
    runs = []
    for name in sorted(n for n in names if _TRIAL.search(n)):
        m = _TRIAL.search(name)
        assert m is not None
        batch, cities, cot, trial = m.groups()
        steps, passed = parse_trial(git(repo, "show", f"HEAD:{name}"))
        runs.append(
            {
                "id": f"gptoss/n={batch}/cities={cities}/cot={cot}/trial-{trial}",
                "source": {"repo": REPO, "commit": commit, "path": name},
                "setting": {"batch": int(batch), "cities": int(cities), "cot": cot == "true"},
                "resolved": passed,
                "steps": steps,
            }
        )
    write_runs(runs, out)


def _key(step: dict) -> str:
    """A call as the labelling rule compares calls: the tool and its arguments, strings
    case-folded and trimmed (``New York City`` and ``new york city`` are one city)."""

    def fold(v: Any) -> Any:
        if isinstance(v, str):
            return " ".join(v.casefold().split())
        if isinstance(v, dict):
            return {k: fold(x) for k, x in v.items()}
        if isinstance(v, list):
            return [fold(x) for x in v]
        return v

    return json.dumps([step["tool"], fold(step.get("args"))], sort_keys=True)


def label_run(steps: list[dict]) -> dict:
    """The rule of GPTOSS_LABELS.md: one call made a 3rd time with no call of something not
    asked before since the first of those three, or a cycle of calls (ABABA)."""
    seen: set[str] = set()
    new_at: list[int] = []  # step indexes of calls of something not asked before
    places: dict[str, list[int]] = {}
    calls: list[tuple[int, str]] = []
    for i, step in enumerate(steps):
        if step.get("tool") is None:
            continue
        key = _key(step)
        calls.append((i, key))
        if key not in seen:
            seen.add(key)
            new_at.append(i)
        at = places.setdefault(key, [])
        at.append(i)
        if len(at) >= 3:
            first = at[-3]
            if not any(first < j < i for j in new_at):
                return {"looping": True, "loop_start": first, "flag_at": i}
        cycle = find_cycle(calls)
        if cycle is not None:
            return {"looping": True, "loop_start": cycle[0], "flag_at": cycle[1]}
    return {"looping": False, "loop_start": None, "flag_at": None}


def label(runs_path: Path, out: Path) -> None:
    runs = read_runs(runs_path)
    by_setting: dict[str, list[str]] = {}
    for run in runs:
        s = run["setting"]
        by_setting.setdefault(f"{s['batch']}/{s['cities']}/{s['cot']}", []).append(run["id"])
    split = split_halves(by_setting, SEED)
    labels = {}
    for run in runs:
        labels[run["id"]] = {"split": split[run["id"]], **label_run(run["steps"])}
    write_labels(labels, out)
    loops = [v for v in labels.values() if v["looping"]]
    print(f"{len(labels)} runs, {len(loops)} loops -> {out}")


def main(argv: list[str]) -> None:
    parser, sub = commands(__doc__)
    add_convert(sub, REPO)
    add_label(sub)
    args = parser.parse_args(argv)
    if args.cmd == "convert":
        convert(args.repo, args.out)
    else:
        label(args.runs, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
