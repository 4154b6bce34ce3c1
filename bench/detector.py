"""Benchmark of LoopDetector: detection quality per source, cost per step and memory.

Run: ``.venv/bin/python bench/detector.py [--steps 20000] [--quality-only] [--cost-only]
[--verdicts PATH] [--late N]``

- Quality, per source: the production detector (``LoopDetector()``) over the labelled trace corpus
  (tests/traces), each peer suite (tests/loops/peers: other projects' own loop-detection test
  cases) and the hand-labelled real runs (bench/corpora: the tuned and the held-out split, and the
  whole converted corpus for the false-alarm rate; the enriched set, chosen by a repetition
  listing and not at random, is shown apart). A looping case is a true positive when the
  first flag comes at the expected step or one step later, a false positive when it comes earlier
  (before the loop began, or before the step the peer agrees on), a false negative when it comes
  later or never; a flag on a healthy case is a false positive. Median delay: the actions from
  the expected step to the first flag, over the true positives. "Flagged ok" is the share of
  runs that finished successfully (real runs: resolved) that were flagged at all; for the
  traces and the peer suites, where nothing "finishes", the share of healthy cases flagged.
  "ok, no loop": the same over the successful runs whose label shows no loop (a run may loop
  for a while and still succeed).
  "Peer step" counts the peer cases the peer flags where our first flag is the peer's own step or
  one later, whatever we expect (our disagreements lower it on purpose).
- Delays count the agent's actions (`actions_between`): tool calls and turns a harness
  answered (an agent turn in a run without a user, a rejected answer), not the agent's chat
  messages to the user (a turn in a run where a user speaks, a call of a user tool such as
  ``respond``). "Median delay" is the actions from the expected step to the first flag.
- Timing, per source with loops (a second table): the targets count from where the loop
  starts, not from the step we expect a flag at. "From start": the actions from the loop's
  first step (the label's ``loop_start``; the peer suites give none, so their expected step) to
  the first flag, median over the true positives; "<= 3 after start": the share of the looping
  cases flagged at the loop's start or at most 3 actions after it (a miss or an early flag is
  not). "On time" (peer suites): the share of the cases the peer flags where our first flag
  comes at or before the peer's own step + 1 (earlier counts, unlike "peer step").
- Conversational runs (bench/data/tau2runs.jsonl.gz, or $REWIND_TAU2RUNS; labels in
  bench/corpora/tau2_labels.json):
  a customer-service agent and a simulated customer, each half in two forms (the customer's turns
  as user input between agent turns, and tau-bench's ``respond`` calls); only the tuned half's
  mistakes are listed.
- Conversational runs of Grok agents (tau2-bench simulations of a fork, blakeelias/tau2-bench;
  converted by bench/corpora/convert_grok_tau2.py into shared/data/grok_tau2.jsonl.gz beside
  the checkout, or $REWIND_GROKTAU2; labels in bench/corpora/grok_tau2_labels.json,
  GROK_TAU2_LABELS.md; rows "tau2, Grok"): the same two forms; one loop in 586 runs, so
  mostly a false-alarm check.
- Tool-calling runs (gpt-oss-20b asking a weather tool for 1 to 15 cities; converted by
  bench/corpora/convert_gptoss.py into shared/data/gptoss_weather.jsonl.gz beside the checkout,
  or $REWIND_GPTOSS; labels in bench/corpora/gptoss_labels.json, GPTOSS_LABELS.md): no user,
  one tool with fixed answers; the loops are one city asked again and again.
- Web-API runs (six ToolLLaMA-2-7B agents answering questions through RapidAPI web APIs on
  StableToolBench, ToolBench's CoT mode; converted by bench/corpora/convert_toolbench.py into
  shared/data/toolbench_cot.jsonl.gz beside the checkout, or $REWIND_TOOLBENCH; labels in
  bench/corpora/toolbench_labels.json, TOOLBENCH_LABELS.md): no user, short runs (about 4
  calls), the harness rejecting the model's output (turns without a call, unparseable
  arguments, a malformed ``Finish``).
- Multi-turn runs on stateful APIs (BFCL v4, gpt-oss-120b and -20b on seven vLLM builds:
  a file system, a car, trading, travel, messaging; converted by bench/corpora/convert_bfcl.py
  into shared/data/bfcl_gptoss.jsonl.gz beside the checkout, or $REWIND_BFCL; labels in
  bench/corpora/bfcl_labels.json, BFCL_LABELS.md, split by task): several user requests per
  run (user turns between), repeated reads, failures with nudged arguments, rejected responses.
- ``--late N`` lists, instead of the tables, every looping case of a tuned or enriched set, the
  traces and the peers not flagged within 3 steps of its loop's start, with its steps from N
  before the start to the first flag and the rule of each flag (never a held-out case).
- Human chats (LoCoMo, ``shared/data/locomo10.json``): long two-person chats, each speaker in turn
  fed as the agent's message turns and the other as the user; no tools and no loops, so every
  flag is a false alarm ("flagged ok"). Even positions tuned, odd positions held out.

- Cost: ``observe`` is timed step by step on a healthy stream (a coding agent doing distinct
  work with status checks, polls and transient errors) and on a looping stream (crop retries,
  jittered retries, search/fetch cycles, empty turns, a dead tool, between healthy stretches).
- Baseline: the detector a user would write instead (`SimpleWindowDetector`): the last steps'
  keys in a bounded deque (as many as the detector's window) with a Counter of them, flagging a
  key seen 3 times in the window, in the same run. Twice: with the key a user writes
  (the tool, its arguments as sorted JSON, the error or the result), and with the detector's
  own normalization and fingerprints, so the table separates what normalizing costs from what
  the rules cost. Its flags on both streams are printed beside the detector's: it is cheaper
  and catches less (no jitter, no progress, no turns).
- Memory: bytes held by a detector (tracemalloc) after 10k and 100k healthy steps, beside the
  baseline's.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gc
import gzip
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

# the engine of this checkout, not whichever one is installed (run as a script, sys.path[0] is
# bench/)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.loops.detector import (  # noqa: E402
    DEFAULT_USER_TOOLS,
    DetectorConfig,
    LoopDetector,
    Step,
    Verdict,
)
from engine.loops.fingerprint import digest, fingerprint  # noqa: E402
from engine.loops.normalize import Normalizer, error_signature, result_digest  # noqa: E402

TARGET_MEDIAN_US = 20.0


# --- streams ----------------------------------------------------------------------------------
def healthy_stream(n: int) -> Iterator[Step]:
    """Distinct, productive work: reads, edits, status checks, test runs, polls, a 503 now and
    then, short thoughts."""
    for i in range(n):
        k = i % 8
        if k == 0:
            yield Step(
                tool="read_file",
                args={"path": f"src/pkg/mod{i}.py"},
                result=f"def f{i}():\n    return {i}\n",
            )
        elif k == 1:
            yield Step(
                tool="edit_file",
                args={
                    "path": f"src/pkg/mod{i % 40}.py",
                    "old": "a",
                    "new": f"b{i}",
                    "request_id": f"r{i}",
                },
                result="Edited",
            )
        elif k == 2:
            yield Step(tool="git_status", args={}, result=f" M src/pkg/mod{i % 40}.py")
        elif k == 3:
            yield Step(
                tool="run_tests",
                args={"cmd": "pytest -q"},
                result={"failed": (n - i) % 7, "passed": i, "duration": f"{i % 9}.1s"},
            )
        elif k == 4:
            yield Step(tool=None, text=f"Step {i}: looking at the next module.")
        elif k == 5:
            yield Step(
                tool="job_status",
                args={"job_id": "j-1"},
                result={"state": "running", "progress": i % 100},
            )
        elif k == 6:
            yield Step(
                tool="web_search",
                args={"query": f"python error {i}"},
                result=[f"https://docs.example/{i}"],
            )
        elif i % 3:
            yield Step(tool="fetch", args={"url": f"https://docs.example/{i}"}, result=f"page {i}")
        else:
            yield Step(
                tool="fetch",
                args={"url": f"https://docs.example/{i}"},
                ok=False,
                error="HTTP 503 Service Unavailable",
            )


def looping_stream(n: int) -> Iterator[Step]:
    """Loops of every kind, each a few steps past its detection, between healthy stretches."""
    produced = 0
    segment = 0
    while produced < n:
        s = segment
        kind = segment % 6
        if kind == 0:
            box = [820, 1400, 1180, 1330]
            steps = [
                Step(
                    tool="image_crop",
                    args={"path": f"r{s}.jpg", "box": box},
                    ok=False,
                    error="invalid slice: y2 (1330) must be greater than y1 (1400)",
                )
            ] * 8
        elif kind == 1:
            steps = [
                Step(
                    tool="image_crop",
                    args={"path": f"r{s}.jpg", "box": [820 + j, 1400 - j, 1180, 1330]},
                    ok=False,
                    error=f"invalid slice: y1 ({1400 - j}) > y2 (1330)",
                )
                for j in range(6)
            ]
        elif kind == 2:
            steps = [
                Step(
                    tool="web_search",
                    args={"query": f"freeze policy {s}"},
                    result=[f"https://wiki/{s}"],
                ),
                Step(tool="fetch", args={"url": f"https://wiki/{s}"}, result="TBD"),
            ] * 4
        elif kind == 3:
            steps = [Step(tool=None, text="")] * 5
        elif kind == 4:
            steps = [
                Step(
                    tool="fetch",
                    args={"url": f"https://down.example/{s}/{j}"},
                    ok=False,
                    error="HTTP 503 from egress proxy",
                )
                for j in range(6)
            ]
        else:
            steps = list(healthy_stream(12 + s))[-12:]
        for step in steps:
            yield step
            produced += 1
            if produced >= n:
                return
        segment += 1


# --- the simple baseline -----------------------------------------------------------------------
class SimpleWindowDetector:
    """The loop check a user would write: the keys of the last `window` steps in a bounded deque
    with a Counter of them; a step whose key is in the window `threshold` times is flagged.

    The key is ``(tool, arguments as sorted JSON, ok, error or result)``, or with `normalized`
    the real detector's (normalized arguments, fingerprint, result digest, error signature).
    """

    def __init__(self, window: int, threshold: int = 3, normalized: bool = False) -> None:
        self.threshold = threshold
        self.normalizer = Normalizer() if normalized else None
        self.keys: collections.deque = collections.deque(maxlen=window)
        self.counts: collections.Counter = collections.Counter()

    def key(self, step: Step) -> object:
        if self.normalizer is None:
            if step.tool is None:
                return ("turn", step.text)
            args = json.dumps(step.args, sort_keys=True, default=str)
            return (step.tool, args, step.ok, step.error if not step.ok else str(step.result))
        if step.tool is None:
            return ("turn", digest(step.text or ""), False)
        args = self.normalizer.args(step.args)
        outcome = (
            result_digest(step.result, self.normalizer)
            if step.ok
            else digest(error_signature(step.error, args))
        )
        return (fingerprint(step.tool, args), outcome, step.ok)

    def observe(self, step: Step) -> bool:
        key = self.key(step)
        keys, counts = self.keys, self.counts
        if len(keys) == keys.maxlen:
            oldest = keys[0]
            counts[oldest] -= 1
            if not counts[oldest]:
                del counts[oldest]
        keys.append(key)
        counts[key] += 1
        return counts[key] >= self.threshold


def flagged(detector, steps: Sequence[Step]) -> int:
    """Steps of `steps` that `detector` flags."""
    hits = 0
    for step in steps:
        verdict = detector.observe(step)
        hits += bool(getattr(verdict, "looping", verdict))
    return hits


# --- measuring -------------------------------------------------------------------------------
def time_per_step(detector, steps: list[Step]) -> list[float]:
    """Microseconds spent in each observe call."""
    clock = time.perf_counter_ns
    observe = detector.observe
    out = []
    gc.disable()
    try:
        for step in steps:
            t0 = clock()
            observe(step)
            out.append((clock() - t0) / 1000)
    finally:
        gc.enable()
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def memory_after(make_detector, counts: tuple[int, ...]) -> list[int]:
    """Bytes allocated by a detector (and kept) after feeding it each count of healthy steps."""
    results = []
    gc.collect()
    tracemalloc.start()
    try:
        detector = make_detector()
        fed = 0
        for count in counts:
            for step in healthy_stream(count - fed) if fed == 0 else _continue(fed, count):
                detector.observe(step)
            fed = count
            gc.collect()
            results.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    del detector
    return results


def _continue(start: int, end: int) -> Iterator[Step]:
    stream = healthy_stream(end)
    for i, step in enumerate(stream):
        if i >= start:
            yield step


# --- detection quality per source --------------------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent
LABELS = ROOT / "bench" / "corpora" / "labels.json"
TAU2_RUNS = Path(os.environ.get("REWIND_TAU2RUNS") or ROOT / "bench" / "data" / "tau2runs.jsonl.gz")
TAU2_LABELS = ROOT / "bench" / "corpora" / "tau2_labels.json"
USER = None
"""In a case's steps: the user spoke here (a conversational run's customer turn); not a step."""
LOCOMO_CANDIDATES = tuple(folder / "shared" / "data" / "locomo10.json" for folder in ROOT.parents)
"""LoCoMo (snap-research/LoCoMo, CC BY-NC 4.0, evaluation only, never copied here): long
two-person chats, read from ``shared/data`` beside the checkout."""


def _beside(variable: str, name: str) -> tuple[Path | None, ...]:
    """Where a converted corpus may be: the file named by $`variable`, else `name` in
    ``shared/data`` beside the checkout (or beside a folder above it)."""
    return (
        Path(os.environ[variable]) if os.environ.get(variable) else None,
        *(folder / "shared" / "data" / name for folder in ROOT.parents),
    )


GROK_TAU2_LABELS = ROOT / "bench" / "corpora" / "grok_tau2_labels.json"
GROK_TAU2_CANDIDATES = _beside("REWIND_GROKTAU2", "grok_tau2.jsonl.gz")
"""Where the converted Grok tau2-bench simulations may be (generated, not committed: see
bench/corpora/convert_grok_tau2.py and GROK_TAU2_LABELS.md)."""
GPTOSS_LABELS = ROOT / "bench" / "corpora" / "gptoss_labels.json"
GPTOSS_CANDIDATES = _beside("REWIND_GPTOSS", "gptoss_weather.jsonl.gz")
"""Where the converted gpt-oss tool-calling trials may be (generated, not committed: see
bench/corpora/convert_gptoss.py and GPTOSS_LABELS.md)."""
TOOLBENCH_LABELS = ROOT / "bench" / "corpora" / "toolbench_labels.json"
TOOLBENCH_CANDIDATES = _beside("REWIND_TOOLBENCH", "toolbench_cot.jsonl.gz")
"""Where the converted ToolBench CoT runs may be (generated, not committed: see
bench/corpora/convert_toolbench.py and TOOLBENCH_LABELS.md)."""
BFCL_LABELS = ROOT / "bench" / "corpora" / "bfcl_labels.json"
BFCL_CANDIDATES = _beside("REWIND_BFCL", "bfcl_gptoss.jsonl.gz")
"""Where the converted BFCL multi-turn runs may be (generated, not committed: see
bench/corpora/convert_bfcl.py and BFCL_LABELS.md)."""
REALRUNS_CANDIDATES = (
    Path(os.environ["REWIND_REALRUNS"]) if os.environ.get("REWIND_REALRUNS") else None,
    ROOT / "bench" / "corpora" / "realruns.jsonl.gz",
    *(folder / "shared" / "data" / "realruns.jsonl.gz" for folder in ROOT.parents),
)
"""Where the converted real-runs corpus may be (it is generated, not committed: see
bench/corpora/convert_realruns.py): ``shared/data`` beside the checkout or beside any folder
above it (a worktree one level deeper finds the same one)."""


@dataclass(frozen=True)
class Case:
    """One scored scenario."""

    name: str
    steps: Sequence[Step | None | tuple[()]]
    """The steps in order; `USER` (None) where the user spoke, `NEW_TASK` where a new task
    began (neither is a step, neither has an index)."""
    expected: int | None
    """Step at which a flag is expected; None: the case is healthy."""
    earliest: int | None = None
    """Earliest acceptable flag (the loop's first step); None: `expected`."""
    finished_ok: bool | None = None
    """The run finished successfully (real runs: resolved); None when unknown."""
    peer_flag: int | None = None
    """The peer's own flag step (peer suites only)."""


def _import_by_path(name: str, folder: Path):
    """Import a tests/ package by its path (tests/ is not an installed package)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def trace_cases() -> list[Case]:
    corpus = _import_by_path("rewind_trace_corpus", ROOT / "tests" / "traces").CORPUS
    return [
        Case(t.name, t.steps, t.flag_at, t.loop_start, finished_ok=not t.looping) for t in corpus
    ]


def peer_cases() -> dict[str, list[Case]]:
    suites = _import_by_path("rewind_peer_suites", ROOT / "tests" / "loops" / "peers").SUITES
    return {
        suite: [
            Case(
                c.name,
                c.steps,
                c.expected,
                finished_ok=c.expected is None,
                peer_flag=c.flag_at,
            )
            for c in cases
        ]
        for suite, cases in suites.items()
    }


def realruns_path() -> Path | None:
    return next((p for p in REALRUNS_CANDIDATES if p is not None and p.exists()), None)


def _step(d: dict) -> Step:
    return Step(
        tool=d.get("tool"),
        args=d.get("args"),
        ok=d.get("ok", True),
        error=d.get("error"),
        result=d.get("result"),
        text=d.get("text"),
        turn=d.get("turn"),
    )


def realrun_cases(path: Path) -> dict[str, list[Case]]:
    """The labelled splits and the whole corpus (unlabelled: only its false-alarm rate counts)."""
    labels = json.loads(LABELS.read_text())
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        runs = [json.loads(line) for line in fh]
    splits = {
        "tuned": "real runs, tuned",
        "heldout": "real runs, held-out",
        "enriched": "real runs, enriched (not random)",
    }
    out: dict[str, list[Case]] = {name: [] for name in splits.values()}
    every: list[Case] = []
    for run in runs:
        steps = [_step(d) for d in run["steps"]]
        label = labels.get(run["id"])
        if label is not None:
            out[splits[label["split"]]].append(
                Case(
                    run["id"],
                    steps,
                    label["flag_at"] if label["looping"] else None,
                    label["loop_start"],
                    finished_ok=run.get("resolved"),
                )
            )
        every.append(Case(run["id"], steps, None, finished_ok=run.get("resolved")))
    out[f"real runs, all {len(every)} (no labels)"] = every
    return out


def _respond_form(entries: list[dict]) -> list[Step]:
    """The tau-bench action form of a conversation: each agent message is a call of the
    ``respond`` tool whose result is the customer's reply; the customer's turns are no steps."""
    steps: list[Step] = []
    for d in entries:
        if "user" in d:
            last = steps[-1] if steps else None
            if last is not None and last.tool == "respond":
                reply = f"{last.result} {d['user']}" if last.result else d["user"]
                steps[-1] = Step(tool="respond", args=last.args, result=reply)
            continue
        if d.get("tool") is None:
            steps.append(Step(tool="respond", args={"content": d.get("text") or ""}))
        else:
            steps.append(_step(d))
    return steps


def tau2_cases() -> dict[str, list[Case]]:
    """The conversational runs (tau2-bench), per labelled split, in two forms: agent turns with
    the customer's turns between (`USER`), and tau-bench's action form (a ``respond`` call whose
    result is the customer's reply). Both have the same step indexes. With the Grok runs of
    bench/corpora/GROK_TAU2_LABELS.md when their converted file is there."""
    out = _conversations(TAU2_RUNS, TAU2_LABELS, "conversational")
    grok = next((p for p in GROK_TAU2_CANDIDATES if p is not None and p.exists()), None)
    if grok is not None:
        out.update(_conversations(grok, GROK_TAU2_LABELS, "tau2, Grok"))
    return out


def _conversations(path: Path, labels_path: Path, prefix: str) -> dict[str, list[Case]]:
    labels = json.loads(labels_path.read_text())
    names = {
        ("tuned", "turns"): f"{prefix}, tuned",
        ("heldout", "turns"): f"{prefix}, held-out",
        ("tuned", "respond"): f"{prefix} (respond), tuned",
        ("heldout", "respond"): f"{prefix} (respond), held-out",
    }
    out: dict[str, list[Case]] = {name: [] for name in names.values()}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            run = json.loads(line)
            label = labels[run["id"]]
            forms = {
                "turns": [USER if "user" in d else _step(d) for d in run["steps"]],
                "respond": _respond_form(run["steps"]),
            }
            for form, steps in forms.items():
                out[names[label["split"], form]].append(
                    Case(
                        run["id"],
                        steps,
                        label["flag_at"] if label["looping"] else None,
                        label["loop_start"],
                        finished_ok=run.get("resolved"),
                    )
                )
    return out


def gptoss_cases() -> dict[str, list[Case]]:
    """The gpt-oss-20b tool-calling trials (one tool, fixed answers; bench/corpora/
    GPTOSS_LABELS.md), per labelled split; empty when the converted file is not there."""
    names = {"tuned": "tool calls (gpt-oss), tuned", "heldout": "tool calls (gpt-oss), held-out"}
    return _labelled_runs(GPTOSS_CANDIDATES, GPTOSS_LABELS, names)


def toolbench_cases() -> dict[str, list[Case]]:
    """The ToolBench CoT runs (ToolLLaMA agents answering questions through web APIs, short
    runs, rejected output; bench/corpora/TOOLBENCH_LABELS.md), per labelled split; empty when
    the converted file is not there."""
    names = {"tuned": "web APIs (ToolBench), tuned", "heldout": "web APIs (ToolBench), held-out"}
    return _labelled_runs(TOOLBENCH_CANDIDATES, TOOLBENCH_LABELS, names)


def bfcl_cases() -> dict[str, list[Case]]:
    """The BFCL v4 multi-turn runs of gpt-oss (several user requests per run on stateful
    APIs: a file system, a car, trading, travel; rejected responses; bench/corpora/
    BFCL_LABELS.md), per labelled split; empty when the converted file is not there."""
    names = {
        "tuned": "multi-turn APIs (BFCL), tuned",
        "heldout": "multi-turn APIs (BFCL), held-out",
    }
    return _labelled_runs(BFCL_CANDIDATES, BFCL_LABELS, names)


def _labelled_runs(
    candidates: tuple[Path | None, ...], labels_path: Path, names: dict[str, str]
) -> dict[str, list[Case]]:
    """Runs (one step per line entry; an entry with ``user`` is a user turn, `USER`) from the
    first converted file of `candidates` that exists, per split of `labels_path` named by
    `names`; empty when none."""
    path = next((p for p in candidates if p is not None and p.exists()), None)
    if path is None:
        return {}
    labels = json.loads(labels_path.read_text())
    out: dict[str, list[Case]] = {name: [] for name in names.values()}
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            run = json.loads(line)
            label = labels[run["id"]]
            out[names[label["split"]]].append(
                Case(
                    run["id"],
                    [USER if "user" in d else _step(d) for d in run["steps"]],
                    label["flag_at"] if label["looping"] else None,
                    label["loop_start"],
                    finished_ok=run.get("resolved"),
                )
            )
    return out


NEW_TASK: tuple[()] = ()
"""In a case's steps: a new task begins here (a chat session on another day); not a step."""


def chat_cases() -> dict[str, list[Case]]:
    """Human-like two-person chats (LoCoMo), a false-alarm check for conversational use: no
    tools, nobody loops. Each conversation is fed twice, each speaker in turn the "agent" (its
    messages are turns) and the other the user (`USER`), a new task at each session (another
    day). Split fixed before any run: conversations in file order, even positions tuned, odd
    positions held out. Every case is healthy; a flag is a false alarm."""
    path = next((p for p in LOCOMO_CANDIDATES if p.exists()), None)
    if path is None:
        return {}
    out: dict[str, list[Case]] = {"human chats, tuned": [], "human chats, held-out": []}
    for position, sample in enumerate(json.loads(path.read_text(encoding="utf-8"))):
        chat = sample["conversation"]
        sessions = sorted(
            (k for k in chat if k.startswith("session_") and not k.endswith("date_time")),
            key=lambda k: int(k.split("_")[1]),
        )
        split = "human chats, tuned" if position % 2 == 0 else "human chats, held-out"
        for agent in (chat["speaker_a"], chat["speaker_b"]):
            steps: list[Step | None | tuple[()]] = []
            for key in sessions:
                steps.append(NEW_TASK)
                for turn in chat[key]:
                    text = turn.get("text") or ""
                    steps.append(Step(tool=None, text=text) if turn["speaker"] == agent else USER)
            name = f"{sample.get('sample_id', position)}/{agent}"
            out[split].append(Case(name, steps, None, finished_ok=True))
    return out


def verdicts(
    steps: Sequence[Step | None | tuple[()]], config: DetectorConfig | None = None
) -> Iterator[tuple[int, Verdict]]:
    """(tool step number, verdict) for each tool step of a case, through a fresh production
    detector (or one built from `config`); user turns (USER) and new tasks (NEW_TASK) reach it
    as they would, unnumbered."""
    detector = LoopDetector(config)
    i = 0
    for step in steps:
        if step is USER:
            detector.user_input()
            continue
        if isinstance(step, tuple):  # NEW_TASK
            detector.new_task()
            continue
        yield i, detector.observe(step)
        i += 1


def action_marks(steps: Sequence[Step | None | tuple[()]]) -> list[bool]:
    """Per tool step of a case (indexed as `verdicts` numbers them): whether it is an action of
    the agent (a tool call, a turn a harness answered) rather than a chat message to the user
    (a call of a user tool, or an accepted turn in a run where a user speaks)."""
    users = any(step is USER for step in steps)
    marks = []
    for step in steps:
        if step is USER or isinstance(step, tuple):
            continue
        chat = step.tool in DEFAULT_USER_TOOLS or (step.tool is None and users and step.ok)
        marks.append(not chat)
    return marks


def actions_between(marks: list[bool], start: int, end: int) -> int:
    """The agent's actions after step `start` up to step `end` (negative when `end` comes
    first): how many actions later the flag at `end` came."""
    if end >= start:
        return sum(marks[start + 1 : end + 1])
    return -sum(marks[end + 1 : start + 1])


def first_flag(
    steps: Sequence[Step | None | tuple[()]], config: DetectorConfig | None = None
) -> int | None:
    return next((i for i, verdict in verdicts(steps, config) if verdict.looping), None)


@dataclass
class Score:
    source: str
    cases: int
    loops: int
    labelled: bool
    tp: int = 0
    fp: int = 0
    fn: int = 0
    delays: list[int] | None = None
    ok_runs: int = 0
    ok_flagged: int = 0
    ok_healthy: int = 0
    """Successful runs the labels show no loop in."""
    ok_healthy_flagged: int = 0
    peer_cases: int = 0
    peer_hits: int = 0
    peer_on_time: int = 0
    """Peer-flagged cases our first flag comes at or before the peer's step + 1."""
    from_start: list[int] | None = None
    """First flag minus the loop's first step, over the true positives."""
    within_3: int = 0
    """Looping cases flagged at the loop's first step or at most 3 steps after it."""
    misses: list[str] | None = None

    def cell(self, value: float | None, fmt: str) -> str:
        return "—" if value is None else format(value, fmt)

    @property
    def precision(self) -> float | None:
        if not self.labelled:
            return None
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else None

    @property
    def recall(self) -> float | None:
        if not self.labelled:
            return None
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else None


def score(
    source: str, cases: list[Case], labelled: bool = True, config: DetectorConfig | None = None
) -> Score:
    sc = Score(source, len(cases), sum(c.expected is not None for c in cases), labelled)
    sc.delays, sc.misses, sc.from_start = [], [], []
    for c in cases:
        got = first_flag(c.steps, config)
        marks = action_marks(c.steps) if c.expected is not None else []
        if c.finished_ok:
            sc.ok_runs += 1
            sc.ok_flagged += got is not None
            if labelled and c.expected is None:
                sc.ok_healthy += 1
                sc.ok_healthy_flagged += got is not None
        if c.peer_flag is not None:
            sc.peer_cases += 1
            sc.peer_hits += got is not None and c.peer_flag <= got <= c.peer_flag + 1
            sc.peer_on_time += got is not None and got <= c.peer_flag + 1
        if not labelled:
            continue
        where = "never" if got is None else f"at {got}"
        if c.expected is None:
            if got is not None:
                sc.fp += 1
                sc.misses.append(f"FP {c.name}: flagged {where}, healthy")
            continue
        earliest = c.expected if c.earliest is None else c.earliest
        sc.within_3 += (
            got is not None and earliest <= got and actions_between(marks, earliest, got) <= 3
        )
        if got is not None and earliest <= got <= c.expected + 1:
            sc.tp += 1
            sc.delays.append(actions_between(marks, c.expected, got))
            sc.from_start.append(actions_between(marks, earliest, got))
        elif got is not None and got < earliest:
            sc.fp += 1
            sc.misses.append(f"FP {c.name}: flagged {where}, expected {c.expected}")
        else:
            sc.fn += 1
            sc.misses.append(f"FN {c.name}: flagged {where}, expected {c.expected}")
    return sc


def quality_report(show_misses: bool) -> None:
    scores = [score("own corpus (tests/traces)", trace_cases())]
    scores += [score(f"peers: {suite}", cases) for suite, cases in peer_cases().items()]
    all_peers = [c for cases in peer_cases().values() for c in cases]
    scores.append(score("peers: all suites", all_peers))
    path = realruns_path()
    if path is not None:
        for name, cases in realrun_cases(path).items():
            scores.append(score(name, cases, labelled="no labels" not in name))
    for name, cases in tau2_cases().items():
        scores.append(score(name, cases))
    for name, cases in gptoss_cases().items():
        scores.append(score(name, cases))
    for name, cases in toolbench_cases().items():
        scores.append(score(name, cases))
    for name, cases in bfcl_cases().items():
        scores.append(score(name, cases))
    for name, cases in chat_cases().items():
        scores.append(score(name, cases))
    print("Detection quality per source (LoopDetector() production defaults)")
    print()
    header = (
        f"{'source':36} {'cases':>5} {'loops':>5} {'precision':>9} {'recall':>6} "
        f"{'median delay':>12} {'peer step':>9} {'flagged ok':>13} {'ok, no loop':>13}"
    )
    print(header)
    print("-" * len(header))
    for sc in scores:
        delay = statistics.median(sc.delays) if sc.delays else None
        peer = f"{sc.peer_hits}/{sc.peer_cases}" if sc.peer_cases else "—"
        ok = f"{sc.ok_flagged}/{sc.ok_runs}" if sc.ok_runs else "—"
        if sc.ok_runs:
            ok += f" {100 * sc.ok_flagged / sc.ok_runs:3.0f}%"
        healthy = f"{sc.ok_healthy_flagged}/{sc.ok_healthy}" if sc.ok_healthy else "—"
        if sc.ok_healthy:
            healthy += f" {100 * sc.ok_healthy_flagged / sc.ok_healthy:3.0f}%"
        print(
            f"{sc.source:36} {sc.cases:5d} {sc.loops if sc.labelled else '—':>5} "
            f"{sc.cell(sc.precision, '.3f'):>9} {sc.cell(sc.recall, '.3f'):>6} "
            f"{sc.cell(delay, '+.1f'):>12} {peer:>9} {ok:>13} {healthy:>13}"
        )
    print()
    print("Held-out rows: never tuned on, but scored again after later rounds of tuning (CI")
    print("prints this table on every run), so read them as tuned; only a set not seen before")
    print("is held out.")
    print()
    print(timing_table(scores))
    print()
    print(stricter_table(path))
    if path is None:
        print()
        print(
            "real runs: no converted corpus found (looked for $REWIND_REALRUNS, "
            "bench/corpora/realruns.jsonl.gz, shared/data/realruns.jsonl.gz beside the "
            "checkout or above it); "
            "build it with bench/corpora/convert_realruns.py"
        )
    if show_misses:
        for sc in scores:
            # the held-out halves are never tuned on: their mistakes are not listed
            if sc.misses and not sc.source.startswith("peers: all") and "held-out" not in sc.source:
                print()
                print(f"{sc.source}:")
                for line in sc.misses:
                    print(f"  {line}")
    print()


STRICTER = DetectorConfig(user_repeat_failures=True)
"""The stricter conversational setting the third table compares with the defaults."""


def stricter_table(path: Path | None) -> str:
    """The labelled sets with user turns (and the real runs), under the defaults and under
    `STRICTER`, side by side: what flagging a failing call retried after a user turn at its
    second attempt buys (flags within 3 steps of the loop's start) and costs (precision, healthy
    successful runs flagged)."""
    sets = dict(tau2_cases())
    if path is not None:
        sets.update(
            (name, cases) for name, cases in realrun_cases(path).items() if "no labels" not in name
        )
    lines = [
        "Stricter setting for conversational agents (user_repeat_failures=true; off by default)",
        "",
        f"{'source':36} {'setting':>8} {'precision':>9} {'recall':>6} {'ok, no loop':>13} "
        f"{'<= 3 after start':>17}",
    ]
    lines.append("-" * len(lines[-1]))
    for name, cases in sets.items():
        for label, config in (("default", None), ("stricter", STRICTER)):
            sc = score(name, cases, config=config)
            healthy = f"{sc.ok_healthy_flagged}/{sc.ok_healthy}" if sc.ok_healthy else "—"
            within = f"{sc.within_3}/{sc.loops} {sc.within_3 / sc.loops:.2f}" if sc.loops else "—"
            lines.append(
                f"{name if label == 'default' else '':36} {label:>8} "
                f"{sc.cell(sc.precision, '.3f'):>9} {sc.cell(sc.recall, '.3f'):>6} "
                f"{healthy:>13} {within:>17}"
            )
    return "\n".join(lines)


def _describe(step: Step | None | tuple[()]) -> str:
    """One line of a step for the late listing."""
    if step is USER:
        return "(user)"
    if isinstance(step, tuple):
        return "(new task)"
    if step.tool is None:
        return f"turn {(step.text or '')[:110]!r}"
    args = json.dumps(step.args, sort_keys=True, default=str)[:90]
    out = f"!{(step.error or '')[:90]!r}" if not step.ok else repr(str(step.result)[:60])
    return f"{step.tool} {args} -> {out}"


def late_report(context: int) -> None:
    """Every tuned looping case not flagged within 3 steps of its loop's start (never a held-out
    one), with the step stream from `context` steps before the start to the first flag (or the
    expected step) and the rule of each looping verdict."""
    sources: list[tuple[str, list[Case]]] = [("own corpus (tests/traces)", trace_cases())]
    sources += [(f"peers: {suite}", cases) for suite, cases in peer_cases().items()]
    path = realruns_path()
    sources += list(realrun_cases(path).items()) if path is not None else []
    sources += list(tau2_cases().items())
    sources += list(gptoss_cases().items())
    sources += list(toolbench_cases().items())
    sources += list(bfcl_cases().items())
    for source, cases in sources:
        if "held-out" in source or "no labels" in source:
            continue
        for c in cases:
            if c.expected is None:
                continue
            start = c.expected if c.earliest is None else c.earliest
            flags = {i: v.rule for i, v in verdicts(c.steps) if v.looping}
            got = min(flags, default=None)
            if got is not None and start <= got and actions_between(
                action_marks(c.steps), start, got
            ) <= 3:
                continue
            print(
                f"\n{source} / {c.name}: loop starts {start}, expected {c.expected}, "
                f"first flag {got} ({flags.get(got)})"
            )
            end = max(c.expected + 1, start + 3) if got is None else max(got, start + 3)
            i = 0
            for step in c.steps:
                between = step is USER or isinstance(step, tuple)  # a user turn, a new task
                if start - context <= i <= end:
                    mark = f" <- {flags[i]}" if not between and i in flags else ""
                    print(f"  {'' if between else i:>4} {_describe(step)}{mark}")
                i += not between


def timing_table(scores: list[Score]) -> str:
    """How soon after the loop's start each labelled source with loops is flagged, and the peer
    suites' "on time" (see the module docstring)."""
    header = (
        f"{'source':36} {'loops':>5} {'from start':>10} {'<= 3 after start':>16} {'on time':>13}"
    )
    lines = [
        "Timing: first flag from the loop's start, in actions (targets: within 3; peers on time"
        " >= 0.90)",
        "",
        header,
        "-" * len(header),
    ]
    for sc in scores:
        if not sc.labelled or not sc.loops:
            continue
        start = statistics.median(sc.from_start) if sc.from_start else None
        within = f"{sc.within_3}/{sc.loops} {sc.within_3 / sc.loops:.2f}"
        on_time = "—"
        if sc.peer_cases:
            on_time = f"{sc.peer_on_time}/{sc.peer_cases} {sc.peer_on_time / sc.peer_cases:.2f}"
        lines.append(
            f"{sc.source:36} {sc.loops:5d} {sc.cell(start, '+.1f'):>10} {within:>16} {on_time:>13}"
        )
    return "\n".join(lines)


def all_cases() -> Iterator[tuple[str, Case]]:
    """Every scored case, with the name of its source."""
    for case in trace_cases():
        yield "traces", case
    for suite, cases in peer_cases().items():
        for case in cases:
            yield f"peers: {suite}", case
    path = realruns_path()
    if path is not None:
        for name, cases in realrun_cases(path).items():
            for case in cases:
                yield name, case
    for name, cases in tau2_cases().items():
        for case in cases:
            yield name, case
    for name, cases in gptoss_cases().items():
        for case in cases:
            yield name, case
    for name, cases in toolbench_cases().items():
        for case in cases:
            yield name, case
    for name, cases in bfcl_cases().items():
        for case in cases:
            yield name, case
    for name, cases in chat_cases().items():
        for case in cases:
            yield name, case


def write_verdicts(path: Path) -> None:
    """Every verdict the production detector gives on every step of every case (not only the
    first flag), all its fields: healthy steps are counted, looping ones written in full."""
    with path.open("w", encoding="utf-8") as out:
        for source, case in all_cases():
            healthy = 0
            for i, verdict in verdicts(case.steps):
                if verdict.looping:
                    fields = dataclasses.asdict(verdict)
                    line = {"source": source, "case": case.name, "step": i, **fields}
                    out.write(json.dumps(line, sort_keys=True, default=repr) + "\n")
                else:
                    healthy += 1
            out.write(json.dumps({"source": source, "case": case.name, "healthy": healthy}) + "\n")
    print(f"verdicts of every case written to {path}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="steps per timed stream")
    parser.add_argument(
        "--memory-steps",
        default="10000,100000",
        help="healthy steps after which the memory held is measured (two counts)",
    )
    parser.add_argument(
        "--quality-only", action="store_true", help="only the detection-quality table"
    )
    parser.add_argument(
        "--cost-only", action="store_true", help="skip the detection-quality table"
    )
    parser.add_argument(
        "--no-misses", action="store_true", help="do not list the cases each source gets wrong"
    )
    parser.add_argument(
        "--verdicts",
        metavar="PATH",
        help="also write every verdict of every case (all steps, all fields) to PATH, one JSON "
        "line per looping verdict: diff two such files to prove a change kept every verdict",
    )
    parser.add_argument(
        "--late",
        type=int,
        metavar="N",
        help="only list the tuned looping cases not flagged within 3 steps of the loop's start, "
        "with the steps from N before the start to the first flag (never a held-out case)",
    )
    opts = parser.parse_args()
    if opts.late is not None:
        late_report(opts.late)
        return

    if opts.verdicts:
        write_verdicts(Path(opts.verdicts))

    if not opts.cost_only:
        quality_report(show_misses=not opts.no_misses)
    if opts.quality_only:
        return

    streams = {
        "healthy": list(healthy_stream(opts.steps)),
        "looping": list(looping_stream(opts.steps)),
    }
    window = LoopDetector().horizon
    detectors = {
        f"rewind (window {window})": lambda: LoopDetector(max_steps=None),
        "base: deque+Counter": lambda: SimpleWindowDetector(window),
        "base, normalized": lambda: SimpleWindowDetector(window, normalized=True),
    }
    rows = []
    flags: dict[tuple[str, str], int] = {}
    for name, steps in streams.items():
        for label, make in detectors.items():
            time_per_step(make(), steps[:2000])  # warm-up (regex and key caches)
            times = time_per_step(make(), steps)
            flags[label, name] = flagged(make(), steps)
            rows.append(
                (
                    name,
                    label,
                    len(steps),
                    statistics.median(times),
                    percentile(times, 0.99),
                    statistics.median(times[-1000:]),
                )
            )

    print(f"LoopDetector.observe, Python {platform.python_version()} on {platform.machine()}")
    print(
        "base: the check a user would write, the last steps' keys in a bounded deque (the "
        f"window, {window}) with a Counter, flagging a key seen 3 times; 'normalized': keyed by "
        "the detector's own normalization and fingerprints"
    )
    print()
    header = (
        f"{'stream':8} {'detector':22} {'steps':>7} {'median µs':>10} {'×base':>6} "
        f"{'p99 µs':>9} {'median µs, last 1k':>19} {'flags':>6}"
    )
    print(header)
    print("-" * len(header))
    medians = {(r[0], r[1]): r[3] for r in rows}
    for name, label, count, median, p99, tail in rows:
        ratio = median / medians[name, "base: deque+Counter"]
        print(
            f"{name:8} {label:22} {count:7d} {median:10.1f} {ratio:5.1f}x {p99:9.1f} "
            f"{tail:19.1f} {flags[label, name]:6d}"
        )
    print()
    small_n, large_n = (int(x) for x in opts.memory_steps.split(","))
    held = {label: memory_after(make, (small_n, large_n)) for label, make in detectors.items()}
    print(f"{'memory held':28} {f'after {small_n:,} steps':>18} {f'after {large_n:,} steps':>19} "
          f"{'ratio':>6}")
    for label, (small, large) in held.items():
        print(f"{label:28} {small / 1024:14.1f} KiB {large / 1024:15.1f} KiB {large / small:6.2f}")
    print()
    ours = held[f"rewind (window {window})"]
    worst = max(r[3] for r in rows if r[1].startswith("rewind"))
    verdict = "PASS" if worst < TARGET_MEDIAN_US else "FAIL"
    print(
        f"target: median observe < {TARGET_MEDIAN_US:.0f} µs on every stream: {verdict}; "
        f"memory bounded by the window: {'PASS' if ours[1] < 1.5 * ours[0] else 'FAIL'}"
    )


if __name__ == "__main__":
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main, listings=("--late", "--verdicts")))
