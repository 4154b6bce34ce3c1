"""View models of the fleet page: the sessions table (search, sort, filters), the KPI row, the
"needs you" band, and the loops-over-time charts' windows and buckets (pure, no Streamlit, no
I/O)."""

from __future__ import annotations

import datetime as dt
import math
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dashboard.views.common import (
    STATUS_ORDER,
    STUCK_AFTER_S,
    duration_text,
    session_link,
    status_label,
    when,
)
from engine import SessionStatus, StoredVerdict, loop_first_step

EPISODE_COLUMNS = ["at", "session", "tenant", "scenario", "prompt_version"]


def loop_episodes_frame(episodes: Iterable[Any]) -> pd.DataFrame:
    """Loop episodes (`engine.fleet.queries.LoopEpisode`) as a frame with EPISODE_COLUMNS."""
    return pd.DataFrame([tuple(e) for e in episodes], columns=EPISODE_COLUMNS)


# -- sessions table ---------------------------------------------------------------------------
SESSION_COLUMNS = [
    "session", "status", "state", "tenant", "scenario", "prompt_version", "locale", "last_activity",
    "steps", "messages", "loops", "rollbacks", "verdict", "explanation", "link", "flagged_at",
    "loop_steps", "hold", "watch_only", "loop_began",
]
WATCH_ONLY = "watch-only"
WAITING = "waiting for on-call"
"""What the fleet table and the needs-you band say of a session waiting for a person's
decision (loop policy ``flag``, `SessionInfo.waiting`)."""
"""The state pill of a session Rewind only watches (ingested by `rewind otlp`): it can be
flagged and labelled, not rolled back or sent a notice."""
WATCH_ONLY_NEEDS = ("watch-only (OpenTelemetry): nothing holds it, nothing to release; stop "
                    "or fix its agent where it runs")
"""What the needs-you band says of a looping session Rewind only watches."""
DEFAULT_SORT = "Needs you first"
SORTS = {
    # looping first, and among them the costliest loop (most steps since it began)
    DEFAULT_SORT: (["status_rank", "loop_steps", "last_activity"], [True, False, False]),
    "Last activity": ("last_activity", False),
    "Loop verdicts": ("loops", False),
    "Rollbacks": ("rollbacks", False),
    "Steps": ("steps", False),
    "Status": ("status_rank", True),
    "Session id": ("session", True),
}


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
        # The loop columns are filled only while the session loops (and has a verdict saying so).
        loop = verdict if i.status == SessionStatus.LOOPING else None
        watch_only = bool(meta.get("watch_only"))
        waiting = bool(getattr(i, "waiting", False))
        state = [status_label(i.status), *([WAITING] if waiting else []),
                 *([WATCH_ONLY] if watch_only else [])]
        rows.append((
            i.id, i.status, state, meta.get("tenant"),
            meta.get("scenario"), meta.get("prompt_version"), meta.get("locale") or "en",
            i.updated_at, i.steps, i.messages, i.loops, i.rollbacks,
            verdict["rule"] if verdict else None, verdict["explanation"] if verdict else None,
            session_link(i.id),
            loop.get("at") if loop is not None else None,
            loop_steps(i.steps, loop) if loop is not None else None,
            WAITING if waiting else meta.get("hold"), watch_only,
            loop_began(loop) if loop is not None else None,
        ))
    frame = pd.DataFrame.from_records(rows, columns=SESSION_COLUMNS)
    frame["last_activity"] = local_times(frame["last_activity"].astype(float))
    frame["flagged_at"] = local_times(frame["flagged_at"].astype(float))
    frame["loop_began"] = local_times(frame["loop_began"].astype(float))
    frame["loop_steps"] = frame["loop_steps"].astype("Int64")
    frame["watch_only"] = frame["watch_only"].astype(bool)
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


def watch_only_note(frame: pd.DataFrame, what: str) -> str:
    """What a bulk rollback of `frame` (the rows `what` names: "selected", "matching") cannot
    do: "2 of the 5 matching are watch-only: …", or "" when none is."""
    if frame.empty or "watch_only" not in frame:
        return ""
    n = int(frame["watch_only"].sum())
    if not n:
        return ""
    verb = "is" if n == 1 else "are"
    return (f"{n:,} of the {len(frame):,} {what} {verb} watch-only (seen through OpenTelemetry): "
            "Rewind does not run those agents, so it cannot roll them back or notify them; the "
            "rollback skips them and takes the others")


CHAR_PX, CELL_PAD_PX = 7.5, 24
"""Width of one character of the table's font (14 px sans, generous) and a cell's padding."""


# The grid draws cells on a canvas, which shows ASCII whitespace (tab, newline, ...) as spaces
# and other control characters as nothing.
_CANVAS_SPACES = frozenset("\t\n\x0b\x0c\r")


def _char_cells(ch: str) -> int:
    if ch in _CANVAS_SPACES:
        return 1
    if unicodedata.category(ch) in ("Mn", "Me", "Cf", "Cc"):
        return 0  # combining marks, joiners, variation selectors, controls: no cell of their own
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def text_cells(text: str) -> int:
    """How many character cells `text` takes on one line: wide (CJK, most emoji) characters
    two, combining marks, zero-width and control characters none."""
    return sum(_char_cells(ch) for ch in text)


def text_width(texts: pd.Series, least: int = 200, most: int = 1400) -> int:
    """A column width in pixels that shows the longest of `texts` whole on one line (the
    table's cells never wrap), between `least` and `most`. Lengths are in cells
    (`text_cells`): counted in characters, a Japanese explanation got half the width it needs
    and was cut."""
    shown = texts.dropna().astype(str)
    longest = max(map(text_cells, shown), default=0)
    return int(min(max(least, longest * CHAR_PX + CELL_PAD_PX), most))


def facets(metas: Iterable[Mapping[str, Any] | None]) -> dict[str, list[str]]:
    """Distinct tenants, scenarios and prompt versions among sessions' `meta`, sorted, for the
    filter menus."""
    seen: dict[str, set[str]] = {k: set() for k in ("tenant", "scenario", "prompt_version")}
    for meta in metas:
        for key, values in seen.items():
            value = (meta or {}).get(key)
            if value is not None:
                values.add(str(value))
    return {k: sorted(v) for k, v in seen.items()}


@dataclass(frozen=True)
class Kpi:
    label: str
    value: str
    help: str
    alert: bool = False
    """True when the number calls for attention."""
    note: str = ""
    """A few words under the number (what it rests on), or none."""


def kpis(stats: Mapping[str, int], window_s: float = 3600.0) -> list[Kpi]:
    """The fleet KPI row from `Engine.fleet.stats`."""
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
        Kpi("Compensations", f"{pending:,} / {failed:,}",
            "Pending / failed: saga compensations queued by rollbacks; failed ones need "
            "manual action.",
            alert=failed > 0),
    ]


@dataclass(frozen=True)
class LabelAgreement:
    """How the detector's flags agree with the operators' "was this a loop?" labels."""

    flagged: int
    """Labelled sessions the detector flagged (at least once): what precision rests on."""
    right: int
    """Of those, labelled a loop."""
    loops: int
    """Sessions labelled a loop."""
    caught: int
    """Of those, flagged."""
    labelled: int
    """Labelled sessions found in the store."""

    @property
    def precision(self) -> float | None:
        return self.right / self.flagged if self.flagged else None

    @property
    def recall(self) -> float | None:
        return self.caught / self.loops if self.loops else None


def label_agreement(labels: Mapping[str, str], flagged: Mapping[str, bool]) -> LabelAgreement:
    """Labels (session -> ``loop`` / ``not_loop``) against whether each session was flagged;
    labelled sessions missing from `flagged` (purged) are left out."""
    known = [(labels[s], flagged[s]) for s in labels if s in flagged]
    return LabelAgreement(
        flagged=sum(f for _, f in known),
        right=sum(f and lab == "loop" for lab, f in known),
        loops=sum(lab == "loop" for lab, _ in known),
        caught=sum(f and lab == "loop" for lab, f in known),
        labelled=len(known),
    )


def precision_kpi(agreement: LabelAgreement) -> Kpi:
    """The fleet's "Detector precision" card: the share of flagged sessions operators labelled a
    loop, and the count it rests on."""
    a = agreement
    if a.precision is None:
        return Kpi("Detector precision", "n/a",
                   "No flagged session is labelled yet: on a session's page, answer “Was this "
                   f"a loop?” ({a.labelled} labelled session{'s' if a.labelled != 1 else ''} "
                   "so far, none flagged).", note="no labels yet" if not a.labelled else
                   "none flagged")
    recall = "" if a.recall is None else (
        f" Of {a.loops} labelled a loop, {a.caught} were flagged (recall {a.recall:.2f}).")
    return Kpi("Detector precision", f"{a.precision:.2f}",
               f"Of the {a.flagged} flagged sessions operators labelled, {a.right} were labelled "
               f"a loop.{recall} Labels are set on each session's page.",
               note=f"on {a.flagged} labelled")


def loop_steps(steps_total: int, verdict: StoredVerdict | None) -> int | None:
    """Steps taken since a loop began: step numbers are never reused, so a session still
    looping has spent steps from the loop's first step (its first flag's, however often it
    was flagged since: `engine.records.loop_first_step`) to `steps_total` inside its loop."""
    start = loop_first_step(verdict)
    if not start:
        return None
    return max(int(steps_total) - int(start) + 1, 0)


def loop_began(verdict: StoredVerdict | None) -> float | None:
    """Unix time the loop's first step began (a verdict stored before loops were recorded from
    their first step: the time of that verdict)."""
    if not verdict:
        return None
    episode = verdict.get("episode")
    return float(episode["started_at"]) if episode else verdict.get("at")


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


def needs_you(looping: pd.DataFrame, compensations: Sequence[Any], now: float,
              limit: int = 6) -> list[NeedsYou]:
    """What waits for on-call, the costliest loop first: the most steps spent since the loop
    began (a loop left running for 4,000 steps before one of 3), the newest first among equals
    (the heading counts the rest); looping sessions (from the fleet frame), then failed
    compensations and pending ones older than STUCK_AFTER_S."""
    out: list[NeedsYou] = []
    if not looping.empty:
        order = [c for c in ("loop_steps", "flagged_at") if c in looping]
        rows = looping.sort_values(order, ascending=False, na_position="last", kind="stable")
        for row in rows.head(limit).itertuples():
            # a missing facet is NaN in a text column (pandas' string dtype), and NaN is truthy
            parts = [row.session, _text(row.scenario), status_label(row.status)]
            began = row._asdict().get("loop_began")
            if began is not None and pd.notna(began):
                ago = duration_text(now - began.timestamp())
                parts.append(f"loop began {began:%H:%M:%S} ({ago} ago)")
            elif pd.notna(row.flagged_at):
                flagged = row.flagged_at.timestamp()
                parts.append(f"flagged {row.flagged_at:%H:%M:%S} ({duration_text(now - flagged)}"
                             " ago)")
            if pd.notna(row.loop_steps):
                parts.append(f"{int(row.loop_steps)} steps in the loop")
            # whether an agent still works on it: a loop still growing, or one left standing
            last = row._asdict().get("last_activity")
            if last is not None and pd.notna(last):
                parts.append(f"last step {duration_text(now - last.timestamp())} ago")
            if _text(row.hold):
                parts.append(_text(row.hold))
            if bool(row._asdict().get("watch_only")):
                parts.append(WATCH_ONLY_NEEDS)
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


def _text(value: Any) -> str:
    """A table cell as text: missing (None, NaN) as ""."""
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) \
        else str(value)


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
