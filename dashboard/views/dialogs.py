"""View models of the operator dialogs: rollback and notice (preset reasons, notice templates,
the preview tables) and the fleet's bulk rollback (dry-run totals, preview and result tables)
(pure, no Streamlit, no I/O)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dashboard.views.common import counted, short_json, status_label
from engine import NOTICE_FLAG, TEMPLATES, template_for


# -- rollback and notice ----------------------------------------------------------------------
def notices_leaving(preview: Any) -> int:
    """How many notices (messages the user already saw) a rollback preview takes back."""
    count = 0
    for m in preview.messages:
        message = m.message if hasattr(m, "message") else m  # dicts, or records
        count += bool(isinstance(message, Mapping) and message.get(NOTICE_FLAG))
    return count


PRESET_REASONS = (
    "Loop confirmed: the agent repeats a failing call",
    "User waiting: the agent is stuck",
    "Duplicate side effects: undo them",
    "Wrong direction: back to the last good point",
)
"""Reasons an operator can pick instead of typing; the text goes to the audit log as is."""


DECIDE_KEY = "rw-decide"
"""Key of the dialogs' block with the reason and the confirm and cancel buttons."""
NOTICE_KEY = "rw-notice-pick"
"""Key of the rollback dialog's block with the notice choice and its preview."""
DETAILS_KEY = "rw-details"
"""Key of the rollback dialog's block with the tables of what leaves."""
DIALOG_CSS = """<style>
.stDialog > div:has(.st-key-rw-decide){overflow:clip}
.stDialog > div *:has(.st-key-rw-decide){background-color:inherit}
.stDialog .st-key-rw-decide,
.stDialog [data-testid="stLayoutWrapper"]:has(> .st-key-rw-decide){position:sticky;bottom:0;
 z-index:3}
.stDialog .st-key-rw-decide{background-color:inherit;padding:.5rem 0 .75rem;
 border-top:1px solid rgba(127,140,153,.35)}
@media (max-width:640px){.stDialog .st-key-rw-decide [data-testid="stButtonGroup"]
 div:has(> button){flex-wrap:nowrap;overflow-x:auto;scrollbar-width:thin}
 .stDialog .st-key-rw-decide [data-testid="stButtonGroup"] button{flex-shrink:0}
 .stDialog .st-key-rw-notice-pick,
 .stDialog [data-testid="stLayoutWrapper"]:has(> .st-key-rw-notice-pick){order:1}
 .stDialog .st-key-rw-details,
 .stDialog [data-testid="stLayoutWrapper"]:has(> .st-key-rw-details){order:2}}
</style>"""
"""Keeps the reason and the buttons on screen while a long preview scrolls under them, on a
laptop and on a phone: the block sticks to the bottom of the dialog's visible part (the dialog
box clips instead of hiding its overflow, which would make it the sticky block's scroller). It
takes the dialog's own background, whatever the theme, through the blocks between them. On a
phone the preset reasons scroll sideways in one row, so the block stays short, and the block
comes before the notice choice and its preview (the notice block and the tables move after it):
a block stuck to the bottom only ever covers what comes after it, and there the tall block
covered the notice the user will see."""

NOTICE_CHOICES = ("English template", "Chinese template", "Custom text")


def default_notice_choice(locale: str | None) -> str:
    """The template matching the session's locale."""
    return "Chinese template" if template_for(locale) == TEMPLATES["zh"] else "English template"


def notice_text(choice: str, custom: str = "", rolled_back: bool = True) -> str | None:
    """Exactly the text the user will see for a notice choice; None when custom text is empty.
    A session that was not rolled back gets the template that claims no reset."""
    if choice in ("English template", "Chinese template"):
        return template_for("zh" if choice == "Chinese template" else "en", rolled_back)
    return custom.strip() or None


def preview_frames(preview: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(steps leaving the live line, compensations that will be queued) of a RollbackPreview."""
    steps = pd.DataFrame(
        [{"step": s.n, "tool": s.tool or "agent turn", "status": s.status,
          "error": s.error, "side effect": s.side_effect} for s in preview.steps],
        columns=["step", "tool", "status", "error", "side effect"],
    )
    comps = pd.DataFrame(
        [{"step": n, "compensation": name, "args": short_json(args)}
         for n, name, args in preview.compensations],
        columns=["step", "compensation", "args"],
    )
    return steps, comps


# -- bulk rollback ----------------------------------------------------------------------------
BULK_PREVIEW_COLUMNS = ["session", "status", "tenant", "prompt_version", "back_to", "steps",
                        "messages", "compensations", "note"]


@dataclass(frozen=True)
class BulkTotals:
    """What a bulk rollback preview adds up to."""

    sessions: int
    """Sessions that would be rolled back."""
    skipped: int
    """Matching sessions that would not (nothing to roll back, no snapshot…)."""
    steps: int
    """Steps leaving the live lines, over all sessions."""
    messages: int
    """Messages leaving the live lines, over all sessions."""
    notices: int
    """Of those messages, notices the users already got."""
    compensations: dict[str, int]
    """Compensation handler -> how many would be queued."""

    def compensations_text(self) -> str:
        """E.g. "points_refund ×3, crop_undo"; blank when none."""
        return ", ".join(f"{name} ×{n}" if n > 1 else name
                         for name, n in sorted(self.compensations.items()))


def bulk_totals(items: Sequence[Any]) -> BulkTotals:
    """Totals of a dry run (`Engine.rollback_many(..., dry_run=True)`)."""
    previews = [i.preview for i in items if i.ok and i.preview is not None]
    comps = Counter(name for p in previews for _, name, _ in p.compensations)
    return BulkTotals(len(previews), len(items) - len(previews),
                      sum(len(p.steps) for p in previews),
                      sum(len(p.messages) for p in previews),
                      sum(notices_leaving(p) for p in previews), dict(comps))


def bulk_preview_frame(items: Sequence[Any],
                       rows: Mapping[str, Mapping[str, Any]] | None = None) -> pd.DataFrame:
    """One line per session of a dry run: where it would go back to, how many steps and
    messages would leave its live line, which compensations would be queued, or why it is
    skipped. `rows` (session -> fleet row) adds status, tenant and prompt version."""
    rows = rows or {}
    out = []
    for i in items:
        row = rows.get(i.session, {})
        p = i.preview if i.ok else None
        notices = notices_leaving(p) if p is not None else 0
        out.append({
            "session": i.session, "status": status_label(row.get("status") or ""),
            "tenant": row.get("tenant") or "", "prompt_version": row.get("prompt_version") or "",
            "back_to": p.target if p is not None else "",
            "steps": len(p.steps) if p is not None else None,
            "messages": (f"{len(p.messages)}"
                         + (f" ({counted(notices, 'notice')})" if notices else "")
                         if p is not None else ""),
            "compensations": ", ".join(f"{name} (step {n})" for n, name, _ in p.compensations)
                             if p is not None else "",
            "note": "" if i.ok else f"skipped: {i.error}",
        })
    frame = pd.DataFrame(out, columns=BULK_PREVIEW_COLUMNS)
    frame["steps"] = frame["steps"].astype("Int64")
    return frame


BULK_RESULT_COLUMNS = ["session", "result", "back_to", "steps", "compensations", "error"]


def bulk_result_frame(items: Sequence[Any], left_alone: Iterable[str] = ()) -> pd.DataFrame:
    """One line per session of a bulk rollback: rolled back (where to, what left, which
    compensations were queued) or failed (why); `left_alone`: previewed sessions that no longer
    matched the filter when the operator confirmed."""
    out = []
    for i in items:
        r = i.rollback
        out.append({"session": i.session, "result": "rolled back" if i.ok else "failed",
                    "back_to": r.target if r is not None else "",
                    "steps": r.abandoned_steps if r is not None else None,
                    "compensations": ", ".join(c.name for c in r.compensations)
                                     if r is not None else "",
                    "error": i.error or ""})
    for sid in left_alone:
        out.append({"session": sid, "result": "left alone", "back_to": "", "steps": None,
                    "compensations": "",
                    "error": "no longer matched the filter (rolled back meanwhile, or gone)"})
    frame = pd.DataFrame(out, columns=BULK_RESULT_COLUMNS)
    frame["steps"] = frame["steps"].astype("Int64")
    return frame
