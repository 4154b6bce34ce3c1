"""View models of the session page: what a loop cost, the step timeline, why it was flagged
(evidence, argument diffs), the snapshot tree, the messages and notices, and the memory and
token-budget tabs (pure, no Streamlit, no I/O)."""

from __future__ import annotations

import html
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from dashboard.views.common import (
    ARGS_CHARS,
    duration_text,
    escape_text,
    plot_text,
    short_json,
    when,
)
from engine import NOTICE_FLAG, StoredVerdict, TokenBreakdown, is_refused, loop_first_step

MAX_LANES = 12
"""Timeline lanes for the most frequent fingerprints; rarer calls share one lane."""
OTHER_LANE = "other calls"
AGENT_LANE = "agent turn"


@dataclass(frozen=True)
class LoopCost:
    """Since when and how bad: what one loop cost, from the session's steps."""

    start_step: int
    """First step of the loop."""
    end_step: int
    """Last step inside the loop: the newest step while the session still loops, else the
    step whose verdict flagged it."""
    started_at: float
    """Unix time the loop's first step began."""
    ended_at: float
    """Unix time of the loop's last step (its end, or its start while it runs)."""
    ongoing: bool
    """The session is still looping: the cost keeps growing."""
    steps: int
    """Steps spent inside the loop (wasted: a rollback takes them off the live line)."""
    tokens: int | None
    """Context tokens sent to the model over those steps (sum of each step's recorded
    `budget.total`); None when the runtime recorded no budgets."""
    side_effects: tuple[tuple[int, str], ...]
    """(step, tool) of side-effecting steps that completed inside the loop: the outside world
    changed while the agent was stuck."""
    rolled_back_at: float | None = None
    """Unix time of the rollback that ended the loop (its steps lie on that abandoned branch);
    the loop lasts until then, however long the session waited for on-call."""
    flags: int | None = None
    """How often this loop was flagged (None: a verdict stored before loops were counted)."""
    snapshots: int | None = None
    """Write-ahead snapshots taken for the loop's steps (None: unknown)."""
    partial: bool = False
    """The page holds only the newest steps, not the loop's first ones: the side effects
    listed are those of the steps shown."""

    @property
    def duration_s(self) -> float:
        return max(self.ended_at - self.started_at, 0.0)


def loop_cost(steps: Sequence[Any], verdict: StoredVerdict | None, looping: bool,
              now: float | None = None, branches: Sequence[Any] = ()) -> LoopCost | None:
    """The cost of the loop `verdict` describes, or None without a verdict or its steps.

    The loop begins at its first step: the first flag's (`loop_first_step`), however often it
    was flagged since. While `looping`, it runs from there to the newest step and until `now`.
    Otherwise its steps end at the last step that carried a verdict for the same loop, and its
    time at the rollback that abandoned that step (one of `branches`) when there was one: a
    session flagged and left waiting for on-call looped until someone rolled it back. When
    `steps` (the newest steps of a long session) no longer reach the loop's first step, the
    counts come from the loop record the verdict carries.
    """
    if not verdict or not steps:
        return None
    start = loop_first_step(verdict)
    if start is None:
        return None
    episode = verdict.get("episode")
    by_n = {s.n: s for s in steps}
    if start not in by_n:
        return _cost_from_episode(steps, verdict, looping, now) if episode else None
    if looping:
        end = max(by_n)
    else:
        flagged = [s.n for s in steps if s.verdict and loop_first_step(s.verdict) == start]
        end = max(flagged) if flagged else max(verdict.get("evidence_steps") or [start])
    inside = [s for s in steps if start <= s.n <= end]
    last = by_n.get(end) or inside[-1]
    ended_at = (now if looping and now is not None
                else (last.ended_at or last.started_at))
    rolled_back_at = None
    if not looping and last.branch:
        cut = next((b.created_at for b in branches if b.id == last.branch), None)
        if cut is not None and cut >= ended_at:
            ended_at = rolled_back_at = cut
    budgets = [s.budget.get("total") for s in inside if getattr(s, "budget", None)]
    tokens = sum(int(t or 0) for t in budgets) if budgets else None
    effects = tuple((s.n, s.tool or "agent turn") for s in inside
                    if s.side_effect and s.status == "ok")
    return LoopCost(start, end, by_n[start].started_at, ended_at, looping, len(inside),
                    tokens, effects, rolled_back_at,
                    flags=episode["flags"] if episode else None,
                    snapshots=sum(1 for s in inside if s.snapshot is not None))


def _cost_from_episode(steps: Sequence[Any], verdict: StoredVerdict, looping: bool,
                       now: float | None) -> LoopCost:
    """The cost from the loop record of `verdict` when the steps shown begin inside the loop."""
    episode = verdict["episode"]
    start = int(episode["start_step"])
    end = max(s.n for s in steps) if looping else int(episode["through_step"])
    ended_at = now if looping and now is not None else float(verdict["at"])
    effects = tuple((s.n, s.tool or "agent turn") for s in steps
                    if start <= s.n <= end and s.side_effect and s.status == "ok")
    return LoopCost(start, end, float(episode["started_at"]), ended_at, looping,
                    end - start + 1, episode["tokens"], effects, None,
                    flags=episode["flags"], snapshots=episode["snapshots"], partial=True)


def loop_cost_line(cost: LoopCost) -> str:
    """The cost as one plain sentence (foreign tool names included: render through `plain`)."""
    parts = [f"loop began {when(cost.started_at):%Y-%m-%d %H:%M:%S} at step {cost.start_step}",
             ("running for " if cost.ongoing else "lasted ") + duration_text(cost.duration_s)
             + (f" (until the rollback at {when(cost.rolled_back_at):%H:%M:%S})"
                if cost.rolled_back_at is not None else ""),
             f"{cost.steps:,} steps wasted"]
    if cost.flags is not None and cost.flags > 1:
        parts.append(f"flagged {cost.flags:,} times")
    if cost.tokens is not None:
        parts.append(f"{cost.tokens:,} context tokens")
    if cost.snapshots:
        parts.append(f"{cost.snapshots:,} snapshots")
    if cost.side_effects:
        parts.append(f"{len(cost.side_effects)} side effects ran during the loop"
                     + (" (in the steps shown)" if cost.partial else "") + ": "
                     + ", ".join(f"{tool} (step {n})" for n, tool in cost.side_effects[:5]))
    else:
        parts.append("no side effects during the loop")
    return " · ".join(parts)


# -- session: watch-only, operator label --------------------------------------------------------
def is_watch_only(info: Any) -> bool:
    """Whether Rewind only watches the session (spans from `rewind otlp`) and does not run its
    agent: it cannot roll it back, notify its user or refuse its calls."""
    return bool((info.meta or {}).get("watch_only"))


WATCH_ONLY_BADGE = ":violet-badge[watch-only]"
WATCH_ONLY_LOOPING = ("Rewind only watches this agent (OpenTelemetry): nothing holds it, so it "
                      "does not wait for on-call and cannot be released, stopped or rolled back "
                      "here. Its agent keeps running: stop or fix it where it runs.")
"""The looping box's last line on a watch-only session, instead of a rollback target."""
WATCH_ONLY_NOTE = (
    "**Watch-only:** Rewind sees this agent through its OpenTelemetry traces (`rewind otlp`) "
    "but does not run it. **It can** flag its loops, page on-call (`rewind alert`), show them "
    "here and take your label. **It cannot** hold the agent: under the flag policy its loop "
    "is flagged but the agent keeps running, so nothing waits for you here and there is "
    "nothing to release or stop. Nor can it roll the agent back, send its user a notice or "
    "hold its calls under a quarantine. To stop a loop, stop or fix the agent where it runs."
)
"""What the session page says instead of offering actions the engine would refuse."""

LABEL_WORDS = {"loop": "a loop", "not_loop": "not a loop"}
"""How an operator's label reads."""
LABEL_ACTION = "label"
"""Audit action of a label (the engine's; the label is the audit row)."""


@dataclass(frozen=True)
class LabelSeen:
    """The newest operator answer to "was this a loop?" for one session."""

    label: str
    """``loop`` or ``not_loop``."""
    actor: str
    at: float
    reason: str | None


def current_label(events: Iterable[Any]) -> LabelSeen | None:
    """The newest label among a session's audit events (any order), or None."""
    labels = [e for e in events if e.action == LABEL_ACTION
              and (e.detail or {}).get("label") in LABEL_WORDS]
    if not labels:
        return None
    e = max(labels, key=lambda e: (e.at, e.id))
    return LabelSeen(e.detail["label"], e.actor, e.at, e.reason)


def label_text(seen: LabelSeen | None) -> str:
    """The current label as one sentence (foreign actor and reason: render through `plain`)."""
    if seen is None:
        return "No operator has said yet whether this was a loop."
    text = (f"Labelled {LABEL_WORDS[seen.label]} by {seen.actor} at "
            f"{when(seen.at):%Y-%m-%d %H:%M:%S}")
    return text + (f": {seen.reason}" if seen.reason else ".")


# -- session: timeline ------------------------------------------------------------------------
LANE_ARGS_CHARS = 36
"""Arguments shown in a lane's name."""


def lane_labels(steps: Sequence[Any], fingerprints: Iterable[str]) -> dict[str, str]:
    """Lane names for fingerprints: the tool and its short arguments, e.g.
    `refund_api {"amount":42,…}`; the fingerprint's start is added only where two lanes would
    read the same."""
    first: dict[str, Any] = {}
    wanted = set(fingerprints)
    for s in steps:
        if s.fingerprint in wanted and s.fingerprint not in first:
            first[s.fingerprint] = s
    names = {fp: f"{s.tool} {short_json(s.args, LANE_ARGS_CHARS)}" for fp, s in first.items()}
    seen = Counter(names.values())
    return {fp: (f"{name} · {fp[:6]}" if seen[name] > 1 else name) for fp, name in names.items()}


def timeline_frame(steps: Sequence[Any], max_lanes: int = MAX_LANES) -> pd.DataFrame:
    """One row per step: x (step), lane (fingerprint lane), outcome, line, hover text.

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
        parts = [f"<b>step {s.n}</b> · {plot_text(s.tool or 'agent turn')}",
                 f"at {at:%Y-%m-%d %H:%M:%S}" if at else ""]
        if s.tool:
            parts.append("args: " + plot_text(short_json(s.args)))
        if s.error:
            parts.append("error: " + plot_text(s.error[:ARGS_CHARS]))
        if s.text:
            parts.append("text: " + plot_text(s.text[:ARGS_CHARS]))
        if not s.on_live_line:
            late = " · late" if s.late else ""
            parts.append(f"abandoned ({plot_text(str(s.branch))}){late}")
        if s.side_effect:
            parts.append("side effect")
        turn = getattr(s, "turn", None)
        if turn:  # the model response that issued it: one turn's calls are one attempt
            parts.append("model response: " + plot_text(turn[:ARGS_CHARS]))
        rows.append({"n": s.n, "lane": lane, "tool": s.tool, "fingerprint": s.fingerprint,
                     "outcome": outcome, "line": line,
                     "hover": "<br>".join(p for p in parts if p), "at": s.started_at,
                     "label": str(s.n) if s.n in shown else ""})
    return pd.DataFrame(rows, columns=["n", "lane", "tool", "fingerprint", "outcome", "line",
                                       "hover", "at", "label"])


STEP_LABELS = 16
"""Most step numbers written next to the timeline's markers (more would overlap on a phone)."""


def labelled_steps(steps: Sequence[Any], limit: int = STEP_LABELS) -> set[int]:
    """The steps whose number the timeline writes next to their marker: every step of a short
    session; else evenly spaced ones, and always where a loop began and where it was flagged,
    so a phone (where nothing hovers) still tells which step is which."""
    numbers = sorted({s.n for s in steps})
    if len(numbers) <= limit:
        return set(numbers)
    marked = {s.n for s in steps if s.verdict}
    marked |= {s.verdict.get("loop_start_step") for s in steps if s.verdict} - {None}
    room = max(limit - len(marked), 2)
    every = math.ceil(len(numbers) / room)
    return marked | set(numbers[::every])


def clock_ticks(frame: pd.DataFrame, count: int = 8) -> tuple[list[int], list[str]]:
    """About `count` step numbers spread over the timeline, labelled with step and clock time
    (the date too when the steps span more than one day)."""
    if frame.empty:
        return [], []
    ordered = frame.drop_duplicates("n").sort_values("n")
    picks = ordered.iloc[sorted({round(i * (len(ordered) - 1) / max(count - 1, 1))
                                 for i in range(count)})]
    times = [when(t) for t in picks["at"]]
    days = {t.date() for t in times if t is not None}
    fmt = "%d %b %H:%M" if len(days) > 1 else "%H:%M:%S"
    return ([int(n) for n in picks["n"]],
            [f"{int(n)}<br>{t:{fmt}}" if t else str(int(n)) for n, t in zip(picks["n"], times,
                                                                             strict=True)])


def lane_order(frame: pd.DataFrame) -> list[str]:
    """Lanes in order of first appearance (top to bottom), shared lanes last."""
    seen = list(dict.fromkeys(frame["lane"].tolist())) if not frame.empty else []
    tail = [x for x in (OTHER_LANE, AGENT_LANE) if x in seen]
    return [x for x in seen if x not in tail] + tail


def loop_windows(steps: Sequence[Any]) -> list[tuple[float, float, str]]:
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


def rollback_markers(steps: Sequence[Any], branches: Sequence[Any]) -> list[dict]:
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


# -- session: why flagged ---------------------------------------------------------------------
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


def evidence_frame(steps: Sequence[Any], verdict: StoredVerdict | None) -> pd.DataFrame:
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


def arg_diffs(steps: Sequence[Any]) -> pd.DataFrame:
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


def near_duplicate_groups(steps: Sequence[Any]) -> list[list[Any]]:
    """Evidence steps grouped by tool where the arguments are not all identical."""
    by_tool: dict[str | None, list] = {}
    for s in steps:
        by_tool.setdefault(s.tool, []).append(s)
    return [group for group in by_tool.values()
            if len(group) > 1 and len({s.fingerprint for s in group}) > 1]


# -- session: snapshot tree -------------------------------------------------------------------
def tree_layout(nodes: Sequence[Any], branches: Sequence[Any] = (),
                include_retired: bool = False) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """Node positions and edges for the snapshot tree.

    x is the creation order, y the lane: 0 for the live line, 1, 2, … for abandoned branches in
    the order they were cut. Retired step snapshots (no longer restorable) are hidden unless
    `include_retired`; their children are linked to the nearest shown ancestor.

    Returns:
        (nodes frame with id, x, y, label, state, is_head, restorable, hover; edges as
        (parent id, child id)).
    """
    by_id = {n.id: n for n in nodes}

    def shown(n) -> bool:
        return (include_retired or n.restorable or not n.on_live_line or n.is_head
                or n.kind != "step")

    lanes = {b.id: i + 1 for i, b in enumerate(branches)}
    for n in nodes:
        if n.branch and n.branch not in lanes:
            lanes[n.branch] = len(lanes) + 1
    reasons = {b.id: b for b in branches}
    rows, edges = [], []
    visible = [n for n in nodes if shown(n)]
    visible_ids = {n.id for n in visible}
    labels = node_labels(visible)
    for x, n in enumerate(visible):
        parent = n.parent
        guard = 0
        while parent is not None and parent not in visible_ids and guard < len(by_id):
            parent = by_id[parent].parent if parent in by_id else None
            guard += 1
        if parent is not None:
            edges.append((parent, n.id))
        if n.is_head:
            state = "head"
        elif not n.on_live_line:
            state = "abandoned"
        elif n.restorable:
            state = "restorable"
        else:
            state = "retired"
        b = reasons.get(n.branch) if n.branch else None
        hover = [f"<b>{plot_text(n.id)}</b> · {plot_text(n.label or n.kind)}",
                 f"{n.kind} snapshot, before step {n.next_step}, {n.messages} messages",
                 f"taken {when(n.created_at):%Y-%m-%d %H:%M:%S}"]
        if n.is_head:
            hover.append("latest: where the agent is now")
        if n.abandoned_reason:
            hover.append(plot_text(n.abandoned_reason[:300]))
        elif not n.restorable:
            hover.append("expired by retention: cannot roll back here")
        rows.append({"id": n.id, "x": x, "y": lanes.get(n.branch, 0) if n.branch else 0,
                     "label": labels[n.id], "state": state, "is_head": n.is_head,
                     "restorable": n.restorable and n.on_live_line, "next_step": n.next_step,
                     "branch": n.branch, "reason": b.reason if b else None,
                     "hover": "<br>".join(hover)})
    frame = pd.DataFrame(rows, columns=["id", "x", "y", "label", "state", "is_head",
                                        "restorable", "next_step", "branch", "reason", "hover"])
    return frame, edges


def node_label(node: Any, limit: int = 18) -> str:
    """The short text drawn next to a snapshot node: its label, else "step N"."""
    text = node.label or (f"step {node.next_step}" if node.kind == "step" else node.kind)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def node_labels(nodes: Sequence[Any], limit: int = 18) -> dict[str, str]:
    """Snapshot id -> the text drawn next to its node (`node_label`); where several nodes would
    read the same ("before post_invoi…" three times), a second line tells them apart: the step
    they come before, their time when that is the same too, and their id as a last resort.
    Lines are joined with "\n" (the chart escapes each line and breaks between them)."""
    first = {n.id: node_label(n, limit) for n in nodes}
    same = Counter(first.values())
    out = {}
    for n in nodes:
        text = first[n.id]
        if same[text] > 1:
            text += f"\nstep {n.next_step}"
        out[n.id] = text
    for extra in (lambda n: f" · {when(n.created_at):%H:%M:%S}", lambda n: f" · {n.id}"):
        twice = Counter(out.values())
        out = {n.id: out[n.id] + extra(n) if twice[out[n.id]] > 1 else out[n.id]
               for n in nodes}
    return out


def rollback_choices(nodes: Sequence[Any], suggested: str | None) -> tuple[list[str], int]:
    """Restorable snapshots on the live line, newest first, and the index of `suggested`."""
    choices = [n.id for n in reversed(nodes) if n.on_live_line and n.restorable]
    index = choices.index(suggested) if suggested in choices else 0
    return choices, index


def snapshot_caption(node: Any, suggested: str | None = None) -> str:
    """How a snapshot is named in menus: id, label, position, and a mark for the suggested."""
    text = f"{node.id} · {node.label or node.kind} · before step {node.next_step}"
    if node.is_head:
        text += " · latest"
    if node.id == suggested:
        text += " · suggested"
    return text


# -- session: messages ------------------------------------------------------------------------
@dataclass(frozen=True)
class MessageView:
    seq: int
    role: str
    text: str
    abandoned: bool
    branch: str | None
    reason: str | None
    notice: bool


def content_text(content: Any) -> str:
    """Readable text of a chat message's content (strings, content-part lists, other JSON)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") if isinstance(p, Mapping) and "text" in p else short_json(p, 400)
                 for p in content]
        return "\n".join(str(p) for p in parts)
    return short_json(content, 2000)


def messages_view(records: Sequence[Any], branches: Sequence[Any]) -> list[MessageView]:
    """Every message in write order; abandoned ones say which rollback took them off the line."""
    why = {b.id: b.why for b in branches}
    return [MessageView(
        seq=r.seq, role=str(r.message.get("role", "?")),
        text=content_text(r.message.get("content")), abandoned=r.branch is not None,
        branch=r.branch, reason=why.get(r.branch) if r.branch else None,
        notice=bool(r.message.get(NOTICE_FLAG)),
    ) for r in records]


def user_view(items: Sequence[MessageView]) -> list[MessageView]:
    """The conversation as the user sees it now: live messages only, the user's and the
    assistant's words (notices included, shown as any other answer); tool traffic, system
    prompts and empty assistant turns (tool calls) are not shown to users."""
    return [m for m in items if not m.abandoned and m.role in ("user", "assistant")
            and m.text.strip()]


def user_view_html(items: Sequence[MessageView]) -> str:
    """`user_view` as chat bubbles for st.html (every text escaped)."""
    out = []
    for m in items:
        side = "rw-you" if m.role == "user" else "rw-bot"
        out.append(f"<div class='rw-bubble {side}' data-seq='{m.seq}'>"
                   f"{escape_text(m.text)}</div>")
    return "<div class='rw-chat'>" + "\n".join(out) + "</div>"


TABS_CSS = """<style>
@media (max-width:640px){.stTabs [role="tablist"]{flex-wrap:wrap;row-gap:.2rem;
 overflow:visible}
.stTabs [role="tablist"] > *{flex-shrink:0}
.stTabs [data-baseweb="tab-highlight"],.stTabs [data-baseweb="tab-border"]{display:none}
.stTabs [role="tab"][aria-selected="true"]{border-bottom:2px solid currentColor}}
</style>"""
"""On a phone the session's six tabs wrap onto a second row instead of scrolling sideways, where
the last ones were off-screen; the sliding underline cannot follow a wrapped row, so the chosen
tab is underlined itself."""

USER_VIEW_CSS = """<style>
.rw-chat{display:flex;flex-direction:column;gap:.4rem;max-width:46rem}
.rw-bubble{padding:.45rem .75rem;border-radius:12px;max-width:85%;word-break:break-word}
.rw-you{align-self:flex-end;background:rgba(59,110,143,.16)}
.rw-bot{align-self:flex-start;background:rgba(127,127,127,.12)}
</style>"""


@dataclass(frozen=True)
class NoticeSeen:
    """The newest notice the session's user got (or that a rollback took back)."""

    text: str
    at: float
    actor: str | None
    """Who sent it, from the audit trail; None when no audit event matches."""
    live: bool
    """Still in the live history (False: a later rollback took it off)."""


def last_notice(records: Sequence[Any], audit: Iterable[Any] = ()) -> NoticeSeen | None:
    """The newest notice among a session's messages, with its sender from the audit events
    (`notice`, or `rollback` for a rollback's notice) written closest to it."""
    notices = [r for r in records if r.message.get(NOTICE_FLAG)]
    if not notices:
        return None
    r = max(notices, key=lambda r: r.seq)
    events = [e for e in audit if e.action in ("notice", "rollback")]
    near = min(events, key=lambda e: abs(e.at - r.created_at), default=None)
    actor = near.actor if near is not None and abs(near.at - r.created_at) <= 5 else None
    return NoticeSeen(content_text(r.message.get("content")), r.created_at, actor,
                      r.branch is None)


def messages_html(items: Sequence[MessageView]) -> str:
    """The history as one HTML block for st.html: abandoned messages struck, notices marked."""
    out = []
    for m in items:
        classes = ["rw-msg", f"rw-{re.sub('[^a-z]', '', m.role.lower()) or 'other'}"]
        head = f"<span class='rw-role'>{html.escape(m.role)}</span>"
        if m.notice:
            classes.append("rw-notice")
            head += " <span class='rw-badge'>notice</span>"
        body = escape_text(m.text)
        if m.abandoned:
            classes.append("rw-abandoned")
            head += (f" <span class='rw-branch' title='{html.escape(m.reason or '', quote=True)}'>"
                     f"abandoned · {html.escape(m.branch or '')}</span>")
            body = f"<del>{body}</del>"
        out.append(f"<div class='{' '.join(classes)}' data-seq='{m.seq}'>{head}"
                   f"<div class='rw-body'>{body}</div></div>")
    return "\n".join(out)


# Translucent backgrounds and inherited text colour: the blocks read the same in the light and
# the dark theme (the console follows the browser's preference).
MESSAGES_CSS = """<style>
.rw-msg{border-left:3px solid #c9d3dd;padding:.35rem .7rem;margin:.35rem 0;border-radius:4px;
 background:rgba(127,140,153,.06)}
.rw-user{border-left-color:#7a9cc6}.rw-assistant{border-left-color:#6aa58f}
.rw-system,.rw-tool{border-left-color:#b7a27a}
.rw-notice{border-left-color:#d08a2e;background:rgba(208,138,46,.12)}
.rw-abandoned{opacity:.62;background:rgba(127,127,127,.10)}
.rw-role{font-weight:600;font-size:.8rem;text-transform:uppercase;letter-spacing:.04em;
 opacity:.75}
.rw-badge{background:#d08a2e;color:#fff;border-radius:3px;padding:0 .3rem;font-size:.72rem}
.rw-branch{color:#8a5a5a;font-size:.75rem}
.rw-body{white-space:pre-wrap;word-break:break-word}
</style>"""


# -- memory and budget ------------------------------------------------------------------------
BudgetPart = Literal["system", "dialogue", "memories", "reserve"]
BUDGET_PARTS: tuple[BudgetPart, ...] = ("system", "dialogue", "memories", "reserve")
"""The parts of a context the budget charts stack (`TokenBreakdown` keys, typed as such so
reading one from a breakdown is typed too)."""
BUDGET_COLUMNS = ["step", *BUDGET_PARTS, "dropped", "total", "max_tokens", "line"]


def memory_label(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def memory_names(items: Sequence[Any]) -> dict[str, str]:
    """Memory id -> its short text, numbered where two would read the same (legend entries)."""
    names: dict[str, str] = {}
    seen: Counter[str] = Counter()
    for m in items:
        name = memory_label(m.text)
        seen[name] += 1
        names[m.id] = name if seen[name] == 1 else f"{name} ({seen[name]})"
    return names


# The decay chart spans seconds (recalls during the session) and weeks (a 7-day half-life): a
# log axis of the time since the first memory shows both, sampled a decade at a time.
DECAY_POINTS = 19
"""Samples per decade of the decay chart."""
DECAY_LAST_DECADE = 9
"""The chart never reaches past 10^9 s (31 years) after the first memory."""


def decay_first_decade(items: Sequence[Any], start: float) -> int:
    """The decade (10^k s after the first memory) where the decay chart begins: the one holding
    the earliest later event (another memory written, a recall), between 1 ms and 1 s."""
    offsets = [t - start for m in items for t in (m.created_at, *m.access_times) if t > start]
    first = min(offsets, default=1.0)
    return max(-3, min(0, math.floor(math.log10(first))))


def decay_windows(items: Sequence[Any], start: float) -> list[tuple[float, float]]:
    """(from, to) unix times, one per decade of the time since the first memory, from
    `decay_first_decade` to 10^DECAY_LAST_DECADE s; the loader stops early with `decay_done`."""
    first = decay_first_decade(items, start)
    return [(start + 10.0 ** k, start + 10.0 ** (k + 1)) for k in range(first, DECAY_LAST_DECADE)]


def decay_done(curve: Any, end: float, now: float) -> bool:
    """Whether the chart reached far enough: past now, and every memory under the threshold."""
    last = [series[-1] for series in curve.weights.values() if series]
    return end >= now and all(w is not None and w < curve.threshold for w in last)


def decay_frames(items: Sequence[Any], curves: Sequence[Any], start: float,
                 now: float) -> tuple[pd.DataFrame, pd.DataFrame, float | None]:
    """(curves, recalls, threshold) for `charts.decay_curves` from the `Curve` of each window of
    `decay_windows`: per memory its weight at each sample (elapsed seconds since the first
    memory, clock time, `ahead` for samples after now: what happens if it is not recalled
    again) and each recall once."""
    names = memory_names(items)
    rows, hits, seen = [], [], set()
    for mid in dict.fromkeys([m.id for m in items]):
        for curve in curves:
            series = curve.weights.get(mid) or []
            rows += [{"memory": names.get(mid, mid), "elapsed": t - start, "t": when(t),
                      "strength": w, "ahead": t > now}
                     for t, w in zip(curve.times, series, strict=True) if w is not None]
    for curve in curves:
        for mid, marks in curve.accesses.items():
            for t, w in marks:
                if (mid, t) not in seen:
                    seen.add((mid, t))
                    hits.append({"memory": names.get(mid, mid), "elapsed": t - start,
                                 "t": when(t), "strength": w})
    columns = ["memory", "elapsed", "t", "strength"]
    frame = pd.DataFrame(rows, columns=[*columns, "ahead"])
    frame = frame.drop_duplicates(["memory", "elapsed"])
    threshold = curves[0].threshold if curves else None
    return frame.reset_index(drop=True), pd.DataFrame(hits, columns=columns), threshold


JUDGE_WORDS = {"key": "key (exact fact)", "rules": "rules judge", "llm": "your LLM judge",
               "nli": "NLI model"}
"""How the judge that invalidated a memory reads; other names as they are."""
MEMORY_COLUMNS = ["memory", "key", "state", "why", "judge", "confidence", "replaced by", "tier",
                  "importance", "recalls", "created"]


def memory_table(items: Sequence[Any]) -> pd.DataFrame:
    """One row per memory: its text and fact key, and for an invalidated one why, by which judge,
    how sure the judge was and which memory replaced it (by its text, else its id)."""
    texts = {m.id: m.text for m in items}
    rows = []
    for m in items:
        invalid = m.invalid_at is not None
        by = m.invalid_by
        newer = m.superseded_by
        rows.append({
            "memory": m.text, "key": m.key or "",
            "state": f"invalidated {when(m.invalid_at):%Y-%m-%d %H:%M:%S}" if invalid else "valid",
            "why": (m.invalid_reason or "no reason recorded") if invalid else "",
            "judge": JUDGE_WORDS.get(by, by) if invalid and by else "",
            "confidence": m.invalid_confidence if invalid else None,
            "replaced by": memory_label(texts.get(newer, newer), 60) if invalid and newer else "",
            "tier": m.tier, "importance": m.importance, "recalls": m.access_count,
            "created": when(m.created_at)})
    frame = pd.DataFrame(rows, columns=MEMORY_COLUMNS)
    frame["confidence"] = frame["confidence"].astype("Float64")
    return frame


def invalidated_text(table: pd.DataFrame) -> str:
    """A line over the memory table: how many memories were invalidated, and by what."""
    gone = table[table["why"] != ""]
    total = f"{len(table)} memor{'y' if len(table) == 1 else 'ies'}"
    if gone.empty:
        return f"{total}, none invalidated."
    judges = ", ".join(f"{name} ×{n}" if n > 1 else name
                       for name, n in Counter(gone["judge"].replace("", "unknown")).items())
    return (f"{total}, {len(gone)} invalidated by a newer one "
            f"({judges}); each says why, how sure the judge was and what replaced it.")


def memory_log_frame(entries: Iterable[Mapping[str, Any]],
                     names: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Memory lifecycle events (promote, evict, prune, a judge unavailable) and replacements, by
    time, each replacement with the judge that decided it (or the key it was written with);
    `names` maps memory ids to their text."""
    known = names or {}

    def name(mid: Any) -> Any:
        # Memory ids are strings; anything else (None when an entry has no id) shows as is.
        return known.get(mid, mid) if isinstance(mid, str) else mid

    rows = []
    for e in sorted(entries, key=lambda e: e.get("at") or 0):
        if "event" in e:
            what, about = e["event"], name(e.get("id"))
        else:
            kept, gone, judge = e.get("kept"), e.get("invalidated"), e.get("judge")
            if judge == "key":  # an exact fact the agent stored by key, written again
                what = f"replaced (key {e.get('key')})"
            else:
                what = f"contradiction ({e.get('kind', '?')})"
                what += f", {JUDGE_WORDS.get(judge, judge)}" if judge else ""
            about = f"kept “{name(kept)}”, invalidated “{name(gone)}”"
        rows.append({"time": when(e.get("at")), "event": what, "memory": about,
                     "reason": e.get("reason")})
    return pd.DataFrame(rows, columns=["time", "event", "memory", "reason"])


def budget_history(steps: Sequence[Any]) -> pd.DataFrame:
    """Token breakdown per step (from `StepRecord.budget`), live and abandoned, in step order.

    Empty when the runtime never passed a context to `Session.step`.
    """
    rows = []
    for s in steps:
        budget: TokenBreakdown | None = getattr(s, "budget", None)
        if not budget:
            continue
        rows.append({"step": s.n, **{k: budget.get(k) for k in BUDGET_COLUMNS[1:-1]},
                     "line": "live" if s.on_live_line else "abandoned"})
    return pd.DataFrame(rows, columns=BUDGET_COLUMNS)


def current_budget(history: pd.DataFrame) -> pd.Series | None:
    """The newest breakdown on the live line (the context the agent works with now)."""
    live = history[history["line"] == "live"]
    return None if live.empty else live.iloc[-1]


def budget_parts(breakdown: TokenBreakdown | pd.Series, max_tokens: int | None) -> pd.DataFrame:
    """One context's token split (system, dialogue, memories, reserve, free) against the window."""
    tokens: dict[str, int] = {p: int(breakdown.get(p) or 0) for p in BUDGET_PARTS}
    if max_tokens:
        tokens["free"] = max(int(max_tokens) - sum(tokens.values()), 0)
    return pd.DataFrame([{"part": p, "tokens": n} for p, n in tokens.items()],
                        columns=["part", "tokens"])
