"""What every page's view model shares: status words and colours, times and durations, compact
JSON, and foreign text made safe for Markdown, HTML and plotly (pure, no Streamlit, no I/O)."""

from __future__ import annotations

import datetime as dt
import html
import json
import math
import re
from typing import Any, overload

from engine import SessionStatus, shown_store

ARGS_CHARS = 200
"""Arguments are cut to this many characters in hovers and tables."""

STATUS_ORDER: tuple[SessionStatus, ...] = (
    SessionStatus.LOOPING, SessionStatus.ROLLED_BACK, SessionStatus.HEALTHY, SessionStatus.STOPPED)
"""Statuses in the order the fleet sorts and filters them: what needs attention first."""
STATUS_LABELS: dict[SessionStatus, str] = {
    SessionStatus.LOOPING: "looping",
    SessionStatus.ROLLED_BACK: "rolled back",
    SessionStatus.HEALTHY: "healthy",
    SessionStatus.STOPPED: "stopped",
}
"""How statuses read everywhere (table, filters, headers): words, never emoji alone; the colour
comes from STATUS_COLORS, so a browser without emoji fonts loses nothing."""
STATUS_COLORS: dict[SessionStatus, str] = {
    SessionStatus.LOOPING: "red",
    SessionStatus.ROLLED_BACK: "orange",
    SessionStatus.HEALTHY: "green",
    SessionStatus.STOPPED: "gray",
}
"""Streamlit theme colours per status (table pills, Markdown `:red[…]`)."""


def status_label(status: Any) -> str:
    """The word for a status (unknown values as they are)."""
    return STATUS_LABELS.get(status, str(status))


def status_markdown(status: Any) -> str:
    """A status as coloured Markdown text, e.g. `:red[**looping**]`."""
    color = STATUS_COLORS.get(status, "gray")
    return f":{color}[**{plain(status_label(status))}**]"


# Typed per argument so a caller with a time it knows is there gets a datetime, not an Optional.
@overload
def when(ts: float) -> dt.datetime: ...
@overload
def when(ts: float | None) -> dt.datetime | None: ...
def when(ts: float | None) -> dt.datetime | None:
    """A unix time as a local, aware datetime (None stays None)."""
    return None if ts is None else dt.datetime.fromtimestamp(ts).astimezone()


def short_json(value: Any, limit: int = ARGS_CHARS) -> str:
    """Compact JSON of `value`, cut to `limit` characters with an ellipsis."""
    try:
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def session_link(sid: str) -> str:
    """Relative URL of a session's page: works behind any base path and can be shared."""
    from urllib.parse import quote

    return f"session?session={quote(sid, safe='')}"


# -- foreign text ------------------------------------------------------------------------------
# Session ids, meta, tool names, errors, memories, reasons, actor names: agents, users and shared
# URLs choose them all. Streamlit renders Markdown in titles, captions, alerts, metrics and labels
# (links, and bare URLs it links on its own); plotly renders a subset of HTML in labels, legends
# and hovers (including <a href>). Foreign text goes through `plain` or `plot_text`, never raw.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~<>$:&=])")
WORD_JOINER = "\u2060"
"""Invisible, zero-width: splits what Markdown would auto-link without changing what people read."""
_AUTOLINK = re.compile(r"(?i)(\\:)(?=//)|(www)(?=\\\.)|(@)")


def plain(text: object) -> str:
    """`text` as Markdown that shows exactly its characters and renders nothing: no link, no
    emphasis, no HTML, no emoji shortcode, no LaTeX.

    Every Markdown character is backslash-escaped. Escapes alone do not stop GitHub-style
    auto-links (Streamlit links `https://…`, `www.…` and `name@host.tld` found in the text after
    unescaping), so a word joiner (U+2060) goes after `:` before `//`, after `www` before `.`
    and after `@`: invisible on screen, and no longer a URL or an e-mail address.
    """
    escaped = _MD_SPECIAL.sub(r"\\\1", str(text))
    return _AUTOLINK.sub(lambda m: m.group(0) + WORD_JOINER, escaped)


def literal(text: object) -> str:
    """`text` as a Markdown code span: every character shown as is, in monospace, never a link.

    For ids and other values people compare character by character; pass `repr(value)` to make
    spaces at the ends and invisible characters visible. Line breaks show as spaces.
    """
    text = str(text).replace("\r", " ").replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    # A space at each end keeps a backtick in the text from joining the fence; CommonMark drops
    # exactly one space at each end when both are there.
    pad = " " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def plot_text(text: object) -> str:
    """`text` safe inside a plotly label, legend, annotation or hover: plotly renders `<a href>`,
    `<b>`, `<br>` and entities there, so `&`, `<` and `>` are escaped (quotes are harmless)."""
    return html.escape(str(text), quote=False)


def escape_text(text: str) -> str:
    """Text safe to put inside HTML (st.html): no tags survive, line breaks are kept."""
    return html.escape(text, quote=True).replace("\n", "<br>")


def store_label(url: str) -> str:
    """How the sidebar names the store: a SQLite file by its absolute path, others by the
    scheme, host and path of `Engine.url`.

    The engine's URL has its `user:password@` redacted already; options in the query string
    (`password=`, `fallback=`, retries…) say nothing an operator needs there, and may hold a
    secret, so they are left out.
    """
    # A file by its absolute path, as `rewind` prints it: "which folder?" is the question a
    # relative path leaves open.
    return shown_store(url)


# -- times and counts --------------------------------------------------------------------------
def duration_text(seconds: float | None) -> str:
    """A duration for people: "45 s", "12 min", "3 h 05 min", "2 d 4 h"; blank when unknown."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return ""
    s = max(int(seconds), 0)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def counted(n: int, noun: str) -> str:
    """A count with its noun, plural with an s: "1 notice", "2 notices"."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def loops_text(loops: int, this_loop: int | None = None) -> str:
    """How often a session was flagged, in words on-call reads at a glance; `this_loop`: the
    verdicts of the loop it is in now (one loop left running is flagged again every few steps,
    so the lifetime count alone reads like that many loops)."""
    if not loops:
        return "never flagged as looping"
    if this_loop is not None and this_loop >= 1:
        now = "once in this loop" if this_loop == 1 else f"{this_loop:,} times in this loop"
        return f"flagged {now}" + ("" if loops <= this_loop else f" ({loops:,} verdicts in all)")
    return "flagged as looping once" if loops == 1 else f"flagged as looping {loops:,} times"


def rollbacks_text(rollbacks: int) -> str:
    """How often a session was rolled back, in words."""
    return "never rolled back" if not rollbacks else (
        "rolled back once" if rollbacks == 1 else f"rolled back {rollbacks} times")


# Shared by the fleet's "needs you" band and the compensations page.
STUCK_AFTER_S = 300.0
"""A compensation still pending after this long has no process running it."""
