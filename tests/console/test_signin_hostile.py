"""Sign-in and demo mode as an attacker would try them (dashboard.signin.access,
dashboard.signin.passwords).

No timing assertions: what must cost the same is shown by counting key derivations.
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from streamlit.testing.v1 import AppTest
from support.paths import ROOT

from dashboard.signin import access
from dashboard.signin import passwords as auth
from dashboard.signin.access import BrowserRequest, SignInThrottle
from dashboard.signin.passwords import hash_password, needs_rehash, verify_password
from engine import Engine

APP = str(ROOT / "dashboard" / "app.py")
HASH = hash_password("correct horse")


@pytest.fixture
def kdf_runs(monkeypatch):
    """Counts scrypt runs made by dashboard.signin.passwords."""
    runs = []
    real = hashlib.scrypt

    def counting(*args, **kwargs):
        runs.append(kwargs.get("n"))
        return real(*args, **kwargs)

    monkeypatch.setattr(auth.hashlib, "scrypt", counting)
    return runs


# -- password hashes ------------------------------------------------------------------------------
def test_new_hashes_use_at_least_n_2_15_r_8_p_1():
    scheme, n, r, p, _, _ = HASH.split("$")
    assert scheme == "scrypt" and int(n) >= 2**15 and (int(r), int(p)) == (8, 1)
    assert verify_password("correct horse", HASH) and not verify_password("wrong", HASH)
    assert not needs_rehash(HASH)


def test_old_n_2_14_hashes_still_verify():
    salt = b"0123456789abcdef"
    digest = hashlib.scrypt(b"old secret", salt=salt, n=2**14, r=8, p=1, dklen=32)
    old = "$".join(
        [
            "scrypt",
            "16384",
            "8",
            "1",
            base64.b64encode(salt).decode(),
            base64.b64encode(digest).decode(),
        ]
    )
    assert verify_password("old secret", old) and not verify_password("other", old)
    assert needs_rehash(old)


def test_a_hash_asking_for_absurd_cost_is_refused_without_running():
    assert not verify_password("x", "scrypt$1073741824$8$1$AAAA$AAAA")


# -- timing: every attempt costs one key derivation ---------------------------------------------
@pytest.mark.parametrize(
    "username,password",
    [
        ("alice", ""),
        ("alice", "wrong"),
        ("alice", None),
        ("nobody", ""),
        ("nobody", "wrong"),
        ("", ""),
        (" alice ", ""),
    ],
)
def test_every_failed_attempt_runs_the_kdf_exactly_once(kdf_runs, username, password):
    accounts = {"alice": {"role": "operator", "password_hash": HASH}}
    access.authenticate(accounts, "warm-up", "x")  # makes the dummy hash once
    kdf_runs.clear()
    assert access.authenticate(accounts, username, password) is None
    assert len(kdf_runs) == 1
    assert kdf_runs[0] >= 2**15


def test_an_empty_password_never_matches_even_a_hash_of_nothing(kdf_runs):
    assert verify_password("", HASH) is False
    assert len(kdf_runs) == 1


# -- lock-out keyed on the name sign-in uses ------------------------------------------------------
def test_padding_the_name_does_not_escape_the_lock_out():
    now = [0.0]
    throttle = SignInThrottle(limit=3, lock_s=60, clock=lambda: now[0])
    for name in ("alice", " alice", "alice ", "\talice"):
        throttle.failed(name, "203.0.113.9")
    for name in ("alice", " alice", "alice\n"):
        # the fourth failure doubled the first wait
        assert throttle.locked_for(name, "203.0.113.9") == 120
    throttle.succeeded(" alice ", "203.0.113.9")
    assert throttle.locked_for("alice", "203.0.113.9") == 0


def test_a_stranger_cannot_lock_the_owner_out():
    now = [0.0]
    throttle = SignInThrottle(limit=5, lock_s=30, max_s=900, account_max_s=5,
                              clock=lambda: now[0])
    waits = []
    for _ in range(12):  # a stranger guesses alice's password from one address
        throttle.failed("alice", "203.0.113.9")
        waits.append(throttle.locked_for("alice", "203.0.113.9"))
    assert waits[4] == 30 and waits[5] == 60 and waits[-1] == 900  # backoff, capped
    assert throttle.locked_for("alice", "198.51.100.7") <= 5  # the owner waits seconds at most
    now[0] += 5
    assert throttle.locked_for("alice", "198.51.100.7") == 0
    assert throttle.locked_for("alice", "203.0.113.9") > 0  # the stranger still waits
    throttle.succeeded("alice", "198.51.100.7")
    assert throttle.locked_for("alice", "203.0.113.9") > 0  # the owner's success frees no one


def test_a_client_spraying_names_is_slowed_too():
    throttle = SignInThrottle(limit=2, lock_s=10, clock=lambda: 0.0)
    for i in range(8):
        throttle.failed(f"user-{i}", "203.0.113.9")
    assert throttle.locked_for("someone-new", "203.0.113.9") == 10
    assert throttle.locked_for("someone-new", "198.51.100.7") == 0


def test_the_throttle_table_stays_bounded():
    throttle = SignInThrottle(limit=1)
    throttle.MAX_TRACKED = 100
    for i in range(1000):
        throttle.failed(f"name-{i}")
    assert len(throttle._failures) == 100
    assert throttle.locked_for("name-999") > 0


def test_sign_in_form_locks_the_padded_name_too():
    accounts = {
        "mallory-target": {"role": "operator", "password_hash": hash_password("the-right-one")}
    }
    at = AppTest.from_file(APP, default_timeout=60)
    at.secrets["rewind"] = {"store": "sqlite:///:memory:", "users": accounts}
    at.run()
    for i in range(6):
        at.text_input[0].input(" " * (i % 3) + "mallory-target" + " " * (i % 2))
        at.text_input[1].input(f"guess-{i}")
        at.button[0].click().run()
    at.text_input[0].input(" mallory-target ")
    at.text_input[1].input("the-right-one")
    at.button[0].click().run()
    assert "Too many failed attempts" in "\n".join(e.value for e in at.error)
    assert [t.value for t in at.title] == ["Rewind console"]


# -- OIDC -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "claims,identity",
    [
        ({"email": "alice@example.com", "email_verified": True, "sub": "s1"}, "alice@example.com"),
        (
            {"email": "alice@example.com", "email_verified": "true", "sub": "s1"},
            "alice@example.com",
        ),
        ({"email": "alice@example.com", "sub": "s1"}, "s1"),
        ({"email": "alice@example.com", "email_verified": False, "sub": "s1"}, "s1"),
        ({"email": "alice@example.com", "email_verified": "false", "sub": "s1"}, "s1"),
        ({"email": "alice@example.com", "email_verified": 1, "sub": "s1"}, "s1"),
        ({"email": "alice@example.com"}, None),
    ],
)
def test_oidc_trusts_the_email_only_when_verified(claims, identity):
    assert access.oidc_identity(claims) == identity


def test_an_unverified_email_gets_no_operator_role():
    roles = {"operators": ["alice@example.com"]}
    claims = {"email": "alice@example.com", "email_verified": False, "sub": "attacker-42"}
    assert access.role_for_identity(access.oidc_identity(claims), roles) is None


def test_unverified_email_in_the_console_gets_no_role(tmp_path):
    at = AppTest.from_file(APP, default_timeout=60)
    at.secrets["auth"] = {
        "redirect_uri": "http://localhost:8501/oauth2callback",
        "cookie_secret": "x" * 32,
        "client_id": "c",
        "client_secret": "s",
        "server_metadata_url": "https://id.example.com/.well-known/openid",
    }
    at.secrets["rewind"] = {
        "store": f"sqlite:///{tmp_path}/r.db",
        "roles": {"operators": ["alice@example.com"]},
    }
    at.user = {
        "is_logged_in": True,
        "email": "alice@example.com",
        "email_verified": False,
        "sub": "attacker-42",
    }
    at.run()
    assert not at.exception
    assert "no role" in "\n".join(e.value for e in at.error)
    assert not at.metric


# -- demo mode: Host, peer and Origin ------------------------------------------------------------
@pytest.mark.parametrize(
    "host,local",
    [
        ("localhost", True),
        ("localhost:8501", True),
        ("LOCALHOST:1", True),
        ("127.0.0.1", True),
        ("127.0.0.1:8501", True),
        ("[::1]", True),
        ("[::1]:8501", True),
        ("rebind.evil.test", False),
        ("rebind.evil.test:8501", False),
        ("127.0.0.2:8501", False),
        ("localhost.evil.test", False),
        ("127.0.0.1.nip.io:8501", False),
        ("evil@localhost", False),
        ("localhost:8501/x", False),
        ("localhost:notaport", False),
        ("", False),
        (None, False),
        ("::1", False),
        ("0.0.0.0:8501", False),
        ("localhost :8501", False),
    ],
)
def test_demo_host_must_be_a_loopback_name(host, local):
    assert access.is_local_host_header(host) is local


@pytest.mark.parametrize(
    "request_,allowed",
    [
        (BrowserRequest("localhost:8501", "http://localhost:8501", None), True),
        (BrowserRequest("127.0.0.1:8501", None, None), True),
        (BrowserRequest("[::1]:8501", "http://[::1]:8501", "::1"), True),
        (BrowserRequest("rebind.evil.test:8501", "http://rebind.evil.test:8501", None), False),
        (BrowserRequest("localhost:8501", "http://localhost:3000", None), False),  # another port
        (BrowserRequest("localhost:8501", "https://evil.test", None), False),
        (BrowserRequest("localhost:8501", "null", None), False),
        (BrowserRequest("localhost:8501", None, "10.0.0.9"), False),  # a remote peer
        (BrowserRequest(None, None, None), False),
    ],
)
def test_demo_request_needs_local_host_peer_and_origin(request_, allowed):
    assert access.demo_request_allowed("127.0.0.1", request_) is allowed
    assert access.demo_request_allowed("0.0.0.0", request_) is False


def test_a_run_without_a_browser_checks_only_the_bind_address():
    assert access.demo_request_allowed("127.0.0.1", None)
    assert not access.demo_request_allowed("0.0.0.0", None)


def demo_app(monkeypatch, tmp_path, request_) -> AppTest:
    monkeypatch.setenv("REWIND_STORE", f"sqlite:///{tmp_path}/r.db")
    Engine.open(f"sqlite:///{tmp_path}/r.db").close()  # the console never creates a store
    monkeypatch.setattr(access, "browser_request", lambda: request_)
    return AppTest.from_file(APP, default_timeout=60).run()


def test_demo_mode_under_a_rebinding_name_shows_how_to_configure_accounts(monkeypatch, tmp_path):
    hostile = "www.evil.test](https://evil.test) [x"
    at = demo_app(
        monkeypatch, tmp_path, BrowserRequest(f"{hostile}", "http://rebind.evil.test:8501", None)
    )
    assert not at.exception
    assert "only serves localhost" in "\n".join(e.value for e in at.error)
    assert "[rewind.users.<name>]" in "\n".join(m.value for m in at.markdown)
    assert not at.title and not at.metric and not at.button and not at.dataframe
    assert hostile in [t.value for t in at.text]  # shown as plain text only
    assert all("evil" not in m.value for m in at.markdown)


def test_demo_mode_on_localhost_still_acts_as_operator(monkeypatch, tmp_path):
    at = demo_app(
        monkeypatch, tmp_path, BrowserRequest("localhost:8501", "http://localhost:8501", None)
    )
    assert not at.exception
    assert [t.value for t in at.title] == ["Fleet"]


def test_config_sets_allowed_hosts_to_loopback_names():
    import tomllib

    root = ROOT
    config = tomllib.loads((root / ".streamlit" / "config.toml").read_text())
    assert sorted(config["server"]["allowedHosts"]) == ["127.0.0.1", "::1", "localhost"]
