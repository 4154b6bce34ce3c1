"""Incident: one cause of loops (a tool, a normalised error, a rule), the sessions it holds, each
linked to its page, and the remedies for the whole group, previewed before they act."""

from __future__ import annotations

import time

import streamlit as st

from dashboard import actions, data, dialogs, views
from dashboard.signin import access
from dashboard.views import incidents as incident_views
from engine import RewindError

# (Comments, not docstrings: Streamlit's magic would print a bare string on the page.)
# The remedy previewed and waiting for the operator's confirmation: incident id, action,
# reason, and the incident's revision the preview was made on.
PENDING = "incident-pending"

user = access.require_user()
url = data.store_url()
iid = st.query_params.get("incident")

st.title("Incident")
dialogs.show_flash()

if not iid:
    with data.store_errors():
        found = data.incidents(url, None)
    if not found:
        st.info("No incident: no loops were grouped by cause yet.", icon=":material/check:")
        st.stop()
    st.caption("Loops grouped by cause: the tool, its error with ids, numbers, paths and times "
               "masked, and the rule that flagged it. Open ones first.")
    for inc in found:
        st.page_link("screens/incident.py",
                     label=views.plain(f"[{inc.status}] {incident_views.incident_line(inc)}"),
                     query_params={"incident": inc.id}, icon=":material/crisis_alert:")
    st.stop()

try:
    with data.store_errors():
        inc = data.incident(url, iid)
except KeyError:
    st.error(f"No incident {views.literal(repr(iid))} in this store.")
    st.page_link("screens/incident.py", label="All incidents", icon=":material/list:")
    st.stop()

st.markdown(f"**{views.plain(inc.tool or incident_views.NO_TOOL)}** loops · rule "
            f"{views.literal(inc.rule)} · {views.literal(inc.id)} · **{inc.status}**")
st.markdown(f"Error, ids and numbers masked: {views.literal(inc.signature or '(no error)')}")
if inc.error:
    st.caption(f"As one session saw it: {views.plain(inc.error)}")
cols = st.columns(4)
cols[0].metric("Sessions", len(inc.sessions), border=True)
cols[1].metric("Loop verdicts", inc.loops, border=True)
cols[2].metric("Steps in loops", inc.steps, border=True)
cols[3].metric("Tokens in loops", inc.tokens, border=True)
st.markdown(views.plain(
    f"By state now: {incident_views.counts_text(inc.counts)}. First seen "
    f"{views.when(inc.first_seen):%Y-%m-%d %H:%M:%S}, last seen "
    f"{views.when(inc.last_seen):%Y-%m-%d %H:%M:%S}."
    + (f" Tenants: {', '.join(inc.tenants)}." if inc.tenants else "")
    + (f" Prompt versions: {', '.join(inc.prompt_versions)}." if inc.prompt_versions else "")
    + (f" Scenarios: {', '.join(inc.scenarios)}." if inc.scenarios else "")))
if inc.status == "closed":
    st.info(views.plain(f"Closed by {inc.closed_by}: {inc.close_reason}"),
            icon=":material/check:")
for entry in inc.actions:
    st.caption(views.plain(f"{views.when(entry.get('at')):%Y-%m-%d %H:%M:%S} · "
                           f"{entry.get('actor')} took {entry.get('action')}: "
                           f"{entry.get('reason')}"))

if len(inc.sessions) > 1:
    st.caption("Blast radius: sessions in the incident over time")
    st.line_chart(incident_views.blast_radius_frame(inc), x="at", y="sessions", height=180)

st.subheader(f"Sessions ({len(inc.sessions)})")
with data.store_errors():
    infos = data.session_infos(url, inc.sessions)
st.dataframe(
    incident_views.incident_sessions_frame(inc, infos), hide_index=True, key="incident-sessions",
    column_config={
        "link": st.column_config.LinkColumn("session", display_text=r"session\?session=(.*)"),
        "prompt_version": "prompt",
        "joined": st.column_config.DatetimeColumn("joined", format="YYYY-MM-DD HH:mm:ss"),
    })
watched = incident_views.watch_only_count(infos)
if watched:
    st.info(incident_views.watch_only_text(watched, len(inc.sessions)),
            icon=":material/visibility:")
st.caption(f"updated {time.strftime('%H:%M:%S')}")

if inc.status != "open":
    st.stop()
if not user.can_act:
    st.caption("You are signed in as a viewer: you can see incidents, not act on them.")
    st.stop()

st.subheader("Remedies for the whole incident")
remedies = [a for a in incident_views.REMEDIES
            if a not in ("release", "stop") or hasattr(data.engine().fleet, a)]
if inc.tool is None:
    remedies = [a for a in remedies if a != "quarantine"]
with st.form("incident-remedy", border=True):
    action = st.selectbox("Remedy", remedies, key="incident-action",
                          format_func=lambda a: incident_views.REMEDIES[a])
    reason = st.text_input("Reason (required, written to the audit log)", key="incident-reason")
    asked = st.form_submit_button("Preview")

if asked and not reason.strip():
    st.error("Say why you take this remedy first; the reason goes to the audit log.")
    st.session_state.pop(PENDING, None)
elif asked:
    try:
        preview = actions.incident_remedy(data.engine(), user, inc.id, action, reason,
                                          dry_run=True, seen=inc.revision)
    except (RewindError, PermissionError, ValueError, KeyError) as exc:
        st.error(views.plain(exc))
        st.session_state.pop(PENDING, None)
    else:
        st.session_state[PENDING] = {"incident": inc.id, "action": action, "reason": reason,
                                     "seen": inc.revision,
                                     "text": incident_views.preview_text(preview)}

pending = st.session_state.get(PENDING)
if pending and pending["incident"] == inc.id:
    with st.container(border=True, key="incident-confirm"):
        st.warning(views.plain(pending["text"]), icon=":material/warning:")
        go, cancel = st.columns([1, 4])
        confirmed = go.button(f"Confirm: {incident_views.REMEDIES[pending['action']]}",
                              type="primary", key="incident-confirm-button")
        if cancel.button("Cancel", key="incident-cancel"):
            st.session_state.pop(PENDING, None)
            st.rerun()
    if confirmed:
        st.session_state.pop(PENDING, None)
        try:
            done = actions.incident_remedy(data.engine(), user, inc.id, pending["action"],
                                           pending["reason"], seen=pending["seen"])
        except (actions.ActionRefused, RewindError, PermissionError, ValueError,
                KeyError) as exc:
            st.error(views.plain(exc))
        else:
            data.forget_incidents()
            data.forget_session()
            kind = "error" if done.failed else "success"
            dialogs.flash(kind, incident_views.done_text(done))
            st.rerun()
