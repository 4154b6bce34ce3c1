"""Sign-in sessions of local accounts: the token store (pure, with a fake clock), what a session
restores, and the console's use of them (AppTest; the cookie itself in tests/e2e/
test_sign_in_sessions.py, since AppTest sends no cookies: the test stands in for the browser by
handing `session_cookie` the token)."""

from __future__ import annotations

import re

import pytest
from streamlit.testing.v1 import AppTest
from support.fleet import seed_fleet
from support.paths import ROOT

from dashboard.signin import access
from dashboard.signin.access import (
    COOKIE_KEY,
    SESSION_COOKIE,
    SESSION_KEY,
    TOKEN_KEY,
    AccessConfigError,
    SessionTokens,
    User,
    cookie_script,
    credential_stamp,
    restored_user,
    session_limits,
)
from dashboard.signin.passwords import hash_password

APP = str(ROOT / "dashboard" / "app.py")
HASHES = {"olivia": hash_password("olivia-pw"), "victor": hash_password("victor-pw")}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def store_with_clock(**options) -> tuple[SessionTokens, Clock]:
    clock = Clock()
    return SessionTokens(idle_s=600, lifetime_s=3600, clock=clock, **options), clock


# -- the token store -----------------------------------------------------------------------------
def test_a_token_is_random_and_the_store_keeps_only_its_digest():
    tokens, _ = store_with_clock()
    first, second = tokens.issue("olivia", "stamp"), tokens.issue("olivia", "stamp")
    assert first != second
    assert re.fullmatch(r"[A-Za-z0-9_-]{43,}", first)  # 32 random bytes, URL-safe
    assert tokens.validate(first).name == "olivia"
    held = repr(tokens._sessions)
    assert first not in held and second not in held


def test_a_session_ends_after_being_idle_and_use_keeps_it_alive():
    tokens, clock = store_with_clock()
    token = tokens.issue("olivia", "stamp")
    clock.t += 599
    assert tokens.validate(token) is not None  # used: idle counts from now
    clock.t += 599
    assert tokens.validate(token) is not None
    clock.t += 600
    assert tokens.validate(token) is None
    assert len(tokens) == 0  # an expired session is forgotten
    clock.t -= 600  # and does not come back
    assert tokens.validate(token) is None


def test_a_session_ends_at_its_lifetime_however_often_it_is_used():
    tokens, clock = store_with_clock()
    token = tokens.issue("olivia", "stamp")
    for _ in range(11):
        clock.t += 300
        assert tokens.validate(token) is not None
    clock.t += 300  # 3600 s after sign-in
    assert tokens.validate(token) is None


def test_the_limits_apply_to_sessions_already_open():
    tokens, clock = store_with_clock()
    token = tokens.issue("olivia", "stamp")
    clock.t += 120
    tokens.idle_s = 60
    assert tokens.validate(token) is None


def test_revoking_ends_one_session_and_revoking_an_account_ends_all_of_it():
    tokens, _ = store_with_clock()
    a1, a2, b = (tokens.issue("olivia", "s"), tokens.issue("olivia", "s"),
                 tokens.issue("victor", "s"))
    tokens.revoke(a1)
    tokens.revoke("never-issued")
    tokens.revoke(None)
    assert tokens.validate(a1) is None and tokens.validate(a2) is not None
    assert tokens.revoke_account("olivia") == 1
    assert tokens.validate(a2) is None
    assert tokens.validate(b).name == "victor"


def test_the_store_is_bounded_and_forgets_the_least_recently_used_first():
    tokens, clock = store_with_clock(max_sessions=3)
    first, second, third = (tokens.issue(n, "s") for n in ("a", "b", "c"))
    clock.t += 1
    assert tokens.validate(first) is not None  # used: now the most recent
    fourth = tokens.issue("d", "s")
    assert len(tokens) == 3
    assert tokens.validate(second) is None
    assert all(tokens.validate(t) is not None for t in (first, third, fourth))


@pytest.mark.parametrize("cookie", [None, "", "x" * 500, 42, "forged-" + "a" * 40])
def test_anything_but_an_issued_token_is_no_session(cookie):
    tokens, _ = store_with_clock()
    tokens.issue("olivia", "s")
    assert tokens.validate(cookie) is None


def test_a_session_restores_its_account_as_the_secrets_hold_it_now():
    tokens, _ = store_with_clock()
    token = tokens.issue("olivia", credential_stamp(HASHES["olivia"]))
    entry = tokens.validate(token)
    accounts = {"olivia": {"role": "operator", "password_hash": HASHES["olivia"]}}
    assert restored_user(entry, accounts) == User("olivia", "operator", "local")
    demoted = {"olivia": {"role": "viewer", "password_hash": HASHES["olivia"]}}
    assert restored_user(entry, demoted) == User("olivia", "viewer", "local")
    assert restored_user(entry, {}) is None  # deleted
    new_password = {"olivia": {"role": "operator", "password_hash": hash_password("new")}}
    assert restored_user(entry, new_password) is None
    assert restored_user(None, accounts) is None


def test_session_limits_come_from_the_secrets_and_refuse_nonsense():
    assert session_limits({}) == (12 * 3600.0, 7 * 24 * 3600.0)
    assert session_limits({"rewind": {"session_idle_minutes": 30, "session_max_hours": 8}}) == (
        1800.0, 8 * 3600.0)
    for bad in (0, -1, "30", True):
        with pytest.raises(AccessConfigError, match="session_idle_minutes"):
            session_limits({"rewind": {"session_idle_minutes": bad}})


def test_the_cookie_script_sets_a_strict_cookie_and_deletes_it():
    script = cookie_script("tok_EN-1", 3600)
    assert f"'{SESSION_COOKIE}=' + \"tok_EN-1\"" in script
    assert "Max-Age=3600; Path=/; SameSite=Strict" in script
    assert "location.protocol === 'https:' ? '; Secure'" in script
    assert "document.currentScript.textContent = ''" in script  # not left in the page
    assert ":has(script[data-rw-cookie]){display:none}" in script  # nor a gap in the layout
    deletion = cookie_script(None, 3600)
    assert f"'{SESSION_COOKIE}=' + \"\"" in deletion and "Max-Age=0;" in deletion


# -- in the console (AppTest) --------------------------------------------------------------------
@pytest.fixture(scope="module")
def store(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('sessions')}/rewind.db"
    seed_fleet(url, background=2)
    return url


@pytest.fixture
def cookie(monkeypatch):
    """What the browser sends as the session cookie when a new Streamlit session connects."""
    sent: dict[str, str | None] = {"value": None}
    monkeypatch.setattr(access, "session_cookie", lambda: sent["value"])
    return sent


def console(store, accounts=None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    users = accounts if accounts is not None else {
        "olivia": {"role": "operator", "password_hash": HASHES["olivia"]},
        "victor": {"role": "viewer", "password_hash": HASHES["victor"]}}
    at.secrets["rewind"] = {"store": store, "users": users}
    return at


def sign_in(at: AppTest, name: str) -> AppTest:
    at.run()
    at.text_input[0].input(name)
    at.text_input[1].input(f"{name}-pw")
    at.button[0].click().run()
    assert not at.exception
    return at


def cookie_scripts(at: AppTest) -> list[str]:
    return [h.value for h in at.html if SESSION_COOKIE in h.value]


def signed_in(at: AppTest) -> str:
    return "\n".join(str(m.value) for m in at.sidebar.markdown)


def test_signing_in_issues_a_session_the_browser_gets_once(store, cookie):
    at = sign_in(console(store), "victor")
    token = at.session_state[TOKEN_KEY]
    assert access._session_tokens().validate(token).name == "victor"
    assert cookie_scripts(at) == [cookie_script(token, 7 * 24 * 3600)]
    assert "victor" not in token
    at.run()
    assert cookie_scripts(at) == []  # handed over once; the page keeps no copy
    assert COOKIE_KEY not in at.session_state


def test_a_new_streamlit_session_with_the_cookie_is_signed_in_with_the_role_now(store, cookie):
    token = sign_in(console(store), "olivia").session_state[TOKEN_KEY]
    cookie["value"] = token
    reloaded = console(store).run()  # a reload: a new Streamlit session, the cookie sent
    assert not reloaded.exception
    assert [t.value for t in reloaded.title] == ["Fleet"]
    assert "**olivia** · operator" in signed_in(reloaded)
    assert not cookie_scripts(reloaded)  # the browser has it already
    demoted = console(store, {"olivia": {"role": "viewer",
                                         "password_hash": HASHES["olivia"]}}).run()
    assert "**olivia** · viewer" in signed_in(demoted)


def test_a_forged_cookie_gets_the_sign_in_form_and_the_cookie_deleted(store, cookie):
    cookie["value"] = "forged-token-that-was-never-issued-by-this-console"
    at = console(store).run()
    assert [t.label for t in at.text_input] == ["Username", "Password"]
    assert cookie_scripts(at) == [cookie_script(None, 7 * 24 * 3600)]
    assert SESSION_KEY not in at.session_state


def test_a_deleted_account_is_signed_out_on_the_next_run_and_its_session_ends(store, cookie):
    at = sign_in(console(store), "victor")
    token = at.session_state[TOKEN_KEY]
    at.secrets["rewind"] = {"store": store, "users": {
        "olivia": {"role": "operator", "password_hash": HASHES["olivia"]}}}
    at.run()
    assert [t.label for t in at.text_input] == ["Username", "Password"]
    assert cookie_scripts(at) == [cookie_script(None, 7 * 24 * 3600)]
    assert access._session_tokens().validate(token) is None
    cookie["value"] = token  # the account is back; the ended session is not
    assert [t.label for t in console(store).run().text_input] == ["Username", "Password"]


def test_signing_out_revokes_the_session_and_deletes_the_cookie(store, cookie):
    at = sign_in(console(store), "olivia")
    token = at.session_state[TOKEN_KEY]
    at.sidebar.button(key="sign-out").click().run()
    assert [t.label for t in at.text_input] == ["Username", "Password"]
    assert cookie_scripts(at) == [cookie_script(None, 7 * 24 * 3600)]
    assert access._session_tokens().validate(token) is None


def test_a_session_signed_out_in_another_tab_ends_here_on_the_next_run(store, cookie):
    here = sign_in(console(store), "olivia")
    cookie["value"] = here.session_state[TOKEN_KEY]
    there = console(store).run()  # the same browser, another tab
    there.sidebar.button(key="sign-out").click().run()
    here.run()
    assert [t.label for t in here.text_input] == ["Username", "Password"]


def test_the_cookie_is_read_once_per_streamlit_session(store, cookie):
    cookie["value"] = "forged-token-that-was-never-issued-by-this-console"
    at = console(store).run()
    assert cookie_scripts(at)  # deleted once
    at.text_input[0].input("olivia")
    at.text_input[1].input("wrong")
    at.button[0].click().run()
    # a later run leaves the browser's cookie alone: another tab may have signed in since
    assert cookie_scripts(at) == []
    assert "Unknown username or wrong password." in [e.value for e in at.error]
