"""The console leads with incidents: the fleet's first screen lists open ones above "needs you",
and the incident page lists its sessions and takes a remedy for all of them (AppTest)."""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from dashboard.signin.access import SESSION_KEY, User
from dashboard.signin.passwords import hash_password
from engine import Engine, LoopWaiting

APP = str(Path(__file__).resolve().parents[2] / "dashboard" / "app.py")
OPERATOR = User("olivia", "operator", "local")
VIEWER = User("victor", "viewer", "local")


def _broken_refund(engine: Engine, sid: str, n: int) -> None:
    s = engine.session(sid, meta={"tenant": "acme", "scenario": "refund"}, on_loop="flag")
    s.append_message("user", "refund please")
    s.snapshot("start")
    with contextlib.suppress(LoopWaiting):  # under flag the agent then waits for on-call
        for _ in range(3):
            with s.step("refund_api", {"order": f"A-{n}"}) as call:
                call.fail(f"HTTP 503 for order A-{n} (request {uuid.uuid4()})")


@pytest.fixture
def store(tmp_path):
    url = f"sqlite:///{tmp_path}/rewind.db"
    with Engine.open(url) as engine:
        for n in range(5):
            _broken_refund(engine, f"refund-{n}", n)
        s = engine.session("other", on_loop="flag")
        s.snapshot("start")
        with contextlib.suppress(LoopWaiting):
            for _ in range(3):
                with s.step("image_crop", {"x": 1}) as call:
                    call.fail("invalid slice")
        [inc] = [i for i in engine.incidents() if i.tool == "refund_api"]
    return url, inc.id


def app(url: str, user=OPERATOR, page=None, query=None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.secrets["rewind"] = {"store": url, "users": {
        "olivia": {"role": "operator", "password_hash": hash_password("olivia-pw")},
        "victor": {"role": "viewer", "password_hash": hash_password("victor-pw")}}}
    at.session_state[SESSION_KEY] = user
    if page:
        at.switch_page(page)
    for key, value in (query or {}).items():
        at.query_params[key] = value
    return at.run()


def _markdown(at: AppTest) -> str:
    return "\n".join(str(m.value) for m in at.markdown)


def test_the_fleet_shows_open_incidents_above_needs_you(store):
    url, iid = store
    at = app(url)
    assert not at.exception
    assert "2 open incidents" in _markdown(at)
    links = [e for e in at.main if type(e).__name__ == "PageLink"]
    lines = [str(e.proto.label).replace("\\", "") for e in links]  # as written, unescaped
    refund = [line for line in lines if "refund_api" in line]
    assert refund and "5 sessions" in refund[0] and "5 waiting" in refund[0]
    assert "503" in refund[0]
    needs_you = next(i for i, line in enumerate(lines) if "refund-" in line)
    assert lines.index(refund[0]) < needs_you  # the incident comes first


def test_the_incident_page_lists_its_sessions_and_rolls_them_all_back(store):
    url, iid = store
    at = app(url, page="screens/incident.py", query={"incident": iid})
    assert not at.exception
    [table] = at.dataframe
    frame = table.value
    assert sorted(frame["link"]) == sorted(f"session?session=refund-{n}" for n in range(5))
    assert set(frame["state"]) == {"waiting"}
    assert [m.value for m in at.metric][:1] == ["5"]

    at.button[0].click().run()  # Preview without a reason: refused, nothing previewed
    assert "Say why" in "\n".join(str(e.value) for e in at.error) and not at.warning
    at.text_input(key="incident-reason").input("refund_api answers 503")
    at.button[0].click().run()  # Preview (the form's submit)
    assert not at.exception
    assert "Roll back 5 of the incident's 5 sessions" in "\n".join(
        str(w.value) for w in at.warning)
    with Engine.open(url) as engine:
        assert {i.id for i in engine.sessions(status="looping")} >= {f"refund-{n}"
                                                                    for n in range(5)}
    at.button(key="incident-confirm-button").click().run()
    assert not at.exception
    assert not at.error, [e.value for e in at.error]
    assert "Rolled back 5 of 5 sessions" in "\n".join(str(s.value) for s in at.success)
    with Engine.open(url) as engine:
        assert engine.incident(iid).counts == {"rolled_back": 5}
        [claim] = engine.audit(action="incident_rollback")
        assert claim.actor == "olivia" and claim.reason == "refund_api answers 503"


def test_a_viewer_sees_the_incident_but_no_remedy(store):
    url, iid = store
    at = app(url, user=VIEWER, page="screens/incident.py", query={"incident": iid})
    assert not at.exception
    assert len(at.dataframe) == 1 and not at.text_input
    assert "viewer" in "\n".join(str(c.value) for c in at.caption)


def test_an_unknown_incident_is_said_plainly(store):
    url, _iid = store
    at = app(url, page="screens/incident.py", query={"incident": "inc-nope"})
    assert not at.exception
    assert "No incident" in "\n".join(str(e.value) for e in at.error)
    at = app(url, page="screens/incident.py")
    assert not at.exception and "open" in _markdown(at) + str(
        [e.proto.label for e in at.main if type(e).__name__ == "PageLink"])
    assert dt.datetime  # (imported for symmetry with the other console tests)


def test_the_blast_radius_counts_sessions_as_they_joined():
    from types import SimpleNamespace

    from dashboard.views.incidents import blast_radius_frame, counts_text

    inc = SimpleNamespace(joined={"b": 20.0, "a": 10.0, "c": 30.0})
    frame = blast_radius_frame(inc)
    assert list(frame["sessions"]) == [1, 2, 3]
    assert [t.timestamp() for t in frame["at"]] == [10.0, 20.0, 30.0]
    assert counts_text({"looping": 12, "rolled_back": 28}) == "28 rolled back, 12 looping"


def test_the_incident_page_releases_its_waiting_sessions_with_one_remedy(store):
    """Release and stop are offered (the engine's verbs live on `engine.fleet`) and act on
    every waiting session, each decision audited."""
    url, iid = store
    at = app(url, page="screens/incident.py", query={"incident": iid})
    assert at.selectbox(key="incident-action").options == [
        "Roll back every session", "Quarantine the tool", "Release the waiting sessions",
        "Stop the waiting sessions", "Send the notice to every session", "Close the incident"]
    at.selectbox(key="incident-action").select("release")
    at.text_input(key="incident-reason").input("refund_api is back")
    at.button[0].click().run()
    assert "Release 5 of the incident's 5 sessions" in "\n".join(
        str(w.value) for w in at.warning)
    at.button(key="incident-confirm-button").click().run()
    assert not at.exception and not at.error
    assert "Released 5 of 5 sessions" in "\n".join(str(s.value) for s in at.success)
    with Engine.open(url) as engine:
        assert engine.incident(iid).counts == {"released": 5}
        assert len(engine.audit(action="release")) == 5
