"""View models of the audit page: events as a table, each summarised in words, and the CSV
export made safe for spreadsheets (pure, no Streamlit, no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from dashboard.views.common import counted, short_json, when
from dashboard.views.quarantine import scope_text, until_text
from engine import AUDIT_ACTIONS as ENGINE_AUDIT_ACTIONS
from engine import notice_gist

AUDIT_COLUMNS = ["time", "actor", "action", "session", "snapshot", "reason", "summary", "batch",
                 "detail", "id"]
AUDIT_ACTIONS = ENGINE_AUDIT_ACTIONS
"""Actions the audit page filters by: every action the engine writes (one vocabulary)."""


def audit_summary(action: str, snapshot: str | None, detail: Mapping[str, Any]) -> str:
    """What an audit event did, in words (plain text; foreign values included as they are)."""
    d = detail or {}
    if action == "rollback":
        text = f"to {snapshot}" if snapshot else "rollback"
        if d.get("steps") is not None:
            text += (f": {d.get('steps')} steps, {d.get('messages', 0)} messages taken out of "
                     "the conversation")
        if d.get("compensations"):
            text += f", {counted(len(d['compensations']), 'compensation')} queued"
        return text
    if action in ("rollback_many", "rollback_many.start"):
        where = d.get("where") or {}
        order = ("status", "tenant", "scenario", "prompt_version", "tool")
        keys = [k for k in order if k in where] + [k for k in where if k not in order]
        scope = ", ".join(f"{k}={where[k]}" if k != "session" else
                          f"{len(where[k]) if isinstance(where[k], list) else 1} listed sessions"
                          for k in keys)
        if action == "rollback_many.start":
            return (f"bulk rollback started: {d.get('sessions', 0)} sessions planned"
                    + (f" ({scope})" if scope else ""))
        text = (f"bulk rollback: {d.get('rolled_back', 0)} of {d.get('sessions', 0)} sessions "
                f"rolled back" + (f" ({scope})" if scope else ""))
        failed = d.get("failed") or {}
        return text + (f"; {len(failed)} failed: {', '.join(list(failed)[:5])}" if failed else "")
    if action in ("quarantine", "quarantine_lift"):
        verb = "quarantined" if action == "quarantine" else "lifted the quarantine of"
        text = f"{verb} tool {d.get('tool')} for {scope_text(d.get('scope') or {})}"
        if action == "quarantine":
            text += " " + until_text(d.get("until"), None)
        return text + (f" ({d['id']})" if d.get("id") else "")
    if action == "notice":
        text = notice_gist(d["text"]) if d.get("text") is not None else "notice"
        return text + (f" (batch {d['batch']})" if d.get("batch") else "")
    if action == "freeze":
        return (f"declared the freeze {d.get('name')}: {d.get('start')} to {d.get('end')}, "
                f"loops: {d.get('on_loop') or 'engine default'}")
    if action == "freeze_end":
        return f"ended the freeze {d.get('name')}"
    if action == "label":
        return f"labelled {str(d.get('label', '')).replace('_', ' ')}"
    if action == "detector":
        settings = d.get("settings") or {}
        return ("detector: " + ", ".join(f"{k}={v}" for k, v in settings.items())
                if settings else "detector: back to each process's own settings")
    return ""


def audit_frame(events: Iterable[Any]) -> pd.DataFrame:
    """Audit events as a table; `summary` says what happened in words, `batch` is the bulk
    rollback id (on the batch's summary and on each of its rollbacks), `detail` compact JSON."""
    rows = [{"time": when(e.at), "actor": e.actor, "action": e.action, "session": e.session,
             "snapshot": e.snapshot, "reason": e.reason,
             "summary": audit_summary(e.action, e.snapshot, e.detail),
             "batch": str((e.detail or {}).get("batch") or ""),
             "detail": short_json(e.detail, 100_000), "id": e.id} for e in events]
    return pd.DataFrame(rows, columns=AUDIT_COLUMNS)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
"""What makes a spreadsheet read a cell as a formula (OWASP, CSV injection)."""


def inert_cell(value: Any) -> Any:
    """`value` with a leading `'` when it is text a spreadsheet would run as a formula."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def audit_csv(frame: pd.DataFrame) -> bytes:
    """The audit table as UTF-8 CSV (with BOM, so spreadsheet tools read Chinese text right).

    Actors, sessions, reasons and details are foreign text: a cell that starts like a formula
    (`=HYPERLINK(…)`, `+cmd|…`) gets a leading `'`, so the spreadsheet shows it instead of
    running it. Rows end in CRLF (RFC 4180), so a lone CR inside a cell is quoted, not a row end.
    """
    out = frame.copy()
    if "time" in out and not out.empty:
        out["time"] = out["time"].map(lambda t: t.isoformat() if t is not None else "")
    return out.map(inert_cell).to_csv(index=False, lineterminator="\r\n").encode("utf-8-sig")
