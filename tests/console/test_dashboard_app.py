"""AppTest smoke tests: every page renders without an exception and shows its key elements, for
each way of signing in. Dialog flows and fragments run in the browser tests (tests/e2e)."""

from __future__ import annotations

import datetime as dt
import json
import time

import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest
from support.fleet import AUTO_ROLLED_BACK, LOOPING, seed_fleet, seed_looping
from support.paths import ROOT

from dashboard import views
from dashboard.signin.access import SESSION_KEY, User
from dashboard.signin.passwords import hash_password
from engine import Engine

APP = str(ROOT / "dashboard" / "app.py")
OPERATOR = User("olivia", "operator", "local")
VIEWER = User("victor", "viewer", "local")
HASHES = {"olivia": hash_password("olivia-pw"), "victor": hash_password("victor-pw")}
TABS = ["Timeline", "Why flagged", "Snapshot tree", "Memory", "Token budget", "Messages"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('apptest')}/rewind.db"
    seed_fleet(url)
    return url


def local_secrets(store, freeze=False):
    now = dt.datetime.now(dt.UTC)
    rewind = {"store": store, "users": {
        "olivia": {"role": "operator", "password_hash": HASHES["olivia"]},
        "victor": {"role": "viewer", "password_hash": HASHES["victor"]}}}
    if freeze:  # True, or the keys to set in [rewind.freeze]
        rewind["freeze"] = {"start": (now - dt.timedelta(hours=1)).isoformat(),
                            "end": (now + dt.timedelta(days=1)).isoformat(),
                            "name": "Holiday change freeze",
                            **(freeze if isinstance(freeze, dict) else {})}
    return {"rewind": rewind}


def app(store, user=OPERATOR, page=None, query=None, **secrets_options) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    for key, value in local_secrets(store, **secrets_options).items():
        at.secrets[key] = value
    if user is not None:
        at.session_state[SESSION_KEY] = user
    if page:
        at.switch_page(page)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    return at.run()


def texts(elements) -> str:
    return "\n".join(str(e.value) for e in elements)


def labels(widgets) -> list[str]:
    return [w.label for w in widgets]


# -- signing in ---------------------------------------------------------------------------------
def test_sign_in_form_guards_every_page(store):
    for page in (None, "screens/session/session.py", "screens/audit.py"):
        at = app(store, user=None, page=page, query={"session": LOOPING})
        assert not at.exception
        assert labels(at.text_input) == ["Username", "Password"]
        assert "Sign in" in labels(at.button)
        assert [t.value for t in at.title] == ["Rewind console"]
        assert not at.metric and not at.dataframe


def test_signing_in_with_the_right_password_opens_the_fleet(store):
    at = app(store, user=None)
    at.text_input[0].input("victor")
    at.text_input[1].input("wrong")
    at.button[0].click().run()
    assert "Unknown username or wrong password." in texts(at.error)
    at.text_input[1].input("victor-pw")
    at.button[0].click().run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Fleet"]
    assert at.session_state[SESSION_KEY] == VIEWER
    assert "victor" in texts(at.sidebar.markdown)


# -- fleet ---------------------------------------------------------------------------------------
def test_fleet_shows_kpis_loop_charts_table_and_the_freeze(store):
    at = app(store, freeze=True)
    assert not at.exception
    assert labels(at.metric) == ["Active sessions", "Looping now", "Rollbacks, last hour",
                                 "Compensations", "Detector precision"]
    assert at.metric[1].value == "1"
    # Vega-Lite on this first screen: the browser never loads plotly's 4.7 MB for it
    assert len(at.get("vega_lite_chart")) == 2 and not at.get("plotly_chart")
    table = at.dataframe[0].value
    assert LOOPING in set(table["session"]) and len(table) == 26
    assert "Holiday change freeze" in texts(at.warning)
    assert labels(at.toggle)[0].startswith("Live")
    assert "matching sessions" in texts(at.caption)


def test_the_banner_says_whether_agents_follow_the_freeze(tmp_path):
    """A freeze configured for the console alone is not followed by agents: the banner says
    so; one declared in the store (every process follows it) needs no such note."""
    store = f"sqlite:///{tmp_path}/freeze.db"
    note = "Configured for this console only"
    with Engine.open(store) as engine:
        engine.session("s").append_message("user", "hi")
    assert note in texts(app(store, freeze={"on_loop": "flag"}).warning)
    with Engine.open(store) as engine:
        now = time.time()
        engine.fleet.declare_freeze(now - 60, now + 3600, name="Declared freeze", on_loop="flag",
                              actor="alice", reason="holiday")
    from dashboard import data

    data.engine_for(store)._runtime.forget_declared_freeze()  # the console's: within a second
    at = app(store)  # nothing configured for the console
    assert not at.exception
    assert "Declared freeze" in texts(at.warning) and note not in texts(at.warning)


def test_the_freeze_banner_says_what_happens_to_loops(store):
    def shown(markdown: str) -> str:  # what a reader sees of escaped Markdown, roughly
        return markdown.replace("\u2060", "").replace("\\", "")

    name = "**Ops** [freeze](https://evil.example)"
    at = app(store, freeze={"on_loop": "flag", "name": name})
    assert not at.exception
    banner = at.warning[0].value
    assert (f"**{name}** until " in shown(banner)
            and "Loops are flagged for on-call, not rolled back automatically (freeze policy)"
            in shown(banner))
    assert views.plain(name) in banner  # the name is plain text: no emphasis, no link
    assert "flagged, not rolled back by the freeze policy" in shown(texts(at.caption))
    without = app(store, freeze=True).warning[0].value
    assert "Roll looping sessions back and tell their users" in shown(without)
    wrong = app(store, freeze={"on_loop": "page"})
    assert not wrong.exception
    assert ("The freeze window setting is wrong and was ignored: [rewind.freeze] on_loop must be "
            "one of rollback, nudge_then_rollback, flag, off, not 'page'"
            in shown(texts(wrong.warning)))


def test_fleet_filters_and_sorts_through_the_engine(store):
    at = app(store)
    at.selectbox(key="status").select("looping").run()
    assert not at.exception
    assert set(at.dataframe[0].value["status"]) == {"looping"}
    at.selectbox(key="status").select("All")
    at.selectbox(key="prompt").select("v7")
    at.selectbox(key="sort").select("Loop verdicts").run()
    table = at.dataframe[0].value
    assert set(table["prompt_version"]) == {"v7"}
    assert table["loops"].is_monotonic_decreasing
    at.text_input(key="q").input("img-crop").run()
    assert at.dataframe[0].value["session"].tolist() == [AUTO_ROLLED_BACK]


def test_fleet_can_pause_its_refresh(store):
    at = app(store)
    at.toggle(key="live").set_value(False).run()
    assert not at.exception
    assert "paused" in texts(at.caption)


# -- session ------------------------------------------------------------------------------------
@pytest.mark.parametrize("tab", TABS)
def test_session_deep_link_renders_every_tab(store, tab):
    at = app(store, page="screens/session/session.py", query={"session": LOOPING, "tab": tab})
    assert not at.exception
    assert [t.value for t in at.title] == [views.plain(LOOPING)]
    assert labels(at.tabs) == TABS
    assert "Looping" in texts(at.error)
    charts = at.get("plotly_chart")
    if tab == "Timeline":
        # Vega-Lite on the page's first tab: the browser never loads plotly's 4.7 MB for it
        assert len(at.get("vega_lite_chart")) == 1 and not charts
    elif tab == "Why flagged":
        # The header's since-when/how-bad metrics come first; the tab's three follow.
        assert labels(at.metric)[-3:] == ["Rule", "Loop began at step", "Steps in evidence"]
        assert at.dataframe[0].value["tool"].eq("refund_api").all()
    elif tab == "Snapshot tree":
        assert len(charts) == 1
        assert at.selectbox(key="tree-node").value == \
            Engine.open(store).get_session(LOOPING).suggested_target()
        assert any(b.startswith("Roll back to snap-") for b in labels(at.button))
    elif tab in ("Memory", "Token budget"):
        assert "not recorded" in texts(at.info) and not charts
    elif tab == "Messages":
        html = [h for h in at.get("html") if "<script>" not in h.proto.body]  # not the frame guard
        assert html and "Please refund order A-1" in html[0].proto.body


def test_memory_and_token_budget_tabs_draw_what_the_session_recorded(store):
    at = app(store, page="screens/session/session.py", query={"session": AUTO_ROLLED_BACK,
                                                              "tab": "Memory"})
    assert not at.exception
    assert len(at.get("plotly_chart")) == 1
    assert "The user wants a square crop of img-7.png" in set(at.dataframe[0].value["memory"])
    at = app(store, page="screens/session/session.py", query={"session": AUTO_ROLLED_BACK,
                                                              "tab": "Token budget"})
    assert not at.exception
    assert len(at.get("plotly_chart")) == 2
    assert "Context of step 5" in texts(at.markdown)


def test_operator_sees_the_actions_and_the_rollback_dialog_defaults_to_the_suggestion(store):
    at = app(store, page="screens/session/session.py",
             query={"session": LOOPING, "tab": "Messages"})
    assert {"Roll back…", "Send notice…"} <= set(labels(at.button))
    at.button(key="open-rollback").click().run()
    assert not at.exception
    suggested = Engine.open(store).get_session(LOOPING).suggested_target()
    assert at.selectbox(key=f"rb-target-{LOOPING}").value == suggested
    assert "Reason (required, written to the audit log)" in labels(at.text_input)
    assert {"Roll back", "Cancel"} <= set(labels(at.button))
    assert "Taken out of the conversation" in texts(at.markdown)



def test_the_rollback_dialog_stays_open_across_runs_until_cancelled(store):
    """A run of the page the operator did not ask for (the page's first runs finishing, a
    chart's first state) keeps the dialog and its reason; Cancel closes it for good."""
    at = app(store, page="screens/session/session.py",
             query={"session": LOOPING, "tab": "Messages"})
    at.button(key="open-rollback").click().run()
    at.pills(key=f"rb-reason-{LOOPING}-preset").set_value(views.PRESET_REASONS[0]).run()
    at.run()  # not asked for through the dialog
    assert not at.exception
    assert at.pills(key=f"rb-reason-{LOOPING}-preset").value == views.PRESET_REASONS[0]
    assert not at.button(key=f"rb-confirm-{LOOPING}").disabled
    at.button(key=f"rb-cancel-{LOOPING}").click().run()
    assert "Roll back" not in labels(at.button)
    at.run()
    assert "Roll back" not in labels(at.button)
    assert Engine.open(store).get_session(LOOPING).info().rollbacks == 0

def test_operator_opens_the_notice_dialog_with_the_locale_template(store):
    at = app(store, page="screens/session/session.py",
             query={"session": AUTO_ROLLED_BACK, "tab": "Messages"})
    at.button(key="open-notice").click().run()
    assert not at.exception
    assert at.radio(key=f"nt-{AUTO_ROLLED_BACK}-choice").value == "Chinese template"
    assert "Send notice" in labels(at.button)


def test_viewer_finds_no_way_to_act(store):
    for tab in ("Why flagged", "Snapshot tree"):
        at = app(store, user=VIEWER, page="screens/session/session.py",
                 query={"session": LOOPING, "tab": tab})
        assert not at.exception
        buttons = labels(at.button)
        assert not [b for b in buttons if b.startswith(("Roll back", "Send notice"))], buttons
        assert "signed in as a viewer" in texts(at.caption)


def test_session_page_without_id_lists_looping_sessions(store):
    at = app(store, page="screens/session/session.py")
    assert not at.exception
    links = at.get("page_link")
    assert links and links[0].proto.query_string == f"session={LOOPING}"
    assert links[0].proto.label.startswith(views.plain(LOOPING))


def test_unknown_session_says_so(store):
    at = app(store, page="screens/session/session.py", query={"session": "no-such-session"})
    assert not at.exception
    assert "no-such-session" in texts(at.error)


# -- audit --------------------------------------------------------------------------------------
def test_audit_lists_filters_and_exports(store):
    at = app(store, page="screens/audit.py")
    assert not at.exception
    assert [t.value for t in at.title] == ["Audit"]
    table = at.dataframe[0].value
    assert {"rollback", "notice"} <= set(table["action"])
    assert labels(at.get("download_button")) == ["Export CSV"]
    at.selectbox(key="action").select("rollback").run()
    assert set(at.dataframe[0].value["action"]) == {"rollback"}
    at.text_input(key="audit-session").input(AUTO_ROLLED_BACK).run()
    assert at.dataframe[0].value["session"].tolist() == [AUTO_ROLLED_BACK]


# -- on-call ---------------------------------------------------------------------------
def page_links(at) -> list:
    return [e.proto for e in at.get("page_link")]


def test_fleet_says_what_needs_you_first(store):
    at = app(store)
    assert not at.exception
    # real links (open in a new tab, paste into the incident channel), not buttons
    band = [link for link in at.get("page_link") if "steps in the loop" in link.proto.label]
    assert band and band[0].proto.label.startswith("refund\\-42")
    assert "6 steps in the loop" in band[0].proto.label
    assert (band[0].proto.page, band[0].proto.query_string) == ("session", "session=refund-42")
    looping_kpi = at.metric[1]
    assert looping_kpi.label == "Looping now" and looping_kpi.proto.delta == "needs you"
    at.button(key="kpi-looping").click().run()  # the KPI opens the filtered table
    assert not at.exception and set(at.dataframe[0].value["status"]) == {"looping"}
    assert at.query_params.get("status") in (["looping"], "looping")
    at = app(store)
    table = at.dataframe[0].value
    assert table.iloc[0]["session"] == LOOPING  # looping first by default
    assert table.iloc[0]["loop_steps"] == "6" and "None" not in set(table["tenant"])


def test_fleet_search_sort_and_window_come_from_the_url(store):
    at = app(store, query={"q": "img-crop", "sort": "Steps", "window": "7 days"})
    assert not at.exception
    assert at.dataframe[0].value["session"].tolist() == [AUTO_ROLLED_BACK]
    assert at.selectbox(key="sort").value == "Steps"
    assert at.selectbox(key="window").value == "7 days"
    at = app(store, query={"status": "looping"})
    assert set(at.dataframe[0].value["status"]) == {"looping"}


def test_fleet_charts_fit_the_loops_by_default(store):
    at = app(store)
    assert not at.exception
    assert at.selectbox(key="window").value == views.AUTO_WINDOW
    caption = next(c.value for c in at.caption if "one bar per" in c.value)
    assert "the rest summed as" in caption
    specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    # the seeded loops spread over a day: the fitted window gives a readable number of bars
    lo, hi = json.loads(specs[0]["encoding"]["x"]["scale"]["domain"]["expr"])
    widths = {v["end"] - v["start"] for s in specs for layer in s["layer"]
              if layer["mark"]["type"] == "bar" for v in layer["data"]["values"]}
    (width,) = widths
    assert len(specs) == 2 and views.MIN_BARS <= (hi - lo) / (width / 0.85) <= views.MAX_BARS


def test_session_header_says_since_when_and_how_bad(store):
    at = app(store, page="screens/session/session.py",
             query={"session": LOOPING, "tab": "Messages"})
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Steps wasted"] == "6" and metrics["Side effects in the loop"] == "0"
    assert "Looping for" in metrics and "Loop began" in metrics
    at.button(key="open-audit").click().run()  # to the session's audit trail
    assert not at.exception and [t.value for t in at.title] == ["Audit"]
    assert at.text_input(key="audit-session").value == LOOPING
    at = app(store, page="screens/session/session.py",
             query={"session": LOOPING, "tab": "Messages"})
    html = [h.proto.body for h in at.get("html")]
    user_side = [h for h in html if "rw-chat" in h]
    assert user_side and "Please refund order A-1" in user_side[0]
    assert "HTTP 500" not in user_side[0]  # tool traffic is not what the user sees


def test_the_header_stops_saying_the_session_waits_for_on_call_once_rolled_back(tmp_path):
    """`meta["hold"]` (the demo's "waits for on-call") is true only while the session loops:
    after a rollback nobody is waited for, and the header must not say so."""
    from dashboard import data
    from engine.demo.scenarios import HOLD_LABEL

    url = f"sqlite:///{tmp_path}/hold.db"
    with Engine.open(url) as engine:
        seed_looping(engine, "held-1")
        engine.session("held-1", meta={"hold": HOLD_LABEL})  # merged into its meta
    held = views.plain(HOLD_LABEL)  # as the caption writes it
    at = app(url, page="screens/session/session.py", query={"session": "held-1"})
    assert not at.exception and "Looping" in texts(at.error)
    assert f"**{held}**" in texts(at.caption)
    with Engine.open(url) as engine:
        engine.rollback("held-1", actor="olivia", reason="refund loop", notice=False)
    data.forget_session("held-1")  # as the rollback dialog does after rolling back
    at = app(url, page="screens/session/session.py", query={"session": "held-1"})
    assert not at.exception and "Rolled back." in texts(at.warning)
    header = texts(at.caption)
    assert "globex" in header  # the meta line is still there, without the hold
    assert held not in header and HOLD_LABEL not in header


def test_roll_back_is_secondary_on_a_session_that_is_not_looping(store):
    at = app(store, page="screens/session/session.py", query={"session": AUTO_ROLLED_BACK})
    button = at.button(key="open-rollback")
    assert button.label == "Roll back anyway…" and button.proto.type == "secondary"
    at.button(key="open-rollback").click().run()
    assert not at.exception
    assert "not looping" in texts(at.warning) and "notice" in texts(at.warning)
    assert at.button(key=f"rb-confirm-{AUTO_ROLLED_BACK}").disabled  # no reason yet
    at = app(store, page="screens/session/session.py", query={"session": LOOPING})
    assert at.button(key="open-rollback").proto.type == "primary"


def test_the_rollback_confirm_waits_for_a_reason_and_offers_presets(store):
    at = app(store, page="screens/session/session.py", query={"session": LOOPING})
    at.button(key="open-rollback").click().run()
    assert at.button(key=f"rb-confirm-{LOOPING}").disabled
    presets = at.get("button_group")[0]
    assert list(presets.options) == list(views.PRESET_REASONS)
    # Typing the reason reruns the dialog as a fragment, which AppTest does not replay: the
    # browser test drives that part (tests/e2e/test_console.py).


def test_a_second_notice_needs_a_confirmation(store):
    at = app(store, page="screens/session/session.py", query={"session": AUTO_ROLLED_BACK})
    at.button(key="open-notice").click().run()
    assert not at.exception
    assert "already got a notice" in texts(at.warning) and "rewind" in texts(at.warning)
    assert at.button(key=f"nt-send-{AUTO_ROLLED_BACK}").disabled
    assert labels(at.checkbox) == ["Send another notice anyway"]  # ticking it: browser test
    at = app(store, page="screens/session/session.py", query={"session": LOOPING})
    at.button(key="open-notice").click().run()
    assert "already got a notice" not in texts(at.warning)
    assert not at.button(key=f"nt-send-{LOOPING}").disabled


def test_compensations_page_lists_stuck_and_failed_ones(tmp_path):
    from support.fleet import StepClock

    url = f"sqlite:///{tmp_path}/comp.db"
    with Engine.open(url, clock=StepClock(back_s=3600.0)) as engine:
        s = engine.session("comp-1", meta={"tenant": "acme"})
        s.append_message("user", "refund please")
        s.snapshot("start")
        with s.step("points_debit", {"user": "u"}, side_effect=True,
                    compensation=("points_refund", {"user": "u"})) as call:
            call.ok({"balance": 1})
        engine.rollback("comp-1", to=s.tree()[0].id, actor="rewind", reason="test")
    at = app(url, page="screens/compensations.py")
    assert not at.exception
    assert [t.value for t in at.title] == ["Compensations"]
    table = at.dataframe[0].value
    assert table["handler"].tolist() == ["points_refund"]
    assert table["status"].tolist() == ["pending"]
    assert "points\\_refund" in texts(at.warning) or "points_refund" in texts(at.warning)
    fleet = app(url)
    links = [link.proto for link in fleet.get("page_link")]
    assert any("compensation points" in link.label and link.page == "compensations"
               for link in links), links


def test_compensations_page_gives_operators_the_actions_and_viewers_none(tmp_path):
    url = f"sqlite:///{tmp_path}/comp.db"
    with Engine.open(url, compensation_attempts=1) as engine:
        s = engine.session("comp-2")
        start = s.snapshot("start")
        with s.step("points_debit", {"user": "u"}, side_effect=True,
                    compensation=("points_refund", {"user": "u"})) as call:
            call.ok({"balance": 1})
        engine.rollback("comp-2", to=start, actor="rewind", reason="test", notice=False)
        live = Engine(engine.store, compensation_attempts=1)
        live.compensations.register("points_refund", lambda args, key: 1 / 0)
        live.compensations.run()  # failed for good, and its process is live
    at = app(url, page="screens/compensations.py", query={"comp-status": "failed"})
    assert not at.exception
    assert at.dataframe[0].value["live"].tolist() == ["yes"]
    assert "registered" not in texts(at.warning)
    assert "Fix the cause and retry" in texts(at.error)
    assert at.button(key="comp-retry").disabled and at.button(key="comp-resolve").disabled
    at.text_input(key="comp-reason-0").input("service back").run()
    assert at.button(key="comp-retry").disabled  # still nothing selected
    viewer = app(url, user=VIEWER, page="screens/compensations.py",
                 query={"comp-status": "failed"})
    assert not viewer.exception
    assert "comp-retry" not in [b.key for b in viewer.button]
    assert "Only operators can retry" in texts(viewer.caption)


def test_audit_links_sessions_and_takes_the_session_from_the_url(store):
    at = app(store, page="screens/audit.py", query={"audit-session": AUTO_ROLLED_BACK})
    assert not at.exception
    table = at.dataframe[0].value
    assert set(table["session"]) == {AUTO_ROLLED_BACK}
    assert set(table["link"]) == {f"session?session={AUTO_ROLLED_BACK}"}


# -- demo mode and single sign-on ----------------------------------------------------------------
@pytest.fixture
def server_address():
    before = st_config.get_option("server.address")

    def set_address(value):
        st_config.set_option("server.address", value)

    yield set_address
    st_config.set_option("server.address", before)


def test_demo_mode_on_localhost_acts_as_operator_demo(store, server_address, monkeypatch):
    server_address("127.0.0.1")
    monkeypatch.setenv("REWIND_STORE", store)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert "Demo mode" in texts(at.info)
    assert "demo" in texts(at.sidebar.markdown)
    assert [t.value for t in at.title] == ["Fleet"]


def test_demo_mode_refuses_a_public_address(store, server_address, monkeypatch):
    server_address("0.0.0.0")
    monkeypatch.setenv("REWIND_STORE", store)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert "only serves localhost" in texts(at.error)
    assert not at.title and not at.metric


def oidc_app(store, user) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.secrets["auth"] = {"redirect_uri": "http://localhost:8501/oauth2callback",
                          "cookie_secret": "x" * 32, "client_id": "c", "client_secret": "s",
                          "server_metadata_url": "https://id.example.com/.well-known/openid"}
    at.secrets["rewind"] = {"store": store, "roles": {"operators": ["alice@example.com"],
                                                      "viewers": ["*@example.com"]}}
    at.user = {"email_verified": True, **user}  # roles trust only a verified e-mail
    return at.run()


def test_oidc_maps_identities_to_roles(store):
    at = oidc_app(store, {"is_logged_in": True, "email": "alice@example.com"})
    assert not at.exception and [t.value for t in at.title] == ["Fleet"]
    assert texts(at.sidebar.markdown) == f"**{views.plain('alice@example.com')}** · operator"
    at = oidc_app(store, {"is_logged_in": True, "email": "bob@example.com"})
    assert texts(at.sidebar.markdown) == f"**{views.plain('bob@example.com')}** · viewer"
    at = oidc_app(store, {"is_logged_in": True, "email": "eve@elsewhere.test"})
    assert "gives this identity no role" in texts(at.error) and not at.metric
    at = oidc_app(store, {"is_logged_in": False})
    assert labels(at.button) == ["Sign in"] and not at.metric


def test_malformed_accounts_are_reported_not_crashed(store):
    at = AppTest.from_file(APP, default_timeout=60)
    at.secrets["rewind"] = {"store": store, "users": {"olivia": {"role": "operator",
                                                                 "password_hash": "plain"}}}
    at.run()
    assert not at.exception
    assert "rewind hash-password" in texts(at.error)


def test_a_degraded_store_is_shown_in_a_banner(tmp_path):
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    fallback = f"sqlite:///{tmp_path}/fallback.db"
    url = f"redis://u:pw-secret@127.0.0.1:{port}/0?retries=0&fallback={fallback}"
    at = app(url)
    assert not at.exception
    banner = texts(at.error)
    assert "Degraded store" in banner and views.plain(f"127.0.0.1:{port}") in banner
    assert "pw-secret" not in banner


def test_a_store_from_a_newer_release_is_an_error_not_a_traceback(tmp_path):
    import sqlite3

    url = f"sqlite:///{tmp_path}/newer.db"
    Engine.open(url).close()
    with sqlite3.connect(tmp_path / "newer.db") as conn:
        conn.execute("UPDATE rewind_meta SET value = '999' WHERE key = 'schema_version'")
    at = app(url)
    assert not at.exception
    shown = texts(at.error)
    assert "newer Rewind" in shown and views.plain("upgrade agent-rewind") in shown
    assert not at.dataframe


# -- hostile text ---------------------------------------------------------------------------------
UNESCAPED_LINK = r"https?://|www\.|(?<!\\)\]\(|(?<!\\)<a[\s>]|@evil"
"""What would become a link if Streamlit's Markdown rendered it (plain() breaks each of these)."""
ANCHOR = r"<a[\s>]"
"""What plotly's labels and st.html would render as a link."""
PLAIN_TEXT_ELEMENTS = {"arrow_data_frame", "json", "text", "code", "plotly_chart", "html",
                       "vega_lite_chart"}
"""Elements that show their text as text, never as Markdown (checked separately or not at all;
Vega-Lite draws on a canvas: tests/console/test_dashboard_charts.py keeps names out of its code)."""
PLAIN_TEXT_FIELDS = {"id", "formId", "queryParamKey", "queryString", "value", "rawValue",
                     "default"}
"""Widget fields never shown, or shown as text (a text box's value, a selectbox's choice)."""
PLAIN_OPTIONS = {"selectbox", "multiselect"}
"""Widgets whose options are shown as text (a radio's options are Markdown)."""


def _elements(node):
    for child in getattr(node, "children", {}).values():
        yield child
        yield from _elements(child)


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def vega_code(value, key=""):
    """The strings of a Vega-Lite spec that Vega evaluates (expressions), not its inline data."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k not in ("values", "datasets"):
                yield from vega_code(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from vega_code(v, key)
    elif key in ("expr", "labelExpr", "signal", "calculate", "filter", "test") and \
            isinstance(value, str):
        yield value


def links_rendered(at) -> list[str]:
    """Every piece of Markdown, HTML or plotly markup on the page that would render a link."""
    import json
    import re

    from google.protobuf.json_format import MessageToDict

    found = []
    for element in _elements(at._tree):
        proto = getattr(element, "proto", None)
        if proto is None:
            continue
        kind = getattr(element, "type", "")
        if kind == "plotly_chart":
            spec = json.loads(proto.spec)
            found += [s for s in _strings(spec) if re.search(ANCHOR, s, re.IGNORECASE)]
        elif kind == "vega_lite_chart":  # text is drawn as text; code must not hold any
            found += [f"vega expression: {s}" for s in vega_code(json.loads(proto.spec))
                      if "evil" in s.lower()]
        elif kind == "html":
            found += [proto.body] if re.search(ANCHOR, proto.body, re.IGNORECASE) else []
        elif kind not in PLAIN_TEXT_ELEMENTS:
            fields = {k: v for k, v in MessageToDict(proto).items() if k not in PLAIN_TEXT_FIELDS
                      and not (k == "options" and kind in PLAIN_OPTIONS)}
            found += [f"{kind}: {s}" for s in _strings(fields)
                      if re.search(UNESCAPED_LINK, s, re.IGNORECASE)]
    return found


@pytest.fixture(scope="module")
def hostile_store(tmp_path_factory):
    from support.fleet import seed_hostile

    url = f"sqlite:///{tmp_path_factory.mktemp('hostile')}/rewind.db"
    seed_hostile(url)
    return url


def test_hostile_text_never_renders_as_a_link_on_any_page(hostile_store):
    from support.fleet import HOSTILE_LOOPING, HOSTILE_ROLLED_BACK

    pages = [app(hostile_store), app(hostile_store, page="screens/session/session.py"),
             app(hostile_store, page="screens/audit.py")]
    for sid in (HOSTILE_LOOPING, HOSTILE_ROLLED_BACK):
        for tab in TABS:
            pages.append(app(hostile_store, page="screens/session/session.py",
                             query={"session": sid, "tab": tab}))
    for at in pages:
        assert not at.exception
        assert links_rendered(at) == []
    fleet, no_id, audit, timeline = pages[:4]
    assert HOSTILE_LOOPING in set(fleet.dataframe[0].value["session"])  # the text is there
    assert no_id.get("page_link")
    assert len(audit.dataframe[0].value) >= 1
    assert len(timeline.title) == 1 and "evil" in timeline.title[0].value
    assert timeline.get("vega_lite_chart")


def test_hostile_text_never_renders_as_a_link_in_dialogs_and_flashes(hostile_store):
    from support.fleet import EVIL_TEXT, HOSTILE_LOOPING

    from dashboard.dialogs import FLASH_KEY

    query = {"session": HOSTILE_LOOPING, "tab": "Snapshot tree"}
    at = app(hostile_store, page="screens/session/session.py", query=query)
    at.button(key="open-notice").click().run()
    assert not at.exception and links_rendered(at) == []
    assert "Send notice" in labels(at.button)
    at = app(hostile_store, page="screens/session/session.py", query=query)
    oldest = at.selectbox(key="tree-node").options[-1]
    at.selectbox(key="tree-node").select(oldest).run()
    at.button(key="tree-rollback").click().run()  # the preview lists a hostile compensation
    assert not at.exception and links_rendered(at) == []
    assert "Compensations that will be queued (1):" in texts(at.markdown)
    at = app(hostile_store, page="screens/session/session.py", query=query)
    at.session_state[FLASH_KEY] = ("success", f"Rolled back to snap-1; {EVIL_TEXT}")
    at.run()
    assert "Rolled back to" in texts(at.success)
    assert links_rendered(at) == []
    at.session_state[FLASH_KEY] = ("error", EVIL_TEXT)
    at.run()
    assert "evil" in texts(at.error) and links_rendered(at) == []


def test_the_session_page_takes_the_id_exactly_as_given(hostile_store):
    with Engine.open(hostile_store) as engine:
        engine.session("sess-1", meta={"tenant": "plain-one"})
        engine.session("sess-1 ", meta={"tenant": "trailing-space"})
    at = app(hostile_store, page="screens/session/session.py", query={"session": "sess-1 "})
    assert not at.exception and not at.error
    assert "trailing\\-space" in texts(at.caption) and "plain\\-one" not in texts(at.caption)
    assert "`'sess-1 '`" in texts(at.caption)  # the exact id, quoted, so the space shows
    assert at.text_input(key="session").value == "sess-1 "
    at = app(hostile_store, page="screens/session/session.py", query={"session": "refund-42 "})
    assert not at.exception
    assert "No session `'refund-42 '`" in texts(at.error)
    at = app(hostile_store, page="screens/session/session.py", query={"session": "sess-1"})
    assert "plain\\-one" in texts(at.caption) and "`'sess-1" not in texts(at.caption)


def test_the_audit_filter_takes_the_session_id_exactly_as_given(hostile_store):
    from support.fleet import HOSTILE_ROLLED_BACK

    at = app(hostile_store, page="screens/audit.py")
    at.text_input(key="audit-session").input(HOSTILE_ROLLED_BACK).run()
    assert set(at.dataframe[0].value["session"]) == {HOSTILE_ROLLED_BACK}
    at.text_input(key="audit-session").input(HOSTILE_ROLLED_BACK + " ").run()
    assert at.dataframe[0].value.empty


def test_the_sidebar_never_shows_a_store_password(tmp_path):
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    fallback = f"sqlite:///{tmp_path}/fallback.db"
    url = (f"redis://u:pw-secret@127.0.0.1:{port}/0?retries=0&password=qs-secret"
           f"&fallback={fallback}")
    at = app(url)
    assert not at.exception
    sidebar = texts(at.sidebar.caption)
    assert sidebar.startswith("Store:")
    assert "pw-secret" not in sidebar and "qs-secret" not in sidebar
    assert "secret" not in texts(at.error)


# -- fleet controls --------------------------------------------------------------------
@pytest.fixture
def controls_store(tmp_path):
    """Its own store (these tests change it): refund-42 and three sessions looping under v9."""
    from support.fleet import seed_looping, seed_prompt_loops

    url = f"sqlite:///{tmp_path}/rewind.db"
    with Engine.open(url) as engine:
        seed_looping(engine)
    return url, seed_prompt_loops(url, "v9", 3)


def test_fleet_offers_bulk_rollback_to_operators_only(controls_store):
    url, v9 = controls_store
    at = app(url)
    assert not at.exception
    selected, matching = at.button(key="bulk-selected"), at.button(key="bulk-filter")
    assert selected.label == "Roll back 0 selected" and selected.disabled
    assert matching.disabled  # no filter yet: never the whole fleet
    at.selectbox(key="prompt").select("v9").run()
    matching = at.button(key="bulk-filter")
    assert matching.label == "Roll back all 3 matching the filter" and not matching.disabled
    assert any("at most 200 sessions at once" in c.value for c in at.caption)
    viewer = app(url, user=VIEWER, query={"prompt": "v9"})
    assert not viewer.exception
    assert not [b for b in labels(viewer.button) if b.startswith("Roll back")]


def test_operator_quarantines_and_lifts_a_tool_from_the_console(controls_store):
    url, _ = controls_store
    at = app(url, page="screens/quarantine.py")
    assert not at.exception and "No tool is quarantined" in texts(at.info)
    assert at.selectbox(key="q-tool").options[0] == "refund_api"  # called lately, listed
    at.selectbox(key="q-tool").select("refund_api")
    at.button(key="FormSubmitter:quarantine-form-Quarantine tool").click().run()
    assert "give a reason" in texts(at.error)  # refused: nothing stored
    assert Engine.open(url).quarantines() == []
    at.text_input(key="q-reason").input("HTTP 500 for everyone")
    at.selectbox(key="q-tenant").select("globex")
    at.button(key="FormSubmitter:quarantine-form-Quarantine tool").click().run()
    assert not at.exception
    (q,) = Engine.open(url).quarantines()
    assert (q.tool, q.actor, q.scope, q.until) == ("refund_api", "olivia", {"tenant": "globex"},
                                                  None)
    table = at.dataframe[0].value
    assert table[["tool", "scope", "actor", "until"]].values.tolist() == [
        ["refund_api", "tenant=globex", "olivia", "until lifted"]]

    fleet = app(url)
    (link,) = [e.proto for e in fleet.get("page_link") if "quarantine" in e.proto.label]
    assert link.label == "1 tool quarantine in force: refund\\_api"

    viewer = app(url, user=VIEWER, page="screens/quarantine.py")
    assert not viewer.exception and len(viewer.dataframe) == 1
    assert "Quarantine tool" not in labels(viewer.button) and not viewer.text_input

    at.text_input(key="lift-reason").input("fixed upstream")
    at.button(key="FormSubmitter:lift-form-Lift quarantine").click().run()
    assert not at.exception and Engine.open(url).quarantines() == []
    assert [e.action for e in Engine.open(url).audit()] == ["quarantine_lift", "quarantine"]


def typed(selectbox, text: str):
    """Type `text` into a selectbox made with `accept_new_options=True`: the browser sends the
    typed text as the value; AppTest only selects listed options, so list it on this run's copy
    of the element first (the page's own options are untouched)."""
    selectbox.options.append(text)
    return selectbox.select(text)


def test_quarantining_a_tool_no_agent_called_says_so_and_suggests_the_name(controls_store):
    """A typo quarantines nothing: the page still sets it, but says no agent called that name
    and names the tool the operator probably meant."""
    url, _ = controls_store
    at = app(url, page="screens/quarantine.py")
    assert "refund_apl" not in at.selectbox(key="q-tool").options
    typed(at.selectbox(key="q-tool"), "refund_apl")
    at.text_input(key="q-reason").input("HTTP 500 for everyone")
    at.button(key="FormSubmitter:quarantine-form-Quarantine tool").click().run()
    assert not at.exception and not at.error
    (q,) = Engine.open(url).quarantines()
    assert q.tool == "refund_apl"
    (shown,) = [s.value.replace("\\", "") for s in at.success]
    assert shown.startswith("Quarantined refund_apl for every session until lifted (q-")
    assert ("Note: no agent called 'refund_apl' in the recently active sessions; a quarantine "
            "matches tool names exactly (did you mean 'refund_api'?).") in shown

    # a tool agents did call gets no such note
    at.selectbox(key="q-tool").select("refund_api")
    at.text_input(key="q-reason").input("HTTP 500 for everyone")
    at.button(key="FormSubmitter:quarantine-form-Quarantine tool").click().run()
    (shown,) = [s.value.replace("\\", "") for s in at.success]
    assert shown.startswith("Quarantined refund_api") and "no agent called" not in shown


def test_audit_shows_a_bulk_rollback_and_filters_its_batch(controls_store):
    url, v9 = controls_store
    with Engine.open(url) as engine:
        (first, *_) = engine.rollback_many({"prompt_version": "v9"}, actor="olivia",
                                           reason="v9 loops")
        engine.quarantine("refund_api", actor="olivia", reason="HTTP 500")
    at = app(url, page="screens/audit.py", query={"batch": first.batch})
    assert not at.exception
    table = at.dataframe[0].value
    assert sorted(table["action"]) == ["notice", "notice", "notice", "rollback", "rollback",
                                       "rollback", "rollback_many", "rollback_many.start"]
    assert set(table["batch"]) == {first.batch}
    summary = table[table["action"] == "rollback_many"]["summary"].item()
    assert summary == "bulk rollback: 3 of 3 sessions rolled back (prompt_version=v9)"
    at = app(url, page="screens/audit.py", query={"action": "quarantine"})
    (summary,) = at.dataframe[0].value["summary"]
    assert summary.startswith("quarantined tool refund_api for every session until lifted (q-")
