"""`rewind …` on a temporary SQLite store: one smoke test per on-call command, asserting on what
the operator reads and on what the store holds afterwards.

The store is seeded through the engine API: `refund-42` looped on refund_api and was only flagged
(policy "flag"), with a side-effecting points_debit between its "start" snapshot and the loop;
`faq-7` is healthy. Commands run in-process through `engine.cli.main` (output captured), and
through the real `python -m engine.cli` in a subprocess. `demo` is covered in test_demo.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.fleet import LOOPING, seed_looping
from support.paths import ROOT

from dashboard.signin.passwords import verify_password
from engine import NOTICE_FLAG, PAUSED_TEMPLATES, TEMPLATES
from engine.cli.parser import main

HEALTHY = "faq-7"


@pytest.fixture
def store(tmp_path, open_engine) -> str:
    url = f"sqlite:///{tmp_path}/rewind.db"
    engine = open_engine(url)
    seed_looping(engine)
    s = engine.session(HEALTHY, meta={"tenant": "acme", "scenario": "faq", "locale": "en"})
    s.append_message("user", "What are your opening hours?")
    with s.step("search_faq", {"q": "opening hours"}) as call:
        call.ok({"answer": "9 to 5"})
    s.append_message("assistant", "We are open from 9 to 5.")
    return url


@pytest.fixture
def rewind(capsys):
    """`rewind(*args)`: run a command in-process; returns (exit code, what it printed)."""

    def run(*args: str) -> tuple[int, str]:
        code = main(list(args))
        return code, capsys.readouterr().out

    return run


def rows(out: str) -> dict[str, list[str]]:
    """A printed table as {first column: columns}, header and rule left out."""
    lines = [line for line in out.splitlines()[2:] if line.strip()]
    return {line.split()[0]: line.split() for line in lines}


def snapshot_labelled(engine, sid: str, label: str) -> str:
    return next(n.id for n in engine.get_session(sid).tree() if n.label == label)


def test_sessions_lists_each_session_with_its_status_and_verdict(store, rewind):
    code, out = rewind("--store", store, "sessions")
    assert code == 0
    table = rows(out.split("\n\n")[0])
    assert table[LOOPING][1:3] == ["looping", "globex"]
    assert table[LOOPING][-1] == "exact_repeat"
    assert table[HEALTHY][1:3] == ["healthy", "acme"]
    assert table[HEALTHY][-1] == "-"
    assert f"2 session(s) in {store}" in out

    code, out = rewind("--store", store, "sessions", "--status", "looping")
    assert code == 0
    assert set(rows(out.split("\n\n")[0])) == {LOOPING}

    code, out = rewind("--store", store, "sessions", "--json")
    assert code == 0
    listed = {s["id"]: s for s in json.loads(out)}
    assert set(listed) == {LOOPING, HEALTHY}
    assert listed[LOOPING]["status"] == "looping"


def test_show_explains_the_verdict_and_suggests_a_target(store, rewind, open_engine):
    suggested = open_engine(store).get_session(LOOPING).suggested_target()
    assert suggested
    code, out = rewind("--store", store, "show", LOOPING)
    assert code == 0
    assert f"session {LOOPING}  status=looping" in out
    assert "verdict: exact_repeat:" in out and "refund_api" in out
    assert f"suggested rollback target: {suggested}" in out
    tree = rows(out.split("\n\n", 1)[1])
    assert suggested in tree
    assert "start" in [cols[2] for cols in tree.values()]
    assert tree[suggested][-1] == "yes"  # restorable


def test_rollback_goes_to_the_suggested_target_and_notifies_the_user(store, rewind, open_engine):
    engine = open_engine(store)
    suggested = engine.get_session(LOOPING).suggested_target()
    code, out = rewind(
        "--store", store, "rollback", LOOPING, "--actor", "alice", "--reason", "loop on refund_api"
    )
    assert code == 0
    assert f"rolled {LOOPING} back to {suggested} (epoch 1)" in out
    assert "kept on abandoned branch" in out
    assert f"notice sent: {TEMPLATES['en']}" in out
    info = engine.get_session(LOOPING).info()
    assert info.status == "rolled_back" and info.head == suggested
    last = engine.get_session(LOOPING).state().messages[-1]
    assert last["content"] == TEMPLATES["en"] and last[NOTICE_FLAG]


def test_rollback_across_a_side_effect_queues_its_compensation(store, rewind, open_engine):
    start = snapshot_labelled(open_engine(store), LOOPING, "start")
    code, out = rewind(
        "--store",
        store,
        "rollback",
        LOOPING,
        "--to",
        start,
        "--actor",
        "alice",
        "--reason",
        "customer cancelled",
        "--no-notice",
    )
    assert code == 0
    assert f"rolled {LOOPING} back to {start}" in out
    assert "compensation queued: points_refund for step 2 (pending)" in out
    assert "notice sent" not in out

    code, out = rewind("--store", store, "compensations")
    assert code == 0
    (comp,) = rows(out).values()
    assert comp[1:5] == [LOOPING, "2", "points_refund", "pending"]
    code, out = rewind("--store", store, "compensations", "--status", "done")
    assert code == 0 and rows(out) == {}


def test_compensations_are_retried_and_resolved_with_an_actor_and_a_reason(
    store, capsys, open_engine
):
    engine = open_engine(store, compensation_attempts=1)
    engine.rollback(LOOPING, to=snapshot_labelled(engine, LOOPING, "start"), actor="alice",
                    reason="loop", notice=False)
    worker = open_engine(store, compensation_attempts=1)
    worker.compensations.register("points_refund", lambda args, key: 1 / 0)
    worker.compensations.run()
    [comp] = engine.compensations(status="failed")
    worker.close()  # its heartbeat stays for two minutes: forget it, as after a long pause
    engine.store.heartbeat_worker(worker.config.worker_id, [], engine.clock(), 0)

    def rewind(*args: str) -> tuple[int, str, str]:
        code = main(["--store", store, "compensations", *args])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    code, out, _ = rewind()
    assert code == 0 and rows(out)[str(comp.id)][4:8] == ["failed", "1", "-", "no"]
    code, out, err = rewind("--retry", str(comp.id), "--actor", "alice", "--reason",
                            "points service is back")
    assert code == 0 and "is pending again" in out
    assert "no running process has registered points_refund" in err
    assert engine.compensations()[0].status == "pending"
    [event] = engine.audit(action="compensation.retry")
    assert (event.actor, event.reason) == ("alice", "points service is back")

    code, out, err = rewind("--resolve", str(comp.id), "--actor", "alice", "--reason",
                            "refunded by hand")
    assert code == 0 and "marked resolved by alice" in out
    assert engine.compensations()[0].resolved_by == "alice"
    code, _, err = rewind("--retry", str(comp.id), "--actor", "alice", "--reason", "again")
    assert code == 1 and "resolved by hand by alice" in err
    code, _, err = rewind("--resolve", "9999", "--actor", "alice", "--reason", "typo")
    assert code == 4 and "no compensation 9999" in err
    code, _, err = rewind("--retry", str(comp.id), "--actor", "alice")
    assert code == 2 and "--reason" in err
    with pytest.raises(SystemExit):  # argparse: one action at a time
        main(["--store", store, "compensations", "--retry", "1", "--resolve", "1"])
    code, out, _ = rewind("--status", "resolved")
    assert code == 0 and list(rows(out)) == [str(comp.id)]


def test_notice_lands_in_the_session_messages(store, rewind, open_engine):
    text = "We reset this conversation; please check the last answer."
    code, out = rewind("--store", store, "notice", HEALTHY, text, "--actor", "alice")
    assert code == 0
    assert f"notice appended to {HEALTHY}: {text}" in out
    code, out = rewind("--store", store, "notice", LOOPING, "--actor", "alice")
    assert code == 0
    # No text: the template for the session's locale and for what happened. LOOPING was
    # flagged, not rolled back, so the notice claims no reset.
    assert PAUSED_TEMPLATES["en"] in out and "reset" not in out

    engine = open_engine(store)
    last = engine.get_session(HEALTHY).state().messages[-1]
    assert last == {"role": "assistant", "content": text, NOTICE_FLAG: True}
    assert engine.get_session(LOOPING).state().messages[-1]["content"] == PAUSED_TEMPLATES["en"]


def test_audit_lists_who_did_what(store, rewind):
    assert (
        rewind(
            "--store",
            store,
            "rollback",
            LOOPING,
            "--actor",
            "alice",
            "--reason",
            "loop on refund_api",
            "--no-notice",
        )[0]
        == 0
    )
    assert rewind("--store", store, "notice", HEALTHY, "--actor", "bob")[0] == 0

    code, out = rewind("--store", store, "audit")
    assert code == 0
    assert "loop on refund_api" in out
    events = [line.split() for line in out.splitlines()[2:]]
    # newest first; TIME takes two columns (date and time)
    assert [(e[2], e[3], e[4]) for e in events[:2]] == [
        ("bob", "notice", HEALTHY),
        ("alice", "rollback", LOOPING),
    ]
    code, out = rewind("--store", store, "audit", "--action", "notice")
    assert code == 0
    assert {line.split()[3] for line in out.splitlines()[2:]} == {"notice"}
    code, out = rewind("--store", store, "audit", "--session", HEALTHY)
    assert code == 0
    assert {line.split()[4] for line in out.splitlines()[2:]} == {HEALTHY}


def test_purge_deletes_abandoned_branches_and_keeps_the_live_line(store, rewind, open_engine):
    assert (
        rewind(
            "--store",
            store,
            "rollback",
            LOOPING,
            "--actor",
            "alice",
            "--reason",
            "loop",
            "--no-notice",
        )[0]
        == 0
    )
    engine = open_engine(store)
    live = engine.get_session(LOOPING).state().messages
    assert engine.get_session(LOOPING).branches()

    code, out = rewind("--store", store, "purge", "--days", "0", "--yes")
    assert code == 0
    removed = json.loads(out)
    assert removed["branches"] == 1 and removed["steps"] > 0
    assert engine.get_session(LOOPING).branches() == []
    assert engine.get_session(LOOPING).state().messages == live

    code, out = rewind("--store", store, "purge", "--older-than", "7d")  # none is that old
    assert code == 0 and "nothing to delete" in out
    assert engine.get_session(LOOPING).state().messages == live


def test_purge_without_an_age_deletes_nothing_and_says_to_name_one(store, open_engine, capsys):
    assert main(["--store", store, "rollback", LOOPING, "--actor", "alice", "--reason", "loop",
                 "--no-notice"]) == 0
    engine = open_engine(store)
    branches = engine.get_session(LOOPING).branches()
    assert branches
    capsys.readouterr()
    assert main(["--store", store, "purge", "--yes"]) == 2
    said = capsys.readouterr()
    assert "--older-than AGE" in said.err + said.out
    assert "nothing was deleted" in said.err + said.out
    assert engine.get_session(LOOPING).branches() == branches


def test_doctor_reports_a_healthy_store(store, rewind):
    code, out = rewind("--store", store, "doctor")
    assert code == 0
    assert out.startswith(f"{store}: ok")
    assert "warning" not in out


def test_hash_password_prints_a_hash_the_console_accepts(rewind):
    code, out = rewind("hash-password", "--password", "olivia-on-call")
    assert code == 0
    hashed = out.strip()
    assert "olivia-on-call" not in hashed
    assert verify_password("olivia-on-call", hashed)
    assert not verify_password("wrong", hashed)


def _rewind_process(*args: str, store: str | None = None, stdin: str | None = None):
    """The real command line: a new Python process running this checkout's `engine.cli`."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if store is not None:
        env["REWIND_STORE"] = store
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_command_line_reads_the_store_from_the_environment(store):
    done = _rewind_process("sessions", "--status", "looping", store=store)
    assert done.returncode == 0, done.stderr
    assert set(rows(done.stdout.split("\n\n")[0])) == {LOOPING}
    assert f"1 session(s) in {store}" in done.stdout

    done = _rewind_process("rollback", LOOPING, "--actor", "alice", "--reason", "loop", store=store)
    assert done.returncode == 0, done.stderr
    assert f"rolled {LOOPING} back to snap-" in done.stdout


def test_the_command_line_hashes_a_password_read_from_stdin():
    done = _rewind_process("hash-password", stdin="victor-reads\n")
    assert done.returncode == 0, done.stderr
    assert verify_password("victor-reads", done.stdout.strip())


def test_purge_idle_sessions_keeps_evidence(store, rewind, open_engine):
    """`purge --idle-sessions` removes idle sessions that are not evidence and keeps the
    flagged one, however old; a dry run removes nothing."""
    code, out = rewind("--store", store, "purge", "--idle-sessions", "--older-than", "0",
                       "--dry-run")
    assert code == 0 and "1 idle session(s)" in out and "1 as old kept as evidence" in out
    engine = open_engine(store)
    assert {i.id for i in engine.sessions()} == {LOOPING, HEALTHY}

    code, out = rewind("--store", store, "purge", "--idle-sessions", "--older-than", "0",
                       "--yes")
    assert code == 0 and json.loads(out) == {"sessions": 1, "evidence": 1}
    assert {i.id for i in engine.sessions()} == {LOOPING}
    (entry,) = [a for a in engine.audit(action="retention") if a.detail.get("session_ids")]
    assert entry.detail["session_ids"] == [HEALTHY]


def test_dashboard_without_the_console_extra_says_how_to_install_it(monkeypatch, capsys):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "streamlit" else find_spec(name, *a))
    monkeypatch.setattr(subprocess, "call", lambda *a, **k: pytest.fail("started streamlit"))
    assert main(["dashboard"]) == 1
    err = capsys.readouterr().err
    assert "needs streamlit" in err and "pip install 'agent-rewind[console]'" in err
