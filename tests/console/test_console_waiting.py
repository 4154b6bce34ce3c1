"""The console shows a session waiting for on-call (since when) and offers the decisions besides
the rollback: Release… and Stop…, each through the engine with the operator's rights, audited."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard import actions
from dashboard.signin.access import SESSION_KEY, User
from dashboard.signin.passwords import hash_password
from dashboard.views import fleet as fleet_views
from engine import DecisionRefused, Engine, LoopWaiting, PermissionDenied

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
OPERATOR = User("olivia", "operator", "local")
VIEWER = User("victor", "viewer", "local")
HASH = hash_password("pw")


def _wait(engine: Engine, sid: str) -> None:
    s = engine.session(sid, meta={"tenant": "acme", "scenario": "receipts"}, on_loop="flag")
    s.snapshot("start")
    with pytest.raises(LoopWaiting):
        for _ in range(3):
            with s.step("image_crop", {"x": 10}) as call:
                call.fail("invalid slice")


@pytest.fixture
def store(tmp_path):
    url = f"sqlite:///{tmp_path}/rewind.db"
    with Engine.open(url, freeze=None) as engine:
        _wait(engine, "crop-1")
        _wait(engine, "crop-2")
    return url


def page(store, sid: str, user: User = OPERATOR) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90)
    at.secrets["rewind"] = {"store": store, "users": {
        "olivia": {"role": "operator", "password_hash": HASH},
        "victor": {"role": "viewer", "password_hash": HASH}}}
    at.session_state[SESSION_KEY] = user
    at.switch_page("screens/session/session.py")
    at.query_params["session"] = sid
    at.query_params["tab"] = "Timeline"
    return at.run()


def test_the_session_page_says_it_waits_and_offers_release_and_stop(store):
    at = page(store, "crop-1")
    assert not at.exception
    shown = "\n".join(str(e.value) for e in at.error)
    assert "Waiting for on-call" in shown and "releases it or stops it" in shown
    keys = [b.key for b in at.button]
    assert "open-rollback" in keys and "open-release" in keys and "open-stop" in keys
    viewer = page(store, "crop-1", VIEWER)
    assert not [b for b in viewer.button if b.key in ("open-release", "open-stop")]


def test_release_from_the_dialog_is_audited_with_the_operator(store):
    at = page(store, "crop-1")
    at.button(key="open-release").click().run()
    at.text_input(key="release-crop-1-text").input("false alarm, crop fixed").run()
    at.text_area(key="release-note-crop-1").input("use height 20").run()
    at.button(key="release-go-crop-1").click().run()
    assert not at.exception
    with Engine.open(store, create=False) as engine:
        (row,) = engine.audit(action="release")
        assert (row.actor, row.reason) == ("olivia", "false alarm, crop fixed")
        info = engine.session_info("crop-1")
        assert not info.waiting and info.last_verdict["decision"]["note"] == "use height 20"
    after = page(store, "crop-1")
    assert "open-release" not in [b.key for b in after.button]


def test_console_actions_check_rights_and_reasons(store):
    with Engine.open(store, create=False) as engine:
        with pytest.raises(actions.ActionRefused, match="say why"):
            actions.decide(engine, OPERATOR, "crop-2", "stop", " ")
        with pytest.raises(PermissionDenied):
            actions.decide(engine, VIEWER, "crop-2", "stop", "halt")
        decision = actions.decide(engine, OPERATOR, "crop-2", "stop", "halt")
        assert decision.kind == "stopped" and decision.actor == "olivia"
        with pytest.raises(DecisionRefused, match="stopped already by olivia"):
            actions.decide(engine, OPERATOR, "crop-2", "release", "go")
        assert [r.action for r in engine.audit()] == ["stop"]


def test_the_fleet_table_and_needs_you_band_say_waiting(store):
    with Engine.open(store, create=False) as engine:
        frame = fleet_views.sessions_frame(engine.sessions())
    waiting = frame[frame["session"] == "crop-1"].iloc[0]
    assert fleet_views.WAITING in waiting["state"]
    items = fleet_views.needs_you(frame[frame["status"] == "looping"], [], now=2e9)
    assert all(fleet_views.WAITING in i.text for i in items) and len(items) == 2


def test_a_watched_session_page_says_nothing_holds_it_and_offers_no_decision(tmp_path):
    """An OpenTelemetry-fed session under flag is flagged but never held: its page says so
    and offers neither Release nor Stop (nor a rollback), whoever looks."""
    from support.loop_steps import REPEAT, _record, _watched

    from dashboard.views.session import header as header_views

    url = f"sqlite:///{tmp_path}/rewind.db"
    with Engine.open(url, freeze=None) as engine:
        _record(_watched(engine, "otel-conv-1"), [REPEAT] * 4)
    at = page(url, "otel-conv-1")
    assert not at.exception
    shown = "\n".join(str(e.value) for e in at.error)
    assert header_views.WATCH_ONLY_LOOPING in shown and "Waiting for on-call" not in shown
    assert "nothing to release or stop" in "\n".join(str(i.value) for i in at.info)
    assert not [b for b in at.button
                if b.key in ("open-release", "open-stop", "open-rollback", "open-notice")]


def test_console_decisions_on_a_session_not_waiting_are_refused_and_write_nothing(store):
    with Engine.open(store, create=False) as engine:
        s = engine.session("healthy")
        with s.step("image_crop", {"x": 1}) as call:
            call.ok("cropped")
        before = engine.session_info("healthy"), len(engine.audit())
        for kind in ("release", "stop"):
            with pytest.raises(DecisionRefused, match="'healthy' is not waiting for on-call"):
                actions.decide(engine, OPERATOR, "healthy", kind, "go on")
        with pytest.raises(actions.ActionRefused, match="say why"):  # checked before the store
            actions.decide(engine, OPERATOR, "healthy", "release", "")
        assert (engine.session_info("healthy"), len(engine.audit())) == before
