"""View models of the compensations page: the outbox as a table, handlers no live process
registered, and what a retry or resolve of several compensations did (pure, no Streamlit, no
I/O)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

import pandas as pd

from dashboard.views.common import STUCK_AFTER_S, duration_text, session_link, short_json, when

COMPENSATION_COLUMNS = ["id", "status", "state", "handler", "live", "session", "link", "step",
                        "attempts", "next_try", "age", "created", "updated", "last_error",
                        "resolved", "args", "stuck"]
COMPENSATION_COLORS = {"pending": "orange", "running": "blue", "failed": "red", "done": "green",
                       "resolved": "gray"}
OPEN_COMPENSATIONS = ("failed", "pending", "running")
"""Statuses still waiting for a handler or a person (retry and mark resolved apply to them)."""
COMPENSATION_REASONS = (
    "Downstream service is back: run it again",
    "Handler fixed and deployed",
    "Undone by hand outside Rewind",
    "Nothing to undo: the side effect never happened",
)
"""Reasons an operator can pick for a retry or a resolve; the text goes to the audit log."""


def next_try_text(at: float | None, now: float) -> str:
    """When a pending compensation is tried next, for people: local time and how far off,
    "14:03:05 (in 30 s)", "due now" once the time has passed; blank when none is planned."""
    if at is None:
        return ""
    if at <= now:
        return "due now"
    return f"{when(at).strftime('%H:%M:%S')} (in {duration_text(at - now)})"


def compensations_frame(comps: Iterable[Any], now: float,
                        live: Collection[str] | None = None) -> pd.DataFrame:
    """Compensations as the page shows them: state as text (coloured by the page), age as
    words, `next_try` when a failed one is tried again (`next_try_text`), blanks for what
    is missing, `stuck` for pending ones older than STUCK_AFTER_S.

    Args:
        live: handler names some live process registered (`Engine.compensations.handlers`);
            ``live`` is "yes"/"no" for open compensations (blank for done or resolved ones,
            and when unknown).
    """
    rows = [{"id": c.id, "status": str(c.status), "state": [str(c.status)], "handler": c.name,
             "live": ("" if live is None or c.status not in OPEN_COMPENSATIONS
                      else "yes" if c.name in live else "no"),
             "session": c.session, "link": session_link(c.session), "step": c.step,
             "attempts": c.attempts,
             "next_try": next_try_text(getattr(c, "next_attempt_at", None), now),
             "age": duration_text(now - c.created_at),
             "created": when(c.created_at), "updated": when(c.updated_at),
             "last_error": c.error or "",
             "resolved": (f"{c.resolved_by}: {c.resolved_reason or ''}"
                          if getattr(c, "resolved_by", None) else ""),
             "args": short_json(c.args),
             "stuck": c.status == "pending" and now - c.created_at >= STUCK_AFTER_S}
            for c in comps]
    return pd.DataFrame(rows, columns=COMPENSATION_COLUMNS)


def handlers_without_process(frame: pd.DataFrame) -> list[tuple[str, int]]:
    """(handler, open compensations waiting for it) for each handler no live process has
    registered, most compensations first (from `compensations_frame` with `live`)."""
    waiting = frame[frame["live"] == "no"]
    counts = waiting.groupby("handler").size().sort_values(ascending=False, kind="stable")
    return [(str(name), int(n)) for name, n in counts.items()]


def compensation_outcomes_text(action: str, outcomes: Sequence[Any]) -> tuple[str, list[str]]:
    """("success" | "error", lines of plain text) for the page after a retry or resolve of
    several compensations; outcomes are `dashboard.actions.CompensationOutcome`s."""
    done = [o for o in outcomes if o.ok]
    failed = [o for o in outcomes if not o.ok]
    verb = {"retry": "Retried", "resolve": "Marked resolved"}[action]
    parts = []
    if done:
        ids = ", ".join(f"#{o.id} {o.name}" for o in done)
        tail = (" (pending again; a process with the handler runs it on its next pass)"
                if action == "retry" else "")
        parts.append(f"{verb} {len(done)}: {ids}{tail}.")
    for o in failed:
        parts.append(f"#{o.id}: {o.error}")
    return ("error" if failed else "success"), parts
