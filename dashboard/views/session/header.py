"""View model of the session page above its tabs: what the latest loop cost (since when, how many
steps, tokens and side effects), what a watch-only session says instead of actions, the
operator's "was this a loop?" label, and the tab row's CSS (pure, no Streamlit, no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dashboard.views.common import duration_text, when
from engine import AuditEvent, BranchInfo, SessionInfo, StepRecord, StoredVerdict, loop_first_step


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


def loop_cost(steps: Sequence[StepRecord], verdict: StoredVerdict | None, looping: bool,
              now: float | None = None,
              branches: Sequence[BranchInfo] = ()) -> LoopCost | None:
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
    budgets = [s.budget.get("total") for s in inside if s.budget]
    tokens = sum(int(t or 0) for t in budgets) if budgets else None
    effects = tuple((s.n, s.tool or "agent turn") for s in inside
                    if s.side_effect and s.status == "ok")
    return LoopCost(start, end, by_n[start].started_at, ended_at, looping, len(inside),
                    tokens, effects, rolled_back_at,
                    flags=episode["flags"] if episode else None,
                    snapshots=sum(1 for s in inside if s.snapshot is not None))


def _cost_from_episode(steps: Sequence[StepRecord], verdict: StoredVerdict, looping: bool,
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


# -- watch-only sessions, the operator's label ---------------------------------------------------
def is_watch_only(info: SessionInfo) -> bool:
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


def current_label(events: Iterable[AuditEvent]) -> LabelSeen | None:
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


# -- the tab row ----------------------------------------------------------------------------------
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
