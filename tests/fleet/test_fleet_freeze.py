"""The freeze is a fleet fact kept in the store: declared once (console or CLI,
audited), followed by every process on the store, whatever that process's own environment
says; the banner and `rewind freeze` state where the freeze comes from."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest
from support.paths import ROOT

from engine import Engine, PermissionDenied
from engine.cli.parser import main

NOW = time.time()
START, END = NOW - 3600, NOW + 86400


def test_a_declared_freeze_reaches_an_engine_that_was_given_none(open_engine, tmp_path):
    url = f"sqlite:///{tmp_path}/r.db"
    console = open_engine(url, freeze=None)
    agent = open_engine(url, freeze=None)  # like a plain Engine.open with no $REWIND_FREEZE_*
    assert agent.fleet.loop_policy().policy == "rollback"
    console.fleet.declare_freeze(START, END, name="National Day", on_loop="flag", actor="alice",
                           reason="holiday change freeze")
    agent._runtime.forget_declared_freeze()  # another process: within a second; here at once
    choice = agent.fleet.loop_policy()
    assert (choice.policy, choice.source, choice.reason) == ("flag", "freeze",
                                                             "freeze: National Day")
    assert agent.fleet.freeze_in_force()[1] == "store"
    (row,) = console.audit(action="freeze")
    assert row.actor == "alice" and row.reason == "holiday change freeze"
    assert row.detail["on_loop"] == "flag"

    assert console.fleet.end_freeze(actor="bob", reason="freeze over").name == "National Day"
    agent._runtime.forget_declared_freeze()
    assert agent.fleet.loop_policy().policy == "rollback"
    assert [e.actor for e in console.audit(action="freeze_end")] == ["bob"]


def test_the_stored_freeze_wins_over_a_process_configuration(open_engine, tmp_path):
    import datetime as dt

    from engine import FreezeWindow

    url = f"sqlite:///{tmp_path}/r.db"
    local = FreezeWindow(dt.datetime.fromtimestamp(START, dt.UTC),
                         dt.datetime.fromtimestamp(END, dt.UTC), "local", "rollback")
    agent = open_engine(url, freeze=local)
    assert agent.fleet.freeze_in_force() == (local, "config")
    open_engine(url).fleet.declare_freeze(START, END, name="fleet", on_loop="flag", actor="alice",
                                    reason="r")
    agent._runtime.forget_declared_freeze()
    assert agent.fleet.freeze.name == "fleet" and agent.fleet.loop_policy().policy == "flag"


def test_only_operators_declare_a_freeze_and_a_reason_is_needed(open_engine):
    from engine import Actor, Role

    engine = open_engine("sqlite:///:memory:")
    with pytest.raises(PermissionDenied):
        engine.fleet.declare_freeze(START, END, actor=Actor("v", Role.VIEWER), reason="r")
    with pytest.raises(ValueError, match="reason"):
        engine.fleet.declare_freeze(START, END, actor="alice", reason=" ")
    assert engine.fleet.freeze is None and engine.audit(action="freeze") == []


AGENT = textwrap.dedent("""
    import sys
    from engine import Engine, LoopDetected, LoopWaiting
    engine = Engine.open(sys.argv[1])       # no freeze given, none in the environment
    s = engine.session(sys.argv[2], meta={"locale": "en"})
    s.append_message("user", "crop the receipt")
    s.snapshot("start")
    try:
        for _ in range(8):
            with s.step("image_crop", {"x": 10}) as call:
                call.fail("invalid slice")
    except LoopWaiting:
        print("waiting")
    except LoopDetected as caught:
        print("rolled back" if caught.rollback else "not rolled back")
    print(s.info().status)
""")


@pytest.mark.parametrize("declared", [True, False])
def test_an_agent_process_follows_the_freeze_the_console_declared(tmp_path, declared):
    """An agent process and the console share a store: the agent reads no $REWIND_FREEZE_* and
    still flags instead of rolling back while the declared freeze lasts."""
    url = f"sqlite:///{tmp_path}/r.db"
    with Engine.open(url) as console:
        if declared:
            console.fleet.declare_freeze(START, END, name="freeze", on_loop="flag", actor="alice",
                                   reason="holiday")
    env = {k: v for k, v in os.environ.items() if not k.startswith("REWIND_")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", AGENT, url, "crop-1"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    if declared:
        # flagged: the session waits for on-call, never rolled back
        assert done.stdout.split() == ["waiting", "looping"]
    else:
        assert done.stdout.splitlines() == ["rolled back", "rolled_back"]


def test_the_cli_declares_shows_and_ends_the_freeze(tmp_path, open_engine, capsys):
    url = f"sqlite:///{tmp_path}/r.db"
    open_engine(url)
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(t))  # noqa: E731
    assert main(["freeze", "--store", url, "--start", iso(START), "--end", iso(END),
                 "--name", "Holiday", "--on-loop", "flag", "--actor", "alice",
                 "--reason", "holiday"]) == 0
    assert "declared in the store" in capsys.readouterr().out
    assert main(["--store", url, "freeze"]) == 0
    out = capsys.readouterr().out
    assert "Holiday" in out and "in force" in out and "every process" in out
    assert main(["--store", url, "freeze", "--lift", "--actor", "bob", "--reason", "over"]) == 0
    assert main(["--store", url, "freeze", "--lift", "--actor", "bob", "--reason", "x"]) == 4
    assert main(["--store", url, "freeze", "--start", iso(START)]) == 2  # no actor, no end


def _freeze_exempt_fleet(engine) -> None:
    """Under a declared flag freeze: two sessions opened exempt, one not."""
    engine.fleet.declare_freeze(START, END, name="Holiday", on_loop="flag", actor="alice",
                                reason="holiday")
    engine._runtime.forget_declared_freeze()
    for sid in ("canary-1", "canary-2"):
        engine.session(sid, on_loop="rollback", freeze_exempt=True)
    engine.session("canary-1", freeze_exempt=True)  # opened again: noted once
    engine.session("ordinary")


def test_sessions_opened_exempt_from_the_freeze_are_counted_on_every_store(store_url,
                                                                          open_engine):
    engine = open_engine(store_url)
    _freeze_exempt_fleet(engine)
    assert engine.fleet.exempt_sessions() == ["canary-1", "canary-2"]
    assert engine.fleet.exempt_sessions(active_since=END) == []  # none changed since then
    assert engine.fleet.delete_session("canary-2", actor="alice", reason="done")
    assert engine.fleet.exempt_sessions(START) == ["canary-1"]
    # the exemption is the handle's: an exempt handle keeps its own policy, the others wait
    assert engine.session("canary-1", on_loop="rollback",
                          freeze_exempt=True).loop_policy().policy == "rollback"
    assert engine.session("ordinary", on_loop="rollback").loop_policy().policy == "flag"


def test_deleting_or_purging_a_session_forgets_its_exemption_and_nothing_else(store_url,
                                                                              open_engine):
    engine = open_engine(store_url)
    _freeze_exempt_fleet(engine)
    engine.session("idle-exempt", freeze_exempt=True)
    store = engine._runtime.store
    assert sorted(store.fleet_docs("freeze_exempt")) == ["canary-1", "canary-2", "idle-exempt"]
    assert engine.fleet.delete_session("canary-2", actor="alice", reason="done")
    assert sorted(store.fleet_docs("freeze_exempt")) == ["canary-1", "idle-exempt"]
    # a purge keeps what is evidence or recent; the exemption goes with the session it purged
    later = time.time() + 3600
    engine._runtime.clock = lambda: later
    with engine.session("canary-1").step("crop", {"x": 1}) as call:  # activity: not idle
        call.ok("done")
    assert engine.fleet.purge_idle_sessions(1800, dry_run=True, actor="alice")["sessions"] == 2
    assert sorted(store.fleet_docs("freeze_exempt")) == ["canary-1", "idle-exempt"]  # dry run
    assert engine.fleet.purge_idle_sessions(1800, actor="alice")["sessions"] == 2
    assert sorted(s.id for s in engine.sessions()) == ["canary-1"]  # idle-exempt, ordinary went
    assert sorted(store.fleet_docs("freeze_exempt")) == ["canary-1"]
    assert engine.fleet.exempt_sessions() == ["canary-1"]


def test_rewind_freeze_says_flagged_sessions_wait_and_counts_the_exempt_ones(
        tmp_path, open_engine, capsys):
    url = f"sqlite:///{tmp_path}/r.db"
    _freeze_exempt_fleet(open_engine(url))
    assert main(["--store", url, "freeze"]) == 0
    out = capsys.readouterr().out
    assert "a flagged session waits until an operator rolls it back, releases or stops it" in out
    assert "rewind rollback|release|stop SESSION" in out
    assert ("2 sessions are exempt from it (opened with freeze_exempt=True) and keep their own "
            "loop policy: canary-1, canary-2") in out


def test_rewind_freeze_without_exempt_sessions_says_the_policy_applies_to_all(
        tmp_path, open_engine, capsys):
    url = f"sqlite:///{tmp_path}/r.db"
    open_engine(url).session("ordinary")
    assert main(["--store", url, "freeze", "--start", "2026-01-01T00:00:00+00:00", "--end",
                 "2099-01-01T00:00:00+00:00", "--on-loop", "flag", "--actor", "alice",
                 "--reason", "holiday"]) == 0
    out = capsys.readouterr().out
    assert "a flagged session waits until an operator" in out
    assert "no session is exempt from it: its loop policy applies to every session" in out
