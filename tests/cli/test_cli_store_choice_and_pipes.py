"""A new user's first hour with the CLI: a wrong store is refused, never shown as an
empty fleet; --store works on either side of the command; a second rollback does not undo the
first one's notice; a closed pipe is no failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.fleet import LOOPING, seed_looping
from support.paths import ROOT

from engine import NOTICE_FLAG
from engine.cli.parser import main
from engine.cli.text import _fmt_utc


def rewind_process(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "REWIND_STORE"}
    environ["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], cwd=cwd, text=True,
                          capture_output=True, env={**environ, **(env or {})}, timeout=120)


@pytest.fixture
def store(tmp_path, open_engine) -> str:
    url = f"sqlite:///{tmp_path}/fleet/rewind.db"
    seed_looping(open_engine(url))
    return url


@pytest.mark.parametrize("where", [
    [],                                              # the default, from another folder
    ["--store", "sqlite:///missing/dir/x.db"],
    ["--store", "sqlite:///nothing-here.db"],
])
def test_a_store_that_does_not_exist_is_refused_and_never_created(tmp_path, where):
    done = rewind_process(*where, "sessions", "--status", "looping", cwd=tmp_path)
    assert done.returncode == 4, done.stderr
    assert "no Rewind store at " + str(tmp_path) in done.stderr
    assert done.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no .rewind/, no missing/, no file


def test_an_empty_store_url_is_a_usage_error_not_the_default(tmp_path):
    done = rewind_process("--store", "", "sessions", cwd=tmp_path)
    assert done.returncode == 2
    assert "the store URL is empty" in done.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("order", ["before", "after"])
def test_store_is_accepted_before_or_after_the_command(store, tmp_path, order):
    args = (["--store", store, "sessions", "--status", "looping"] if order == "before"
            else ["sessions", "--status", "looping", "--store", store])
    done = rewind_process(*args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert LOOPING in done.stdout
    path = store.removeprefix("sqlite:///")
    assert f"rewind: store {path}" in done.stderr  # every command says which store it read


def test_the_store_after_the_command_wins_over_the_one_before(store, tmp_path):
    done = rewind_process("--store", "sqlite:///elsewhere.db", "show", LOOPING,
                          "--store", store, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "elsewhere.db").exists()


def test_a_second_rollback_is_refused_unless_forced(store, open_engine, capsys):
    args = ["--store", store, "rollback", LOOPING, "--actor", "alice", "--reason", "loop"]
    assert main(args) == 0
    capsys.readouterr()
    engine = open_engine(store)
    first = [m for m in engine.get_session(LOOPING).state().messages if m.get(NOTICE_FLAG)]
    assert len(first) == 1

    assert main(args) == 1
    err = capsys.readouterr().err
    assert "rolled back already" in err and "--force" in err
    live = engine.get_session(LOOPING).state().messages
    assert [m for m in live if m.get(NOTICE_FLAG)] == first  # the user's notice stays

    assert main([*args, "--force"]) == 0


def test_a_closed_pipe_ends_the_command_quietly(store, tmp_path, open_engine):
    engine = open_engine(store)
    for i in range(300):  # more rows than one pipe buffer
        engine.session(f"extra-{i:03}", meta={"tenant": "acme"}).append_message("user", "hi")
    env = {k: v for k, v in os.environ.items() if k != "REWIND_STORE"}
    env["PYTHONPATH"] = str(ROOT)
    cmd = (f"{sys.executable} -m engine.cli --store {store} sessions --limit 300 | head -1; "
           "exit ${PIPESTATUS[0]}")
    done = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, text=True, capture_output=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "BrokenPipe" not in done.stderr and "failed" not in done.stderr
    assert done.stdout.startswith("SESSION")


def test_audit_refuses_an_action_it_never_records(store, capsys):
    assert main(["--store", store, "audit", "--action", "bogus"]) == 2
    err = capsys.readouterr().err
    assert "unknown action 'bogus'" in err and "quarantine_lift" in err


def test_quarantine_and_audit_say_until_which_tool_and_cut_with_an_ellipsis(store, capsys):
    reason = "the refund API answers HTTP 500 to every call since the 14:00 deploy " * 2
    assert main(["--store", store, "quarantine", "refund_api", "--actor", "alice",
                 "--reason", reason, "--until", "+2h"]) == 0
    said = capsys.readouterr().out
    assert "until 20" in said  # "until <date> UTC", not a bare date
    assert main(["--store", store, "audit", "--action", "quarantine"]) == 0
    out = capsys.readouterr().out
    assert "tool refund_api" in out and "…" in out


def test_quarantining_a_tool_no_agent_called_warns_and_suggests_the_name_meant(store, capsys):
    assert main(["--store", store, "quarantine", "refund_apl", "--actor", "alice",
                 "--reason", "typo"]) == 0
    said = capsys.readouterr().out
    assert "no agent called 'refund_apl'" in said and "did you mean 'refund_api'" in said
    assert main(["--store", store, "quarantine", "refund_api", "--actor", "alice",
                 "--reason", "HTTP 500 since 14:00"]) == 0
    assert "no agent called" not in capsys.readouterr().out


def test_audit_shows_the_notice_text_on_one_line_cut_with_an_ellipsis(store, capsys):
    text = ("We are sorry:\x1b[31m your refund\nis on its way. " + "More words follow. " * 10)
    assert main(["--store", store, "notice", LOOPING, text, "--actor", "alice"]) == 0
    capsys.readouterr()
    assert main(["--store", store, "audit", "--action", "notice"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if LOOPING in line)
    assert 'notice: "We are sorry:[31m your refund is on its way.' in row
    assert "\x1b" not in out and "…\"" in row
    assert "More words follow. " * 10 not in row  # bounded, not the whole text


def test_compensations_say_when_a_failed_one_is_tried_next(tmp_path, open_engine, capsys):
    url = f"sqlite:///{tmp_path}/rewind.db"
    eng = open_engine(url, compensation_backoff=(600.0, 4.0, 3600.0))
    s = eng.session("refund-9")
    s.snapshot(label="before refund")
    with s.step("refund_api", {"order": "A-1"}, side_effect=True,
                compensation=("refund_api.undo", {"order": "A-1"})) as call:
        call.ok({"refunded": 10})
    s.rollback(actor="alice", reason="wrong refund")

    def down(args, key):
        raise RuntimeError("HTTP 503")

    eng.compensations.register("refund_api.undo", down)
    eng.compensations.run()
    (comp,) = eng.compensations()
    assert comp.status == "pending" and comp.next_attempt_at is not None
    assert main(["--store", url, "compensations"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header, row = lines[0], next(line for line in lines if "refund-9" in line)
    assert "NEXT TRY" in header
    column = row[header.index("NEXT TRY"):]
    assert column.startswith(_fmt_utc(comp.next_attempt_at))
