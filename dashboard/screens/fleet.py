"""Fleet: KPIs, loops over time, the sessions table. Refreshes itself unless paused."""

from __future__ import annotations

import time

import streamlit as st

from dashboard import access, charts, data, settings, views
from engine import SessionStatus

user = access.require_user()
url = data.store_url()
secrets = access.read_secrets()
interval = settings.refresh_seconds(secrets)
try:
    freeze = settings.freeze_window(secrets)
except settings.SettingsError:
    freeze = None  # the frame already said what is wrong with it

ALL = "All"

title, toggle = st.columns([4, 1], vertical_alignment="bottom")
title.title("Fleet")
live = toggle.toggle(f"Live: refresh every {interval:g} s", value=True, key="live",
                     help="Pause to read the table without it moving.")


def _pick(value: str) -> str | None:
    return None if value == ALL else value


def render_needs_you(stats: dict, looping, now: float) -> None:
    """The band on top: what waits for a person now, each a link to where to act."""
    with data.store_errors():
        comps = data.attention_compensations(url, stats)
    items = views.needs_you(looping, comps, now)
    if not items:
        st.caption("Nothing needs you now: no session is looping and no compensation is "
                   "failed or stuck.")
        return
    with st.container(border=True, key="needs-you"):
        st.markdown(f":red[**Needs you ({len(items)})**]")
        # Buttons that navigate, not <a href>: a session id is foreign text, and this band must
        # not put it into the page's markup as a URL (the table draws its links on a canvas).
        for n, item in enumerate(items):
            loop = item.page == "session"
            if st.button(views.plain(item.text), key=f"needs-you-{n}", type="tertiary",
                         icon=":material/autorenew:" if loop else ":material/build:"):
                st.switch_page("screens/session.py" if loop else "screens/compensations.py",
                               query_params=item.query)


def _filter_looping() -> None:
    st.session_state["status"] = SessionStatus.LOOPING
    st.session_state["sort"] = views.DEFAULT_SORT


def render_kpis(stats: dict) -> None:
    for col, kpi in zip(st.columns(4), views.kpis(stats), strict=True):
        if kpi.alert:
            col.metric(kpi.label, kpi.value, help=kpi.help, border=True, delta="needs you",
                       delta_color="inverse", delta_arrow="off")
            if kpi.label == "Looping now":
                # Sets the status filter (bound to ?status=), so the filtered table has a URL.
                col.button("Show the looping sessions", key="kpi-looping", type="tertiary",
                           icon=":material/filter_list:", on_click=_filter_looping)
            else:
                col.page_link("screens/compensations.py", label="Open compensations",
                              query_params={"comp-status": "failed"}, icon=":material/build:")
        else:
            col.metric(kpi.label, kpi.value, help=kpi.help, border=True)


def chart_window(label: str, episodes, now: float) -> views.ChartWindow:
    """The charts' span and bar width: fitted to the episodes ("Auto"), or the last 6 h…7 d."""
    if label in views.FIXED_WINDOWS:
        window_s = views.FIXED_WINDOWS[label]
        return views.ChartWindow(now - window_s, now, views.bucket_seconds(window_s))
    return views.fit_window(episodes["at"], now)


def render_loop_charts(now: float) -> None:
    heading, choice = st.columns([3, 1], vertical_alignment="bottom")
    heading.subheader("Loops over time")
    label = choice.selectbox("Window", views.WINDOW_CHOICES, index=0, key="window",
                             label_visibility="collapsed", bind="query-params",
                             help="Auto fits the window to the loops of the last 7 days.")
    lookback = views.FIXED_WINDOWS.get(label, views.AUTO_LOOKBACK_S)
    with data.store_errors():
        episodes = data.loop_episodes(url, lookback)
    window = chart_window(label, episodes, now)
    span = freeze.span() if freeze is not None else None
    left, right = st.columns(2)
    for col, by, name in ((left, "prompt_version", "by prompt version"),
                          (right, "scenario", "by scenario")):
        buckets = views.loop_buckets(episodes, by, window.since, window.until, window.bucket_s)
        col.plotly_chart(charts.loops_over_time(buckets, by, title=name, freeze=span,
                                                bucket_s=window.bucket_s),
                         key=f"loops-{by}", config={"displayModeBar": False})
    st.caption(f"{views.plain(window.caption())} · the top {views.TOP_SERIES} series by loops, "
               "the rest summed as “other”")
    if span is not None and freeze is not None and span[0] < window.until \
            and span[1] > window.since:
        st.caption(settings.freeze_caption(freeze))


# Everything below refreshes together. The charts come before the filters and the table, so the
# browser starts loading plotly while the (larger) table is still being read.
@st.fragment(run_every=interval if live else None)
def live_view() -> None:
    now = time.time()
    with data.store_errors():
        stats = data.fleet_stats(url)
        looping = (data.sessions(url, SessionStatus.LOOPING) if stats.get("looping", 0)
                   else views.sessions_frame([]))
    render_needs_you(stats, looping, now)
    render_kpis(stats)

    render_loop_charts(now)

    st.subheader("Sessions")
    with data.store_errors():
        menus = data.facets(url)
    f = st.columns([1, 1, 1, 1, 1.4, 1, 0.7])
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
    with data.store_errors():
        frame = data.sessions(url, _pick(status), _pick(tenant), _pick(scenario), _pick(prompt))
    shown = views.select_sessions(frame, search=search, sort=sort, limit=rows)
    picked = st.dataframe(
        views.blank_missing(shown),
        column_order=["link", "state", "flagged_at", "loop_steps", "explanation", "tenant",
                      "scenario", "prompt_version", "last_activity", "steps", "loops",
                      "rollbacks", "verdict", "hold"],
        column_config={
            "link": st.column_config.LinkColumn("session", display_text=r"session\?session=(.*)"),
            "state": st.column_config.MultiselectColumn(
                "status", options=[views.STATUS_LABELS[s] for s in views.STATUS_ORDER],
                color=[views.STATUS_COLORS[s] for s in views.STATUS_ORDER]),
            "flagged_at": st.column_config.DatetimeColumn(
                "looping since", format="HH:mm:ss",
                help="When the loop was flagged (its latest verdict), for sessions looping now."),
            "loop_steps": st.column_config.TextColumn(
                "steps in loop", help="Steps spent since the loop began; a rollback takes them "
                "off the live line."),
            "hold": st.column_config.TextColumn("policy note"),
            "prompt_version": "prompt",
            "loops": st.column_config.NumberColumn(
                "loop verdicts", help="Loop verdicts so far; under the flag policy one loop can "
                "be flagged more than once. The charts above count loops."),
            "last_activity": st.column_config.DatetimeColumn("last activity",
                                                             format="YYYY-MM-DD HH:mm:ss"),
            "explanation": st.column_config.TextColumn("why flagged", width="large"),
        },
        hide_index=True, on_select="rerun", selection_mode="single-row", key="fleet-table",
    )
    capped = len(frame) >= data.FLEET_CAP
    st.caption(
        f"{len(shown):,} of {len(frame):,}{'+' if capped else ''} matching sessions · "
        f"updated {time.strftime('%H:%M:%S', time.localtime(now))}"
        + (" · live" if live else " · paused")
        + (f" · the table reads the {data.FLEET_CAP:,} most recently active; narrow the filters"
           if capped else "")
        + " · select a row to open the session"
    )
    selected = picked.selection.rows if picked is not None else []
    if selected:
        sid = shown.iloc[selected[0]]["session"]
        st.switch_page("screens/session.py", query_params={"session": sid})


live_view()
