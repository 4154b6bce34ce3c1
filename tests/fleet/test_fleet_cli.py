"""`rewind rollback --where …` and `rewind quarantine …` as an operator runs them."""

from __future__ import annotations

import pytest

from engine import Engine, LoopWaiting
from engine.cli.parser import EXIT_NOT_FOUND, EXIT_REFUSED, EXIT_USAGE, main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def url(tmp_path) -> str:
    """Two looping sessions of prompt v8, one of v7, and a healthy v8 one."""
    store = f"sqlite:///{tmp_path}/rewind.db"
    with Engine.open(store, on_loop="flag") as eng:
        for sid, version in (("a", "v8"), ("b", "v8"), ("c", "v7")):
            s = eng.session(sid, meta={"prompt_version": version})
            s.append_message("user", "hi")
            s.snapshot("start")
            with pytest.raises(LoopWaiting):  # flagged: waits for on-call
                for _ in range(3):
                    with s.step("image_crop", {"x": 1}) as call:
                        call.fail("invalid slice")
        eng.session("d", meta={"prompt_version": "v8"}).append_message("user", "fine")
    return store


def _statuses(url: str) -> dict[str, str]:
    with Engine.open(url) as eng:
        return {i.id: str(i.status) for i in eng.sessions()}


def test_dry_run_lists_and_changes_nothing(capsys, url):
    code, out, _ = run(capsys, "--store", url, "rollback", "--where", "status=looping",
                       "--where", "prompt_version=v8", "--dry-run", "--actor", "alice",
                       "--reason", "v8 loops")
    assert code == 0 and "dry run: 2 session(s)" in out
    rows = {line.split()[0] for line in out.splitlines()[2:] if line.strip()}
    assert {"a", "b"} <= rows and "c" not in rows
    assert _statuses(url) == {"a": "looping", "b": "looping", "c": "looping", "d": "healthy"}


def test_without_a_terminal_and_without_yes_it_refuses(capsys, url, monkeypatch):
    monkeypatch.setattr("sys.stdin.isatty", lambda: False, raising=False)
    code, _, err = run(capsys, "--store", url, "rollback", "--where", "status=looping",
                       "--actor", "alice", "--reason", "x")
    assert code == EXIT_REFUSED and "--yes" in err
    assert _statuses(url)["a"] == "looping"


def test_with_yes_every_match_is_rolled_back_under_one_batch(capsys, url):
    code, out, _ = run(capsys, "--store", url, "rollback", "--where", "status=looping",
                       "--where", "prompt-version=v8", "--yes", "--actor", "alice",
                       "--reason", "v8 loops")
    assert code == 0 and "2 rolled back, 0 refused" in out
    assert _statuses(url) == {"a": "rolled_back", "b": "rolled_back", "c": "looping",
                              "d": "healthy"}
    with Engine.open(url) as eng:
        batches = {e.detail["batch"] for e in eng.audit(action="rollback")}
        assert len(batches) == 1 and batches.pop() in out


def test_a_refused_session_makes_the_exit_code_say_so(capsys, url):
    code, out, _ = run(capsys, "--store", url, "rollback", "--where", "prompt_version=v8",
                       "--yes", "--actor", "alice", "--reason", "x")
    assert code == EXIT_REFUSED and "refused" in out and "NothingToRollBack" in out
    assert _statuses(url)["a"] == "rolled_back"


@pytest.mark.parametrize("argv,expect", [
    (["rollback", "--where", "colour=red"], "--where takes KEY=VALUE"),
    (["rollback", "a", "--where", "status=looping"], "not both"),
    (["rollback"], "--where"),
    (["rollback", "a", "--yes"], "go with --where"),
    (["rollback", "--where", "status=looping", "--to", "snap-1"], "--to"),
])
def test_usage_errors(capsys, url, argv, expect):
    try:
        code, _, err = run(capsys, "--store", url, *argv, "--actor", "alice", "--reason", "x")
    except SystemExit as exc:  # argparse's own usage error
        code, err = exc.code, capsys.readouterr().err
    assert code == EXIT_USAGE and expect in err


def test_single_session_rollback_still_works(capsys, url):
    code, out, _ = run(capsys, "--store", url, "rollback", "a", "--actor", "alice",
                       "--reason", "one")
    assert code == 0 and "rolled a back" in out


def test_quarantine_set_list_lift(capsys, url):
    code, out, _ = run(capsys, "--store", url, "quarantine", "refund_api", "--reason",
                       "payments down", "--actor", "alice", "--tenant", "acme", "--until", "+2h")
    assert code == 0 and "quarantined refund_api for tenant=acme" in out
    with Engine.open(url) as eng:
        (q,) = eng.quarantines()
        assert q.scope == {"tenant": "acme"} and q.until is not None
    code, out, _ = run(capsys, "--store", url, "quarantine", "--list")
    assert code == 0 and q.id in out and "payments down" in out
    code, _, err = run(capsys, "--store", url, "quarantine", "--lift", q.id)
    assert code == EXIT_USAGE and "--reason" in err
    code, out, _ = run(capsys, "--store", url, "quarantine", "--lift", q.id, "--reason", "ok",
                       "--actor", "bob")
    assert code == 0 and q.id in out
    code, _, err = run(capsys, "--store", url, "quarantine", "--lift", q.id, "--reason", "ok",
                       "--actor", "bob")
    assert code == EXIT_NOT_FOUND
    with Engine.open(url) as eng:
        assert eng.quarantines() == []
        assert [e.action for e in eng.audit()][:2] == ["quarantine_lift", "quarantine"]


@pytest.mark.parametrize("until", ["tomorrow", "+2x", "2026-13-40"])
def test_quarantine_until_must_be_readable(capsys, url, until):
    with pytest.raises(SystemExit) as caught:
        main(["--store", url, "quarantine", "x", "--reason", "r", "--actor", "a",
              "--until", until])
    assert caught.value.code == EXIT_USAGE


@pytest.mark.parametrize("until", ["+99999999999h", "+9" + "9" * 400 + "d"])
def test_quarantine_until_past_any_calendar_is_refused_with_its_reason(capsys, url, until):
    with pytest.raises(SystemExit) as caught:
        main(["--store", url, "quarantine", "x", "--reason", "r", "--actor", "a",
              "--until", until])
    assert caught.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "lies past 9999-12-31" in err and "OverflowError" not in err
    with Engine.open(url) as eng:
        assert eng.quarantines() == []


def test_quarantine_until_an_iso_time(capsys, url):
    code, out, _ = run(capsys, "--store", url, "quarantine", "x", "--reason", "r", "--actor",
                       "a", "--until", "2999-01-01T08:00")
    assert code == 0 and "2999-01-01 08:00:00 UTC" in out
