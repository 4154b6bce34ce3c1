"""The CLI as a careless operator uses it: no tracebacks, exit codes that say what happened,
no password on the screen, no purge without confirmation, no double rollback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from support.paths import ROOT

from engine import Engine
from engine.cli.parser import (
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_STORE,
    EXIT_USAGE,
    build_parser,
    main,
    parse_age,
    scrub,
)
from engine.store import redact


def rewind(*argv: str, stdin: str | None = "", timeout: float = 120) -> subprocess.CompletedProcess:
    """`rewind ARGV…` in a fresh process, as an operator runs it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("REWIND_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *argv],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.fixture
def url(tmp_path) -> str:
    """A SQLite store with a session that has something to roll back, and an old branch."""
    store = f"sqlite:///{tmp_path}/rewind.db"
    clock = [1_000_000.0]
    with Engine.open(store, clock=lambda: clock[0]) as eng:
        s = eng.session("sess-1", meta={"tenant": "acme"})
        s.append_message("user", "refund order A-1")
        s.snapshot("start")
        s.append_message("assistant", "working on it")
        old = eng.session("old-1")
        old.append_message("user", "a")
        old.snapshot("s")
        old.append_message("user", "b")
        old.rollback(actor="alice", reason="old loop", notice=False)
    return store


def run_main(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- exit codes and messages -----------------------------------------------------------------------
def test_help_documents_the_exit_codes():
    text = build_parser().format_help()
    assert "exit codes:" in text
    for code in ("0", "1", "2", "3", "4"):
        assert f"\n  {code} " in text


@pytest.mark.parametrize(
    "argv,code,message",
    [
        (["rollback", "sess-1", "--actor", "", "--reason", "x"], EXIT_USAGE, "--actor must not be"),
        (["rollback", "sess-1", "--actor", "  ", "--reason", "x"], EXIT_USAGE, "--actor must not"),
        (["notice", "sess-1", "--actor", ""], EXIT_USAGE, "--actor must not be empty"),
        (["purge", "--days", "-1"], EXIT_USAGE, "--days must be a number >= 0"),
        (["purge", "--older-than=-1d"], EXIT_USAGE, "an age must be"),
        (["purge", "--days", "nan"], EXIT_USAGE, "--days must be a number >= 0"),
        (["show", " "], EXIT_USAGE, "only whitespace"),
        (["show", "sess\u200b1"], EXIT_USAGE, "ZERO WIDTH SPACE"),
        (["show", "no-such-session"], EXIT_NOT_FOUND, "no session 'no-such-session'"),
        (["rollback", "no-such", "--actor", "a", "--reason", "r"], EXIT_NOT_FOUND, "no session"),
        (
            ["rollback", "sess-1", "--to", "nope", "--actor", "a", "--reason", "r"],
            EXIT_NOT_FOUND,
            "no snapshot",
        ),
    ],
)
def test_user_errors_exit_with_a_message_and_no_traceback(capsys, url, argv, code, message):
    with pytest.raises(SystemExit) if code == EXIT_USAGE else _no_raise() as exited:
        result = main(["--store", url, *argv])
    err = capsys.readouterr().err
    got = exited.value.code if code == EXIT_USAGE else result
    assert got == code
    assert message in err and "Traceback" not in err


class _no_raise:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_an_unknown_url_scheme_is_a_usage_error(capsys):
    code, _, err = run_main(capsys, "--store", "foo://u:secret@host/x", "sessions")
    assert code == EXIT_USAGE and "unknown store URL" in err and "secret" not in err


def test_a_corrupt_database_is_reported_by_doctor_not_crashed(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not a database at all, just text " * 100)
    for command in ("doctor", "sessions"):
        result = rewind("--store", f"sqlite:///{bad}", command)
        assert result.returncode == EXIT_STORE, result.stderr
        assert "not a database" in result.stderr and "Traceback" not in result.stderr
    assert (
        "doctor: the store is not usable" in rewind("--store", f"sqlite:///{bad}", "doctor").stderr
    )


def test_a_read_only_database_is_reported_clearly(url, tmp_path):
    path = url.removeprefix("sqlite:///")
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    if subprocess.run(["chattr", "+i", path], capture_output=True).returncode != 0:
        pytest.skip("cannot make a file immutable here (chattr +i needs root and ext4/xfs)")
    try:
        listing = rewind("--store", url, "sessions")
        writing = rewind("--store", url, "notice", "sess-1", "--actor", "alice")
    finally:
        subprocess.run(["chattr", "-i", path], check=True)
    # opened read-only: reading commands work, writing ones say why they cannot
    assert listing.returncode == 0, listing.stderr
    assert "sess-1" in listing.stdout
    assert writing.returncode == EXIT_STORE
    assert "read-only" in writing.stderr and "Traceback" not in writing.stderr


def test_an_unreachable_redis_names_the_store_but_never_its_password(capsys):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    for target in (
        f"redis://127.0.0.1:{port}/0?password=hunter2&retries=0",
        f"redis://app:hunter2@127.0.0.1:{port}/0?retries=0",
    ):
        code, out, err = run_main(capsys, "--store", target, "sessions")
        assert code == EXIT_STORE
        assert f"127.0.0.1:{port}" in err and "hunter2" not in err + out
        assert "Traceback" not in err


def test_redact_masks_password_query_parameters_and_nested_urls():
    assert redact("redis://h:6379/0?password=s3cret") == "redis://h:6379/0?password=***"
    assert (
        redact("redis://h/0?db=1&Password=x&retries=0") == "redis://h/0?db=1&Password=***&retries=0"
    )
    assert redact("redis://u:pw@h/0") == "redis://u:***@h/0"
    assert "pw" not in redact("redis://h/0?fallback=redis://u:pw@h2/0")
    assert redact("sqlite:///x.db") == "sqlite:///x.db"
    assert "pw" not in redact("redis://u:pw@[bad")


def test_every_url_the_cli_prints_is_redacted(capsys, url):
    assert scrub("cannot reach (redis://h:1/0?password=hunter2).") == (
        "cannot reach (redis://h:1/0?password=***)."
    )
    code, out, _ = run_main(capsys, "--store", url + "?password=hunter2", "sessions")
    assert code == 0 and "hunter2" not in out and "password=***" in out


def test_stored_text_cannot_drive_the_terminal(capsys, url):
    with Engine.open(url) as eng:
        s = eng.session("sess-1")
        s.inject_notice("\x1b[2J\x1b[31mwiped\x1b[0m", actor="al\x1bice")
    code, out, _ = run_main(capsys, "--store", url, "audit", "--session", "sess-1")
    assert code == 0 and "\x1b" not in out and "\\x1b" in out


# -- rollback -------------------------------------------------------------------------------------
def test_rollback_refuses_when_nothing_would_leave_the_live_line(capsys, url):
    with Engine.open(url) as eng:
        eng.session("sess-1").snapshot("now")
    code, _, err = run_main(
        capsys, "--store", url, "rollback", "sess-1", "--actor", "alice", "--reason", "try"
    )
    assert code == EXIT_REFUSED and "nothing to roll back" in err
    with Engine.open(url) as eng:
        assert eng.get_session("sess-1").branches() == []
        assert eng.audit(session="sess-1") == []


def test_rollback_passes_the_epoch_it_read(capsys, url, monkeypatch):
    seen = {}
    real = Engine.rollback

    def spy(self, sid, to=None, **kwargs):
        seen.update(kwargs)
        return real(self, sid, to, **kwargs)

    monkeypatch.setattr(Engine, "rollback", spy)
    with Engine.open(url) as eng:
        epoch = eng.get_session("sess-1").info().epoch
    code, out, _ = run_main(
        capsys, "--store", url, "rollback", "sess-1", "--actor", "alice", "--reason", "loop"
    )
    assert code == 0 and "rolled sess-1 back" in out
    assert seen["expect_epoch"] == epoch


def test_of_eight_concurrent_rollbacks_only_the_first_wins(url):
    with Engine.open(url) as eng:
        epoch = eng.get_session("sess-1").info().epoch
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "engine.cli",
                "--store",
                url,
                "rollback",
                "sess-1",
                "--actor",
                f"op{i}",
                "--reason",
                "loop",
                "--expect-epoch",
                str(epoch),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for i in range(8)
    ]
    results = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in procs]
    for p in procs:
        p.stdout.close()
        p.stderr.close()
    wins = [r for r in results if r[0] == 0]
    assert len(wins) == 1, results
    for code, _, err in results:
        if code != 0:
            assert code == EXIT_REFUSED and "Traceback" not in err
            assert "rolled back" in err or "epoch" in err
    with Engine.open(url) as eng:
        assert len(eng.get_session("sess-1").branches()) == 1


# -- purge ----------------------------------------------------------------------------------------
def test_parse_age_accepts_days_and_units():
    assert parse_age("7") == parse_age("7d") == 7 * 86400
    assert (
        parse_age("12h") == 12 * 3600 and parse_age("30m") == 1800 and parse_age("2w") == 14 * 86400
    )
    assert parse_age("0") == 0


def test_purge_dry_run_lists_and_deletes_nothing(capsys, url):
    code, out, _ = run_main(capsys, "--store", url, "purge", "--older-than", "0", "--dry-run")
    assert code == 0 and "old-1" in out and "old loop" in out
    assert "1 abandoned branch(es)" in out and "nothing was deleted" in out
    with Engine.open(url) as eng:
        assert len(eng.get_session("old-1").branches()) == 1


def test_purge_without_a_terminal_or_yes_refuses(url):
    result = rewind("--store", url, "purge", "--days", "0", stdin="y\n")
    assert result.returncode == EXIT_REFUSED
    assert "--yes" in result.stderr and "Traceback" not in result.stderr
    with Engine.open(url) as eng:
        assert len(eng.get_session("old-1").branches()) == 1


def test_purge_asks_on_a_terminal_and_deletes_only_when_confirmed(capsys, url, monkeypatch):
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    answers = iter(["n", "yes"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    code, _, err = run_main(capsys, "--store", url, "purge", "--older-than", "0s")
    assert code == EXIT_REFUSED and "cancelled" in err
    with Engine.open(url) as eng:
        assert len(eng.get_session("old-1").branches()) == 1
    code, out, _ = run_main(capsys, "--store", url, "purge", "--older-than", "0s")
    assert code == 0 and '"branches": 1' in out
    with Engine.open(url) as eng:
        assert eng.get_session("old-1").branches() == []


def test_purge_with_yes_applies_the_age(capsys, url):
    code, out, _ = run_main(capsys, "--store", url, "purge", "--older-than", "30000d", "--yes")
    assert code == 0 and "nothing to delete" in out
    code, out, _ = run_main(capsys, "--store", url, "purge", "--days", "0", "--yes")
    assert code == 0 and '"branches": 1' in out


# -- hash-password and dashboard ----------------------------------------------------------------
def test_hash_password_refuses_an_empty_password_without_a_traceback():
    result = rewind("hash-password", stdin="\n")
    assert result.returncode == EXIT_USAGE
    assert "must not be empty" in result.stderr and "Traceback" not in result.stderr
    result = rewind("hash-password", "--password", "s3cret")
    assert result.returncode == 0 and result.stdout.startswith("scrypt$32768$8$1$")


def test_dashboard_allowed_hosts_keep_the_loopback_names(monkeypatch, url):
    calls = []
    monkeypatch.setattr("engine.cli.commands.subprocess.call",
                        lambda cmd, **kw: calls.append(cmd) or 0)
    assert main(["--store", url, "dashboard", "--address", "0.0.0.0",
                 "--allowed-host", "rewind.example.com"]) == 0
    cmd = calls[0]
    hosts = [cmd[i + 1] for i, arg in enumerate(cmd) if arg == "--server.allowedHosts"]
    assert hosts == ["localhost", "127.0.0.1", "::1", "rewind.example.com"]
    calls.clear()
    main(["--store", url, "dashboard"])
    assert "--server.allowedHosts" not in calls[0]  # .streamlit/config.toml's list applies


@pytest.mark.parametrize("argv,code,message", [
    (["release", "sess-1", "--reason", "go on"], EXIT_REFUSED,
     "'sess-1' is not waiting for on-call"),
    (["stop", "sess-1", "--reason", "halt"], EXIT_REFUSED, "'sess-1' is not waiting for on-call"),
    (["release", "no-such", "--reason", "go on"], EXIT_NOT_FOUND, "no session 'no-such'"),
    (["stop", "sess-1", "--reason", " "], EXIT_REFUSED, "needs a reason"),
], ids=["release-not-waiting", "stop-not-waiting", "unknown", "blank-reason"])
def test_a_decision_the_engine_refuses_exits_with_why_and_writes_nothing(capsys, url, argv, code,
                                                                         message):
    """`rewind release|stop` on a session that does not wait, an unknown one, or with a blank
    reason: the exit code and message say which, and the store is left as it was."""
    with Engine.open(url, create=False) as engine:
        before = (engine.session_info("sess-1"), len(engine.audit()))
    result, _out, err = run_main(capsys, "--store", url, *argv[:2], "--actor", "alice",
                                 *argv[2:])
    assert result == code and message in err and "Traceback" not in err
    with Engine.open(url, create=False) as engine:
        assert (engine.session_info("sess-1"), len(engine.audit())) == before
