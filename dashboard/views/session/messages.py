"""View model of the session page's Messages tab: every write with the rollback that took it off
the line, the conversation as the user sees it, and the last notice the user got (pure, no
Streamlit, no I/O)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dashboard.views.common import escape_text, short_json
from engine import NOTICE_FLAG, AuditEvent, BranchInfo, MessageRecord


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


def messages_view(records: Sequence[MessageRecord],
                  branches: Sequence[BranchInfo]) -> list[MessageView]:
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


def last_notice(records: Sequence[MessageRecord],
                audit: Iterable[AuditEvent] = ()) -> NoticeSeen | None:
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
