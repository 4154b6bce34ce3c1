"""View models of the tool quarantine page: scopes and end times in words, the table and the
picker labels (pure, no Streamlit, no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from dashboard.views.common import duration_text, when


def scope_text(scope: Mapping[str, Any]) -> str:
    """A quarantine's scope in words: "every session" or "tenant=acme, prompt_version=v8"."""
    return ", ".join(f"{k}={v}" for k, v in sorted(scope.items())) or "every session"


def until_text(until: float | None, now: float | None) -> str:
    """When a quarantine ends: "until lifted", or "until 2026-01-02 13:00 (in 3 h 05 min)"."""
    if until is None:
        return "until lifted"
    text = f"until {when(until):%Y-%m-%d %H:%M %Z}"
    return text + (f" (in {duration_text(until - now)})" if now is not None else "")


QUARANTINE_COLUMNS = ["tool", "scope", "actor", "reason", "since", "until", "id"]


def quarantines_frame(quarantines: Iterable[Any], now: float) -> pd.DataFrame:
    """Quarantines as the page lists them, oldest first."""
    rows = [{"tool": q.tool, "scope": scope_text(q.scope), "actor": q.actor, "reason": q.reason,
             "since": when(q.created_at), "until": until_text(q.until, now), "id": q.id}
            for q in quarantines]
    return pd.DataFrame(rows, columns=QUARANTINE_COLUMNS)


def quarantine_label(q: Any, limit: int = 60) -> str:
    """A quarantine in one line, for a picker: tool · scope · id (plain text)."""
    tool = q.tool if len(q.tool) <= limit else q.tool[: limit - 1] + "…"
    return f"{tool} · {scope_text(q.scope)} · {q.id}"
