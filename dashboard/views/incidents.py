"""View models of incidents (loops grouped by cause): the fleet's one-line summary and the
incident page's session table (pure, no Streamlit, no I/O)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import pandas as pd

from dashboard.views.common import status_label, when
from engine import incident_state as state_of

NO_TOOL = "(agent turn)"
"""The tool shown for loops of agent turns without a tool call."""
INCIDENT_COLUMNS = ["link", "state", "tenant", "scenario", "prompt_version", "joined"]
REMEDIES = {
    "rollback": "Roll back every session",
    "quarantine": "Quarantine the tool",
    "release": "Release the waiting sessions",
    "stop": "Stop the waiting sessions",
    "notice": "Send the notice to every session",
    "close": "Close the incident",
}
"""Remedy -> its label on the incident page, in the order offered."""


def counts_text(counts: Mapping[str, int]) -> str:
    """Sessions by state in words: "28 rolled back, 12 looping" (largest first)."""
    parts = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{n} {status_label(state).lower()}" for state, n in parts) or "no sessions"


def incident_line(inc: Any) -> str:
    """An incident in one line (plain text): tool, signature, sessions by state, first seen."""
    sig = inc.signature or "(no error)"
    sig = sig if len(sig) <= 90 else sig[:89] + "…"
    spread = f" · tenants {', '.join(inc.tenants)}" if inc.tenants else ""
    return (f"{inc.tool or NO_TOOL} · “{sig}” · {len(inc.sessions)} sessions: "
            f"{counts_text(inc.counts)}{spread} · since {when(inc.first_seen):%H:%M:%S}")


def incident_link(iid: str) -> str:
    """The incident page's relative URL."""
    return f"incident?incident={quote(iid, safe='')}"


def incident_sessions_frame(inc: Any, infos: Mapping[str, Any]) -> pd.DataFrame:
    """The incident's sessions, in the order they joined, each with a link to its page.
    `infos`: session id -> `SessionInfo` (None for one deleted since)."""
    rows = []
    for sid in inc.sessions:
        info = infos.get(sid)
        meta = dict(info.meta) if info is not None else {}
        rows.append({
            "link": f"session?session={quote(sid, safe='')}",
            "state": status_label(state_of(info)),
            "tenant": meta.get("tenant"), "scenario": meta.get("scenario"),
            "prompt_version": meta.get("prompt_version"),
            "joined": when(inc.joined.get(sid)),
        })
    return pd.DataFrame(rows, columns=INCIDENT_COLUMNS)


def watch_only_count(infos: Mapping[str, Any]) -> int:
    """How many of the sessions (`SessionInfo`s, None for one deleted) Rewind only watches."""
    return sum(1 for info in infos.values()
               if info is not None and (info.meta or {}).get("watch_only"))


def watch_only_text(watched: int, total: int) -> str:
    """What the incident page says of its watch-only sessions (plain text)."""
    which = "1 of these sessions is" if watched == 1 else \
        f"{watched} of these {total} sessions are"
    return (f"{which} watch-only (seen through OpenTelemetry): Rewind does not run their "
            "agents, so nothing holds them; they never wait for on-call, and no remedy here "
            "releases, stops or rolls them back. Stop or fix those agents where they run.")


def preview_text(preview: Any) -> str:
    """What a previewed remedy would do, in one sentence (plain text)."""
    inc, action = preview.incident, preview.action
    if action == "quarantine":
        return (f"Quarantine {preview.tool} for every session: agents are refused it within a "
                "second.")
    if action == "close":
        return f"Close incident {inc.id}; a new loop of this cause opens a new one."
    verb = {"rollback": "Roll back", "release": "Release", "stop": "Stop",
            "notice": "Send the notice to"}[action]
    text = f"{verb} {len(preview.sessions)} of the incident's {len(inc.sessions)} sessions."
    if preview.skipped:
        text += f" {len(preview.skipped)} are left alone (not waiting for on-call)."
    return text


def done_text(done: Any) -> str:
    """What a remedy did, in one sentence (plain text)."""
    failed = done.failed
    if done.action == "quarantine":
        return f"Quarantined {done.quarantine.tool} for every session ({done.quarantine.id})."
    if done.action == "close":
        return f"Closed incident {done.incident.id}."
    ok = len(done.results) - len(failed)
    verb = {"rollback": "Rolled back", "release": "Released", "stop": "Stopped",
            "notice": "Sent the notice to"}[done.action]
    return f"{verb} {ok} of {len(done.results)} sessions" + (
        f"; {len(failed)} refused" if failed else "") + "."


def blast_radius_frame(inc: Any) -> pd.DataFrame:
    """Sessions in the incident over time: one row per session joining (``at``, local time),
    with the number of sessions in it from then on (``sessions``)."""
    times = sorted(inc.joined.values())
    return pd.DataFrame({"at": [when(t) for t in times],
                         "sessions": list(range(1, len(times) + 1))},
                        columns=["at", "sessions"])
