"""Fleet: KPIs, loops over time, the sessions table and its bulk rollback. Refreshes itself
unless paused (and pauses while rows are selected)."""

from __future__ import annotations

import functools
import hashlib
import json
import time
import uuid
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from dashboard import actions, charts, data, dialogs, settings, views
from dashboard.signin import access
from dashboard.views import fleet as fleet_views
from dashboard.views import incidents as incident_views
from engine import SessionStatus

user = access.require_user()
url = data.store_url()
secrets = access.read_secrets()
interval = settings.refresh_seconds(secrets)
try:
    configured = settings.freeze_window(secrets)
except settings.SettingsError:
    configured = None  # the frame already said what is wrong with it
freeze = data.fleet_freeze(configured)[0]

ALL = "All"
# (Comments, not docstrings: Streamlit's magic would print a bare string on the page.)
# Set by a callback of a widget inside the live fragment when the whole page must run again
# (the refresh interval changed, a dialog must open): a fragment run cannot do either.
FULL_RERUN = "fleet-full-rerun"
# The live refresh was paused because rows got selected; clearing them resumes it.
HELD = "fleet-held-for-selection"
# The bulk rollback the operator asked for; the page opens its dialog outside the fragment.
BULK_REQUEST = "fleet-bulk-request"
# A page to open, asked for inside the live fragment: st.switch_page from a fragment that
# refreshes on a timer left the next page blank now and then (its timer fired on the new page).
OPEN_REQUEST = "fleet-open-request"

title, toggle = st.columns([4, 1], vertical_alignment="bottom")
title.title("Fleet")
live = toggle.toggle(f"Live: refresh every {interval:g} s", value=True, key="live",
                     help="Pause to read the table without it moving. Selecting rows pauses it.")
dialogs.show_flash()


def _pick(value: str) -> str | None:
    return None if value == ALL else value


def render_needs_you(looping: pd.DataFrame, comps: list, now: float) -> None:
    """The band on top: what waits for a person now, each a link to where to act."""
    items = views.needs_you(looping, comps, now)
    if not items:
        st.caption("Nothing needs you now: no session is looping and no compensation is "
                   "failed or stuck.")
        return
    with st.container(border=True, key="needs-you"):
        heading, hidden = views.needs_you_heading(items, len(looping))
        st.markdown(f":red[**{heading}**]")
        # Real links, so on-call can open one in a new tab or paste it into the incident
        # channel: Streamlit builds the href from the page and the query parameters,
        # percent-encoding the session id, so foreign text never becomes a URL of its own.
        for item in items:
            loop = item.page == "session"
            st.page_link("screens/session/session.py" if loop else "screens/compensations.py",
                         label=views.plain(item.text), query_params=item.query,
                         icon=":material/autorenew:" if loop else ":material/build:")
        if hidden:
            st.button(f"…and {hidden} more looping: show all {len(looping)} in the table",
                      key="needs-you-more", type="tertiary", icon=":material/filter_list:",
                      on_click=_filter_looping)


def render_incidents(open_incidents: list) -> None:
    """Open incidents (loops grouped by cause), one line each, above what needs you: one broken
    tool shows once, however many sessions it sends into loops. Each links to its page, where
    the remedies for the whole group are."""
    if not open_incidents:
        return
    with st.container(border=True, key="incidents"):
        n = len(open_incidents)
        st.markdown(f":red[**{n} open incident{'s' if n != 1 else ''}: loops grouped by "
                    "cause**]")
        for inc in open_incidents[:10]:
            st.page_link("screens/incident.py",
                         label=views.plain(incident_views.incident_line(inc)),
                         query_params={"incident": inc.id}, icon=":material/crisis_alert:")
        if n > 10:
            st.caption(f"…and {n - 10} more (`rewind incidents` lists them all)")


def render_quarantines(active: list) -> None:
    """One line, only while some tool is quarantined: how many, which, and a link."""
    if not active:
        return
    tools = sorted({q.tool for q in active})
    names = ", ".join(t if len(t) <= 40 else t[:39] + "…" for t in tools[:4])
    names += f" and {len(tools) - 4} more" if len(tools) > 4 else ""
    count = f"{len(active)} tool quarantine{'s' if len(active) != 1 else ''} in force"
    st.page_link("screens/quarantine.py", label=f"{count}: {views.plain(names)}",
                 icon=":material/block:")


def _hold_for_selection(table_key: str) -> None:
    """Pause the live refresh while rows are selected (a selection is by row position, and a
    refresh re-sorts the table); clearing the selection resumes it."""
    rows = st.session_state[table_key]["selection"]["rows"]
    if rows and st.session_state.get("live", True):
        st.session_state["live"] = False
        st.session_state[HELD] = True
        st.session_state[FULL_RERUN] = True
    elif not rows and st.session_state.pop(HELD, False):
        st.session_state["live"] = True
        st.session_state[FULL_RERUN] = True


def _ask_open(page: str, query: dict[str, str]) -> None:
    st.session_state[OPEN_REQUEST] = (page, query)
    st.session_state[FULL_RERUN] = True


def _ask_bulk(request: dialogs.BulkRequest) -> None:
    st.session_state[BULK_REQUEST] = request
    st.session_state[FULL_RERUN] = True


def _fleet_rows(frame: pd.DataFrame) -> dict[str, dict]:
    """session -> the fleet columns the bulk dialog shows."""
    columns = ["session", "status", "tenant", "scenario", "prompt_version"]
    return {r["session"]: r for r in frame[columns].to_dict("records")}


def _bulk_request(what: str, where: dict, frame: pd.DataFrame) -> dialogs.BulkRequest:
    return dialogs.BulkRequest(uuid.uuid4().hex[:12], what, where, _fleet_rows(frame))


def render_actions(chosen: pd.DataFrame, matching: pd.DataFrame, where: dict,
                   search: str, below, total: int | None = None) -> None:
    """Open one selected session; for operators, roll back the selected rows or everything the
    filters match (capped at actions.BULK_CAP, the count on the button). What the bulk rollback
    does goes `below` the table: above it, the table's own toolbar covered it on a phone."""
    cap = actions.BULK_CAP
    with st.container(horizontal=True, vertical_alignment="center", key="fleet-actions"):
        if len(chosen) == 1:
            sid = chosen.iloc[0]["session"]
            short = sid if len(sid) <= 40 else sid[:39] + "…"
            st.button(f"Open {views.plain(short)}", key="open-selected",
                      icon=":material/open_in_new:", on_click=_ask_open,
                      args=("screens/session/session.py", {"session": sid}))
        if not user.can_act:
            return
        n = len(chosen)
        st.button(
            f"Roll back {n} selected", key="bulk-selected", icon=":material/undo:",
            disabled=not n or n > cap, on_click=_ask_bulk,
            args=(_bulk_request(f"{views.counted(n, 'selected session')}",
                                {"session": chosen["session"].tolist()},
                                chosen),),
            help=("Select rows first (the box at the left of each row)." if not n else
                  f"At most {cap} sessions at once." if n > cap else
                  "Preview first; nothing happens before you confirm."))
        scope = dict(where)
        if search.strip():
            scope["session"] = matching["session"].tolist()[: cap + 1]
        count = len(matching) if total is None else total
        described = ", ".join(f"{k}={v}" for k, v in where.items())
        if search.strip():
            described += (", " if described else "") + f"search “{search.strip()}”"
        too_many = count > cap
        st.button(
            f"Roll back all {count:,} matching the filter", key="bulk-filter",
            icon=":material/filter_alt:", disabled=not scope or not count or too_many,
            on_click=_ask_bulk,
            args=(_bulk_request(f"All sessions matching {described}", scope,
                                matching if not too_many else matching.head(0)),),
            help=("Choose a status, tenant, scenario or prompt version (or search) first: a "
                  "bulk rollback never takes the whole fleet." if not scope else
                  f"{count:,} sessions match; at most {cap} at once: narrow the filter."
                  if too_many else "Preview first; nothing happens before you confirm."))
    notes = [fleet_views.watch_only_note(chosen, "selected"),
             fleet_views.watch_only_note(matching, "matching the filter")]
    with below:
        st.caption(f"Bulk rollback: at most {cap} sessions at once, preview first."
                   + "".join(f" {views.plain(n)}." for n in notes if n))


def _filter_looping() -> None:
    st.session_state["status"] = SessionStatus.LOOPING
    st.session_state["sort"] = views.DEFAULT_SORT


def render_kpis(stats: dict, agreement: fleet_views.LabelAgreement) -> None:
    # A row that wraps (not columns, which stack one card per line on a phone).
    with st.container(horizontal=True, key="kpis"):
        for kpi in [*views.kpis(stats), fleet_views.precision_kpi(agreement)]:
            with st.container(width="stretch"):
                render_kpi(kpi)


def render_kpi(kpi: views.Kpi) -> None:
    if kpi.note:
        st.metric(kpi.label, kpi.value, help=kpi.help, border=True, delta=kpi.note,
                  delta_color="off", delta_arrow="off")
        return
    if not kpi.alert:
        st.metric(kpi.label, kpi.value, help=kpi.help, border=True)
        return
    st.metric(kpi.label, kpi.value, help=kpi.help, border=True, delta="needs you",
              delta_color="inverse", delta_arrow="off")
    if kpi.label == "Looping now":
        # Sets the status filter (bound to ?status=), so the filtered table has a URL.
        st.button("Show the looping sessions", key="kpi-looping", type="tertiary",
                  icon=":material/filter_list:", on_click=_filter_looping)
    else:
        st.page_link("screens/compensations.py", label="Open compensations",
                     query_params={"comp-status": "failed"}, icon=":material/build:")


def chart_episodes(label: str, now: float):
    """The loop episodes and the window the charts show: the last 6 h…7 d, or ("Auto") fitted
    to the episodes of the last day, or of the last 7 days when the last day had none."""
    if label in views.FIXED_WINDOWS:
        window_s = views.FIXED_WINDOWS[label]
        with data.store_errors():
            episodes = data.loop_episodes(url, window_s)
        return episodes, views.ChartWindow(now - window_s, now, views.bucket_seconds(window_s))
    with data.store_errors():
        episodes, lookback = views.auto_episodes(lambda s: data.loop_episodes(url, s))
    return episodes, views.fit_window(episodes["at"], now, lookback_s=lookback)


_NO_ROWS = views.sessions_frame([])
CHART_SERIES = (("prompt_version", "by prompt version"), ("scenario", "by scenario"))


@dataclass(frozen=True)
class LoopCharts:
    """The loop charts of one window choice, built before anything is drawn."""

    label: str
    window: views.ChartWindow
    figures: dict


def loop_charts(label: str, now: float) -> LoopCharts:
    episodes, window = chart_episodes(label, now)
    span = freeze.span() if freeze is not None else None
    figures = {by: charts.loops_over_time(views.loop_buckets(episodes, by, window.since,
                                                             window.until, window.bucket_s),
                                          by, title=name, freeze=span, bucket_s=window.bucket_s)
               for by, name in CHART_SERIES}
    return LoopCharts(label, window, figures)


def render_loop_charts(now: float, ready: LoopCharts) -> None:
    heading, choice = st.columns([3, 1], vertical_alignment="bottom")
    heading.subheader("Loops over time")
    label = choice.selectbox("Window", views.WINDOW_CHOICES, index=0, key="window",
                             label_visibility="collapsed", bind="query-params",
                             help="Auto fits the window to the loops of the last day (of "
                                  "the last 7 days when the last day had none).")
    built = ready if label == ready.label else loop_charts(label, now)
    window = built.window
    span = freeze.span() if freeze is not None else None
    for col, (by, _) in zip(st.columns(2), CHART_SERIES, strict=True):
        # Vega-Lite, not plotly, on this first screen: see `charts.loops_over_time`.
        col.vega_lite_chart(built.figures[by], key=f"loops-{by}", width="stretch")
    st.caption(f"{views.plain(window.caption())} · the top {views.TOP_SERIES} series by loops, "
               "the rest summed as “other”")
    if span is not None and freeze is not None and span[0] < window.until \
            and span[1] > window.since:
        st.caption(settings.freeze_caption(freeze))


@dataclass(frozen=True)
class FirstScreen:
    """What the top of the page shows, read before any of it is drawn."""

    stats: dict
    looping: pd.DataFrame
    compensations: list
    quarantines: list
    agreement: fleet_views.LabelAgreement
    charts: LoopCharts


def read_first_screen(now: float) -> FirstScreen:
    """Every read of the first screen and its charts, before anything is drawn: the band, the
    KPIs, the charts and the table then arrive together instead of one by one as each query
    returns and each figure is built. The
    fleet is never listed whole: the counts are the KPIs', the band reads the looping sessions
    (the status index) only when some loop, the menus a window of the most recently active."""
    stats = data.fleet_stats(url)
    looping = data.looping(url) if stats.get("looping", 0) else _NO_ROWS
    data.facets(url)
    # the charts of the window the selector will show (its state, else the link's, else Auto)
    label = st.session_state.get("window") or st.query_params.get("window", views.AUTO_WINDOW)
    return FirstScreen(stats, looping, data.attention_compensations(url, stats),
                       data.quarantines(url), data.label_agreement(url),
                       loop_charts(label, now))


# Everything below refreshes together, top to bottom: the charts are Vega-Lite, whose chunk the
# browser loads as fast as the table's, so the first screen arrives whole.
@st.fragment(run_every=interval if live else None)
def live_view() -> None:
    now = time.time()
    with data.store_errors():
        screen = read_first_screen(now)
        open_incidents = data.incidents(url)
    render_incidents(open_incidents)
    render_needs_you(screen.looping, screen.compensations, now)
    render_quarantines(screen.quarantines)
    render_kpis(screen.stats, screen.agreement)
    render_loop_charts(now, screen.charts)

    st.subheader("Sessions")
    with data.store_errors():
        menus = data.facets(url)
    f = st.columns([1, 1, 1, 1, 1.2, 1.4, 0.7])  # wide enough for "Needs you first"
    status = f[0].selectbox("Status", [ALL, *views.STATUS_ORDER], key="status",
                            bind="query-params",
                            format_func=lambda v: v if v == ALL else views.status_label(v))
    tenant = f[1].selectbox("Tenant", [ALL, *menus["tenant"]], key="tenant",
                            bind="query-params")
    scenario = f[2].selectbox("Scenario", [ALL, *menus["scenario"]], key="scenario",
                              bind="query-params")
    prompt = f[3].selectbox("Prompt version", [ALL, *menus["prompt_version"]], key="prompt",
                            bind="query-params")
    search = f[4].text_input("Search", placeholder="session id, tenant, scenario…", key="q",
                             bind="query-params")
    sort = f[5].selectbox("Sort by", list(views.SORTS), key="sort", bind="query-params")
    rows = f[6].selectbox("Rows", [100, 500, 2000], key="rows", bind="query-params")
    where = {k: v for k, v in (("status", _pick(status)), ("tenant", _pick(tenant)),
                               ("scenario", _pick(scenario)), ("prompt_version", _pick(prompt)))
             if v is not None}
    whole = not where and not search.strip() and sort in data.TABLE_SORTS
    with data.store_errors():
        if whole:  # the first screen: read the rows shown, in an order the indexes give
            shown = data.table_page(url, sort, rows)
            frame = matching = shown.head(0)  # no filter: no bulk rollback of "all matching"
            total = screen.stats.get("sessions", len(shown))
        else:
            frame = data.sessions(url, _pick(status), _pick(tenant), _pick(scenario),
                                  _pick(prompt))
            shown = views.select_sessions(frame, search=search, sort=sort, limit=rows)
            matching = views.select_sessions(frame, search=search) if search.strip() else frame
            total = len(frame)
    # A selection is by row position: a new filter or order is a new table, with none.
    view = json.dumps([status, tenant, scenario, prompt, search, sort, rows], default=str)
    table_key = f"fleet-table-{hashlib.sha1(view.encode()).hexdigest()[:12]}"
    bar = st.container()
    picked = st.dataframe(
        views.blank_missing(shown),
        column_order=["link", "state", "loop_began", "loop_steps", "explanation", "tenant",
                      "scenario", "prompt_version", "last_activity", "steps", "loops",
                      "rollbacks", "verdict", "hold"],
        column_config={
            "link": st.column_config.LinkColumn("session", display_text=r"session\?session=(.*)"),
            "state": st.column_config.MultiselectColumn(
                "status", options=[*(views.STATUS_LABELS[s] for s in views.STATUS_ORDER),
                                   fleet_views.WATCH_ONLY],
                color=[*(views.STATUS_COLORS[s] for s in views.STATUS_ORDER), "violet"],
                help="watch-only: seen through OpenTelemetry (rewind otlp); Rewind does not "
                     "run the agent, so it can flag and label it but not roll it back."),
            "loop_began": st.column_config.DatetimeColumn(
                "looping since", format="HH:mm:ss",
                help="When the loop's first step began (not its latest flag), for sessions "
                     "looping now."),
            "loop_steps": st.column_config.TextColumn(
                "steps in loop", help="Steps spent since the loop began; a rollback takes them "
                "out of the conversation the agent continues from."),
            "hold": st.column_config.TextColumn("policy note"),
            "prompt_version": "prompt",
            "loops": st.column_config.NumberColumn(
                "times flagged", help="How often the session was flagged as looping in all; "
                "one loop left running is flagged again every few steps. The charts above count "
                "loops."),
            "last_activity": st.column_config.DatetimeColumn("last activity",
                                                             format="YYYY-MM-DD HH:mm:ss"),
            "explanation": st.column_config.TextColumn(
                "why flagged", width=fleet_views.text_width(shown["explanation"]),
                help="What the detector saw when it last flagged the session; the session's "
                     "“Why flagged” tab shows each rule's view."),
        },
        hide_index=True, on_select=functools.partial(_hold_for_selection, table_key),
        selection_mode="multi-row", key=table_key,
    )
    capped = not whole and len(frame) >= data.FLEET_CAP
    st.caption(
        f"{len(shown):,} of {total:,}{'+' if capped else ''} matching sessions · "
        f"updated {time.strftime('%H:%M:%S', time.localtime(now))}"
        + (" · live" if live else " · paused")
        + (f" · the table reads the {data.FLEET_CAP:,} most recently active; narrow the filters"
           if capped else "")
        + (" · select rows to open one or roll them back" if user.can_act
           else " · select a row to open the session")
    )
    below = st.container(key="fleet-bulk-note")
    selected = [r for r in (picked.selection.rows if picked is not None else []) if r < len(shown)]
    with bar:
        render_actions(shown.iloc[selected], matching, where, search, below,
                       total if whole else None)
    # Last, once every widget of the fragment is drawn: a rerun asked for before them leaves
    # their values unregistered in this run, and the next run can find the filters gone (the
    # whole fleet shown right after a bulk rollback of one prompt version's loops).
    if st.session_state.pop(FULL_RERUN, False):
        st.rerun(scope="app")


opening = st.session_state.pop(OPEN_REQUEST, None)
if opening is not None:
    st.switch_page(opening[0], query_params=opening[1])
live_view()

# Outside the fragment: a dialog opened inside it would vanish at its next refresh.
request = st.session_state.pop(BULK_REQUEST, None)
if request is not None and user.can_act:
    dialogs.bulk_rollback_dialog(user, request)
