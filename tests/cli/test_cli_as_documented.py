"""A demanding new user's review of the engine and the CLI: what README.md promises, tried the
way people type it, on real SQLite files. Each test states a promise of the README.

- The CLI takes a command's options and positionals in any order (`rewind notice SESSION
  --actor alice "text"`), and `--` still marks where the positionals are.
- A wrong type is one clear error before anything is written: a rollback target that is not a
  snapshot id, an actor that is neither a name nor an `Actor` (never audited as "None"), a
  fleet filter no session can match, a recall `k` that is not a count, a query holding a lone
  surrogate.
"""

from __future__ import annotations

import pytest
from support.fleet import LOOPING, seed_looping
from support.paths import ROOT

from engine import NOTICE_FLAG, Actor
from engine.cli.parser import main
from engine.errors import ConfigError, StepError
from engine.memory.embeddings import HashingEmbedder
from engine.memory.session import MemoryConfig


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path}/rewind.db"


@pytest.fixture
def looping(url, open_engine):
    engine = open_engine(url)
    seed_looping(engine)
    return engine


def notices(engine) -> list[str]:
    return [m["content"] for m in engine.get_session(LOOPING).state().messages
            if m.get(NOTICE_FLAG)]


# -- the CLI: options and positionals in any order --------------------------------------------

@pytest.mark.parametrize("argv", [
    ["notice", LOOPING, "custom words", "--actor", "alice"],   # README's order
    ["notice", LOOPING, "--actor", "alice", "custom words"],   # argparse called this an error
    ["notice", "--actor=alice", LOOPING, "custom words"],
    ["notice", LOOPING, "--actor", "alice", "custom words", "--store", "{url}"],
])
def test_notice_text_is_taken_before_or_after_the_options(url, looping, capsys, argv):
    argv = [a.replace("{url}", url) for a in argv]
    assert main(["--store", url, *argv]) == 0, capsys.readouterr().err
    assert notices(looping) == ["custom words"]
    assert "custom words" in capsys.readouterr().out


def test_an_extra_word_is_still_a_usage_error(url, looping, capsys):
    with pytest.raises(SystemExit) as done:
        main(["--store", url, "notice", LOOPING, "--actor", "alice", "one", "two"])
    assert done.value.code == 2
    assert "unrecognized arguments: two" in capsys.readouterr().err
    assert notices(looping) == []


def test_a_double_dash_still_marks_a_session_id_that_looks_like_an_option(url, open_engine,
                                                                          capsys):
    engine = open_engine(url)
    with engine.session("-h").step("lookup", {"q": 1}) as call:
        call.ok("found")
    assert main(["--store", url, "show", "--last", "5", "--", "-h"]) == 0
    assert capsys.readouterr().out.startswith("session -h ")
    assert main(["--store", url, "rollback", "--actor", "alice", "--reason", "r", "--force",
                 "--", "-h"]) == 0
    assert "rolled -h back" in capsys.readouterr().out


# -- wrong types: one clear error, nothing written --------------------------------------------

@pytest.mark.parametrize("to", [5, 4.0, ["snap-2"]])
def test_a_rollback_target_that_is_not_a_snapshot_id_is_named(looping, to):
    s = looping.get_session(LOOPING)
    before = s.info()
    with pytest.raises(TypeError, match="a rollback target must be a snapshot id"):
        s.rollback(to=to, actor="alice", reason="loop")
    with pytest.raises(TypeError, match="a rollback target must be a snapshot id"):
        s.preview_rollback(to)
    assert s.info().epoch == before.epoch and looping.audit() == []


def test_a_snapshot_node_as_the_target_says_to_pass_its_id(looping):
    s = looping.get_session(LOOPING)
    with pytest.raises(TypeError, match=r"pass its \.id"):
        s.rollback(to=s.tree()[0], actor="alice", reason="loop")


@pytest.mark.parametrize("actor", [None, 5, b"alice"])
def test_an_actor_that_is_no_name_is_refused_not_audited_as_its_repr(looping, actor):
    s = looping.get_session(LOOPING)
    epoch = s.info().epoch
    with pytest.raises(TypeError, match="an actor must be a name"):
        s.rollback(actor=actor, reason="loop")
    with pytest.raises(TypeError, match="an actor must be a name"):
        s.inject_notice("hello", actor=actor)
    with pytest.raises(TypeError, match="an actor must be a name"):
        looping.quarantine("refund_api", actor=actor, reason="HTTP 500")
    assert s.info().epoch == epoch and notices(looping) == []
    assert looping.audit() == [] and looping.quarantines() == []
    # names and Actors still act
    assert s.rollback(actor=Actor("alice"), reason="loop").actor == "alice"


@pytest.mark.parametrize("filters, error", [
    ({"status": "loop"}, "status must be one of healthy, looping, rolled_back, stopped"),
    ({"tenant": 5}, "the tenant filter must be a string"),
    ({"updated_since": "yesterday"}, "updated_since must be a Unix time"),
])
def test_a_fleet_filter_no_session_could_match_is_an_error_not_an_empty_fleet(looping, filters,
                                                                             error):
    with pytest.raises((ValueError, TypeError), match=error):
        looping.sessions(**filters)
    assert [i.id for i in looping.sessions(status="looping")] == [LOOPING]


def test_recall_names_a_wrong_k_or_a_lone_surrogate_in_the_query(url, open_engine):
    # a hashing embedder: recall without loading the MiniLM model (seconds)
    s = open_engine(url, memory=MemoryConfig(embedder=HashingEmbedder())).session("mem")
    s.memory.add("FX rate EUR/USD fixed at 1.08 for this task", importance=0.9)
    with pytest.raises(TypeError, match="k, the number of memories to return, must be an int"):
        s.memory.recall("exchange rate", k="3")
    with pytest.raises(TypeError, match="must be an int"):
        s.memory.recall("exchange rate", k=True)
    with pytest.raises(ValueError, match="must be 0 or more, not -1"):
        s.memory.recall("exchange rate", k=-1)
    with pytest.raises(ValueError, match="the query: the text holds a lone surrogate"):
        s.memory.recall("rate \ud800", k=3)
    with pytest.raises(TypeError, match="key_prefix must be a string"):
        s.memory.recall("rate", key_prefix=5)
    assert s.memory.recall("exchange rate", k=0) == []
    assert [h.text for h in s.memory.recall("exchange rate", k=3)] == [
        "FX rate EUR/USD fixed at 1.08 for this task"]


def test_an_agent_turn_whose_text_is_not_a_string_is_named_and_not_recorded(url, open_engine):
    s = open_engine(url).session("turns")
    with pytest.raises(TypeError, match="an agent turn's text must be a string"):
        s.agent_turn(5)
    with pytest.raises(TypeError, match="must be a string"):
        s.agent_turn({"text": "hi"})
    assert s.steps() == []
    assert not s.agent_turn("Let me check.").looping and len(s.steps()) == 1


def test_set_vars_given_pairs_says_to_pass_a_dict(url, open_engine):
    s = open_engine(url).session("vars")
    with pytest.raises(TypeError, match=r"set_vars takes a dict of name -> value, not a list"):
        s.set_vars([("order_id", "A-1")])
    assert s.state().variables == {}
    s.set_vars(dict([("order_id", "A-1")]))
    assert s.state().variables == {"order_id": "A-1"}


@pytest.mark.parametrize("one", [{"role": "user", "content": "hi"}, "hi", b"hi"])
def test_append_messages_given_one_message_says_so(url, open_engine, one):
    s = open_engine(url).session("msgs")
    with pytest.raises(TypeError, match="append_messages takes a list of messages"):
        s.append_messages(one)
    assert s.state().messages == []
    s.append_messages([{"role": "user", "content": "hi"}])
    assert s.state().messages == [{"role": "user", "content": "hi"}]


# -- the freeze: errors name what the operator typed -----------------------------------------

def test_a_bad_declared_freeze_time_is_named_as_given_not_as_a_config_file_key(url, looping,
                                                                              capsys):
    with pytest.raises(ConfigError, match="the freeze's start must be an ISO 8601 time") as bad:
        looping.fleet.declare_freeze("garbage", "2026-10-08T00:00:00+08:00", actor="alice",
                               reason="holiday")
    assert "[rewind.freeze]" not in str(bad.value)
    assert main(["--store", url, "freeze", "--start", "2026-10-01", "--end", "soon",
                 "--actor", "alice", "--reason", "holiday"]) == 2
    err = capsys.readouterr().err
    assert "the freeze's end must be an ISO 8601 time" in err and "[rewind.freeze]" not in err
    assert looping.fleet.freeze_in_force()[0] is None
    assert looping.audit() == []


@pytest.mark.parametrize("argv, said", [
    (["--name", "National Day"], "--name: only when declaring a freeze"),
    (["--on-loop", "flag"], "--on-loop: only when declaring a freeze"),
    (["--start", "2026-10-01", "--end", "2026-10-08", "--lift", "--actor", "a", "--reason", "r"],
     "not both"),
])
def test_freeze_flags_that_would_be_ignored_are_a_usage_error(url, looping, capsys, argv, said):
    assert main(["--store", url, "freeze", *argv]) == 2
    assert said in capsys.readouterr().err
    assert looping.fleet.freeze_in_force()[0] is None and looping.audit() == []


def test_a_freeze_declared_with_equals_flags_is_in_force(url, looping, open_engine, capsys):
    assert main(["freeze", "--start=2026-10-01T00:00:00+08:00", "--end=2026-10-08T00:00:00+08:00",
                 "--on-loop=flag", "--name=National Day", "--actor=alice", "--reason=holiday",
                 f"--store={url}"]) == 0
    window, source = open_engine(url).fleet.freeze_in_force()  # a fresh process's view, uncached
    assert (window.name, window.on_loop, source) == ("National Day", "flag", "store")


# -- the Python API: a wrong type says what was expected --------------------------------------

def test_a_store_url_that_is_not_a_string_is_named(tmp_path, open_engine):
    with pytest.raises(TypeError, match="a store URL is a string"):
        open_engine(5)
    with pytest.raises(TypeError, match="not PosixPath"):
        open_engine(tmp_path / "rewind.db")
    assert list(tmp_path.iterdir()) == []  # nothing created anywhere


@pytest.mark.parametrize("call, error", [
    (lambda e: e.rollback_many("status=looping", actor="alice", reason="r"),
     "where must be a dict of filters"),
    (lambda e: e.fleet.declare_detector("repeat_threshold=3", actor="alice", reason="r"),
     "detector settings are a dict of DetectorConfig fields"),
    (lambda e: e.fleet.purge_abandoned("7d", actor="alice"), "older_than_s is a number of seconds"),
    (lambda e: e.fleet.purge_idle_sessions("30d", actor="alice"),
     "older_than_s is a number of seconds"),
    (lambda e: e.compensations(status="failing"),
     "status must be one of pending, running, done, failed, resolved"),
])
def test_fleet_calls_name_a_wrong_type_and_change_nothing(looping, call, error):
    before = [(i.id, i.epoch, i.status) for i in looping.sessions()]
    with pytest.raises((TypeError, ValueError), match=error):
        call(looping)
    assert [(i.id, i.epoch, i.status) for i in looping.sessions()] == before
    assert looping.audit() == [] and looping.fleet.detector_settings() == {}


@pytest.mark.parametrize("command", [["audit"], ["compensations"],
                                     ["compensations", "--status", "failed"]])
def test_a_mistyped_session_filter_is_not_found_not_an_empty_table(url, looping, capsys,
                                                                   command):
    assert main(["--store", url, *command, "--session", LOOPING + "x"]) == 4
    captured = capsys.readouterr()
    assert f"no session '{LOOPING}x'" in captured.err and captured.out == ""
    # a session that exists, with nothing to list, is an empty table
    assert main(["--store", url, *command, "--session", LOOPING]) == 0
    assert capsys.readouterr().out.split()[0] in ("TIME", "ID")


def test_the_audit_of_a_deleted_session_is_still_shown(url, looping, capsys):
    looping.rollback(LOOPING, actor="alice", reason="loop")
    assert looping.fleet.delete_session(LOOPING, actor="alice", reason="test data")
    assert main(["--store", url, "audit", "--session", LOOPING]) == 0
    assert "rollback" in capsys.readouterr().out


def test_show_last_zero_lists_no_snapshot_not_all_of_them(url, looping, capsys):
    assert main(["--store", url, "show", LOOPING, "--last=0"]) == 0
    table = capsys.readouterr().out.split("SNAPSHOT", 1)[1]
    assert "snap-" not in table
    assert main(["--store", url, "show", LOOPING, "--last", "2"]) == 0
    table = capsys.readouterr().out.split("SNAPSHOT", 1)[1]
    assert table.count("before refund_api") == 2


# -- a process killed mid-step: what a rollback cannot undo is said ---------------------------

KILLED_MID_STEP = """
import os, signal, sys
from engine import Engine
s = Engine.open(sys.argv[1]).session("paid")
s.append_message("user", "pay twice")
with s.step("pay", {"amount": 5}, side_effect=True, compensation=("refund", {"amount": 5})) as c:
    c.ok("paid")
with s.step("pay", {"amount": 6}, side_effect=True, compensation=("refund", {"amount": 6})):
    os.kill(os.getpid(), signal.SIGKILL)   # the payment may or may not have gone out
"""


def test_a_rollback_over_a_step_its_killed_process_left_running_warns(url, open_engine,
                                                                      capsys):
    import subprocess
    import sys

    root = ROOT
    done = subprocess.run([sys.executable, "-c", KILLED_MID_STEP, url], timeout=120,
                          env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})
    assert done.returncode == -9
    engine = open_engine(url)
    s = engine.get_session("paid")
    assert [(r.n, r.status) for r in s.steps()] == [(1, "ok"), (2, "running")]  # nothing lost
    with s.step("email", {"to": "user"}, side_effect=True) as call:  # no compensation given
        call.ok("sent")
    start = s.tree()[0].id
    preview = s.preview_rollback(start)
    assert [r.n for r in preview.uncompensated] == [2, 3]
    assert [c[0] for c in preview.compensations] == [1]

    assert main(["--store", url, "rollback", "paid", "--to", start, "--actor", "alice",
                 "--reason", "double payment"]) == 0
    err = capsys.readouterr().err
    assert "step 2 (pay) has a side effect and no compensation will run: it was still running" \
        in err
    assert "step 3 (email) has a side effect and no compensation will run: it registered no " \
        "compensation" in err
    assert [(c.step, c.name) for c in engine.compensations()] == [(1, "refund")]
    assert {r.n: r.on_live_line for r in s.steps()} == {1: False, 2: False, 3: False}


def test_a_step_call_entered_twice_is_refused_before_a_second_step_is_written(url, open_engine):
    s = open_engine(url).session("reuse")
    call = s.step("search", {"q": "rates"})
    with call:
        call.ok("first")
    with pytest.raises(StepError, match=r"this StepCall was used already \(step 1\)"):
        with call:
            call.ok("second")
    finished = s.step("search", {"q": "fx"}, snapshot=False)
    finished.ok("done")  # the record_steps form, never entered
    with pytest.raises(StepError, match="a call finished without `with`"):
        with finished:
            pass
    assert [(r.n, r.result_preview) for r in s.steps()] == [(1, '"first"')]


def test_a_dead_webhook_counts_every_alert_that_waits_for_it(url, looping):
    from engine.fleet.alerts import AlertConfig, AlertWorker

    def unreachable(url: str, body: bytes, timeout: float) -> int:
        raise ConnectionRefusedError("connection refused")

    for i in range(3):
        s = looping.session(f"charged-{i}")
        s.snapshot("start")
        with s.step("charge", {"n": i}) as call:
            call.ok("charged")
        looping.rollback(f"charged-{i}", actor="alice", reason="test", notice=False)
    worker = AlertWorker(looping, ["https://hooks.example/dead"],
                         AlertConfig(rules=("rollback",)), post=unreachable, start=0)
    try:
        result = worker.run_once()
    finally:
        worker.close()
    assert result["queued"] == 3 and result["delivered"] == 0
    assert result["waiting"] == 3  # said 1: only the alert tried so far


# -- configuration files: a misnamed table is not silently the defaults -----------------------

@pytest.mark.parametrize("table", ["[rewind.detectors]", "[rewind.Detector]", "[detector]"])
def test_a_misnamed_detector_table_stops_the_process_naming_it(tmp_path, monkeypatch,
                                                               open_engine, table):
    (tmp_path / "rewind.toml").write_text(f"{table}\nrepeat_threshold = 4\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("REWIND_CONFIG", raising=False)
    with pytest.raises(ConfigError, match=r"is not read; the detector's settings go in a table "
                                          r"named exactly \[rewind.detector\]") as refused:
        open_engine("sqlite:///rewind.db")
    assert table in str(refused.value) and "rewind.toml" in str(refused.value)
    assert not (tmp_path / "rewind.db").exists()


def test_a_shared_config_file_with_other_rewind_tables_still_opens(tmp_path, monkeypatch,
                                                                  open_engine):
    shared = tmp_path / "secrets.toml"
    shared.write_text('[rewind.freeze]\nname = "x"\n[rewind.users.bob]\nrole = "viewer"\n'
                      "[rewind.detector]\nrepeat_threshold = 4\n")
    monkeypatch.setenv("REWIND_CONFIG", str(shared))
    engine = open_engine(f"sqlite:///{tmp_path}/rewind.db")
    assert engine.fleet.detector_in_force()[0]["repeat_threshold"] == 4


# -- another process holding the file's write lock ---------------------------------------------

HOLD_THE_LOCK = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")   # a sqlite3 shell left in a write transaction
print("holding", flush=True)
sys.stdin.read()                  # until the test closes our stdin
conn.execute("ROLLBACK")
"""


def test_a_write_lock_held_elsewhere_names_the_store_and_writes_nothing(tmp_path, open_engine,
                                                                        monkeypatch, capsys):
    import subprocess
    import sys

    import engine.store.sqlite.tx as tx
    from engine.errors import StoreBusy

    url = f"sqlite:///{tmp_path}/rewind.db"
    s = open_engine(url).session("agent")
    s.append_message("user", "hi")
    monkeypatch.setattr(tx, "BUSY_TIMEOUT_S", 0.2)  # connections opened from now on wait 0.2 s
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK, f"{tmp_path}/rewind.db"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "holding\n"
        reader = open_engine(url)  # opening writes nothing, so the lock does not stop it
        assert reader.get_session("agent").state().messages == [{"role": "user", "content": "hi"}]
        with pytest.raises(StoreBusy, match=r"the SQLite store sqlite:///.*rewind\.db stayed "
                                            r"locked by another connection for 0\.2 s"):
            reader.get_session("agent").append_message("user", "lost?")
        assert main(["--store", url, "notice", "agent", "--actor", "alice"]) == 3
        err = capsys.readouterr().err
        assert "stayed locked by another connection" in err and "damaged" not in err
    finally:
        holder.communicate("", timeout=60)
    assert holder.returncode == 0
    fresh = open_engine(url).get_session("agent")
    assert fresh.state().messages == [{"role": "user", "content": "hi"}]
    assert fresh.info().epoch == 0 and open_engine(url).audit() == []


@pytest.mark.parametrize("switch, error", [
    ({"force": "no"}, "force is True or False"),
    ({"notice": 5}, "notice is True"),
    ({"expect_epoch": "0"}, "expect_epoch is the epoch read before"),
    ({"expect_epoch": True}, "expect_epoch is the epoch read before"),
])
def test_a_rollback_switch_of_the_wrong_type_is_named_not_obeyed(looping, switch, error):
    with pytest.raises(TypeError, match=error):
        looping.rollback(LOOPING, actor="alice", reason="loop", **switch)
    assert looping.get_session(LOOPING).info().epoch == 0 and looping.audit() == []
    done = looping.rollback(LOOPING, actor="alice", reason="loop", expect_epoch=0,
                            notice="custom", force=False)
    assert done.notice == "custom"
