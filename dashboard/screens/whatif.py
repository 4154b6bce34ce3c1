"""What if: replay the fleet's own stored steps under other detector settings, and see which
sessions would be flagged sooner, later, newly or no longer, and how the flags agree with the
operators' labels. Replay reads the store and never writes to it."""

from __future__ import annotations

import time

import streamlit as st

from dashboard import data, dialogs, views
from dashboard.signin import access
from dashboard.views import whatif
from engine import ConfigError

ALL = "All"
# The last replay asked for on this page (settings, sessions, what they cover), kept across
# reruns so sorting or filtering the result does not replay again.
RESULT = "whatif-request"
# Dropped once the fleet's settings change here: the last replay compared with the old ones.
FORGET = (RESULT, "whatif-declare-reason", "whatif-defaults-reason")

user = access.require_user()
url = data.store_url()

st.title("What if")
st.caption(
    "Try other loop-detector settings on the fleet's own history: the stored steps of each "
    "session (abandoned branches included, in the order they happened) run again through the "
    "detector as it is now and with your settings. Nothing is written and no agent is affected. "
    f"A replay takes the sessions active in the window you choose, at most "
    f"{whatif.SESSION_CAP:,} (the most recently active).")

dialogs.show_flash()

with data.store_errors():
    current, declared = data.detector_now(url)
    declaration = data.detector_declaration(url)
    menus = data.facets(url)


def _by_whom(d: whatif.Declaration) -> str:
    if d.actor is None or d.at is None:
        return ""
    text = (f"by **{views.plain(d.actor)}** {views.duration_text(time.time() - d.at)} ago "
            f"({views.when(d.at):%Y-%m-%d %H:%M:%S})")
    return text + (f": {views.plain(d.reason)}" if d.reason else "")


with st.container(key="whatif-declared", border=True):
    by_whom = _by_whom(declaration)
    if declaration.settings:
        st.markdown("**Declared for the whole fleet:** "
                    + views.literal(whatif.settings_text(dict(sorted(
                        declaration.settings.items())))))
        st.caption("Every process on the store runs these over its own configuration"
                   + (f", declared {by_whom}" if by_whom else "") + ".")
        if user.can_act:
            st.button("Go back to the defaults…", key="whatif-open-defaults",
                      icon=":material/settings_backup_restore:",
                      on_click=dialogs.ask_detector, args=("defaults",))
    else:
        st.markdown("**No detector settings declared for the whole fleet:** every process runs "
                    "its own configuration (its detector factory and `[rewind.detector]`).")
        if by_whom:
            st.caption(f"Back to the defaults {by_whom}.")
if dialogs.detector_asked() == "defaults":
    dialogs.detector_defaults_dialog(user, declared, current, data.detector_defaults(url),
                                     forget=FORGET)

with st.form("whatif"):
    st.markdown("**Sessions to replay**")
    f = st.columns([1.2, 1, 1, 1, 1])
    window = f[0].selectbox("Active in the", list(whatif.WINDOWS),
                            index=list(whatif.WINDOWS).index(whatif.DEFAULT_WINDOW),
                            key="whatif-window")
    status = f[1].selectbox("Status", [ALL, *views.STATUS_ORDER], key="whatif-status",
                            format_func=lambda v: v if v == ALL else views.status_label(v))
    tenant = f[2].selectbox("Tenant", [ALL, *menus["tenant"]], key="whatif-tenant")
    scenario = f[3].selectbox("Scenario", [ALL, *menus["scenario"]], key="whatif-scenario")
    prompt = f[4].selectbox("Prompt version", [ALL, *menus["prompt_version"]],
                            key="whatif-prompt")
    st.markdown("**Detector settings** (each starts at the value the detector runs now"
                + (", as declared in the store" if declared else "") + ")")
    chosen: dict = {}
    changed = dialogs.detector_changes()
    # A row that wraps, not columns: on a phone columns stack one after the other, and the
    # settings would read in another order than on a wide screen.
    with st.container(horizontal=True, key="whatif-settings"):
        for s in whatif.SETTINGS:
            now_value = current[s.field]
            shown = ((", ".join(now_value) or "none") if s.kind == "rules"
                     else whatif.value_text(s.field, now_value))
            label = f"{s.label} (now {shown})" if s.kind != "rules" else s.label
            help_text = f"{s.help} Setting: {s.field}; now {shown}."
            # A new key once this operator changed the fleet's settings: the browser keeps a
            # widget's value across runs, dropping it from the session state does not reset it,
            # and the inputs must start again at the values the detector now runs.
            key = f"whatif-{s.field}" + (f"-{changed}" if changed else "")
            if s.kind == "rules":
                chosen[s.field] = st.multiselect(label, whatif.RULE_IDS, default=now_value,
                                                 key=key, help=help_text, width=620)
            elif s.kind == "bool":
                chosen[s.field] = st.toggle(label, value=bool(now_value), key=key,
                                            help=help_text)
            elif s.kind == "float":
                chosen[s.field] = st.number_input(label, min_value=0.0, max_value=1.0,
                                                  value=float(now_value), step=0.05, key=key,
                                                  help=help_text, width=300)
            else:
                chosen[s.field] = st.number_input(label, min_value=int(s.low),
                                                  value=int(now_value), step=1, key=key,
                                                  help=help_text, width=300)
    run = st.form_submit_button("Replay", type="primary", icon=":material/replay:")


def _pick(value):
    return None if value == ALL else value


if run:
    where = {k: str(v) for k, v in (("status", _pick(status)), ("tenant", _pick(tenant)),
                                    ("scenario", _pick(scenario)),
                                    ("prompt_version", _pick(prompt))) if v is not None}
    with data.store_errors():
        scope = data.replay_scope(url, whatif.WINDOWS[window], _pick(status), _pick(tenant),
                                  _pick(scenario), _pick(prompt))
    capped = len(scope) > whatif.SESSION_CAP
    scope = scope[: whatif.SESSION_CAP]
    st.session_state[RESULT] = {
        "changes": whatif.edits(current, chosen), "declared": dict(declared),
        "ids": tuple(i.id for i in scope), "infos": {i.id: i for i in scope},
        "caption": whatif.scope_caption(len(scope), window, capped, where),
    }

request = st.session_state.get(RESULT)
if request is None:
    st.info("Choose the sessions and the settings to try, then Replay.",
            icon=":material/science:")
    st.stop()

changes = request["changes"]
st.subheader("Result")
st.caption(f"With {views.plain(whatif.settings_text(changes))} · "
           f"{views.plain(request['caption'])}")
if not request["ids"]:
    st.info("No session matches: widen the window or the filters.", icon=":material/search_off:")
    st.stop()

try:
    with data.store_errors(), st.spinner(f"Replaying {len(request['ids']):,} sessions…"):
        result = data.replay(url, {**request["declared"], **changes}, request["ids"])
except (ConfigError, ValueError, TypeError) as exc:
    st.error(f"The detector refuses these settings: {views.plain(exc)}")
    st.stop()

with st.container(horizontal=True, key="whatif-summary"):
    for card in whatif.summary_cards(result.summary):
        with st.container(width="stretch"):
            st.metric(card.label, card.value, help=card.help, border=True)
if user.can_act and changes:
    st.button("Use these settings for the whole fleet…", key="whatif-open-declare",
              icon=":material/publish:", on_click=dialogs.ask_detector, args=("declare",),
              help="Declare them in the store: every process on it runs them from then on.")
elif changes:
    st.caption("You are signed in as a viewer: you can try settings, not declare them for the "
               "fleet.")
if dialogs.detector_asked() == "declare":
    dialogs.declare_detector_dialog(user, changes, request["declared"], current, forget=FORGET)
if not result.summary.labelled:
    st.caption("No session in this replay carries an operator label, so precision and recall "
               "cannot be measured: label sessions on their page (“Was this a loop?”).")

frame = whatif.results_frame(result.sessions, request["infos"])
changed = frame[frame["change"] != whatif.CHANGES["same"]]
only_changed = st.toggle(f"Only sessions whose flag moved ({len(changed):,} of {len(frame):,})",
                         value=True, key="whatif-only-changed")
shown = changed if only_changed else frame
if shown.empty:
    st.info("These settings flag every replayed session exactly as now.",
            icon=":material/check:")
else:
    st.dataframe(
        shown, hide_index=True,
        column_order=["link", "change", "before", "after", "moved", "label", "verdict", "tenant",
                      "scenario", "prompt_version", "steps"],
        column_config={
            "link": st.column_config.LinkColumn("session",
                                                display_text=r"session\?session=(.*)"),
            "change": "what changes",
            "before": st.column_config.TextColumn("first flag now", width="medium"),
            "after": st.column_config.TextColumn("first flag with these settings",
                                                 width="medium"),
            "moved": st.column_config.TextColumn(
                "steps moved", help="How many steps later (+) or earlier (-) the first flag "
                "comes; empty when one side has no flag."),
            "label": "operator label",
            "verdict": st.column_config.TextColumn(
                "against the label", help="right, false flag or missed, with these settings"),
            "prompt_version": "prompt",
        })
st.caption(f"{len(result.sessions):,} sessions replayed · nothing was written")
