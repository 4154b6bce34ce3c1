"""Audit: operator and engine actions (rollbacks, bulk rollbacks, notices, quarantines, …),
filterable, exportable as CSV."""

from __future__ import annotations

import time

import streamlit as st

from dashboard import data, views
from dashboard.signin import access

PERIODS = {"last hour": 3600, "last 24 hours": 86400, "last 7 days": 7 * 86400,
           "last 30 days": 30 * 86400, "all time": None}
ACTIONS = ["All", *views.AUDIT_ACTIONS]

user = access.require_user()
url = data.store_url()

st.title("Audit")
f = st.columns([1, 1, 1.4, 1.2, 1, 0.8])
action = f[0].selectbox("Action", ACTIONS, key="action", bind="query-params")
actor = f[1].text_input("Actor", key="actor", placeholder="e.g. alice, rewind").strip()
session = f[2].text_input("Session", key="audit-session", placeholder="session id",
                          bind="query-params")  # exact, never trimmed
batch = f[3].text_input("Batch", key="batch", placeholder="bulk rollback id",
                        bind="query-params").strip()
period = f[4].selectbox("Period", list(PERIODS), index=2, key="period")
limit = f[5].selectbox("Rows", [200, 1000, 10000], index=1, key="limit")

span = PERIODS[period]
with data.store_errors():
    frame = data.audit(url, session=session or None, actor=actor or None,
                       action=None if action == "All" else action,
                       since=None if span is None else time.time() - span, limit=limit)

if batch:  # the batch's summary and each of its rollbacks carry the id
    frame = frame[frame["batch"] == batch]
shown = frame.copy()
shown["link"] = [views.session_link(s) if isinstance(s, str) and s else None
                 for s in shown["session"]]
for column in ("snapshot", "reason"):
    shown[column] = shown[column].astype(object).where(shown[column].notna(), "")
st.dataframe(shown, hide_index=True, placeholder="—",  # fleet-wide events have no session
             # the reason before the long summary: on a 1440 px screen it was off to the right
             column_order=["time", "actor", "action", "link", "reason", "summary", "batch",
                           "snapshot", "detail", "id"],
             column_config={
                 "time": st.column_config.DatetimeColumn("time", format="YYYY-MM-DD HH:mm:ss"),
                 "link": st.column_config.LinkColumn("session",
                                                     display_text=r"session\?session=(.*)"),
                 "reason": st.column_config.TextColumn("reason", width="medium"),
                 "summary": st.column_config.TextColumn("what happened", width="large"),
                 "detail": st.column_config.TextColumn("detail", width="medium"),
             })
st.caption(f"{len(frame):,} events" + (f" (the newest {limit:,})" if len(frame) >= limit else ""))
st.download_button("Export CSV", views.audit_csv(frame), mime="text/csv",
                   file_name=f"rewind-audit-{time.strftime('%Y%m%d-%H%M%S')}.csv",
                   key="export", on_click="ignore")
