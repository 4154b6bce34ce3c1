"""Rewind console entrypoint: `streamlit run dashboard/app.py` (or `rewind dashboard`).

Builds the navigation, signs the user in, shows the banners every page shares (demo mode, change
freeze), then runs the selected page. Pages live in `dashboard/screens/` and stay thin.

Why `screens/` and not `pages/`: Streamlit treats a `pages/` folder beside the entrypoint as an
old-style multipage app until some session has run `st.navigation`. After a restart, the first
visitor arriving through a shared `/session?session=…` link would get that page run on its own:
without this frame (navigation, banners) and stuck in the old navigation.
"""

from __future__ import annotations

import time

import streamlit as st

from dashboard import data, settings, views
from dashboard.signin import access

st.set_page_config(page_title="Rewind console", page_icon="⏪", layout="wide")
# The tables' own "Download as CSV" and copy would hand agents' text to a spreadsheet as
# formulas (=HYPERLINK(…)); the audit page has its own export, which neutralises them.
st.set_option("client.disableDataExport", True)

# A console framed by another page is a clickjacking target: whatever the headers (which
# `dashboard/serve.py` sends), it hides itself, operator controls included, unless it is the top
# window.
FRAME_GUARD = """<script>
if (window.top !== window.self) {
  const style = document.createElement('style');
  style.textContent = '[data-testid="stApp"]{display:none !important}';
  document.head.appendChild(style);
  const note = document.createElement('p');
  note.id = 'rw-framed';
  note.textContent = 'The Rewind console does not run inside another page. Open it directly.';
  document.body.appendChild(note);
}
</script>"""
st.html(FRAME_GUARD, unsafe_allow_javascript=True)

PAGES = [
    st.Page("screens/fleet.py", title="Fleet", icon=":material/monitoring:", url_path="fleet",
            default=True),
    st.Page("screens/session/session.py", title="Session", icon=":material/timeline:",
            url_path="session"),
    st.Page("screens/incident.py", title="Incident", icon=":material/crisis_alert:",
            url_path="incident"),
    st.Page("screens/compensations.py", title="Compensations", icon=":material/build:",
            url_path="compensations"),
    st.Page("screens/quarantine.py", title="Quarantine", icon=":material/block:",
            url_path="quarantine"),
    st.Page("screens/audit.py", title="Audit", icon=":material/receipt_long:", url_path="audit"),
    st.Page("screens/whatif.py", title="What if", icon=":material/science:", url_path="what-if"),
]

user = access.current_user()
if user is None:
    # Register the pages without running one: the requested page and its query string (a shared
    # ?session=… link) stay in the address bar, and signing in reruns exactly that page.
    st.navigation(PAGES, position="hidden")
    st.stop()

page = st.navigation(PAGES)

with st.sidebar:
    st.markdown(f"**{views.plain(user.name)}** · {views.plain(user.role)}")
    if user.source != "demo" and st.button("Sign out", key="sign-out"):
        access.sign_out(user)
        st.rerun()
    with data.store_errors():
        url = data.engine().url  # redacted by the engine
    st.caption(f"Store: {views.literal(views.store_label(url))}")

if user.source == "demo":
    st.info("Demo mode: no accounts are configured, so this console only answers on localhost "
            "and you act as the operator `demo`. Configure accounts in .streamlit/secrets.toml "
            "before sharing it.", icon=":material/science:")

degraded = data.engine().config.degraded
if degraded:
    st.error(f"**Degraded store:** {views.plain(degraded)}. Sessions written now live in the "
             "fallback store; restart the console with Redis reachable to go back to it.",
             icon=":material/warning:")

try:
    configured = settings.freeze_window(access.read_secrets())
except settings.SettingsError as exc:
    st.warning(f"The freeze window setting is wrong and was ignored: {views.plain(exc)}")
    configured = None
with data.store_errors():
    freeze, freeze_source = data.fleet_freeze(configured)
if freeze is not None and freeze.active(time.time()):
    # The banner states only what is true: a freeze configured for this console alone is not
    # followed by agents that were not configured alike.
    note = "" if freeze_source == "store" else (
        " Configured for this console only: agents follow it only when it is declared in the "
        "store (`rewind freeze --start … --end …`).")
    exempt = None
    if freeze.on_loop is not None:
        with data.store_errors():
            exempt = len(data.exempt_sessions(data.store_url(), freeze.start.timestamp()))
    st.warning(settings.freeze_banner(freeze, exempt) + note, icon=":material/ac_unit:")

page.run()
