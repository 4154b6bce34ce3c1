"""Rights at the moment of acting: a console user's actor asks the
secrets file for its role when the action runs, so a dialog left open by an account demoted or
deleted since acts no more; a secrets file that cannot be read or parsed fails closed (never demo
mode) and names the file and line; role changes apply without a restart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest
from support.fleet import LOOPING, seed_fleet, seed_looping
from support.paths import ROOT

from dashboard import actions
from dashboard.secrets_file import SecretsFileError, read_files
from dashboard.signin import access
from dashboard.signin.access import SESSION_KEY, User, role_authority
from dashboard.signin.passwords import hash_password
from engine import Engine, PermissionDenied

APP = str(ROOT / "dashboard" / "app.py")
HASH = hash_password("olivia-pw")


def write_accounts(path: Path, accounts: dict[str, str], extra: str = "") -> None:
    """secrets.toml with local accounts {name: role}; its mtime moves on every write, so a
    rewrite within the same clock tick is still seen as a change."""
    lines = [extra]
    for name, role in accounts.items():
        lines += [f"[rewind.users.{name}]", f'role = "{role}"', f'password_hash = "{HASH}"', ""]
    before = path.stat().st_mtime_ns if path.exists() else 0
    path.write_text("\n".join(lines), encoding="utf-8")
    os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))


@pytest.fixture
def setup(tmp_path):
    secrets = tmp_path / "secrets.toml"
    write_accounts(secrets, {"olivia": "operator", "victor": "viewer"})
    engine = Engine.open(f"sqlite:///{tmp_path}/rewind.db")
    seed_looping(engine)
    olivia = User("olivia", "operator", "local", authority=role_authority("local", [str(secrets)]))
    yield engine, secrets, olivia
    engine.close()


def _every_action(engine: Engine, user: User) -> dict[str, object]:
    """Each operator action the console offers, as a thunk."""
    target = engine.get_session(LOOPING).suggested_target()
    return {
        "rollback": lambda: actions.roll_back(engine, user, LOOPING, target, "loop"),
        "notice": lambda: actions.send_notice(engine, user, LOOPING, "custom text"),
        "bulk preview": lambda: actions.preview_many(engine, user, {"status": "looping"}),
        "bulk": lambda: actions.roll_back_many(engine, user, {"status": "looping"}, "loops"),
        "quarantine": lambda: actions.quarantine_tool(engine, user, "refund_api", "500s"),
        "detector": lambda: actions.declare_detector(engine, user, {"repeat_threshold": 5},
                                                     "calmer"),
        "detector defaults": lambda: actions.declare_detector(engine, user, {}, "back"),
    }


@pytest.mark.parametrize("change", ["demoted", "deleted", "broken"])
def test_an_open_action_is_refused_once_the_account_changed(setup, change):
    engine, secrets, olivia = setup
    if change == "demoted":
        write_accounts(secrets, {"olivia": "viewer"})
    elif change == "deleted":
        write_accounts(secrets, {"victor": "viewer"})
    else:
        secrets.write_text(secrets.read_text() + "\n[rewind.users.olivia\n", encoding="utf-8")
    before = (engine.get_session(LOOPING).info().epoch,
              len(engine.get_session(LOOPING).state().messages))
    for name, act in _every_action(engine, olivia).items():
        with pytest.raises(PermissionDenied) as refused:
            act()
        assert {"demoted": "is a viewer", "deleted": "no longer an account",
                "broken": "line"}[change] in str(refused.value), name
    assert (engine.get_session(LOOPING).info().epoch,
            len(engine.get_session(LOOPING).state().messages)) == before
    assert engine.audit() == [] and engine.quarantines() == []
    assert engine.fleet.detector_settings() == {}


def test_quarantine_lift_and_compensations_ask_at_the_moment_too(setup):
    engine, secrets, olivia = setup
    q = actions.quarantine_tool(engine, olivia, "refund_api", "500s")
    start = next(n.id for n in engine.get_session(LOOPING).tree() if n.label == "start")
    actions.roll_back(engine, olivia, LOOPING, start, "loop", notice=False)
    [comp] = engine.compensations()
    audited = len(engine.audit())
    write_accounts(secrets, {"olivia": "viewer"})
    with pytest.raises(PermissionDenied):
        actions.lift_quarantine(engine, olivia, q.id, "fixed")
    for act in (actions.retry_compensations, actions.resolve_compensations):
        with pytest.raises(PermissionDenied):
            act(engine, olivia, [comp], "by hand")
    assert [x.id for x in engine.quarantines()] == [q.id] and len(engine.audit()) == audited
    write_accounts(secrets, {"olivia": "operator"})  # promoted back: acts again, no restart
    assert actions.lift_quarantine(engine, olivia, q.id, "fixed").id == q.id


@pytest.mark.parametrize("source,secrets,role", [
    ("local", {"rewind": {"users": {"a": {"role": "viewer", "password_hash": "scrypt$x"}}}},
     "viewer"),
    ("local", {"rewind": {"users": {"b": {"role": "viewer", "password_hash": "scrypt$x"}}}},
     None),
    ("local", {}, None),  # accounts removed: the console is no longer signing anyone in locally
    ("demo", {}, "operator"),
    ("demo", {"rewind": {"users": {"b": {"role": "viewer", "password_hash": "scrypt$x"}}}},
     None),  # accounts added: the demo operator is gone
    ("oidc", {"auth": {"client_id": "x"}, "rewind": {"roles": {"viewers": ["a"]}}}, "viewer"),
    ("oidc", {"auth": {"client_id": "x"}, "rewind": {"roles": {}}}, None),
])
def test_role_now_follows_the_secrets_as_they_are(source, secrets, role):
    assert access.role_now(secrets, source, "a") == role


def test_a_broken_file_names_the_file_and_line(tmp_path):
    path = tmp_path / "secrets.toml"
    path.write_text('[rewind]\nstore = "x"\n\n[rewind.users.alice\nrole = "operator"\n')
    with pytest.raises(SecretsFileError) as broken:
        read_files([str(path)])
    assert broken.value.path == str(path) and broken.value.line == 4
    assert f"{path}, line 4" in str(broken.value)
    path.write_bytes(b'[rewind]\nname = "\xff"\n')
    with pytest.raises(SecretsFileError, match="line 2"):
        read_files([str(path)])
    assert read_files([str(tmp_path / "missing.toml")]) is None


# -- the console itself ---------------------------------------------------------------------------
@pytest.fixture
def file_backed(tmp_path):
    """The console reading secrets from a real file (as `--secrets.files` makes it)."""
    url = f"sqlite:///{tmp_path}/rewind.db"
    seed_fleet(url, background=4)
    secrets = tmp_path / "secrets.toml"
    write_accounts(secrets, {"olivia": "operator"}, extra=f'[rewind]\nstore = "{url}"\n')
    saved = st_config.get_option("secrets.files")
    st_config.set_option("secrets.files", [str(secrets)])
    yield url, secrets
    st_config.set_option("secrets.files", saved)


def _run(user: User | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    if user is not None:
        at.session_state[SESSION_KEY] = user
    return at.run()


def test_a_broken_secrets_file_serves_only_an_error_naming_file_and_line(file_backed):
    url, secrets = file_backed
    secrets.write_text(secrets.read_text() + '\n[rewind.users.olivia]\nrole = "operator\n')
    for user in (None, User("olivia", "operator", "local"), access.DEMO_USER):
        at = _run(user)
        assert not at.exception
        shown = "\n".join(t.value for t in at.text)
        assert str(secrets) in shown and "line" in shown
        assert "serves nothing" in "\n".join(e.value for e in at.error)
        assert not at.sidebar.markdown and not at.button and not at.dataframe
        assert "Demo mode" not in "\n".join(i.value for i in at.info)


def test_role_changes_in_the_file_apply_without_a_restart(file_backed):
    url, secrets = file_backed
    at = _run(User("olivia", "operator", "local"))
    assert "**olivia** · operator" in "\n".join(m.value for m in at.sidebar.markdown)
    write_accounts(secrets, {"olivia": "viewer"}, extra=f'[rewind]\nstore = "{url}"\n')
    at.run()
    assert "**olivia** · viewer" in "\n".join(m.value for m in at.sidebar.markdown)
    secrets.write_text("[rewind\n")  # broken after a good start: closed, not demo
    at.run()
    assert "serves nothing" in "\n".join(e.value for e in at.error)
    assert "Demo mode" not in "\n".join(i.value for i in at.info)
