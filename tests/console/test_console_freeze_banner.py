"""The freeze banner tells the truth about a declared freeze: under "flag" a flagged session
waits for an operator, and the sessions opened exempt from the freeze (`freeze_exempt=True`,
which keep their own loop policy) are counted."""

from __future__ import annotations

import datetime as dt
import time

from streamlit.testing.v1 import AppTest
from support.paths import ROOT

from dashboard import settings
from dashboard.signin.access import SESSION_KEY, User
from dashboard.signin.passwords import hash_password
from engine import Engine, FreezeWindow

APP = str(ROOT / "dashboard" / "app.py")
NOW = time.time()


def _banner(store: str) -> str:
    at = AppTest.from_file(APP, default_timeout=60)
    at.secrets["rewind"] = {"store": store, "users": {
        "olivia": {"role": "operator", "password_hash": hash_password("pw")}}}
    at.session_state[SESSION_KEY] = User("olivia", "operator", "local")
    at.run()
    assert not at.exception
    [banner] = [w.value for w in at.warning if "no deploys" in w.value]
    return banner.replace("\\", "")


def test_the_banner_says_flagged_sessions_wait_and_counts_the_exempt_ones(tmp_path):
    store = f"sqlite:///{tmp_path}/rewind.db"
    with Engine.open(store, freeze=None) as engine:
        engine.fleet.declare_freeze(NOW - 3600, NOW + 86400, name="Holiday", on_loop="flag",
                                    actor="alice", reason="holiday")
        engine.session("ordinary")
        assert "No session is exempt from it" in _banner(store)
        engine.session("canary-1", freeze_exempt=True)
        engine.session("canary-2", freeze_exempt=True)
    from dashboard import data

    data.exempt_sessions.clear()  # the console's cache: a refresh later
    banner = _banner(store)
    assert "a flagged session waits until an operator rolls it back, releases or stops it" \
        in banner
    assert ("**2 sessions are exempt from it** (opened with `freeze_exempt=True`) and keep "
            "their own loop policy.") in banner


def test_a_freeze_without_a_policy_counts_no_exemption():
    start = dt.datetime.now(dt.UTC)
    window = FreezeWindow(start, start + dt.timedelta(hours=1), "Quiet")
    assert "exempt" not in settings.freeze_banner(window, 3)
    one = FreezeWindow(start, start + dt.timedelta(hours=1), "Holiday", "rollback")
    assert "**1 session is exempt from it**" in settings.freeze_banner(one, 1)
    assert "keeps its own loop policy" in settings.freeze_banner(one, 1)
