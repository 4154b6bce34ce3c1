"""Who may use the console and how it is configured (dashboard.signin.access,
dashboard.settings)."""

from __future__ import annotations

import datetime as dt

import pytest
from support.paths import ROOT

from dashboard import settings
from dashboard.signin import access
from dashboard.signin.access import AccessConfigError, SignInThrottle, User
from dashboard.signin.passwords import hash_password

HASH = hash_password("correct horse")


def users(**accounts):
    return {"rewind": {"users": accounts}}


# -- modes and accounts -------------------------------------------------------------------------
def test_access_mode_prefers_oidc_then_local_then_demo():
    assert access.access_mode({}) == "demo"
    assert access.access_mode(None) == "demo"
    assert access.access_mode({"rewind": {"refresh_seconds": 3}}) == "demo"
    assert access.access_mode(users(a={"role": "viewer", "password_hash": HASH})) == "local"
    both = {**users(a={"role": "viewer", "password_hash": HASH}), "auth": {"client_id": "x"}}
    assert access.access_mode(both) == "oidc"


def test_local_accounts_validate_role_and_hash():
    ok = access.local_accounts(users(alice={"role": "operator", "password_hash": HASH}))
    assert ok == {"alice": {"role": "operator", "password_hash": HASH}}
    with pytest.raises(AccessConfigError, match="role must be one of"):
        access.local_accounts(users(alice={"role": "admin", "password_hash": HASH}))
    with pytest.raises(AccessConfigError, match="rewind hash-password"):
        access.local_accounts(users(alice={"role": "viewer", "password_hash": "hunter2"}))
    with pytest.raises(AccessConfigError, match="must be a table"):
        access.local_accounts(users(alice="operator"))


def test_authenticate_checks_the_scrypt_hash():
    accounts = access.local_accounts(users(alice={"role": "operator", "password_hash": HASH}))
    assert access.authenticate(accounts, " alice ", "correct horse") == \
        User("alice", "operator", "local")
    assert access.authenticate(accounts, "alice", "wrong") is None
    assert access.authenticate(accounts, "alice", "") is None
    assert access.authenticate(accounts, "mallory", "correct horse") is None


def test_users_act_through_an_engine_actor_with_their_role():
    viewer = User("bob", "viewer", "local")
    assert not viewer.can_act and viewer.actor().role == "viewer"
    assert access.DEMO_USER.can_act and access.DEMO_USER.actor().name == "demo"


# -- OIDC ---------------------------------------------------------------------------------------
def test_role_for_identity_patterns_and_precedence():
    roles = {"operators": ["alice@example.com", "*@oncall.example.com"],
             "viewers": ["*@example.com"]}
    assert access.role_for_identity("Alice@Example.com", roles) == "operator"
    assert access.role_for_identity("pat@oncall.example.com", roles) == "operator"
    assert access.role_for_identity("bob@example.com", roles) == "viewer"
    assert access.role_for_identity("eve@evil.test", roles) is None
    assert access.role_for_identity("eve@evil.test", {**roles, "default": "viewer"}) == "viewer"
    assert access.role_for_identity("eve@evil.test", {"default": "root"}) is None
    assert access.role_for_identity(None, roles) is None
    assert access.role_for_identity("x@y", {"operators": "x@y"}) == "operator"


def test_oidc_providers_named_or_default():
    assert access.oidc_providers({"client_id": "a", "redirect_uri": "u"}) == [None]
    named = {"redirect_uri": "u", "google": {"client_id": "g"}, "okta": {"client_id": "o"}}
    assert access.oidc_providers(named) == ["google", "okta"]
    assert access.oidc_providers({"redirect_uri": "u"}) == []


# -- demo mode ----------------------------------------------------------------------------------
@pytest.mark.parametrize("address,client,allowed", [
    ("127.0.0.1", None, True), ("localhost", None, True), ("::1", "::1", True),
    ("127.0.0.1", "127.0.0.1", True), ("0.0.0.0", None, False), (None, None, False),
    ("", None, False), ("10.0.0.5", None, False), ("127.0.0.1", "10.0.0.9", False),
    ("example.com", None, False),
])
def test_demo_mode_only_serves_localhost(address, client, allowed):
    assert access.demo_allowed(address, client) is allowed


def test_sign_in_throttle_locks_after_repeated_failures():
    now = [100.0]
    throttle = SignInThrottle(limit=3, lock_s=30, clock=lambda: now[0])
    for _ in range(3):
        assert throttle.locked_for("alice") == 0
        throttle.failed("alice")
    assert throttle.locked_for("alice") == 30
    assert throttle.locked_for("bob") == 0
    now[0] += 31
    assert throttle.locked_for("alice") == 0
    throttle.succeeded("alice")
    throttle.failed("alice")
    assert throttle.locked_for("alice") == 0


# -- settings -----------------------------------------------------------------------------------
def test_freeze_window_from_secrets_and_env():
    conf = {"rewind": {"freeze": {"start": "2026-10-01T00:00:00+08:00",
                                  "end": "2026-10-08T00:00:00+08:00", "name": "National Day"}}}
    window = settings.freeze_window(conf, env={})
    start, end = window.span()
    assert window.name == "National Day" and end - start == 7 * 86400
    assert window.active(start) and window.active(end - 1) and not window.active(end)
    env = {"REWIND_FREEZE_START": "2026-12-24T00:00:00Z", "REWIND_FREEZE_END": "2026-12-27"}
    override = settings.freeze_window(conf, env=env)
    assert override.start == dt.datetime(2026, 12, 24, tzinfo=dt.UTC)
    assert override.end.tzinfo is not None
    assert settings.freeze_window({}, env={}) is None


def test_freeze_window_accepts_toml_datetimes():
    start = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
    window = settings.freeze_window({"rewind": {"freeze": {
        "start": start, "end": dt.date(2026, 10, 8)}}}, env={})
    assert window.start == start and window.name == "Change freeze"


@pytest.mark.parametrize("freeze,message", [
    ({"start": "2026-10-01"}, "needs both start and end"),
    ({"start": "soon", "end": "2026-10-08"}, "ISO 8601"),
    ({"start": "2026-10-08", "end": "2026-10-01"}, "before it starts"),
])
def test_freeze_window_errors_say_what_is_wrong(freeze, message):
    with pytest.raises(settings.SettingsError, match=message):
        settings.freeze_window({"rewind": {"freeze": freeze}}, env={})


def test_store_url_refresh_and_redaction():
    assert settings.store_url({"rewind": {"store": "sqlite:///a.db"}}, env={}) == "sqlite:///a.db"
    assert settings.store_url({}, env={"REWIND_STORE": "redis://h:6379/0"}) == "redis://h:6379/0"
    assert settings.store_url({}, env={}) is None
    assert settings.refresh_seconds({}) == settings.DEFAULT_REFRESH_S
    assert settings.refresh_seconds({"rewind": {"refresh_seconds": 0.1}}) == 1.0
    with pytest.raises(settings.SettingsError):
        settings.refresh_seconds({"rewind": {"refresh_seconds": "often"}})
    assert settings.redact_url("redis://app:s3cret@h:6379/0") == "redis://app:***@h:6379/0"
    assert settings.redact_url("sqlite:///x.db") == "sqlite:///x.db"
    assert settings.redact_url(None) is None


def test_secrets_example_is_valid_and_configures_local_accounts():
    import tomllib

    root = ROOT
    example = tomllib.loads((root / ".streamlit" / "secrets.example.toml").read_text())
    assert access.access_mode(example) == "local"
    assert set(access.local_accounts(example)) == {"alice", "bob"}
    assert settings.freeze_window(example, env={}).on_loop == "flag"
    config = tomllib.loads((root / ".streamlit" / "config.toml").read_text())
    assert config["server"]["enableXsrfProtection"] is True
    assert config["browser"]["gatherUsageStats"] is False
