"""Compensations: the saga outbox, read-only (pending, running, failed; done on request).

A compensation stays pending until a process that registered its handler runs
`Engine.run_compensations`; the console runs none, so a pending one that is old names a handler no
live process has. Retrying and marking resolved need engine actions and come later.
"""

from __future__ import annotations

import time

import streamlit as st

from dashboard import access, data, views

STATUSES = ["needs attention", "pending", "running", "failed", "done", "all"]
ATTENTION = ("failed", "pending", "running")

user = access.require_user()
url = data.store_url()

st.title("Compensations")
f = st.columns([1, 1, 3])
status = f[0].selectbox("Status", STATUSES, key="comp-status", bind="query-params")
limit = f[1].selectbox("Rows", [200, 1000, 5000], key="comp-limit")

now = time.time()
with data.store_errors():
    if status == "needs attention":
        comps = [c for s in ATTENTION for c in data.compensations(url, s, limit)]
    else:
        comps = data.compensations(url, None if status == "all" else status, limit)
frame = views.compensations_frame(comps, now)
stuck = frame[frame["stuck"]]
if not stuck.empty:
    handlers = ", ".join(sorted(set(stuck["handler"])))
    st.warning(
        f"{len(stuck)} pending for more than {views.duration_text(views.STUCK_AFTER_S)}: "
        f"no running process seems to have registered {views.plain(handlers)}. Start the "
        "agent runtime (or the worker) that registers it; they run on its next pass.",
        icon=":material/hourglass_top:",
    )
failed = frame[frame["status"] == "failed"]
if not failed.empty:
    st.error(
        f"{len(failed)} failed: the side effect was not undone. Undo it by hand; retrying "
        "from the console is not available yet.",
        icon=":material/error:",
    )
if frame.empty:
    st.success(
        "No compensation here."
        if status != "needs attention"
        else "No compensation is pending, running or failed."
    )
else:
    st.dataframe(
        frame,
        hide_index=True,
        column_order=[
            "state",
            "handler",
            "link",
            "step",
            "attempts",
            "age",
            "last_error",
            "created",
            "updated",
            "args",
            "id",
        ],
        column_config={
            "state": st.column_config.MultiselectColumn(
                "status",
                options=list(views.COMPENSATION_COLORS),
                color=list(views.COMPENSATION_COLORS.values()),
            ),
            "link": st.column_config.LinkColumn("session", display_text=r"session\?session=(.*)"),
            "last_error": st.column_config.TextColumn("last error", width="large"),
            "created": st.column_config.DatetimeColumn("created", format="YYYY-MM-DD HH:mm:ss"),
            "updated": st.column_config.DatetimeColumn("updated", format="YYYY-MM-DD HH:mm:ss"),
        },
    )
st.caption(
    f"{len(frame):,} compensations · read {time.strftime('%H:%M:%S')} · the outbox is "
    "run by the agent processes that registered each handler, never by the console"
)
