"""Sign-in sessions of local accounts: the token store (with a fake clock, in memory and in every
store backend), what a session restores, and the console's use of them (AppTest; the cookie
itself, which only the server side sets, in tests/console/test_dashboard_serve.py and tests/e2e/
test_sign_in_sessions.py, since AppTest sends no cookies: the test stands in for the browser by
redeeming the page's one-time code and handing `session_cookie` the token)."""

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
    credential_stamp,
    restored_user,
    session_limits,
)
from dashboard.signin.passwords import hash_password
from dashboard.signin.sessions import (
    NAMESPACE,
    SIGN_IN_PATH,
    SIGN_OUT_PATH,
    cookie_header,
    cookie_value,
    exchange_script,
    sign_out_script,
)

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
    held = repr(tokens.documents.fleet(NAMESPACE))
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
    issued = []
    for name in ("a", "b", "c"):
        issued.append(tokens.issue(name, "s"))
        clock.t += 1
    first, second, third = issued
    clock.t += SessionTokens.TOUCH_S  # uses are recorded to the minute
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


def test_the_server_sets_an_httponly_strict_cookie_and_deletes_it():
    assert cookie_header("tok_EN-1", 3600, secure=False) == (
        f"{SESSION_COOKIE}=tok_EN-1; Max-Age=3600; Path=/; HttpOnly; SameSite=Strict".encode())
    assert cookie_header("tok_EN-1", 3600, secure=True).endswith(b"; Secure")
    assert cookie_header(None, 3600, secure=False).startswith(
        f"{SESSION_COOKIE}=; Max-Age=0; Path=/; HttpOnly".encode())
    assert cookie_value(f"a=1; {SESSION_COOKIE}=tok_EN-1; b=2") == "tok_EN-1"
    assert cookie_value("a=1") is None and cookie_value(None) is None


def test_the_page_scripts_carry_a_code_never_a_token():
    script = exchange_script("the-code", "/base" + SIGN_IN_PATH)
    assert '"the-code"' in script and '"/base/_rewind/sign-in"' in script
    assert "method: 'POST'" in script and "location.reload()" in script
    assert "document.cookie" not in script  # the cookie is HttpOnly: no script touches it
    assert "document.currentScript.textContent = ''" in script  # not left in the page
    assert ":has(script[data-rw-cookie]){display:none}" in script  # nor a gap in the layout
    assert f'"{SIGN_OUT_PATH}"' in sign_out_script(SIGN_OUT_PATH)


def test_a_code_is_redeemed_once_and_only_while_fresh():
    tokens, clock = store_with_clock()
    code = tokens.issue_code("olivia", "stamp")
    assert tokens.validate(code) is None  # a code is no session
    token = tokens.redeem(code)
    assert token and token != code and tokens.validate(token).name == "olivia"
    assert tokens.redeem(code) is None  # spent
    late = tokens.issue_code("olivia", "stamp")
    clock.t += SessionTokens.CODE_S
    assert tokens.redeem(late) is None
    for forged in (None, "", "x" * 500, "never-issued"):
        assert tokens.redeem(forged) is None


def test_sessions_live_in_the_store_shared_by_replicas_and_across_restarts(store_url,
                                                                          open_engine):
    """Two consoles on one store (replicas, or one restarted) know the same sessions; the store
    holds only digests."""
    if store_url.endswith(":memory:"):
        pytest.skip("n/a: an in-memory store is one process's alone")
    first = SessionTokens(open_engine(store_url).documents)
    code = first.issue_code("olivia", "stamp")
    second = SessionTokens(open_engine(store_url).documents)
    token = second.redeem(code)  # the page's post may reach another replica
    assert token is not None and first.redeem(code) is None
    assert first.validate(token).name == "olivia"
    held = repr(open_engine(store_url).documents.fleet(NAMESPACE))
    assert token not in held and code not in held
    first.revoke(token)
    assert second.validate(token) is None


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
    monkeypatch.setattr(access, "guarded", lambda: True)  # served as `rewind dashboard` does
    return sent


def console(store, accounts=None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    users = accounts if accounts is not None else {
        "olivia": {"role": "operator", "password_hash": HASHES["olivia"]},
        "victor": {"role": "viewer", "password_hash": HASHES["victor"]}}
    at.secrets["rewind"] = {"store": store, "users": users}
    return at


def tokens_of(store: str) -> SessionTokens:
    """The sessions of `store` as another process sees them (the store is where they live)."""
    from engine import Engine

    return SessionTokens(Engine.open(store).documents)


CODE = re.compile(r'const code = "([A-Za-z0-9_-]+)"')


def sign_in(at: AppTest, name: str) -> str:
    """Sign in through the form; the one-time code the page would post (see `browser`)."""
    at.run()
    at.text_input[0].input(name)
    at.text_input[1].input(f"{name}-pw")
    at.button[0].click().run()
    assert not at.exception
    codes = [m.group(1) for h in at.html for m in [CODE.search(h.value)] if m]
    assert len(codes) == 1, [h.value for h in at.html]
    return codes[0]


def browser(store: str, at: AppTest, name: str, cookie: dict) -> str:
    """What the browser does after sign-in: post the code (the server sets the cookie, here the
    test redeems it as the route would) and reload with the cookie. Returns the token."""
    token = tokens_of(store).redeem(sign_in(at, name))
    assert token is not None
    cookie["value"] = token
    return token


def cookie_scripts(at: AppTest) -> list[str]:
    return [h.value for h in at.html if "data-rw-cookie" in h.value]


def signed_in(at: AppTest) -> str:
    return "\n".join(str(m.value) for m in at.sidebar.markdown)


def sign_out_scripts(at: AppTest) -> list[str]:
    return [h for h in cookie_scripts(at) if SIGN_OUT_PATH in h]


def test_signing_in_hands_the_page_a_one_time_code_not_a_token(store, cookie):
    at = console(store)
    code = sign_in(at, "victor")
    assert [i.value for i in at.info] == ["Signing in…"]
    assert SESSION_KEY not in at.session_state and TOKEN_KEY not in at.session_state
    token = tokens_of(store).redeem(code)
    assert token is not None and token not in "".join(cookie_scripts(at))
    assert tokens_of(store).validate(token).name == "victor"
    assert tokens_of(store).redeem(code) is None  # one time
    at.run()
    assert cookie_scripts(at) == []  # handed over once; the page keeps no copy
    assert COOKIE_KEY not in at.session_state


def test_a_new_streamlit_session_with_the_cookie_is_signed_in_with_the_role_now(store, cookie):
    browser(store, console(store), "olivia", cookie)
    reloaded = console(store).run()  # the reload after sign-in: the cookie sent
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
    assert sign_out_scripts(at) == [sign_out_script(SIGN_OUT_PATH)]
    assert SESSION_KEY not in at.session_state


def test_a_deleted_account_is_signed_out_on_the_next_run_and_its_session_ends(store, cookie):
    token = browser(store, console(store), "victor", cookie)
    at = console(store).run()
    assert "**victor** · viewer" in signed_in(at)
    at.secrets["rewind"] = {"store": store, "users": {
        "olivia": {"role": "operator", "password_hash": HASHES["olivia"]}}}
    at.run()
    assert [t.label for t in at.text_input] == ["Username", "Password"]
    assert sign_out_scripts(at) == [sign_out_script(SIGN_OUT_PATH)]
    assert tokens_of(store).validate(token) is None
    # the account is back; the ended session is not
    assert [t.label for t in console(store).run().text_input] == ["Username", "Password"]


def test_signing_out_revokes_the_session_and_deletes_the_cookie(store, cookie):
    token = browser(store, console(store), "olivia", cookie)
    at = console(store).run()
    at.sidebar.button(key="sign-out").click().run()
    assert [t.label for t in at.text_input] == ["Username", "Password"]
    assert sign_out_scripts(at) == [sign_out_script(SIGN_OUT_PATH)]
    assert tokens_of(store).validate(token) is None


def test_a_session_signed_out_in_another_tab_ends_here_on_the_next_run(store, cookie):
    browser(store, console(store), "olivia", cookie)
    here = console(store).run()
    there = console(store).run()  # the same browser, another tab
    there.sidebar.button(key="sign-out").click().run()
    here.run()
    assert [t.label for t in here.text_input] == ["Username", "Password"]


def test_a_session_survives_a_console_restart(store, cookie):
    """The sessions live in the store: a console process that never saw the sign-in (a restart,
    another replica: a fresh cache here) restores it."""
    browser(store, console(store), "olivia", cookie)
    access._tokens_for.clear()
    at = console(store).run()
    assert "**olivia** · operator" in signed_in(at)


def test_the_cookie_is_read_once_per_streamlit_session(store, cookie):
    cookie["value"] = "forged-token-that-was-never-issued-by-this-console"
    at = console(store).run()
    assert sign_out_scripts(at)  # deleted once
    at.text_input[0].input("olivia")
    at.text_input[1].input("wrong")
    at.button[0].click().run()
    # a later run leaves the browser's cookie alone: another tab may have signed in since
    assert cookie_scripts(at) == []
    assert "Unknown username or wrong password." in [e.value for e in at.error]


def test_without_the_guard_a_sign_in_lasts_for_the_page_only(store, monkeypatch):
    """`streamlit run dashboard/app.py` alone has no cookie route: no cookie, no script, and
    the page is signed in until it is reloaded."""
    monkeypatch.setattr(access, "session_cookie", lambda: None)
    at = console(store).run()
    at.text_input[0].input("olivia")
    at.text_input[1].input("olivia-pw")
    at.button[0].click().run()
    assert "**olivia** · operator" in signed_in(at)
    assert cookie_scripts(at) == []
    at.sidebar.button(key="sign-out").click().run()
    assert [t.label for t in at.text_input] == ["Username", "Password"]
    assert cookie_scripts(at) == []


def test_a_connection_from_another_origin_gets_nothing_even_with_a_valid_cookie(store, cookie,
                                                                               monkeypatch):
    """The guard refuses such a websocket before Streamlit; app.py alone refuses it too."""
    browser(store, console(store), "olivia", cookie)
    monkeypatch.setattr(access, "browser_request", lambda: access.BrowserRequest(
        "127.0.0.1:8501", "http://127.0.0.1:9999", None))
    at = console(store).run()
    assert "another origin" in "\n".join(e.value for e in at.error)
    assert not at.text_input and "olivia" not in signed_in(at)
    monkeypatch.setattr(access, "browser_request", lambda: access.BrowserRequest(
        "127.0.0.1:8501", "http://127.0.0.1:8501", None))
    assert "**olivia** · operator" in signed_in(console(store).run())
