"""Convert ToolBench-style runs (an agent answering questions by calling RapidAPI web APIs) into
the detector's Step vocabulary, label them, and list the runs a reader must open.

Source: ``yuyq18/StepTool`` (public GitHub repository, read from a bare git snapshot; nothing
is downloaded here), commit `COMMIT`:

- ``data_eval/pass_rate_results/<model>_cot/<test set>.json``: the StableToolBench runs of six
  tool agents built on ToolLLaMA-2-7B (the SFT model and five RL-tuned variants: ArCHer, ETO,
  PPO, RFT, StepTool), each in ToolBench's "CoT@1" mode (one ReAct chain per question, no
  restart), on the six test sets (G1 instruction / category / tool, G2 instruction / category,
  G3 instruction; 765 questions, 612 for ETO, which has no G1 category file). The web APIs are
  StableToolBench's virtual API server (cached real answers, an LLM simulating the rest). Each
  entry keeps the run's tool steps in order (``answer_steps``: name, arguments, the harness's
  answer, cut at 1,024 characters) and the evaluator's verdicts (``is_solved``, three
  evaluations). The model's text between calls is not kept by this file.

Left out: the DFS runs (the same files for ``*_dfs``: a DFS run is a search tree whose branches
the agent abandons and restarts, not one sequence of actions) and the gpt-3.5-turbo CoT runs
under ``stabletoolbench/toolbench/tooleval/results/default_evalset`` (each call stored as a
Python repr cut at about 100 characters: arguments and answers cannot be compared).

Mapping to `engine.loops.detector.Step` fields (plain dicts, ``None`` fields left out):

- A call of a function the harness knows or takes for one (an identifier; a hallucinated name
  answered "No such function name" is a failed call of that name): ``tool`` its name (the
  harness renamed unknown names to ``invalid_hallucination_function_name`` in the record; the
  name is taken back from the error), ``args`` the arguments' JSON (the raw text when it is no
  JSON object), ``ok`` false with ``error`` when the harness's answer has a non-empty ``error``
  (or is one of ToolBench's ``{error:...}`` strings for a malformed ``Finish``), else
  ``result`` the answer. ``Finish`` (``give_answer`` / ``give_up_and_restart``) is a call
  like the others: it is how this agent answers; a ``Finish`` the harness rejects ("must have
  return_type") is a failed call of ``Finish``.
- A model response the harness could not read as a call (no function name, or prose where the
  name goes: "No such function name: : I have found ...") is a turn without a tool call
  answered by a rejection: ``tool`` null, ``ok`` false, ``error`` the harness's answer,
  ``text`` what the model wrote there (once: ToolBench's parser also leaves a piece of that
  prose in the arguments).
- ``turn`` is the call's position: the ReAct format issues one action per model response.
- The question is the run's task; no user speaks during a run.

Labels (``label``): the rule of ``TOOLBENCH_LABELS.md``, written before the detector was run on
any of these runs, applied to the steps; the detector is not imported here.

Run (with a git snapshot of the repository in $MIRRORS):

    python bench/corpora/convert_toolbench.py convert \\
        --repo $MIRRORS/yuyq18+StepTool/repo --out ../shared/data/toolbench_cot.jsonl.gz
    python bench/corpora/convert_toolbench.py listing --runs ../shared/data/toolbench_cot.jsonl.gz
    python bench/corpora/convert_toolbench.py label \\
        --runs ../shared/data/toolbench_cot.jsonl.gz --out bench/corpora/toolbench_labels.json

Each output line is one run: ``id`` (``<model>/<test set>/<query id>``), ``source`` (repo,
commit, path), ``setting`` (model, test set), ``resolved`` (a majority of the evaluator's
verdicts "Solved"), ``steps``.
"""

from __future__ import annotations

import ast
import collections
import json
import re
import sys
from pathlib import Path
from typing import Any

from corpus_kit import (
    add_convert,
    add_label,
    add_listing,
    commands,
    find_cycle,
    fold,
    git,
    json_or_text,
    loop,
    read_runs,
    split_halves,
    to_read,
    write_labels,
    write_runs,
)

REPO = "yuyq18/StepTool"
COMMIT = "121a6acd11a899d947a5d3fa7269cf76624c1df3"
"""The commit the runs were converted from (the snapshot's HEAD; the full id is in each run)."""
STEPTOOL = "data_eval/pass_rate_results"
SEED = 20261208
"""Seed of the tuned / held-out split, fixed before any run was scored."""

_STEP = re.compile(r"(?:^|\n)Step (\d+): ")
_ERROR = re.compile(r'^\{"error": "((?:[^"\\]|\\.)*)')
"""The error of a harness answer that is no whole JSON: the answer is cut at 1,024 characters,
sometimes inside its error (a long made-up function name, prose where the name goes)."""
_NO_SUCH = "No such function name: "
_NAME = re.compile(r"^[A-Za-z_][\w.\-]*$")


def _outcome(response: str) -> tuple[str | None, Any]:
    """(error, result) of the harness's answer: the error when it reports one."""
    if not response:
        return None, None
    try:
        data = json.loads(response)
    except ValueError:
        m = _ERROR.match(response)
        if m is not None:
            body = m.group(1)
            try:
                error = json.loads(f'"{body}"')
            except ValueError:  # cut inside an escape
                error = body
            return (error or None), (None if error else response)
        if response.startswith("{error:"):
            return response, None
        return None, response
    if isinstance(data, dict) and "error" in data:
        return (data["error"] or None), (None if data["error"] else data.get("response"))
    return None, data


def to_step(call: dict, position: int) -> dict:
    """One tool step of a run (its ``name``, ``arguments`` and ``response``) as a Step dict."""
    name = (call.get("name") or "").strip()
    arguments = call.get("arguments") or ""
    error, result = _outcome(call.get("response") or "")
    if error and error.startswith(_NO_SUCH):
        name = (
            error[len(_NO_SUCH) :].strip()
            if name in ("", "invalid_hallucination_function_name")
            else name
        )
    if not _NAME.match(name):  # no call the harness could read: a rejected turn
        # the ReAct parser leaves a piece of the same prose in the arguments (both cut at
        # their own length): keep it once
        piece = arguments.strip()[:80]
        text = name if piece and piece in name else f"{name} {arguments}".strip()
        step: dict = {"tool": None, "text": text}
        if error:
            step.update(ok=False, error=error)
        return step
    step = {"tool": name, "args": json_or_text(arguments), "turn": str(position)}
    if error:
        step.update(ok=False, error=error)
    elif result is not None:
        step["result"] = result
    return step


def steptool_steps(answer_steps: str) -> list[dict]:
    """The ``Step N: {...}`` entries of a pass-rate record, in order."""
    cuts = []
    expected = 1
    for m in _STEP.finditer(answer_steps):
        if int(m.group(1)) == expected:
            cuts.append((m.start(), m.end()))
            expected += 1
    calls = []
    for k, (_, end) in enumerate(cuts):
        stop = cuts[k + 1][0] if k + 1 < len(cuts) else len(answer_steps)
        calls.append(ast.literal_eval(answer_steps[end:stop]))
    return [to_step(call, i) for i, call in enumerate(calls)]


def convert(repo: Path, out: Path) -> None:
    """Every CoT run of `STEPTOOL`, one line each."""
    commit = git(repo, "rev-parse", "HEAD").strip()
    names = git(repo, "ls-tree", "-r", "--name-only", "HEAD").split("\n")
    runs = []
    for name in sorted(n for n in names if n.endswith(".json")):
        folder, _, test_set = name.rpartition("/")
        test_set = test_set.removesuffix(".json")
        if folder.startswith(STEPTOOL + "/") and folder.endswith("_cot"):
            model = folder.rsplit("/", 1)[1].removesuffix("_cot").removeprefix("baseline-")
            for qid, entry in json.loads(git(repo, "show", f"{commit}:{name}")).items():
                verdicts = list(entry["is_solved"].values())
                solved = sum(v == "AnswerStatus.Solved" for v in verdicts)
                runs.append(
                    _run(
                        model,
                        test_set,
                        qid,
                        commit,
                        name,
                        2 * solved > len(verdicts),
                        steptool_steps(entry["answer_steps"]),
                    )
                )
    write_runs(runs, out)


def _run(
    model: str,
    test_set: str,
    qid: str,
    commit: str,
    path: str,
    resolved: bool | None,
    steps: list[dict],
) -> dict:
    return {
        "id": f"{model}/{test_set}/{qid}",
        "source": {"repo": REPO, "commit": commit, "path": path, "query_id": qid},
        "setting": {"model": model, "test_set": test_set},
        "resolved": resolved,
        "steps": steps,
    }


# --- the labelling rule of TOOLBENCH_LABELS.md ----------------------------------------------------
def call_key(step: dict) -> str:
    """A call as the rule compares calls: the tool and its arguments (JSON parsed, whitespace
    in strings collapsed, key order ignored)."""
    return json.dumps([step["tool"], fold(step.get("args"))], sort_keys=True)


def error_kind(error: str) -> str:
    """The kind of a harness error: its text up to the first colon or bracket, digits dropped
    (``No such function name: x`` -> ``No such function name``)."""
    head = (
        re.split(r"[:(\[{]", error.strip(), maxsplit=1)[0] if not error.startswith("{") else error
    )
    return re.sub(r"\d+", "#", head.strip())[:80]


def rejection(step: dict) -> str | None:
    """The kind of rejection when the harness refused the model's output without running an
    API: a turn it could not read as a call, arguments it could not parse, a ``Finish``
    without the fields it needs; None for anything else (an API's error is no rejection)."""
    if step.get("ok", True) is not False:
        return None
    error = step.get("error") or ""
    if "Tool input parse error" in error:
        return "arguments not parsed"
    if step.get("tool") is None:
        return "no call: " + error_kind(error)
    if step["tool"] == "Finish" and error.startswith("{error:"):
        return "Finish: " + error
    return None


def label_run(steps: list[dict]) -> dict:
    """The first place where one of the rule's clauses holds (TOOLBENCH_LABELS.md)."""
    seen: set[str] = set()
    new_at: list[int] = []  # calls of something not called before
    places: dict[str, list[int]] = {}
    calls: list[tuple[int, str]] = []
    rejected: list[int] = []  # the same rejection in a row
    rejected_kind: str | None = None
    same_failure: list[int] = []  # failures in a row of one tool with one kind of error
    failure_key = ""
    dead: list[int] = []  # failures in a row of one tool, whatever the error
    dead_tool = ""
    for i, step in enumerate(steps):
        tool = step.get("tool")
        failed = step.get("ok", True) is False
        kind = rejection(step)
        if kind is None:
            rejected, rejected_kind = [], None
        else:
            rejected = rejected + [i] if kind == rejected_kind else [i]
            rejected_kind = kind
            if len(rejected) == 3:
                return loop(rejected[0], i, "the same rejection 3 times in a row")
        if tool is None:
            continue
        key = call_key(step)
        calls.append((i, key))
        if key not in seen:
            seen.add(key)
            new_at.append(i)
        at = places.setdefault(key, [])
        at.append(i)
        if len(at) >= 3 and not any(at[-3] < j < i for j in new_at):
            return loop(at[-3], i, "same call a 3rd time, nothing new since")
        if failed:
            fkey = f"{tool}\x00{error_kind(step.get('error') or '')}"
            same_failure = same_failure + [i] if fkey == failure_key else [i]
            failure_key = fkey
            if len(same_failure) == 3:
                return loop(same_failure[0], i, "same failure of one tool 3 times in a row")
            dead = dead + [i] if tool == dead_tool else [i]
            dead_tool = tool
            if len(dead) == 5:
                return loop(dead[0], i, "one tool failing 5 times in a row")
        else:
            same_failure, failure_key, dead, dead_tool = [], "", [], ""
        cycle = find_cycle(calls)
        if cycle is not None:
            return loop(cycle[0], cycle[1], "cycle")
    return {"looping": False, "loop_start": None, "flag_at": None, "reason": None}


def _line(i: int, step: dict) -> str:
    if step.get("tool") is None:
        what = f"turn {step.get('text', '')[:100]!r}"
    else:
        what = f"{step['tool']} {json.dumps(step.get('args'), sort_keys=True)[:100]}"
    if step.get("ok", True) is False:
        return f"  {i:3} {what} -> !{(step.get('error') or '')[:90]!r}"
    return f"  {i:3} {what} -> {str(step.get('result'))[:70]!r}"


def near_misses(steps: list[dict]) -> list[str]:
    """What a plain listing points at in a run the rule labels healthy: a call made 3+ times,
    one tool failing 3+ times, 2+ rejected turns, 3 failures in a row of any kind."""
    out = []
    calls = collections.Counter(call_key(s) for s in steps if s.get("tool"))
    if calls and max(calls.values()) >= 3:
        out.append("a call 3+ times")
    fails = collections.Counter(s["tool"] for s in steps if s.get("tool") and s.get("ok") is False)
    if fails and max(fails.values()) >= 3:
        out.append("one tool failing 3+ times")
    if sum(1 for s in steps if s.get("tool") is None and s.get("ok") is False) >= 2:
        out.append("2+ rejected turns")
    run = 0
    for s in steps:
        run = run + 1 if s.get("ok") is False else 0
        if run >= 3:
            out.append("3 failures in a row")
            break
    return out


def listing(runs_path: Path, which: str) -> None:
    """Every run the rule labels looping (``loops``) or that a plain listing points at while the
    rule labels it healthy (``near``), one line per step, for reading."""
    for run, head in to_read(read_runs(runs_path), which, label_run, near_misses):
        print(head)
        for i, step in enumerate(run["steps"]):
            print(_line(i, step))


def label(runs_path: Path, out: Path) -> None:
    runs = read_runs(runs_path)
    by_set: dict[str, list[str]] = {}
    for run in runs:
        s = run["setting"]
        by_set.setdefault(f"{s['model']}/{s['test_set']}", []).append(run["id"])
    split = split_halves(by_set, SEED)
    labels = {run["id"]: {"split": split[run["id"]], **label_run(run["steps"])} for run in runs}
    write_labels(labels, out)
    reasons = collections.Counter(v["reason"] for v in labels.values() if v["looping"])
    print(f"{len(labels)} runs, {sum(reasons.values())} loops {dict(reasons)} -> {out}")


def main(argv: list[str]) -> None:
    parser, sub = commands(__doc__)
    add_convert(sub, REPO)
    add_listing(sub)
    add_label(sub)
    args = parser.parse_args(argv)
    if args.cmd == "convert":
        convert(args.repo, args.out)
    elif args.cmd == "listing":
        listing(args.runs, args.which)
    else:
        label(args.runs, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
