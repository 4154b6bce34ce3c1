"""View models: engine records in, plain frames and dicts out (pure, no Streamlit, no I/O).

Pages ask `dashboard.data` for records, shape them here, and hand the result to
`dashboard.charts` or a Streamlit element. Everything here is tested with hand-made records.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from engine.sessions.notices import NOTICE_FLAG, TEMPLATES, template_for
from engine.types import SessionStatus, StoredVerdict, TokenBreakdown

ARGS_CHARS = 200
"""Arguments are cut to this many characters in hovers and tables."""
MAX_LANES = 12
"""Timeline lanes for the most frequent fingerprints; rarer calls share one lane."""
OTHER_LANE = "other calls"
AGENT_LANE = "agent turn"

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

EPISODE_COLUMNS = ["at", "session", "tenant", "scenario", "prompt_version"]


def loop_episodes_frame(episodes: Iterable[Any]) -> pd.DataFrame:
    """Loop episodes (`engine.fleet.LoopEpisode`) as a frame with EPISODE_COLUMNS."""
    return pd.DataFrame([tuple(e) for e in episodes], columns=EPISODE_COLUMNS)


SESSION_COLUMNS = [
    "session", "status", "state", "tenant", "scenario", "prompt_version", "locale", "last_activity",
    "steps", "messages", "loops", "rollbacks", "verdict", "explanation", "link", "flagged_at",
    "loop_steps", "hold",
]
DEFAULT_SORT = "Needs you first"
SORTS = {
    DEFAULT_SORT: (["status_rank", "last_activity"], [True, False]),
    "Last activity": ("last_activity", False),
    "Loop verdicts": ("loops", False),
    "Rollbacks": ("rollbacks", False),
    "Steps": ("steps", False),
    "Status": ("status_rank", True),
    "Session id": ("session", True),
}


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


def store_label(url: str) -> str:
    """How the sidebar names the store: scheme, host and path of `Engine.store.url`.

    The engine's URL has its `user:password@` redacted already; options in the query string
    (`password=`, `fallback=`, retries…) say nothing an operator needs there, and may hold a
    secret, so they are left out.
    """
    return re.split(r"[?#]", url, maxsplit=1)[0]


# -- fleet ------------------------------------------------------------------------------------
def local_times(stamps: pd.Series) -> pd.Series:
    """Unix times as local, aware timestamps (vectorised `when`)."""
    tz = dt.datetime.now().astimezone().tzinfo
    return pd.to_datetime(stamps, unit="s", utc=True).dt.tz_convert(tz)


def sessions_frame(infos: Iterable[Any]) -> pd.DataFrame:
    """One row per SessionInfo, in the columns the fleet table shows."""
    rows = []
    for i in infos:
        verdict: StoredVerdict | None = i.last_verdict
        meta = i.meta or {}
        looping = i.status == SessionStatus.LOOPING and verdict is not None
        rows.append((
            i.id, i.status, [status_label(i.status)], meta.get("tenant"),
            meta.get("scenario"), meta.get("prompt_version"), meta.get("locale") or "en",
            i.updated_at, i.steps, i.messages, i.loops, i.rollbacks,
            verdict["rule"] if verdict else None, verdict["explanation"] if verdict else None,
            session_link(i.id),
            verdict.get("at") if looping else None,
            loop_steps(i.steps, verdict) if looping else None,
            meta.get("hold"),
        ))
    frame = pd.DataFrame.from_records(rows, columns=SESSION_COLUMNS)
    frame["last_activity"] = local_times(frame["last_activity"].astype(float))
    frame["flagged_at"] = local_times(frame["flagged_at"].astype(float))
    frame["loop_steps"] = frame["loop_steps"].astype("Int64")
    frame["status_rank"] = frame["status"].map(
        {s: n for n, s in enumerate(STATUS_ORDER)}).fillna(len(STATUS_ORDER))
    return frame


def select_sessions(frame: pd.DataFrame, *, search: str = "", sort: str = "Last activity",
                    descending: bool | None = None, limit: int | None = None) -> pd.DataFrame:
    """Rows whose id, tenant, scenario or prompt version contains `search`, sorted, cut."""
    out = frame
    needle = (search or "").strip().lower()
    if needle and not out.empty:
        hay = out[["session", "tenant", "scenario", "prompt_version"]].astype(str)
        mask = hay.apply(lambda col: col.str.lower().str.contains(needle, regex=False))
        out = out[mask.any(axis=1)]
    column, ascending = SORTS.get(sort, SORTS[DEFAULT_SORT])
    columns = column if isinstance(column, list) else [column]
    orders = ascending if isinstance(ascending, list) else [ascending]
    if descending is not None:
        orders = [not descending] * len(columns)
    out = out.sort_values([*columns, "session"], ascending=[*orders, True], kind="stable",
                          na_position="last")
    return out.head(limit) if limit else out


BLANK_COLUMNS = ("tenant", "scenario", "prompt_version", "verdict", "explanation", "hold")


def blank_missing(frame: pd.DataFrame) -> pd.DataFrame:
    """The fleet table as shown: missing text as blanks (never "None"), the loop step count as
    text so a session that is not looping shows nothing there."""
    out = frame.copy()
    for column in BLANK_COLUMNS:
        if column in out:
            out[column] = out[column].astype(object).where(out[column].notna(), "")
    if "loop_steps" in out:
        out["loop_steps"] = [("" if pd.isna(v) else str(int(v))) for v in out["loop_steps"]]
    return out


def facets(frame: pd.DataFrame) -> dict[str, list[str]]:
    """Distinct tenants, scenarios and prompt versions, for the filter menus."""
    out = {}
    for column in ("tenant", "scenario", "prompt_version"):
        values = frame[column].dropna().astype(str).unique().tolist() if column in frame else []
        out[column] = sorted(values)
    return out


@dataclass(frozen=True)
class Kpi:
    label: str
    value: str
    help: str
    alert: bool = False
    """True when the number calls for attention."""


def kpis(stats: Mapping[str, int], window_s: float = 3600.0) -> list[Kpi]:
    """The fleet KPI row from `Engine.fleet_stats`."""
    hours = window_s / 3600
    span = "hour" if hours == 1 else f"{hours:g} hours"
    pending = stats.get("compensations_pending", 0)
    failed = stats.get("compensations_failed", 0)
    return [
        Kpi("Active sessions", f"{stats.get('active', 0):,}",
            f"Sessions with activity in the last 5 minutes, of {stats.get('sessions', 0):,}."),
        Kpi("Looping now", f"{stats.get('looping', 0):,}",
            "Sessions whose latest verdict is a loop and that were not rolled back yet.",
            alert=stats.get("looping", 0) > 0),
        Kpi(f"Rollbacks, last {span}", f"{stats.get('rollbacks_window', 0):,}",
            "Automatic and operator rollbacks."),
        Kpi("Compensations pending / failed", f"{pending:,} / {failed:,}",
            "Saga compensations queued by rollbacks; failed ones need manual action.",
            alert=failed > 0),
    ]


def loop_steps(steps_total: int, verdict: StoredVerdict | None) -> int | None:
    """Steps taken since a loop began: step numbers are never reused, so a session still
    looping has spent steps `loop_start_step` … `steps_total` inside its loop."""
    if not verdict or not verdict.get("loop_start_step"):
        return None
    return max(int(steps_total) - int(verdict["loop_start_step"]) + 1, 0)


@dataclass(frozen=True)
class NeedsYou:
    """One line of the fleet's "needs you" band: what waits for a person, and where to go."""

    kind: str
    """"loop" (a looping session) or "compensation" (a failed or stuck compensation)."""
    session: str
    text: str
    """Plain text (foreign values included): render it through `plain`."""
    page: str
    """Page to open: "session" or "compensations"."""
    query: dict[str, str]
    """Query parameters of the link (the session, or the compensation status to filter)."""


STUCK_AFTER_S = 300.0
"""A compensation still pending after this long has no process running it (see issue 15)."""


def needs_you(looping: pd.DataFrame, compensations: Sequence[Any], now: float,
              limit: int = 6) -> list[NeedsYou]:
    """What waits for on-call, oldest loop first: looping sessions (from the fleet frame),
    then failed compensations and pending ones older than STUCK_AFTER_S."""
    out: list[NeedsYou] = []
    if not looping.empty:
        rows = looping.sort_values("flagged_at", na_position="last", kind="stable")
        for row in rows.head(limit).itertuples():
            parts = [row.session, row.scenario or "", status_label(row.status)]
            if pd.notna(row.flagged_at):
                flagged = row.flagged_at.timestamp()
                parts.append(f"flagged {row.flagged_at:%H:%M:%S} ({duration_text(now - flagged)}"
                             " ago)")
            if pd.notna(row.loop_steps):
                parts.append(f"{int(row.loop_steps)} steps in the loop")
            if row.hold:
                parts.append(str(row.hold))
            out.append(NeedsYou("loop", row.session, " · ".join(p for p in parts if p),
                                "session", {"session": row.session}))
    for c in compensations:
        stuck = c.status == "pending" and now - c.created_at >= STUCK_AFTER_S
        if c.status != "failed" and not stuck:
            continue
        age = duration_text(now - c.created_at)
        state = "failed" if c.status == "failed" else f"pending for {age}"
        text = f"compensation {c.name} for {c.session} step {c.step}: {state}"
        if c.error:
            text += f" ({c.error[:80]})"
        out.append(NeedsYou("compensation", c.session, text, "compensations",
                            {"comp-status": str(c.status)}))
        if len(out) >= 2 * limit:
            break
    return out


def needs_you_heading(items: Sequence[NeedsYou], looping_total: int) -> tuple[str, int]:
    """The band's heading and how many looping sessions it leaves out (the band lists at most a
    few; the heading counts them all, so "Needs you (6)" never hides 13 loops)."""
    shown = sum(1 for i in items if i.kind == "loop")
    comps = len(items) - shown
    parts = []
    if looping_total:
        parts.append(f"{looping_total} looping session{'s' if looping_total != 1 else ''}")
    if comps:
        parts.append(f"{comps} compensation{'s' if comps != 1 else ''}")
    return f"Needs you: {' and '.join(parts)}", max(looping_total - shown, 0)


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

    @property
    def duration_s(self) -> float:
        return max(self.ended_at - self.started_at, 0.0)


def loop_cost(steps: Sequence[Any], verdict: StoredVerdict | None, looping: bool,
              now: float | None = None, branches: Sequence[Any] = ()) -> LoopCost | None:
    """The cost of the loop `verdict` describes, or None without a verdict or its steps.

    While `looping`, the loop runs from its first step to the newest step and until `now`.
    Otherwise its steps end at the last step that carried a verdict for the same loop, and its
    time at the rollback that abandoned that step (one of `branches`) when there was one: a
    session flagged and left waiting for on-call looped until someone rolled it back.
    """
    if not verdict or not steps:
        return None
    start = verdict.get("loop_start_step") or min(verdict.get("evidence_steps") or [0]) or None
    if start is None:
        return None
    by_n = {s.n: s for s in steps}
    if start not in by_n:
        return None
    if looping:
        end = max(by_n)
    else:
        flagged = [s.n for s in steps if s.verdict and
                   (s.verdict.get("loop_start_step") or start) == start]
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
                    tokens, effects, rolled_back_at)


def loop_cost_line(cost: LoopCost) -> str:
    """The cost as one plain sentence (foreign tool names included: render through `plain`)."""
    parts = [f"loop began {when(cost.started_at):%Y-%m-%d %H:%M:%S} at step {cost.start_step}",
             ("running for " if cost.ongoing else "lasted ") + duration_text(cost.duration_s)
             + (f" (until the rollback at {when(cost.rolled_back_at):%H:%M:%S})"
                if cost.rolled_back_at is not None else ""),
             f"{cost.steps} steps wasted"]
    if cost.tokens is not None:
        parts.append(f"{cost.tokens:,} context tokens")
    if cost.side_effects:
        parts.append(f"{len(cost.side_effects)} side effects ran during the loop: "
                     + ", ".join(f"{tool} (step {n})" for n, tool in cost.side_effects[:5]))
    else:
        parts.append("no side effects during the loop")
    return " · ".join(parts)


# -- loops over time --------------------------------------------------------------------------
AUTO_WINDOW = "Auto (fit the data)"
"""The fleet's default window: from the first loop episode to the last (or now)."""
FIXED_WINDOWS = {"6 hours": 6 * 3600, "24 hours": 86400, "7 days": 7 * 86400}
WINDOW_CHOICES = (AUTO_WINDOW, *FIXED_WINDOWS)
AUTO_LOOKBACKS = (86400, 7 * 86400)
"""How far back the auto window looks for loop episodes: the last day, and only when that
holds none, the last 7 days (reading a week of events costs seconds on a large fleet's first
visit; an incident always has loops in the last day)."""
AUTO_LOOKBACK_S = AUTO_LOOKBACKS[-1]
"""The farthest the auto window looks back (the longest fixed window)."""
AUTO_MIN_SPAN_S = 900
"""The auto window is never narrower than this, so a single loop still shows as one bar among
many, not as a bar filling the chart."""
AUTO_BUCKETS = (30, 60, 120, 300, 600, 900, 1800, 3600, 2 * 3600, 3 * 3600, 6 * 3600,
                12 * 3600, 86400)
"""Bucket widths the auto window picks from; each at most 2.5 times the one before, so some
width always gives between MIN_BARS and MAX_BARS bars."""
MIN_BARS, MAX_BARS = 20, 60


@dataclass(frozen=True)
class ChartWindow:
    """The time span the loop charts show and their bar width."""

    since: float
    until: float
    bucket_s: int

    def caption(self) -> str:
        start, end = when(self.since), when(self.until)
        fmt = "%H:%M" if start.date() == end.date() and self.until - self.since < 86400 \
            else "%d %b %H:%M"
        return f"{start:{fmt}}–{end:{fmt}}, one bar per {bucket_text(self.bucket_s)}"


def bucket_text(seconds: int) -> str:
    """A bar width for people: "30 s", "5 min", "2 h", "1 d"."""
    for unit, name in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= unit and seconds % unit == 0:
            return f"{seconds // unit} {name}"
    return f"{seconds} s"


def fit_bucket(span_s: float) -> int:
    """The narrowest bucket that gives at most MAX_BARS bars over `span_s` (edges included)."""
    for width in AUTO_BUCKETS:
        if span_s / width <= MAX_BARS - 2:
            return width
    return AUTO_BUCKETS[-1]


def auto_episodes(fetch: Callable[[float], pd.DataFrame]) -> tuple[pd.DataFrame, float]:
    """The loop episodes the auto window fits, and how far back they were read: `fetch(s)`
    (episodes of the last `s` seconds) for the last day, and for the last 7 days only when the
    last day had none."""
    for lookback in AUTO_LOOKBACKS:
        episodes = fetch(lookback)
        if not episodes.empty:
            break
    return episodes, lookback


def fit_window(ats: Iterable[float], now: float, min_span_s: float = AUTO_MIN_SPAN_S,
               lookback_s: float = AUTO_LOOKBACK_S) -> ChartWindow:
    """The window that fits the loop episodes at unix times `ats` (seen in the last
    `lookback_s`): from the first episode to the last, stretched to now when the last one is
    recent (so a live fleet's chart ends at the present), padded by 5 % on each side, at least
    `min_span_s` wide; with a bucket width giving MIN_BARS to MAX_BARS bars."""
    times = sorted(t for t in ats if now - lookback_s <= t <= now)
    if not times:
        return ChartWindow(now - 3600, now, fit_bucket(3600))
    first, last = times[0], times[-1]
    until = now if now - last <= max(0.25 * (last - first), min_span_s) else last
    span = until - first
    pad = 0.05 * span
    since, until = first - pad, min(until + pad, now)
    if until - since < min_span_s:
        since = until - min_span_s
    return ChartWindow(since, until, fit_bucket(until - since))


def bucket_seconds(window_s: float) -> int:
    """A bucket width that gives at most 36 bars over the window (24 for 6 h, 24 h, 7 d…)."""
    for width in (300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400):
        if window_s / width <= 36:
            return width
    return 86400


def loop_buckets(loops: pd.DataFrame, by: str, since: float, until: float,
                 bucket_s: int) -> pd.DataFrame:
    """Loop counts per time bucket and per value of `by` (prompt_version, scenario, tenant).

    `loops` has one row per loop episode with columns `at` (unix time) and `by`. Every bucket
    from `since` to `until` appears, so quiet periods show as zeros, not as gaps.
    """
    start = math.floor(since / bucket_s) * bucket_s
    edges = list(range(int(start), int(until) + 1, bucket_s))
    columns = ["bucket", by, "loops"]
    if loops.empty:
        return pd.DataFrame({"bucket": pd.to_datetime(edges, unit="s", utc=True),
                             by: "", "loops": 0})[columns]
    frame = loops[(loops["at"] >= since) & (loops["at"] <= until)].copy()
    frame[by] = frame[by].fillna("(none)").astype(str)
    frame["bucket"] = (frame["at"] // bucket_s * bucket_s).astype("int64")
    counts = frame.groupby(["bucket", by]).size().rename("loops").reset_index()
    keys = sorted(frame[by].unique()) or [""]
    grid = pd.MultiIndex.from_product([edges, keys], names=["bucket", by]).to_frame(index=False)
    out = grid.merge(counts, on=["bucket", by], how="left").fillna({"loops": 0})
    out["loops"] = out["loops"].astype(int)
    out["bucket"] = pd.to_datetime(out["bucket"], unit="s", utc=True)
    return out[columns]


TOP_SERIES = 6
"""Loop charts draw this many series of their own; the rest are summed as one "other"."""


def top_series(buckets: pd.DataFrame, by: str, n: int = TOP_SERIES) -> pd.DataFrame:
    """`loop_buckets` output cut to the `n` values of `by` with the most loops in the window
    (ties by name), the rest summed per bucket into one series named "other (k more)".

    Returns columns bucket, series, loops, other (True on the summed series), series in rank
    order, the other series last. Empty keys (a window without loops) are dropped.
    """
    columns = ["bucket", "series", "loops", "other"]
    frame = buckets[buckets[by] != ""] if not buckets.empty else buckets
    if frame.empty:
        return pd.DataFrame(columns=columns)
    totals = frame.groupby(by)["loops"].sum()
    ranked = sorted(totals.index, key=lambda k: (-int(totals[k]), str(k)))
    keep, rest = ranked[:n], ranked[n:]
    if len(rest) == 1:  # "other (1 more)" would hide a name for no space saved
        keep, rest = ranked, []
    parts = []
    for key in keep:
        part = frame[frame[by] == key]
        parts.append(pd.DataFrame({"bucket": part["bucket"].to_numpy(), "series": str(key),
                                   "loops": part["loops"].to_numpy(), "other": False}))
    if rest:
        summed = frame[frame[by].isin(rest)].groupby("bucket", sort=True)["loops"].sum()
        parts.append(pd.DataFrame({"bucket": summed.index, "series": f"other ({len(rest)} more)",
                                   "loops": summed.to_numpy(), "other": True}))
    out = pd.concat(parts, ignore_index=True)
    out["loops"] = out["loops"].astype(int)
    return out[columns]


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
    rows = []
    for s in steps:
        if s.tool is None:
            lane = AGENT_LANE
        elif s.fingerprint in own:
            lane = names[s.fingerprint]
        else:
            lane = OTHER_LANE
        outcome = s.status if s.status in ("ok", "error") else "running"
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
        rows.append({"n": s.n, "lane": lane, "tool": s.tool, "fingerprint": s.fingerprint,
                     "outcome": outcome, "line": line,
                     "hover": "<br>".join(p for p in parts if p), "at": s.started_at})
    return pd.DataFrame(rows, columns=["n", "lane", "tool", "fingerprint", "outcome", "line",
                                       "hover", "at"])


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
            hover.append("HEAD (live line ends here)")
        if n.abandoned_reason:
            hover.append(plot_text(n.abandoned_reason[:300]))
        elif not n.restorable:
            hover.append("retired by retention: not restorable")
        rows.append({"id": n.id, "x": x, "y": lanes.get(n.branch, 0) if n.branch else 0,
                     "label": node_label(n), "state": state, "is_head": n.is_head,
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


def rollback_choices(nodes: Sequence[Any], suggested: str | None) -> tuple[list[str], int]:
    """Restorable snapshots on the live line, newest first, and the index of `suggested`."""
    choices = [n.id for n in reversed(nodes) if n.on_live_line and n.restorable]
    index = choices.index(suggested) if suggested in choices else 0
    return choices, index


def snapshot_caption(node: Any, suggested: str | None = None) -> str:
    """How a snapshot is named in menus: id, label, position, and a mark for the suggested."""
    text = f"{node.id} · {node.label or node.kind} · before step {node.next_step}"
    if node.is_head:
        text += " · head"
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
    why = {b.id: f"rolled back to {b.from_snapshot} by {b.actor}: {b.reason}" for b in branches}
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


def escape_text(text: str) -> str:
    """Text safe to put inside HTML (st.html): no tags survive, line breaks are kept."""
    return html.escape(text, quote=True).replace("\n", "<br>")


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


# -- actions ----------------------------------------------------------------------------------
DECIDE_KEY = "rw-decide"
"""Key of the dialogs' block with the reason and the confirm and cancel buttons."""
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
 .stDialog .st-key-rw-decide [data-testid="stButtonGroup"] button{flex-shrink:0}}
</style>"""
"""Keeps the reason and the buttons on screen while a long preview scrolls under them, on a
laptop and on a phone: the block sticks to the bottom of the dialog's visible part (the dialog
box clips instead of hiding its overflow, which would make it the sticky block's scroller). It
takes the dialog's own background, whatever the theme, through the blocks between them. On a
phone the preset reasons scroll sideways in one row, so the block stays short."""

NOTICE_CHOICES = ("English template", "Chinese template", "Custom text")


def default_notice_choice(locale: str | None) -> str:
    """The template matching the session's locale."""
    return "Chinese template" if template_for(locale) == TEMPLATES["zh"] else "English template"


def notice_text(choice: str, custom: str = "") -> str | None:
    """Exactly the text the user will see for a notice choice; None when custom text is empty."""
    if choice == "English template":
        return TEMPLATES["en"]
    if choice == "Chinese template":
        return TEMPLATES["zh"]
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


# -- compensations -----------------------------------------------------------------------------
COMPENSATION_COLUMNS = ["id", "status", "state", "handler", "live", "session", "link", "step",
                        "attempts", "age", "created", "updated", "last_error", "resolved", "args",
                        "stuck"]
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


def compensations_frame(comps: Iterable[Any], now: float,
                        live: Collection[str] | None = None) -> pd.DataFrame:
    """Compensations as the page shows them: state as text (coloured by the page), age as
    words, blanks for what is missing, `stuck` for pending ones older than STUCK_AFTER_S.

    Args:
        live: handler names some live process registered (`Engine.compensation_handlers`);
            ``live`` is "yes"/"no" for open compensations (blank for done or resolved ones,
            and when unknown).
    """
    rows = [{"id": c.id, "status": str(c.status), "state": [str(c.status)], "handler": c.name,
             "live": ("" if live is None or c.status not in OPEN_COMPENSATIONS
                      else "yes" if c.name in live else "no"),
             "session": c.session, "link": session_link(c.session), "step": c.step,
             "attempts": c.attempts, "age": duration_text(now - c.created_at),
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


# -- audit ------------------------------------------------------------------------------------
AUDIT_COLUMNS = ["time", "actor", "action", "session", "snapshot", "reason", "summary", "batch",
                 "detail", "id"]
AUDIT_ACTIONS = ("rollback", "rollback_many", "notice", "compensation", "quarantine",
                 "quarantine_lift", "delete", "retention")
"""Actions the audit page filters by (what the engine writes)."""


def counted(n: int, noun: str) -> str:
    """A count with its noun, plural with an s: "1 notice", "2 notices"."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def audit_summary(action: str, snapshot: str | None, detail: Mapping[str, Any]) -> str:
    """What an audit event did, in words (plain text; foreign values included as they are)."""
    d = detail or {}
    if action == "rollback":
        text = f"to {snapshot}" if snapshot else "rollback"
        if d.get("steps") is not None:
            text += f": {d.get('steps')} steps, {d.get('messages', 0)} messages left the live line"
        if d.get("compensations"):
            text += f", {counted(len(d['compensations']), 'compensation')} queued"
        return text
    if action == "rollback_many":
        where = d.get("where") or {}
        order = ("status", "tenant", "scenario", "prompt_version", "tool")
        keys = [k for k in order if k in where] + [k for k in where if k not in order]
        scope = ", ".join(f"{k}={where[k]}" if k != "session" else
                          f"{len(where[k]) if isinstance(where[k], list) else 1} listed sessions"
                          for k in keys)
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


# -- memory and budget ------------------------------------------------------------------------
BUDGET_PARTS = ("system", "dialogue", "memories", "reserve")
BUDGET_COLUMNS = ["step", *BUDGET_PARTS, "dropped", "total", "max_tokens", "line"]


def memory_label(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


MEMORY_MIN_SPAN_S = 300.0


def memory_span(items: Sequence[Any], now: float,
                min_span_s: float = MEMORY_MIN_SPAN_S) -> tuple[float, float] | None:
    """The time span the decay curves cover: the session's life as its memories record it,
    from the first memory to now, padded (5 % before, 10 % after) and at least `min_span_s`
    wide. A session idle for longer than it lived is cut at its last memory event plus as long
    again, so its recalls do not crowd into the first pixels. None without memories."""
    if not items:
        return None
    start = min(m.created_at for m in items)
    last = max(max([m.created_at, *m.access_times,
                    *([m.invalid_at] if m.invalid_at is not None else [])]) for m in items)
    end = min(max(now, last), last + max(last - start, min_span_s))
    span = max(end - start, min_span_s)
    return start - 0.05 * span, start + 1.1 * span


def memory_frames(items: Sequence[Any], curve: Any) -> tuple[pd.DataFrame, pd.DataFrame,
                                                             float | None, pd.DataFrame]:
    """(curves, recalls, threshold, items) for the Memory tab from `SessionMemory.items()` and
    `SessionMemory.curves()` (a decay `Curve`: times, weights per id, accesses, threshold)."""
    names = {m.id: memory_label(m.text) for m in items}
    curves = pd.DataFrame(
        [{"memory": names.get(mid, mid), "t": when(t), "strength": w}
         for mid, series in curve.weights.items()
         for t, w in zip(curve.times, series, strict=True) if w is not None],
        columns=["memory", "t", "strength"])
    hits = pd.DataFrame(
        [{"memory": names.get(mid, mid), "t": when(t), "strength": w}
         for mid, marks in curve.accesses.items() for t, w in marks],
        columns=["memory", "t", "strength"])
    table = pd.DataFrame(
        [{"memory": m.text, "tier": m.tier, "importance": m.importance,
          "recalls": m.access_count, "created": when(m.created_at),
          "state": "valid" if m.invalid_at is None else f"invalidated: {m.invalid_reason or ''}"}
         for m in items],
        columns=["memory", "tier", "importance", "recalls", "created", "state"])
    return curves, hits, curve.threshold, table


def memory_log_frame(entries: Iterable[Mapping[str, Any]],
                     names: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Memory lifecycle events (promote, evict, prune) and contradiction fixes, by time;
    `names` maps memory ids to their text."""
    names = names or {}
    rows = []
    for e in sorted(entries, key=lambda e: e.get("at") or 0):
        if "event" in e:
            what, about = e["event"], names.get(e.get("id"), e.get("id"))
        else:
            kept, gone = e.get("kept"), e.get("invalidated")
            what = f"contradiction ({e.get('kind', '?')})"
            about = f"kept “{names.get(kept, kept)}”, invalidated “{names.get(gone, gone)}”"
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
    rows = [{"part": p, "tokens": int(breakdown.get(p) or 0)} for p in BUDGET_PARTS]
    used = sum(r["tokens"] for r in rows)
    if max_tokens:
        rows.append({"part": "free", "tokens": max(int(max_tokens) - used, 0)})
    return pd.DataFrame(rows, columns=["part", "tokens"])


# -- fleet controls: bulk rollback and tool quarantine ------------------------------------------
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
