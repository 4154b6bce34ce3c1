"""View model of the session page's "Why flagged" tab: the evidence steps the verdict rests on and
the argument differences between near-duplicates; the engine's answer (`Engine.fleet.why_flagged`:
the flagged step, what each loop rule saw of the session run alone, the smallest change of one
detector setting that would not have flagged it) in on-call's words, with the `rewind replay
--set` line that tries the change on the whole fleet; and, for a stop by the hard step budget,
which task used it (pure, no Streamlit, no I/O).

The engine does the replays and the search; this module only words them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dashboard.views.common import short_json
from engine import MessageRecord, RuleReading, StepRecord, StoredVerdict, WhyFlagged

READING_COLUMNS = ["rule", "at this step", "looks for", "settings"]


def reading_verdict(reading: RuleReading, found: WhyFlagged) -> str:
    """One sentence on what the rule saw at the flagged step: fired here, also sees a loop
    here, saw one earlier, would flag later, sees none."""
    step, fired_rule = found.flag.step, found.flag.rule
    own = reading.alone
    if reading.rule == fired_rule:
        return f"flagged step {step}"
    if own is None:
        return "sees no loop in this session"
    if own.step < step:
        return (f"sees a loop earlier, at step {own.step} (the rules before it did not leave it "
                "the step, or it ran after the first flag)")
    if own.step == step:
        return (f"sees a loop at step {step} too (the rules run in order; the first that fires "
                "names the verdict)")
    return f"sees no loop yet at step {step}; alone it would flag step {own.step}"


def _shown(value: Any) -> str:
    if isinstance(value, bool):  # as `rewind replay --set` and a config file take it
        return "true" if value else "false"
    if isinstance(value, (set, frozenset, list, tuple)):
        return ",".join(sorted(str(v) for v in value)) or "none"
    if isinstance(value, Mapping):
        return ",".join(f"{k}:{_shown(v)}" for k, v in sorted(value.items())) or "none"
    return str(value)


def settings_text(settings: Mapping[str, Any]) -> str:
    """`repeat_threshold=3, breaker_failures=5`; "none" for a rule without settings."""
    return ", ".join(f"{k}={_shown(v)}" for k, v in settings.items()) or "none"


def reading_rows(found: WhyFlagged) -> list[dict[str, str]]:
    """One row per rule, in the detector's order (`READING_COLUMNS`); foreign tool names may be
    in the settings: render via `plain`."""
    return [{"rule": r.rule, "at this step": reading_verdict(r, found), "looks for": r.looks_for,
             "settings": settings_text(r.settings)} for r in found.readings]


def change_sentence(found: WhyFlagged, last_step: int | None = None) -> str | None:
    """The smallest change in one plain sentence (foreign tool names included: render via
    `plain`); None when no single setting clears the step. `last_step`: the session's last
    step; when the flag stopped the session there, a replay without the flag sees no step
    after it, and the sentence says that the record ends, not that no flag would come."""
    change = found.change
    if change is None:
        return None
    if change.field == "tool_exemptions":
        before = change.before or {}
        tools = sorted(t for t in change.after if set(before.get(t, ())) != set(change.after[t]))
        what = f"switching the rule off for {', '.join(tools)}"
    elif change.field == "disabled_rules":
        what = "switching the rule off for every tool"
    else:
        what = f"{change.field} {change.before} → {change.after}"
    if change.flag is not None:
        then = f"the first flag would move to step {change.flag.step} ({change.flag.rule})"
    elif last_step is not None and last_step <= found.flag.step:
        then = (f"no flag in the steps recorded, which end at step {last_step}, where the flag "
                "stopped the session (what it would have done next is not recorded)")
    else:
        then = "the session would not be flagged at all"
    return f"{what}: {then}"


def no_change_sentence(found: WhyFlagged) -> str:
    """Why no single setting clears the step, when `change_sentence` finds none: another rule
    that flags the session at that step or before it, named (foreign tool names are not in it,
    but render via `plain` all the same); else that no setting of the rule that fired is
    enough."""
    rule = found.flag.rule
    also = sorted(getattr(found, "also", ()), key=lambda f: (f.step, f.rule))
    if not also:
        return f"none found; no single setting of {rule} clears it"
    named = ", ".join(f"{f.rule} (alone it flags step {f.step})" for f in also)
    one = len(also) == 1
    return (f"none found: {named} {'flags' if one else 'flag'} this session too, so no setting "
            f"of {rule} alone clears it; switching off {rule} and "
            f"{'that rule' if one else 'those rules'} would")


def turns_sentence(found: WhyFlagged) -> str | None:
    """Which steps one model response issued together, for the steps whose runtime said
    (`WhyFlagged.turns`); None when no two steps share a turn. Calls of one turn are judged as
    one attempt."""
    groups: dict[str, list[int]] = {}
    for n, turn in sorted(getattr(found, "turns", {}).items()):
        groups.setdefault(turn, []).append(n)
    batches = [steps for steps in groups.values() if len(steps) > 1]
    if not batches:
        return None
    shown = "; ".join(f"steps {', '.join(map(str, steps))}" for steps in batches[-4:])
    return (f"Calls one model response issued together, judged as one attempt: {shown}")


def replay_command(found: WhyFlagged) -> str | None:
    """``rewind replay --set FIELD=VALUE`` trying the change on every session; None when the
    change is switching the rule off (or there is none)."""
    change = found.change
    if change is None or change.field in ("tool_exemptions", "disabled_rules"):
        return None
    return f"rewind replay --set {change.field}={change.after}"


# -- a stop by the hard step budget: which task used it ----------------------------------------
STEP_BUDGET = "step_budget"
QUOTE_CHARS = 120
"""Longest piece of the user's message quoted as the task's trigger."""


@dataclass(frozen=True)
class BudgetTask:
    """The task that used up the hard step budget (the budget counts per task, not per session:
    a user message, a new run or graph invocation, a client back after an idle gap starts one)."""

    first_step: int
    """The task's first step (the verdict's first evidence step)."""
    last_step: int
    """The step the budget ran out at."""
    used: int | None
    """Steps the task took (the rule's ``steps``), when recorded."""
    budget: int | None
    """The budget in force (``max_steps``), when recorded."""
    trigger: str
    """``user``: a user message began it; ``start``: the session's first steps; ``runtime``:
    the agent's runtime began it (`Session.new_task`: no message between it and the step before)."""
    message: str | None = None
    """The user's message that began it (``user``), shortened to `QUOTE_CHARS`."""


def _quoted(content: Any) -> str:
    text = " ".join(str(content if content is not None else "").split())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1].rstrip() + "…"


def budget_task(verdict: StoredVerdict | None, steps: Sequence[StepRecord],
                messages: Sequence[MessageRecord]) -> BudgetTask | None:
    """Which task used the budget, for a ``step_budget`` verdict (None for any other): its first
    step is where the verdict's evidence starts; it began with the newest user message written
    after the step before it and by its own start (every branch: the detector saw them all), else
    with the session (no step before it among `steps`), else by the agent's runtime.

    `steps`: `StepRecord`-likes (``n``, ``started_at``); `messages`: `MessageRecord`-likes
    (``message``, ``created_at``), any order."""
    if not verdict or verdict.get("rule") != STEP_BUDGET or not verdict.get("evidence_steps"):
        return None
    evidence = [int(n) for n in verdict["evidence_steps"]]
    first, last = min(evidence), max(evidence)
    details = verdict.get("details") or {}
    used, budget = details.get("steps"), details.get("budget")
    at = {s.n: s.started_at for s in steps}
    start = at.get(first)
    before = [t for n, t in at.items() if n < first]
    task = BudgetTask(first, last, used, budget, "start" if not before else "runtime")
    if start is None:
        return task
    since = max(before, default=float("-inf"))
    said = [m for m in messages if (m.message or {}).get("role") == "user"
            and since < m.created_at <= start]
    if not said:
        return task
    newest = max(said, key=lambda m: m.created_at)
    return BudgetTask(first, last, used, budget, "user", _quoted(newest.message.get("content")))


def budget_sentence(task: BudgetTask) -> str:
    """Which task used the budget, in one sentence (the user's words included: render via
    `plain`)."""
    began = {"user": f"when the user wrote “{task.message}”",
             "start": "when the session started",
             "runtime": ("when the agent's runtime started a new task (a new run or graph "
                         "invocation, or a client back after an idle gap)")}[task.trigger]
    span = (f"step {task.first_step}" if task.first_step == task.last_step
            else f"steps {task.first_step}–{task.last_step}")
    used = f"{task.used} steps" if task.used is not None else "its steps"
    budget = f" of a budget of {task.budget}" if task.budget is not None else ""
    return (f"The task that began at step {task.first_step}, {began}, used {used}{budget} "
            f"({span}). The budget starts again with every new task: a long session is not "
            "stopped for being long.")


# -- the evidence: the steps the verdict rests on -------------------------------------------
def step_list(steps: Sequence[int], limit: int = 12) -> str:
    """Step numbers for people, runs joined: "4–9, 12" (the first `limit` runs, then "…")."""
    runs: list[list[int]] = []
    for n in sorted(set(steps)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    text = [f"{a}" if a == b else f"{a}–{b}" for a, b in runs[:limit]]
    return ", ".join(text) + (", …" if len(runs) > limit else "")


def evidence_frame(steps: Sequence[StepRecord], verdict: StoredVerdict | None) -> pd.DataFrame:
    """The verdict's evidence steps with tool, args, outcome and error."""
    wanted = set(verdict["evidence_steps"]) if verdict else set()
    rows = [{"step": s.n, "tool": s.tool or "agent turn", "args": short_json(s.args, 400),
             "status": s.status, "error": s.error, "line": "live" if s.on_live_line else
             f"abandoned ({s.branch})"} for s in steps if s.n in wanted]
    return pd.DataFrame(rows, columns=["step", "tool", "args", "status", "error", "line"])


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out or {prefix or "(args)": {}}
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(_flatten(v, f"{prefix}[{i}]"))
        return out or {prefix or "(args)": []}
    return {prefix or "(args)": value}


def arg_diffs(steps: Sequence[StepRecord]) -> pd.DataFrame:
    """Argument paths whose values differ between the given steps, one column per step.

    Empty when every step has the same arguments (an exact repeat).
    """
    flat = {s.n: _flatten(s.args) for s in steps}
    paths = sorted({p for f in flat.values() for p in f})
    missing = object()
    rows = []
    for path in paths:
        values = [flat[n].get(path, missing) for n in flat]
        if len({short_json(v) if v is not missing else "∅" for v in values}) > 1:
            row = {"argument": path}
            for n, v in zip(flat, values, strict=True):
                row[f"step {n}"] = "—" if v is missing else short_json(v, 80)
            rows.append(row)
    return pd.DataFrame(rows, columns=["argument", *[f"step {n}" for n in flat]])


def near_duplicate_groups(steps: Sequence[StepRecord]) -> list[list[StepRecord]]:
    """Evidence steps grouped by tool where the arguments are not all identical."""
    by_tool: dict[str | None, list[StepRecord]] = {}
    for s in steps:
        by_tool.setdefault(s.tool, []).append(s)
    return [group for group in by_tool.values()
            if len(group) > 1 and len({s.fingerprint for s in group}) > 1]
