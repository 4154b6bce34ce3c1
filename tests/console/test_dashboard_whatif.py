"""The What-if page and the fleet's labels and watch-only sessions: view models with hand-made
records, and the pages through AppTest on a seeded store."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from streamlit.testing.v1 import AppTest
from support.fleet import AUTO_ROLLED_BACK, LOOPING, seed_fleet
from support.paths import ROOT

from dashboard.signin.access import SESSION_KEY, User
from dashboard.views import fleet as fleet_views
from dashboard.views import whatif
from engine import Engine, LoopDetector
from engine.loops.rules import RULES

APP = str(ROOT / "dashboard" / "app.py")
OPERATOR = User("olivia", "operator", "local")


# -- view models --------------------------------------------------------------------------------
def test_settings_start_at_what_the_detector_runs_now_declared_text_included():
    config = LoopDetector().config
    now = whatif.current_settings(config, {"repeat_threshold": "5", "max_steps": "none",
                                           "disabled_rules": "cycle,recurrence",
                                           "turn_similarity": "0.9", "poll_budget": "oops"})
    assert now["repeat_threshold"] == 5
    assert now["max_steps"] == 0  # no budget
    assert now["disabled_rules"] == ["cycle", "recurrence"]
    assert now["turn_similarity"] == 0.9
    assert now["poll_budget"] == config.poll_budget  # unreadable: the configuration's own
    assert whatif.current_settings(config)["max_steps"] == config.max_steps


def test_only_the_settings_changed_are_tried():
    now = whatif.current_settings(LoopDetector().config)
    chosen = {**now, "repeat_threshold": 6, "max_steps": 0,
              "disabled_rules": ["recurrence", "cycle"]}
    changes = whatif.edits(now, chosen)
    assert changes == {"repeat_threshold": 6, "max_steps": None,
                       "disabled_rules": ["cycle", "recurrence"]}
    assert whatif.edits(now, now) == {}
    assert whatif.settings_text(changes) == \
        "repeat_threshold=6, max_steps=none, disabled_rules=cycle,recurrence"
    assert whatif.settings_text({}) == "the current settings"


def test_the_stricter_conversational_switch_reads_and_shows_as_a_switch():
    config = LoopDetector().config
    now = whatif.current_settings(config)
    assert now["user_repeat_failures"] is False
    assert whatif.current_settings(config, {"user_repeat_failures": "true"})[
        "user_repeat_failures"] is True
    assert whatif.current_settings(config, {"user_repeat_failures": "maybe"})[
        "user_repeat_failures"] is False  # unreadable: the configuration's own
    changes = whatif.edits(now, {**now, "user_repeat_failures": True})
    assert changes == {"user_repeat_failures": True}
    assert whatif.settings_text(changes) == "user_repeat_failures=true"  # as --set takes it
    assert whatif.value_text("user_repeat_failures", False) == "off"


def flag(step, rule="exact_repeat"):
    return SimpleNamespace(step=step, rule=rule)


def replayed(session, before, after, label=None, change="same"):
    return SimpleNamespace(session=session, before=before, after=after, label=label,
                           change=change)


def test_results_list_changes_first_with_the_label_checked():
    infos = {"a": SimpleNamespace(meta={"tenant": "acme"}, steps=9, updated_at=300.0),
             "b": SimpleNamespace(meta={}, steps=4, updated_at=200.0),
             "c": SimpleNamespace(meta=None, steps=5, updated_at=100.0)}
    frame = whatif.results_frame([
        replayed("a", flag(4), flag(4), "loop"),
        replayed("b", flag(6), None, "not_loop", "no_longer_flagged"),
        replayed("c", flag(8), flag(5), None, "earlier"),
    ], infos)
    assert frame["session"].tolist() == ["b", "c", "a"]
    b, c, a = frame.to_dict("records")
    assert (b["change"], b["before"], b["after"], b["verdict"]) == \
        ("no longer flagged", "step 6 · exact_repeat", "not flagged", "right")
    assert c["moved"] == "-3" and c["label"] == "" and c["verdict"] == ""
    assert a["verdict"] == "right" and a["tenant"] == "acme" and a["moved"] == "+0"
    assert b["moved"] == "" and b["steps"] == "4"  # no literal None in the table
    assert not frame.isna().any().any()
    assert a["link"] == "session?session=a"


def test_the_summary_reads_before_and_after_and_says_what_it_rests_on():
    summary = SimpleNamespace(newly_flagged=2, no_longer_flagged=1, earlier=0, later=3,
                              other_rule=2, labelled=4, precision_before=0.75, precision_after=1.0,
                              recall_before=None, recall_after=0.5)
    cards = {c.label: c for c in whatif.summary_cards(summary)}
    assert cards["Newly flagged"].value == "2"
    assert cards["Precision"].value == "0.75 → 1.00"
    assert cards["Recall"].value == "n/a → 0.50"
    assert "4 sessions operators labelled" in cards["Precision"].help
    # the cards of moved sessions add up to the 8 sessions whose flag moved
    moved = ("Newly flagged", "No longer flagged", "Flagged earlier", "Flagged later",
             "Another rule")
    assert sum(int(cards[name].value) for name in moved) == 8


def test_the_scope_caption_says_when_the_replay_was_capped():
    text = whatif.scope_caption(whatif.SESSION_CAP, "last 24 hours", True, {"tenant": "acme"})
    assert "matching tenant=acme" in text and f"at most {whatif.SESSION_CAP}" in text
    assert "at most" not in whatif.scope_caption(3, "last hour", False, {})


def test_precision_rests_on_the_flagged_sessions_operators_labelled():
    agreement = fleet_views.label_agreement(
        {"a": "loop", "b": "loop", "c": "not_loop", "d": "not_loop", "gone": "loop"},
        {"a": True, "b": False, "c": True, "d": False, "x": True})
    assert (agreement.flagged, agreement.right, agreement.loops, agreement.caught,
            agreement.labelled) == (2, 1, 2, 1, 4)
    kpi = fleet_views.precision_kpi(agreement)
    assert (kpi.label, kpi.value, kpi.note) == ("Detector precision", "0.50", "on 2 labelled")
    none = fleet_views.precision_kpi(fleet_views.label_agreement({}, {}))
    assert (none.value, none.note) == ("n/a", "no labels yet")


def info(sid, meta=None):
    return SimpleNamespace(id=sid, status="looping", meta=meta or {}, last_verdict=None,
                           updated_at=1.0, steps=3, messages=1, loops=1, rollbacks=0)


def test_watch_only_sessions_are_marked_and_a_bulk_rollback_counts_them():
    frame = fleet_views.sessions_frame([info("w", {"source": "otlp", "watch_only": True}),
                                        info("r")])
    assert frame["state"].tolist() == [["looping", fleet_views.WATCH_ONLY], ["looping"]]
    note = fleet_views.watch_only_note(frame, "matching the filter")
    assert note.startswith("1 of the 2 matching the filter is watch-only")
    assert "skips them" in note
    assert fleet_views.watch_only_note(frame[frame["session"] == "r"], "selected") == ""


# -- the pages ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def store(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('whatif')}/rewind.db"
    seed_fleet(url)
    with Engine.open(url) as engine:
        engine.label(LOOPING, "loop", actor="olivia")
        engine.label(AUTO_ROLLED_BACK, "not_loop", actor="olivia", reason="a real retry")
    return url


def open_page(store, page=None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90)
    at.secrets["rewind"] = {"store": store, "users": {}}
    at.session_state[SESSION_KEY] = OPERATOR
    at.run()
    if page:  # after a first run: the page's url_path ("what-if") is not its file name
        at.switch_page(page).run()
    return at


def test_fleet_shows_the_detectors_precision_on_labelled_sessions(store):
    at = open_page(store)
    assert not at.exception
    card = next(m for m in at.metric if m.label == "Detector precision")
    # both labelled sessions were flagged; one of them was a loop
    assert card.value == "0.50"


def test_what_if_replays_the_fleet_under_other_settings_and_writes_nothing(store):
    with Engine.open(store) as engine:
        events = len(engine.events(limit=100_000))
        audit = len(engine.audit(limit=100_000))
    at = open_page(store, "screens/whatif.py")
    assert not at.exception
    assert [t.value for t in at.title] == ["What if"]
    repeat = at.number_input(key="whatif-repeat_threshold")
    assert repeat.value == 3 and "(now 3)" in repeat.label
    strict = at.toggle(key="whatif-user_repeat_failures")
    assert strict.value is False and "(now off)" in strict.label
    at.selectbox(key="whatif-window").set_value("last 7 days")
    at.multiselect(key="whatif-disabled_rules").set_value(list(RULES))
    next(b for b in at.button if b.label == "Replay").click()
    at.run()
    assert not at.exception
    cards = {m.label: m.value for m in at.metric}
    assert int(cards["Newly flagged"]) == 0
    assert int(cards["No longer flagged"]) >= 2  # every flagged session, the labelled two
    assert cards["Precision"] == "0.50 → n/a"
    assert cards["Recall"] == "1.00 → 0.00"
    table = at.dataframe[0].value
    assert {LOOPING, AUTO_ROLLED_BACK} <= set(table["session"])
    assert set(table["change"]) == {"no longer flagged"}
    missed = table[table["session"] == LOOPING].iloc[0]
    assert (missed["after"], missed["verdict"]) == ("not flagged", "missed")
    with Engine.open(store) as engine:
        assert len(engine.events(limit=100_000)) == events
        assert len(engine.audit(limit=100_000)) == audit



def test_the_fleet_marks_a_watch_only_session_and_the_bulk_rollback_counts_it(tmp_path):
    # a store of its own: the module's shared store may already sit in the console's caches
    # (another test of this module ran the page on it first), without this session
    store = f"sqlite:///{tmp_path}/watched.db"
    seed_fleet(store)
    with Engine.open(store) as engine:
        s = engine.session("otel-watched", meta={"source": "otlp", "watch_only": True,
                                                 "tenant": "acme"}, on_loop="flag")
        for _ in range(4):
            with s.step("search", {"q": "same"}) as call:
                call.fail("HTTP 500")
        assert s.info().status == "looping"
    at = AppTest.from_file(APP, default_timeout=90)
    at.secrets["rewind"] = {"store": store, "users": {}}
    at.session_state[SESSION_KEY] = OPERATOR
    at.query_params["status"] = "looping"
    at.run()
    assert not at.exception
    table = at.dataframe[0].value
    row = table[table["session"] == "otel-watched"].iloc[0]
    assert fleet_views.WATCH_ONLY in list(row["state"])
    notes = [c.value.replace("\\", "") for c in at.caption  # Markdown escapes dropped
             if "Bulk rollback" in c.value]
    assert notes and "is watch-only" in notes[0] and "skips them" in notes[0], notes


def test_needs_you_reads_a_looping_session_without_scenario_or_hold():
    # pandas' string dtype keeps a missing facet as NaN, which is truthy: it broke the band
    frame = fleet_views.sessions_frame([info("bare"), info("full", {"scenario": "refund",
                                                                    "hold": "held"})])
    items = fleet_views.needs_you(frame, [], now=10.0)
    texts = {i.session: i.text for i in items}
    assert texts["bare"].startswith("bare · looping") and "nan" not in texts["bare"]
    assert texts["full"].startswith("full · refund · looping") and "held" in texts["full"]
