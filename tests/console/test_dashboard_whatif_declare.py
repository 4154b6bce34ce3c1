"""The What-if page makes the settings it tried the fleet's: "Use these settings for the whole
fleet…" declares them in the store through `Engine.fleet.declare_detector` (operators, a reason,
audited), the page shows what is declared and who declared it, when and why, and "Go back to the
defaults…" takes the declaration out. View models with hand-made records, the page through
AppTest on a store of each test's own (the console's caches are per store URL)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from streamlit.testing.v1 import AppTest
from support.fleet import seed_fleet
from support.paths import ROOT

from dashboard import actions
from dashboard.signin.access import SESSION_KEY, User
from dashboard.signin.passwords import hash_password
from dashboard.views import whatif
from engine import Engine, LoopDetector, PermissionDenied

APP = str(ROOT / "dashboard" / "app.py")
OPERATOR = User("olivia", "operator", "local")
VIEWER = User("victor", "viewer", "local")
ACCOUNTS = {"olivia": {"role": "operator", "password_hash": hash_password("olivia-pw")},
            "victor": {"role": "viewer", "password_hash": hash_password("victor-pw")}}


# -- view models --------------------------------------------------------------------------------
def test_the_declare_dialog_lists_each_change_old_to_new_in_the_pages_order():
    now = whatif.current_settings(LoopDetector().config)
    rows = whatif.declare_rows(now, {"max_steps": None, "repeat_threshold": 40,
                                     "disabled_rules": ["recurrence", "cycle"]})
    assert [(r.field, r.now, r.new) for r in rows] == [
        ("repeat_threshold", str(now["repeat_threshold"]), "40"),
        ("max_steps", whatif.value_text("max_steps", now["max_steps"]), "none"),
        ("disabled_rules", "none", "cycle, recurrence"),
    ]
    assert rows[0].label == "Same call repeated (times)"
    # the declaration replaces the store's: what is declared already stays unless changed
    assert whatif.declared_after({"poll_budget": "9", "repeat_threshold": "5"},
                                 {"repeat_threshold": 40}) == {"poll_budget": "9",
                                                               "repeat_threshold": 40}


def test_going_back_lists_each_declared_setting_now_to_default():
    defaults = whatif.current_settings(LoopDetector().config)
    declared = {"repeat_threshold": "40", "per_tool": {"search": 9}}
    current = whatif.current_settings(LoopDetector().config, declared)
    rows = whatif.default_rows(current, declared, defaults)
    assert [(r.field, r.now, r.new) for r in rows] == [
        ("repeat_threshold", "40", str(defaults["repeat_threshold"])),
        ("per_tool", "{'search': 9}", whatif.OWN_CONFIG),  # one the page does not offer
    ]


def test_the_declaration_says_who_declared_it_from_the_newest_detector_audit_row():
    events = [SimpleNamespace(action="detector", actor="olivia", at=100.0, reason="calmer"),
              SimpleNamespace(action="detector", actor="alice", at=50.0, reason="older")]
    d = whatif.declaration({"repeat_threshold": 5}, events)
    assert (d.settings, d.actor, d.at, d.reason) == ({"repeat_threshold": 5}, "olivia", 100.0,
                                                    "calmer")
    assert whatif.declaration({}, []) == whatif.Declaration({})


# -- the page -----------------------------------------------------------------------------------
@pytest.fixture
def store(tmp_path):
    url = f"sqlite:///{tmp_path}/rewind.db"
    seed_fleet(url, background=4)
    return url


def open_whatif(store, user=OPERATOR) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90)
    at.secrets["rewind"] = {"store": store, "users": ACCOUNTS}
    at.session_state[SESSION_KEY] = user
    at.run()
    at.switch_page("screens/whatif.py").run()
    assert not at.exception
    return at


def replay_with(at: AppTest, **settings) -> AppTest:
    at.selectbox(key="whatif-window").set_value("last 7 days")
    for name, value in settings.items():
        at.number_input(key=f"whatif-{name}").set_value(value)
    next(b for b in at.button if b.label == "Replay").click()
    at.run()
    assert not at.exception
    return at


def repeat_input(at: AppTest):
    """The "Same call repeated" input (its key changes once the fleet's settings change)."""
    return next(n for n in at.number_input if n.label.startswith("Same call repeated"))


def texts(elements) -> str:
    return "\n".join(str(e.value) for e in elements)


def detector_rows(store) -> tuple[dict, list]:
    with Engine.open(store) as engine:
        return engine.fleet.detector_settings(), engine.audit(action="detector")


def test_the_dialog_shows_the_diff_and_refuses_to_confirm_without_a_reason(store):
    at = replay_with(open_whatif(store), repeat_threshold=40)
    at.button(key="whatif-open-declare").click().run()
    assert not at.exception
    assert "`repeat_threshold`: **3 → 40**" in texts(at.markdown)
    assert at.button(key="whatif-declare-confirm").disabled
    at.text_input(key="whatif-declare-reason").input("   ").run()
    assert at.button(key="whatif-declare-confirm").disabled  # blanks are no reason
    with Engine.open(store) as engine, pytest.raises(actions.ActionRefused, match="reason"):
        actions.declare_detector(engine, OPERATOR, {"repeat_threshold": 40}, "  ")
    assert detector_rows(store) == ({}, [])


def test_confirming_declares_the_settings_for_the_fleet_and_the_page_shows_who_and_why(store):
    at = replay_with(open_whatif(store), repeat_threshold=40)
    at.button(key="whatif-open-declare").click().run()
    at.text_input(key="whatif-declare-reason").input("fewer false flags in the freeze").run()
    at.button(key="whatif-declare-confirm").click().run()
    assert not at.exception
    declared, audit = detector_rows(store)
    assert declared == {"repeat_threshold": 40}
    assert [(e.actor, e.reason, e.detail) for e in audit] == [
        ("olivia", "fewer false flags in the freeze", {"settings": {"repeat_threshold": 40}})]
    assert "repeat\\_threshold\\=40" in texts(at.success)
    # at once, not after the cache runs out: the declaration, who made it and why
    assert "**Declared for the whole fleet:** `repeat_threshold=40`" in texts(at.markdown)
    assert "by **olivia**" in texts(at.caption) and "fewer false flags" in texts(at.caption)
    repeat = repeat_input(at)
    assert repeat.value == 40 and "(now 40)" in repeat.label
    assert "whatif-open-declare" not in [b.key for b in at.button]  # the old replay is gone


def test_going_back_to_the_defaults_takes_the_declaration_out_of_the_store(store):
    with Engine.open(store) as engine:
        engine.fleet.declare_detector({"repeat_threshold": 40, "poll_budget": 9}, actor="olivia",
                                reason="calmer")
    at = open_whatif(store)
    assert "by **olivia**" in texts(at.caption) and "calmer" in texts(at.caption)
    assert repeat_input(at).value == 40
    at.button(key="whatif-open-defaults").click().run()
    assert not at.exception
    shown = texts(at.markdown)
    assert "`repeat_threshold`: **40 → 3**" in shown and "`poll_budget`: **9 → " in shown
    assert at.button(key="whatif-defaults-confirm").disabled
    at.text_input(key="whatif-defaults-reason").input("freeze over").run()
    at.button(key="whatif-defaults-confirm").click().run()
    assert not at.exception
    declared, audit = detector_rows(store)
    assert declared == {}
    assert (audit[0].actor, audit[0].reason, audit[0].detail) == ("olivia", "freeze over",
                                                                  {"settings": {}})
    assert "No detector settings declared for the whole fleet" in texts(at.markdown)
    assert "Back to the defaults by **olivia**" in texts(at.caption)
    assert repeat_input(at).value == 3 and "(now 3)" in repeat_input(at).label
    assert "whatif-open-defaults" not in [b.key for b in at.button]


def test_a_viewer_can_try_settings_but_not_declare_them(store):
    with Engine.open(store) as engine:
        engine.fleet.declare_detector({"poll_budget": 9}, actor="olivia", reason="calmer")
    at = replay_with(open_whatif(store, VIEWER), repeat_threshold=40)
    keys = [b.key for b in at.button]
    assert "whatif-open-declare" not in keys and "whatif-open-defaults" not in keys
    assert "signed in as a viewer" in texts(at.caption)
    with Engine.open(store) as engine:
        for settings in ({"repeat_threshold": 40}, {}):
            with pytest.raises(PermissionDenied):
                actions.declare_detector(engine, VIEWER, settings, "I want it")
    declared, audit = detector_rows(store)
    assert declared == {"poll_budget": 9} and len(audit) == 1


def test_settings_declared_elsewhere_since_the_replay_are_not_overwritten(store):
    at = replay_with(open_whatif(store), repeat_threshold=40)
    with Engine.open(store) as engine:  # another operator, or the CLI, meanwhile
        engine.fleet.declare_detector({"poll_budget": 9}, actor="alice", reason="polls")
    at.button(key="whatif-open-declare").click().run()
    at.text_input(key="whatif-declare-reason").input("fewer false flags").run()
    assert "changed in the store since your replay" in texts(at.warning)
    assert at.button(key="whatif-declare-confirm").disabled
    assert detector_rows(store)[0] == {"poll_budget": 9}
