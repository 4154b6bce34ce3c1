"""Quarantine: tools the fleet may not call now. Operators set and lift quarantines here; every
agent on the store is refused the tool (`ToolQuarantined`) within about a second."""

from __future__ import annotations

import datetime as dt
import time

import streamlit as st

from dashboard import actions, data, dialogs, settings, views
from dashboard.signin import access
from engine import RewindError, unused_tool_hint

UNTIL = {"Until lifted": None, "1 hour": dt.timedelta(hours=1), "4 hours": dt.timedelta(hours=4),
         "24 hours": dt.timedelta(days=1), "3 days": dt.timedelta(days=3)}
FREEZE_END = "Until the freeze ends"
ANY = "Any"



@st.cache_data(ttl=30, show_spinner=False)
def recent_tools(store_url: str | None) -> dict[str, int]:
    """Tools called in the recently active sessions (a bounded read, kept for 30 s)."""
    return data.engine_for(store_url).fleet.recent_tools()


user = access.require_user()
url = data.store_url()

st.title("Quarantine")
st.caption("While a tool is quarantined, agents are refused it before the call runs: they see "
           "ToolQuarantined with the reason, and the refusal is recorded on their timeline. Every "
           "process on the store honours a change within about a second; expired quarantines "
           "stop applying by themselves.")
dialogs.show_flash()

with data.store_errors():
    active = data.quarantines(url)
now = time.time()
if active:
    st.subheader(f"In force ({len(active)})")
    st.dataframe(views.quarantines_frame(active, now), hide_index=True,
                 column_config={
                     "actor": "set by",
                     "since": st.column_config.DatetimeColumn("since",
                                                              format="YYYY-MM-DD HH:mm:ss"),
                     "reason": st.column_config.TextColumn("reason", width="large"),
                 })
else:
    st.info("No tool is quarantined: agents may call every tool.", icon=":material/check:")

if not user.can_act:
    st.caption("You are signed in as a viewer: you can see quarantines, not set or lift them.")
    st.stop()

try:
    freeze = settings.freeze_window(access.read_secrets())
except settings.SettingsError:
    freeze = None  # the frame already said what is wrong with it
durations = list(UNTIL)
if freeze is not None and freeze.active(now):
    durations.append(FREEZE_END)

with data.store_errors():
    menus = data.facets(url)

left, right = st.columns(2, gap="large")
with left, st.form("quarantine-form", border=True):
    st.markdown("**Quarantine a tool**")
    with data.store_errors():
        called = recent_tools(url)
    tool = st.selectbox("Tool (exactly as agents call it)", list(called), index=None,
                        key="q-tool", accept_new_options=True,
                        placeholder="Choose a tool agents called lately, or type a name",
                        help="Listed: tools called in the recently active sessions, most "
                             "called first.") or ""
    reason = st.text_input("Reason (required; agents and the audit log read it)",
                           key="q-reason")
    scope_cols = st.columns(3)
    scope = {}
    for col, (field, label) in zip(scope_cols, (("tenant", "Tenant"), ("scenario", "Scenario"),
                                                ("prompt_version", "Prompt version")),
                                   strict=True):
        value = col.selectbox(label, [ANY, *menus[field]], key=f"q-{field}",
                              accept_new_options=True,
                              help="Only sessions with this value; type one not listed yet.")
        scope[field] = None if value in (ANY, None) else value
    until_choice = st.selectbox("Ends", durations, key="q-until")
    submitted = st.form_submit_button("Quarantine tool", type="primary")

if submitted:
    until: dt.datetime | dt.timedelta | None = UNTIL.get(until_choice)
    if until_choice == FREEZE_END and freeze is not None:
        until = freeze.end
    try:
        q = actions.quarantine_tool(data.engine(), user, tool, reason, scope, until)
    except (actions.ActionRefused, RewindError, PermissionError, ValueError, TypeError) as exc:
        left.error(views.plain(exc))
    else:
        data.forget_quarantines()
        hint = unused_tool_hint(q.tool, called)
        dialogs.flash("success", f"Quarantined {q.tool} for {views.scope_text(q.scope)} "
                                 f"{views.until_text(q.until, time.time())} ({q.id})."
                                 + (f" {hint[0].upper()}{hint[1:]}." if hint else ""))
        st.rerun()

with right:
    if active:
        with st.form("lift-form", border=True):
            st.markdown("**Lift a quarantine**")
            ids = [q.id for q in active]
            labels = {q.id: views.quarantine_label(q) for q in active}
            qid = st.selectbox("Quarantine", ids, key="lift-id",
                               format_func=lambda i: labels.get(i, i))
            lift_reason = st.text_input("Reason (required, written to the audit log)",
                                        key="lift-reason")
            lift = st.form_submit_button("Lift quarantine")
        if lift:
            try:
                lifted = actions.lift_quarantine(data.engine(), user, qid, lift_reason)
            except (actions.ActionRefused, RewindError, PermissionError) as exc:
                st.error(views.plain(exc))
            else:
                data.forget_quarantines()
                dialogs.flash("success", f"Lifted the quarantine of {lifted.tool} "
                                         f"({lifted.id}); agents may call it again.")
                st.rerun()
