"""Convert BFCL v4 multi-turn runs of gpt-oss (an agent acting on stateful APIs: a file system,
a car, a trading bot, travel booking, messaging, tickets, posting, maths) into the detector's
Step vocabulary, label them, and list the runs a reader must open.

Source: ``bbrowning/bfcl-vllm-results`` (public GitHub repository, read from a bare git snapshot;
nothing is downloaded here), commit `COMMIT`:

- ``results/<configuration>/result/openai_gpt-oss-<size>/multi_turn/BFCL_v4_multi_turn_<cat>
  _result.json``: one line per task, the Berkeley Function Calling Leaderboard's harness driving
  gpt-oss-120b or gpt-oss-20b served by vLLM (function calling). Seven configurations (serving
  builds: ``v0.10.2``, ``v0.11.0``, ``2025-11-12-main``, ``2025-11-12-harmony-fixes``,
  ``2025-11-12-harmony-fixes-2``; 120b in all five, 20b in ``main`` and ``harmony-fixes``) ×
  three categories (``base``, ``miss_func``, ``miss_param``) × 200 tasks. ``long_context`` is
  not in the snapshot (large files) and is left out. Each line's ``inference_log`` keeps, per
  user request (``begin_of_turn_query``), every model response (``step_<k>``: the calls the
  harness decoded, its ``handler_log``, one ``tool`` message per call with the API's answer).
- ``results/<configuration>/score/.../BFCL_v4_multi_turn_<cat>_score.json``: the evaluator's
  summary line, then one line per failed task; ``resolved`` is "not listed there".

A task whose inference failed before any model response (vLLM's error 500 on a malformed
message header; the line has a ``result`` string and no ``inference_log``) has no step and is
left out: 97 of 4,200.

Mapping to `engine.loops.detector.Step` fields (plain dicts, ``None`` fields left out):

- Each user request is ``{"user": <text>}`` (a user turn: the detector's ``user_input``). In
  ``miss_func`` a request may be the harness adding functions ("I have updated some more
  functions you can choose from"); it is a user turn like the others.
- Each call of a decoded response is one step: ``tool`` the name as the model wrote it (a name
  with a leaked channel token, ``echo<|channel|>commentary``, is a call of that made-up name; the
  harness runs it and answers with an error), ``args`` the arguments' JSON (the raw text when it
  is no JSON object), ``turn`` the response's position in the run (calls issued together in one
  response share it). The API's answer: ``ok`` false with ``error`` when it is an object with an
  ``error`` key or the harness's ``Error during execution: ...``; else ``result`` (the JSON
  value, or the raw text).
- A response with no call ("Empty response from the model. Proceed to next turn.": the model
  answered in prose, which the log does not keep) adds no step: what the model said is not
  known, and a turn with empty text would tell the detector that the model said nothing.
  (Until the first scoring it was an accepted turn with empty text; see BFCL_LABELS.md.)
- A response the harness could not decode ("Error decoding the model response. Proceed to next
  turn.") is a turn without a tool call answered by a rejection: ``tool`` null, ``ok`` false,
  ``error`` the harness's text, ``text`` what the model wrote as calls (its first `TEXT_LIMIT`
  characters). The harness then moves to the next request, as it does after the 20th response
  of a request ("Model has been forced to quit after 20 steps.", after which the run ends);
  that note adds no step.

Labels (``label``): the rule of ``BFCL_LABELS.md``, written before the detector was run on any
of these runs, applied to the steps; the detector is not imported here.

Run (with a git snapshot of the repository in $MIRRORS):

    python bench/corpora/convert_bfcl.py convert \\
        --repo $MIRRORS/bbrowning+bfcl-vllm-results/repo --out ../shared/data/bfcl_gptoss.jsonl.gz
    python bench/corpora/convert_bfcl.py listing --runs ../shared/data/bfcl_gptoss.jsonl.gz
    python bench/corpora/convert_bfcl.py label \\
        --runs ../shared/data/bfcl_gptoss.jsonl.gz --out bench/corpora/bfcl_labels.json

Each output line is one run: ``id`` (``<configuration>/<model>/<task id>``), ``task`` (the task
id, the same in every configuration), ``source`` (repo, commit, path), ``setting``
(configuration, model, category), ``resolved``, ``steps``.
"""

from __future__ import annotations

import collections
import json
import random
import re
import sys
from pathlib import Path

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

REPO = "bbrowning/bfcl-vllm-results"
COMMIT = "f98223aef4e7a560e2d2d69849dfb04eed260a52"
"""The commit the runs were converted from (the snapshot's HEAD; checked at conversion)."""
CATEGORIES = ("base", "miss_func", "miss_param")
SEED = 20261209
"""Seed of the tuned / held-out split (by task), fixed before any run was scored."""

DECODE_ERROR = "Error decoding the model response. Proceed to next turn."
EMPTY = "Empty response from the model. Proceed to next turn."
_EXEC_ERROR = "Error during execution"
TEXT_LIMIT = 1000
"""A rejected response's text is kept up to this many characters (some run to 30,000 characters
of repeated dots and channel tokens)."""
_PATH = re.compile(
    r"^results/(?P<conf>[^/]+)/result/openai_(?P<model>gpt-oss-\d+b)/multi_turn/"
    r"BFCL_v4_multi_turn_(?P<cat>base|miss_func|miss_param)_result\.json$"
)


def tool_step(name: str, arguments: str, answer: str | None, turn: int) -> dict:
    """One call of a decoded response and the API's answer as a Step dict."""
    step: dict = {"tool": name, "args": json_or_text(arguments), "turn": str(turn)}
    if answer is None:
        return step
    value = json_or_text(answer)
    if isinstance(value, dict) and "error" in value:
        step.update(ok=False, error=str(value["error"]))
    elif isinstance(value, str) and value.startswith(_EXEC_ERROR):
        step.update(ok=False, error=value)
    elif value != "None":
        step["result"] = value
    return step


def response_steps(messages: list[dict], turn: int) -> list[dict]:
    """The steps of one model response (a ``step_<k>`` entry of the log)."""
    calls: list[dict] = []
    answers: list[str] = []
    notes: list[str] = []
    for m in messages:
        if m["role"] == "assistant":
            content = m["content"]
            calls.extend(content if isinstance(content, list) else [{"": str(content)}])
        elif m["role"] == "tool":
            answers.append(
                m["content"] if isinstance(m["content"], str) else json.dumps(m["content"])
            )
        elif m["role"] == "handler_log":
            notes.append(m["content"])
    if DECODE_ERROR in notes:
        text = " ".join(f"{n}({a})" for c in calls for n, a in c.items())[:TEXT_LIMIT]
        return [{"tool": None, "text": text, "ok": False, "error": DECODE_ERROR}]
    if not calls:  # an answer in prose the log does not keep: no step
        return []
    out = []
    for k, call in enumerate(calls):
        ((name, arguments),) = call.items()
        out.append(tool_step(name, arguments, answers[k] if k < len(answers) else None, turn))
    return out


def record_steps(record: dict) -> list[dict]:
    """Every user request and model response of one result line, in order."""
    steps: list[dict] = []
    turn = 0
    for entry in record["inference_log"]:
        if not isinstance(entry, dict):  # the environment's state before and after
            continue
        query = entry.get("begin_of_turn_query") or []
        steps.append({"user": " ".join(str(m.get("content") or "") for m in query)})
        k = 0
        while f"step_{k}" in entry:
            steps.extend(response_steps(entry[f"step_{k}"], turn))
            turn += 1
            k += 1
    return steps


def convert(repo: Path, out: Path) -> None:
    """Every multi-turn run of the three categories, one line each."""
    commit = git(repo, "rev-parse", "HEAD").strip()
    if commit != COMMIT:
        raise SystemExit(f"the snapshot is at {commit}, the mapping was written for {COMMIT}")
    names = git(repo, "ls-tree", "-r", "--name-only", commit).split("\n")
    runs = []
    skipped = 0
    for name in sorted(n for n in names if _PATH.match(n)):
        m = _PATH.match(name)
        assert m is not None
        score = name.replace("/result/", "/score/", 1).replace("_result.json", "_score.json")
        failed = {
            json.loads(line)["id"]
            for line in git(repo, "show", f"{commit}:{score}").splitlines()[1:]
            if line.strip()
        }
        for line in git(repo, "show", f"{commit}:{name}").splitlines():
            record = json.loads(line)
            if "inference_log" not in record:
                skipped += 1
                continue
            runs.append(
                {
                    "id": f"{m['conf']}/{m['model']}/{record['id']}",
                    "task": record["id"],
                    "source": {"repo": REPO, "commit": commit, "path": name},
                    "setting": {
                        "configuration": m["conf"],
                        "model": m["model"],
                        "category": m["cat"],
                    },
                    "resolved": record["id"] not in failed,
                    "steps": record_steps(record),
                }
            )
    steps = sum(1 for r in runs for s in r["steps"] if "user" not in s)
    write_runs(
        runs, out, f"{len(runs)} runs ({skipped} without a response left out), {steps} steps"
    )


# --- the labelling rule of BFCL_LABELS.md ---------------------------------------------------------
READS = frozenset(
    "ls pwd cat grep wc tail diff sort du find head mean median standard_deviation logarithm "
    "add subtract multiply divide power square_root round_number percentage sum_values "
    "min_value max_value absolute_value imperial_si_conversion si_unit_conversion "
    "liter_to_gallon gallon_to_liter retrieve_invoice verify_traveler_information "
    "find_nearest_tire_shop filter_stocks_by_price posting_get_login_status "
    "message_get_login_status ticket_get_login_status travel_get_login_status "
    "trading_get_login_status".split()
)
"""Tools that only read (besides names starting with a prefix of `_READ_PREFIXES`): every other
tool changes the state when it succeeds (``cd``, ``mv``, ``touch``, ``echo``, ``startEngine``,
``post_tweet``, a login, ...)."""
_READ_PREFIXES = (
    "get_",
    "view_",
    "list_",
    "display",
    "check_",
    "estimate_",
    "search_",
    "compute_",
    "find_",
)


def is_read(tool: str) -> bool:
    return tool in READS or tool.startswith(_READ_PREFIXES)


def call_key(step: dict) -> str:
    """A call as the rule compares calls: the tool and its arguments (JSON parsed, whitespace in
    strings collapsed, key order ignored)."""
    return json.dumps([step["tool"], fold(step.get("args"))], sort_keys=True)


def outcome_key(step: dict) -> str:
    """What the call got: its error, or its answer (whitespace collapsed)."""
    if step.get("ok", True) is False:
        return json.dumps(["error", fold(step.get("error") or "")])
    return json.dumps(["result", fold(step.get("result"))], sort_keys=True)


def label_run(steps: list[dict]) -> dict:
    """The first place where one of the rule's clauses holds (BFCL_LABELS.md). Step indexes
    leave out the user's turns."""
    i = -1
    rejected: list[int] = []  # rejected responses in a row, no call run between
    # per request (a user turn starts them again):
    places: dict[str, list[tuple[int, str, int]]] = {}  # call -> (step, outcome, changes so far)
    changes = 0  # successful state-changing calls so far in this request
    change_keys: list[str] = []  # the call each change was
    attempts: list[tuple[int, str]] = []  # (step, call + outcome), one per call per response
    same_failure: list[int] = []
    failure_key = ""
    dead: list[int] = []
    dead_tool = ""
    recurring: dict[str, list[int]] = {}  # failure (tool, error text) -> its steps
    last_turn: str | None = None
    turn_keys: set[str] = set()
    for step in steps:
        if "user" in step:
            places, changes, change_keys, attempts, recurring = {}, 0, [], [], {}
            same_failure, failure_key, dead, dead_tool = [], "", [], ""
            last_turn, turn_keys = None, set()
            continue
        i += 1
        tool = step.get("tool")
        if tool is None:
            if step.get("ok", True) is False:
                rejected.append(i)
                if len(rejected) == 3:
                    return loop(rejected[0], i, "the same rejection 3 times in a row")
            continue
        rejected = []
        key = call_key(step)
        failed = step.get("ok", True) is False
        turn = step.get("turn")
        if turn is None or turn != last_turn:
            last_turn, turn_keys = turn, set()
        elif key in turn_keys:  # the same call twice in one response: one attempt
            continue
        first_in_turn = not turn_keys
        turn_keys.add(key)
        out = outcome_key(step)
        # 1. the same call, the same outcome, a 3rd time, no other state change since the 1st
        at = places.setdefault(key, [])
        at.append((i, out, changes))
        if len(at) >= 3:
            (i0, o0, c0), (_, o1, _), (_, o2, _) = at[-3:]
            others = [k for k in change_keys[c0:] if k != key]
            if o0 == o1 == o2 and not others:
                return loop(i0, i, "same call, same outcome, a 3rd time")
        # 2. the same failure (same error text) of one tool 3 times in a row
        if failed:
            fkey = f"{tool}\x00{fold(step.get('error') or '')}"
            if fkey == failure_key:
                if first_in_turn:
                    same_failure.append(i)
            else:
                same_failure, failure_key = [i], fkey
            if len(same_failure) == 3:
                return loop(same_failure[0], i, "same failure of one tool 3 times in a row")
            # 3. one failure recurring, whatever sits between
            seen = recurring.setdefault(fkey, [])
            if first_in_turn or not seen:
                seen.append(i)
            if len(seen) == 5:
                return loop(seen[0], i, "same failure a 5th time in one request")
            if tool == dead_tool:
                if first_in_turn:
                    dead.append(i)
            else:
                dead, dead_tool = [i], tool
            if len(dead) == 5:
                return loop(dead[0], i, "one tool failing 5 times in a row")
        else:
            same_failure, failure_key, dead, dead_tool = [], "", [], ""
            if not is_read(tool):
                changes += 1
                change_keys.append(key)
        # 4. cycles of attempts (calls with their outcomes): ABABA of 2 to 5 different ones
        if first_in_turn:
            attempts.append((i, key + out))
        else:
            attempts[-1] = (attempts[-1][0], attempts[-1][1] + "\x00" + key + out)
        cycle = find_cycle(attempts)
        if cycle is not None:
            return loop(cycle[0], cycle[1], "cycle")
    return {"looping": False, "loop_start": None, "flag_at": None, "reason": None}


def _lines(steps: list[dict]) -> list[str]:
    out = []
    i = -1
    for step in steps:
        if "user" in step:
            out.append(f"      USER {step['user'][:110]!r}")
            continue
        i += 1
        if step.get("tool") is None:
            what = f"turn {step.get('text', '')[:80]!r}"
        else:
            args = json.dumps(step.get("args"), sort_keys=True)[:90]
            what = f"[{step.get('turn')}] {step['tool']} {args}"
        if step.get("ok", True) is False:
            out.append(f"  {i:3} {what} -> !{(step.get('error') or '')[:90]!r}")
        else:
            out.append(f"  {i:3} {what} -> {json.dumps(step.get('result'))[:80]}")
    return out


def near_misses(steps: list[dict]) -> list[str]:
    """What a plain listing points at in a run the rule labels healthy: a call 3+ times in one
    request, one tool failing 3+ times in one request, 2+ rejected responses, 3 failures in a
    row, a request that used 15+ steps (the harness stops at 20 responses)."""
    out: set[str] = set()
    calls: collections.Counter = collections.Counter()
    fails: collections.Counter = collections.Counter()
    run = used = 0
    rejected = 0
    for s in steps:
        if "user" in s:
            calls, fails, used = collections.Counter(), collections.Counter(), 0
            continue
        used += 1
        if used >= 15:
            out.add("15+ steps for one request")
        if s.get("tool") is None:
            rejected += s.get("ok", True) is False
        else:
            calls[call_key(s)] += 1
            if calls[call_key(s)] >= 3:
                out.add("a call 3+ times in one request")
            if s.get("ok", True) is False:
                fails[s["tool"]] += 1
                if fails[s["tool"]] >= 3:
                    out.add("one tool failing 3+ times in one request")
        run = run + 1 if s.get("ok", True) is False else 0
        if run >= 3:
            out.add("3 failures in a row")
    if rejected >= 2:
        out.add("2+ rejected responses")
    return sorted(out)


def listing(runs_path: Path, which: str, sample: int | None, seed: int) -> None:
    """Runs the rule labels looping (``loops``) or that a plain listing points at while the rule
    labels them healthy (``near``), one line per step, for reading; ``sample`` draws that many
    at random (seeded)."""
    chosen = to_read(read_runs(runs_path), which, label_run, near_misses)
    if sample is not None and sample < len(chosen):
        chosen = random.Random(seed).sample(chosen, sample)
    for run, head in chosen:
        print(head)
        for line in _lines(run["steps"]):
            print(line)


def split_tasks(tasks: list[str]) -> dict[str, str]:
    """Task id -> ``tuned`` / ``heldout``: per category, the tasks shuffled with `SEED`, the
    first half (rounded up) tuned. Every configuration's run of a task falls in its half."""
    by_cat: dict[str, list[str]] = {}
    for task in sorted(set(tasks)):
        by_cat.setdefault(task.rsplit("_", 1)[0], []).append(task)
    return split_halves(by_cat, SEED, order=lambda t: int(t.rsplit("_", 1)[1]))


def label(runs_path: Path, out: Path) -> None:
    runs = read_runs(runs_path)
    split = split_tasks([run["task"] for run in runs])
    labels = {run["id"]: {"split": split[run["task"]], **label_run(run["steps"])} for run in runs}
    write_labels(labels, out)
    reasons = collections.Counter(v["reason"] for v in labels.values() if v["looping"])
    print(f"{len(labels)} runs, {sum(reasons.values())} loops {dict(reasons)} -> {out}")


def main(argv: list[str]) -> None:
    parser, sub = commands(__doc__)
    add_convert(sub, REPO)
    li = add_listing(sub)
    li.add_argument("--sample", type=int, default=None)
    li.add_argument("--seed", type=int, default=3)
    add_label(sub)
    args = parser.parse_args(argv)
    if args.cmd == "convert":
        convert(args.repo, args.out)
    elif args.cmd == "listing":
        listing(args.runs, args.which, args.sample, args.seed)
    else:
        label(args.runs, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
