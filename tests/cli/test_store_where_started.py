"""One store, the one the user named: `rewind dashboard` and `rewind otlp` read a relative store
URL (the default included) from the folder they were started in, refuse a store that does not
exist (exit 4, naming the absolute path, nothing created), and the console names the store by
its absolute path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from dashboard import settings, views
from engine.cli.parser import main
from engine.store.urls import absolute_url

ROOT = Path(__file__).resolve().parents[2]


def rewind_process(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("REWIND_STORE", "REWIND_CONSOLE_STORE")}
    environ["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], cwd=cwd, text=True,
                          capture_output=True, env={**environ, **(env or {})}, timeout=120)


@pytest.mark.parametrize("command", [["dashboard", "--port", "1"], ["otlp", "--port", "0"]])
@pytest.mark.parametrize("where", [
    [],                                            # the default, .rewind/rewind.db
    ["--store", "sqlite:///missing.db"],
    ["--store", "sqlite:///missing/dir/x.db"],
])
def test_a_missing_store_is_refused_by_the_console_and_the_receiver(tmp_path, command, where):
    done = rewind_process(*where, *command, cwd=tmp_path)
    assert done.returncode == 4, done.stderr
    assert "no Rewind store at " + str(tmp_path) in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing created: no file, no folder


def test_a_missing_store_from_the_environment_is_refused_too(tmp_path):
    done = rewind_process("dashboard", "--port", "1", cwd=tmp_path,
                          env={"REWIND_STORE": "sqlite:///rel/rewind.db"})
    assert done.returncode == 4, done.stderr
    assert str(tmp_path / "rel" / "rewind.db") in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def started_here(tmp_path, monkeypatch, open_engine):
    """A store at ./.rewind/rewind.db of a folder the user starts `rewind` from."""
    open_engine(f"sqlite:///{tmp_path}/.rewind/rewind.db").session("s-1")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REWIND_STORE", raising=False)
    monkeypatch.delenv("REWIND_CONSOLE_STORE", raising=False)
    return tmp_path


def _streamlit_calls(monkeypatch) -> list[dict]:
    calls: list[dict] = []
    monkeypatch.setattr("engine.cli.commands.subprocess.call",
                        lambda cmd, **kw: calls.append({"cmd": cmd, **kw}) or 0)
    return calls


@pytest.mark.parametrize("where", [[], ["--store", "sqlite:///.rewind/rewind.db"]])
def test_the_console_gets_the_store_of_the_folder_it_was_started_from(started_here, monkeypatch,
                                                                       where):
    calls = _streamlit_calls(monkeypatch)
    assert main([*where, "dashboard"]) == 0
    (call,) = calls
    assert Path(call["cwd"]) != started_here  # Streamlit runs in the checkout's folder …
    wanted = f"sqlite:///{started_here}/.rewind/rewind.db"
    assert call["env"]["REWIND_STORE"] == wanted  # … and reads the store named here
    # the console reads it whatever its own folder and secrets.toml say
    assert settings.store_url({"rewind": {"store": "sqlite:///other.db"}},
                              env=call["env"]) == (wanted if where else "sqlite:///other.db")


def test_the_store_named_on_the_command_line_wins_over_the_console_secrets(started_here):
    env = {"REWIND_CONSOLE_STORE": "sqlite:////srv/named.db", "REWIND_STORE": "sqlite:///x.db"}
    assert settings.store_url({"rewind": {"store": "sqlite:///other.db"}}, env=env) == (
        "sqlite:////srv/named.db")
    assert settings.store_url({}, env={"REWIND_STORE": "sqlite:///x.db"}) == "sqlite:///x.db"


def test_absolute_url_resolves_only_relative_sqlite_paths(tmp_path):
    assert absolute_url("sqlite:///a/b.db", base=str(tmp_path)) == f"sqlite:///{tmp_path}/a/b.db"
    assert absolute_url("sqlite:///a.db?synchronous=full", base=str(tmp_path)) == (
        f"sqlite:///{tmp_path}/a.db?synchronous=full")
    assert absolute_url("sqlite:////srv/x.db", base=str(tmp_path)) == "sqlite:////srv/x.db"
    assert absolute_url("sqlite:///:memory:", base=str(tmp_path)) == "sqlite:///:memory:"
    assert absolute_url("redis://h:6379/0", base=str(tmp_path)) == "redis://h:6379/0"


def test_the_console_names_a_sqlite_store_by_its_absolute_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert views.store_label("sqlite:///.rewind/rewind.db") == str(
        tmp_path / ".rewind" / "rewind.db")
    assert views.store_label("sqlite:////var/lib/rewind/rewind.db") == "/var/lib/rewind/rewind.db"


def test_the_console_never_creates_a_store(tmp_path, monkeypatch):
    from dashboard import data
    from engine import StoreNotFound

    data.engine_for.clear()
    with pytest.raises(StoreNotFound, match=str(tmp_path / "nope.db")):
        data.engine_for(f"sqlite:///{tmp_path}/nope.db")
    assert list(tmp_path.iterdir()) == []


def test_the_console_says_the_store_is_missing_and_creates_nothing(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from dashboard import data

    missing = tmp_path / "missing.db"
    monkeypatch.setenv("REWIND_STORE", f"sqlite:///{missing}")
    monkeypatch.delenv("REWIND_CONSOLE_STORE", raising=False)
    data.engine_for.clear()
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60).run()
    assert not at.exception
    errors = "\n".join(e.value for e in at.error)
    assert "There is no store to show" in errors and views.plain(str(missing)) in errors
    assert not at.title and not at.metric  # never "Nothing needs you now"
    assert list(tmp_path.iterdir()) == []
