"""View model of the session page's Timeline tab: one lane per frequent call, the loop windows to
shade, where rollbacks cut the line, the step numbers and clock times to write (pure, no
Streamlit, no I/O)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import pandas as pd

from dashboard.views.common import ARGS_CHARS, short_json, when
from engine import BranchInfo, StepRecord, StoredVerdict, is_refused

MAX_LANES = 12
"""Timeline lanes for the most frequent fingerprints; rarer calls share one lane."""
OTHER_LANE = "other calls"
AGENT_LANE = "agent turn"


LANE_ARGS_CHARS = 36
"""Arguments shown in a lane's name."""


def lane_labels(steps: Sequence[StepRecord], fingerprints: Iterable[str]) -> dict[str, str]:
    """Lane names for fingerprints: the tool and its short arguments, e.g.
    `refund_api {"amount":42,…}`; the fingerprint's start is added only where two lanes would
    read the same."""
    first: dict[str, StepRecord] = {}
    wanted = set(fingerprints)
    for s in steps:
        if s.fingerprint in wanted and s.fingerprint not in first:
            first[s.fingerprint] = s
    names = {fp: f"{s.tool} {short_json(s.args, LANE_ARGS_CHARS)}" for fp, s in first.items()}
    seen = Counter(names.values())
    return {fp: (f"{name} · {fp[:6]}" if seen[name] > 1 else name) for fp, name in names.items()}


def timeline_frame(steps: Sequence[StepRecord], max_lanes: int = MAX_LANES) -> pd.DataFrame:
    """One row per step: x (step), lane (fingerprint lane), outcome, line, and its tooltip
    (`tip`: a title and named lines of plain text, only those that say something).

    The `max_lanes` most frequent fingerprints get their own lane; the rest share
    "other calls", so a 5,000-step session with thousands of distinct calls stays readable.
    """
    counts = Counter(s.fingerprint for s in steps if s.tool)
    own = {fp for fp, _ in counts.most_common(max_lanes)}
    names = lane_labels(steps, own)
    shown = labelled_steps(steps)
    rows = []
    for s in steps:
        if s.tool is None:
            lane = AGENT_LANE
        elif s.fingerprint in own:
            lane = names[s.fingerprint]
        else:
            lane = OTHER_LANE
        # is_refused, not the status alone: refusals stored before the refused status existed
        # ended in error, and were drawn as the tool failing.
        outcome = ("refused" if is_refused(s.status, s.error)
                   else s.status if s.status in ("ok", "error") else "running")
        line = "live" if s.on_live_line else "abandoned"
        at = when(s.started_at)
        # Plain text: the chart (Vega) draws it as text, never as markup.
        tip: dict[str, str] = {"title": f"step {s.n} · {s.tool or AGENT_LANE}"}
        if at:
            tip["at"] = f"{at:%Y-%m-%d %H:%M:%S}"
        if s.tool:
            tip["args"] = short_json(s.args)
        if s.error:
            tip["error"] = s.error[:ARGS_CHARS]
        if s.text:
            tip["text"] = s.text[:ARGS_CHARS]
        if not s.on_live_line:
            tip["abandoned"] = f"by a rollback ({s.branch})" + (" · late" if s.late else "")
        if s.side_effect:
            tip["side effect"] = "yes"
        turn = getattr(s, "turn", None)
        if turn:  # the model response that issued it: one turn's calls are one attempt
            tip["model response"] = turn[:ARGS_CHARS]
        rows.append({"n": s.n, "lane": lane, "tool": s.tool, "fingerprint": s.fingerprint,
                     "outcome": outcome, "line": line, "tip": tip, "at": s.started_at,
                     "label": str(s.n) if s.n in shown else ""})
    return pd.DataFrame(rows, columns=["n", "lane", "tool", "fingerprint", "outcome", "line",
                                       "tip", "at", "label"])


STEP_LABELS = 16
"""Most step numbers written next to the timeline's markers (more would overlap on a phone)."""


def labelled_steps(steps: Sequence[StepRecord], limit: int = STEP_LABELS) -> set[int]:
    """The steps whose number the timeline writes next to their marker: every step of a short
    session; else evenly spaced ones, and always where a loop began and where it was flagged,
    so a phone (where nothing hovers) still tells which step is which."""
    numbers = sorted({s.n for s in steps})
    if len(numbers) <= limit:
        return set(numbers)
    marked = {s.n for s in steps if s.verdict}
    marked |= {start for s in steps
               if s.verdict and (start := s.verdict.get("loop_start_step")) is not None}
    room = max(limit - len(marked), 2)
    every = math.ceil(len(numbers) / room)
    return marked | set(numbers[::every])


def clock_ticks(frame: pd.DataFrame, count: int = 8) -> tuple[list[int], list[list[str]]]:
    """About `count` step numbers spread over the timeline, each labelled with its lines: the
    step and its clock time (the date too when the steps span more than one day)."""
    if frame.empty:
        return [], []
    ordered = frame.drop_duplicates("n").sort_values("n")
    picks = ordered.iloc[sorted({round(i * (len(ordered) - 1) / max(count - 1, 1))
                                 for i in range(count)})]
    times = [when(t) for t in picks["at"]]
    days = {t.date() for t in times if t is not None}
    fmt = "%d %b %H:%M" if len(days) > 1 else "%H:%M:%S"
    return ([int(n) for n in picks["n"]],
            [[str(int(n)), f"{t:{fmt}}"] if t else [str(int(n))]
             for n, t in zip(picks["n"], times, strict=True)])


def lane_order(frame: pd.DataFrame) -> list[str]:
    """Lanes in order of first appearance (top to bottom), shared lanes last."""
    seen = list(dict.fromkeys(frame["lane"].tolist())) if not frame.empty else []
    tail = [x for x in (OTHER_LANE, AGENT_LANE) if x in seen]
    return [x for x in seen if x not in tail] + tail


def loop_windows(steps: Sequence[StepRecord]) -> list[tuple[float, float, str]]:
    """(x0, x1, rule) spans to shade: from each loop's first step to the step that flagged it.

    Verdicts repeated on later steps of the same loop (policy "flag") widen one span.
    """
    spans: list[list] = []
    for s in steps:
        v: StoredVerdict | None = s.verdict
        if not v:
            continue
        start = v["loop_start_step"] or min(v["evidence_steps"] or [s.n])
        rule = v["rule"] or "loop"
        x0, x1 = start - 0.5, s.n + 0.5
        if spans and spans[-1][2] == rule and x0 <= spans[-1][1] + 1:
            spans[-1][1] = max(spans[-1][1], x1)
            spans[-1][0] = min(spans[-1][0], x0)
        else:
            spans.append([x0, x1, rule])
    return [(a, b, r) for a, b, r in spans]


def steps_shown(shown: int, total: int) -> str:
    """What the timeline leaves out of a long session, as a sentence to append ('' when none)."""
    if shown >= total:
        return ""
    return (f" Showing the newest {shown:,} of {total:,} steps (older ones stay in the store: "
            "`Session.steps()`).")


def rollback_markers(steps: Sequence[StepRecord], branches: Sequence[BranchInfo]) -> list[dict]:
    """Where each rollback cut the line: x after the last step it abandoned, with who and why."""
    last_on: dict[str, int] = {}
    for s in steps:
        if s.branch and not s.late:
            last_on[s.branch] = max(last_on.get(s.branch, 0), s.n)
    out = []
    for b in branches:
        if b.id not in last_on:
            continue
        out.append({"x": last_on[b.id] + 0.5, "branch": b.id, "target": b.from_snapshot,
                    "actor": b.actor, "reason": b.reason, "at": when(b.created_at)})
    return out
