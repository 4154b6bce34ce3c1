"""On-call in the loop: under the "flag" policy a flagged session waits for a person, who rolls
it back, releases it or stops it (engine/recovery/oncall.py), on every store."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from engine import (
    Actor,
    DecisionRefused,
    LoopDetected,
    LoopWaiting,
    PermissionDenied,
    Role,
    SessionStopped,
    UnknownSession,
    WaitTimeout,
)
from engine.cli.parser import main as cli_main
from engine.loops.detector import DetectorConfig, LoopDetector

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def flagging(store_url, open_engine):
    return open_engine(store_url, on_loop="flag", freeze=None)


def _crop(s, ran: list[int], times: int = 1) -> None:
    for _ in range(times):
        with s.step("image_crop", {"x": 10, "height": -20}) as call:
            ran.append(1)
            call.fail("invalid slice")


def _waiting(engine, sid="crop") -> tuple:
    s = engine.session(sid, meta={"tenant": "acme"})
    s.append_message("user", "crop the receipt")
    s.snapshot("start")
    ran: list[int] = []
    with pytest.raises(LoopWaiting) as caught:
        _crop(s, ran, 3)
    return s, ran, caught.value


def _written(engine, sid):
    """What a refused decision must leave as it was."""
    info = engine.session_info(sid)
    return (info.status, info.last_verdict, info.messages, len(engine.audit(session=sid)))


def test_a_flagged_session_waits_and_the_looping_call_is_not_run_again(flagging):
    s, ran, waiting = _waiting(flagging)
    assert len(ran) == 3 and isinstance(waiting, LoopDetected) and waiting.rollback is None
    assert waiting.verdict.rule and waiting.since > 0 and "waiting for on-call since" in str(
        waiting)
    for _ in range(5):  # the agent keeps trying: the tool body never runs again
        with pytest.raises(LoopWaiting) as again:
            _crop(s, ran)
        assert again.value.since == waiting.since
    assert len(ran) == 3 and s.info().steps == 3
    # visible to the fleet view, the summary and another process's handle
    (listed,) = flagging.sessions()
    assert listed.waiting and listed.waiting_since == waiting.since
    assert flagging.session_info("crop").waiting_since == waiting.since
    other = flagging.session("crop")  # a fresh handle learns of the wait from the store
    with pytest.raises(LoopWaiting):
        _crop(other, ran)
    assert len(ran) == 3


def test_release_lets_the_agent_continue_with_the_operators_note(flagging):
    s, ran, _ = _waiting(flagging)
    decision = flagging.fleet.release("crop", actor="alice",
                                      reason="the crop box is fixed upstream",
                                      note="use height 20, not -20")
    assert decision.kind == "released" and decision.actor == "alice"
    assert decision.note == "use height 20, not -20"
    assert s.wait_for_decision(timeout=0) == decision
    last = s.state().messages[-1]
    assert last["role"] == "system" and "use height 20, not -20" in last["content"]
    # the evidence of the wait does not flag the session again at once ...
    _crop(s, ran, 2)
    assert len(ran) == 5 and not s.info().waiting
    # ... a loop that goes on is flagged again on fresh evidence, and waits again
    with pytest.raises(LoopWaiting):
        _crop(s, ran)
    assert s.info().waiting and s.info().last_verdict.get("decision") is None
    (row,) = flagging.audit(action="release")
    assert (row.actor, row.session, row.reason) == ("alice", "crop",
                                                    "the crop box is fixed upstream")


def test_a_new_handle_after_a_release_starts_its_window_after_the_evidence(flagging):
    _waiting(flagging)
    flagging.fleet.release("crop", actor="alice", reason="go on")
    fresh = flagging.session("crop")
    ran: list[int] = []
    _crop(fresh, ran, 2)  # would flag at once if the window held the three before the wait
    assert len(ran) == 2


def test_stop_ends_the_session_and_its_steps_say_so(flagging):
    s, ran, _ = _waiting(flagging)
    decision = s.stop(actor="alice", reason="the tool is broken until Monday")
    assert decision.kind == "stopped"
    info = s.info()
    assert info.status == "stopped" and not info.waiting
    with pytest.raises(SessionStopped, match="stopped by alice: the tool is broken"):
        _crop(s, ran)
    with pytest.raises(SessionStopped):  # another handle too
        _crop(flagging.session("crop"), ran)
    assert len(ran) == 3
    assert s.wait_for_decision(timeout=0).kind == "stopped"
    (row,) = flagging.audit(action="stop")
    assert row.actor == "alice" and row.reason == "the tool is broken until Monday"


def test_a_rollback_is_a_decision_and_the_agent_continues(flagging):
    s, ran, _ = _waiting(flagging)
    flagging.rollback("crop", actor=Actor("alice"), reason="back to before the crop")
    decision = s.wait_for_decision(timeout=0)
    assert decision.kind == "rolled_back" and decision.actor == "alice"
    assert decision.reason == "back to before the crop"
    with pytest.raises(DecisionRefused, match="not waiting"):  # the one decision was taken
        flagging.fleet.release("crop", actor="bob", reason="late")
    _crop(s, ran)
    assert len(ran) == 4


@pytest.mark.parametrize("bad", ["healthy", "viewer", "blank reason", "twice", "unknown"])
def test_bad_decisions_are_refused_and_write_nothing(flagging, bad):
    if bad == "healthy":
        s = flagging.session("crop")
        with s.step("image_crop", {"x": 1}) as call:
            call.ok("ok")
    else:
        _waiting(flagging)
    before = _written(flagging, "crop")
    if bad == "healthy":
        with pytest.raises(DecisionRefused, match="'crop' is not waiting for on-call"):
            flagging.fleet.release("crop", actor="alice", reason="r")
        with pytest.raises(DecisionRefused, match="not waiting"):
            flagging.fleet.stop("crop", actor="alice", reason="r")
    elif bad == "viewer":
        viewer = Actor("vera", Role.VIEWER)
        with pytest.raises(PermissionDenied, match="vera is a viewer"):
            flagging.fleet.release("crop", actor=viewer, reason="r")
        with pytest.raises(PermissionDenied):
            flagging.fleet.stop("crop", actor=viewer, reason="r")
        demoted = Actor("olga", Role.OPERATOR, authority=lambda name: "viewer")
        with pytest.raises(PermissionDenied):  # rights as they are at the moment of acting
            flagging.fleet.release("crop", actor=demoted, reason="r")
    elif bad == "blank reason":
        for reason in ("", "   ", None):
            with pytest.raises(DecisionRefused, match="needs a reason"):
                flagging.fleet.release("crop", actor="alice", reason=reason)
            with pytest.raises(DecisionRefused, match="needs a reason"):
                flagging.fleet.stop("crop", actor="alice", reason=reason)
    elif bad == "twice":
        flagging.fleet.release("crop", actor="alice", reason="go on", note="careful")
        before = _written(flagging, "crop")
        with pytest.raises(DecisionRefused, match="released already by alice"):
            flagging.fleet.release("crop", actor="bob", reason="again")
        with pytest.raises(DecisionRefused, match="released already by alice"):
            flagging.fleet.stop("crop", actor="bob", reason="no, stop")
    else:
        with pytest.raises(UnknownSession):
            flagging.fleet.release("nope", actor="alice", reason="r")
    assert _written(flagging, "crop") == before


def test_two_operators_deciding_at_once_one_wins(flagging):
    _waiting(flagging)
    results: list[object] = []
    barrier = threading.Barrier(4)

    def decide(i):
        barrier.wait()
        try:
            if i % 2:
                results.append(flagging.fleet.release("crop", actor=f"op{i}", reason="go"))
            else:
                results.append(flagging.fleet.stop("crop", actor=f"op{i}", reason="halt"))
        except DecisionRefused as exc:
            results.append(exc)

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    decided = [r for r in results if not isinstance(r, DecisionRefused)]
    assert len(decided) == 1 and len(results) == 4
    assert len(flagging.audit(action="release")) + len(flagging.audit(action="stop")) == 1


def test_wait_for_decision_blocks_until_another_thread_decides(flagging):
    s, _, _ = _waiting(flagging)
    with pytest.raises(WaitTimeout, match="still waits for on-call"):
        s.wait_for_decision(timeout=0.05, poll=0.01)
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(s.wait_for_decision(poll=0.01)))
    waiter.start()
    flagging.fleet.release("crop", actor="alice", reason="go on")
    waiter.join(timeout=30)
    assert not waiter.is_alive() and got[0].kind == "released"


def test_await_decision_leaves_the_event_loop_free(flagging):
    s, _, _ = _waiting(flagging)

    async def scenario():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        async def operator():
            while ticks < 5:  # the loop runs while the agent awaits its decision
                await asyncio.sleep(0.005)
            await asyncio.to_thread(flagging.fleet.stop, "crop", actor="alice", reason="halt")

        tick = asyncio.create_task(ticker())
        decision, _ = await asyncio.gather(s.await_decision(poll=0.01), operator())
        tick.cancel()
        return decision, ticks

    decision, ticks = asyncio.run(scenario())
    assert decision.kind == "stopped" and ticks >= 5

    async def too_late():
        other, _, _ = _waiting(flagging, "crop-2")
        with pytest.raises(WaitTimeout):
            await other.await_decision(timeout=0.05, poll=0.01)

    asyncio.run(too_late())


WAITER = textwrap.dedent("""
    import sys
    from engine import Engine
    engine = Engine.open(sys.argv[1], freeze=None)
    print("waiting", flush=True)
    decision = engine.get_session(sys.argv[2]).wait_for_decision(timeout=60)
    print(decision.kind, decision.actor, decision.note, flush=True)
""")


def test_wait_for_decision_across_processes(tmp_path, open_engine):
    url = f"sqlite:///{tmp_path}/r.db"
    engine = open_engine(url, on_loop="flag", freeze=None)
    _waiting(engine)
    env = {k: v for k, v in os.environ.items() if not k.startswith("REWIND_")}
    env["PYTHONPATH"] = str(ROOT)
    waiter = subprocess.Popen([sys.executable, "-c", WAITER, url, "crop"], env=env,
                              stdout=subprocess.PIPE, text=True)
    assert waiter.stdout is not None and waiter.stdout.readline().strip() == "waiting"
    time.sleep(0.3)  # let it poll at least once (correctness does not depend on it)
    engine.fleet.release("crop", actor="alice", reason="go on", note="try height 20")
    out, _ = waiter.communicate(timeout=60)
    assert waiter.returncode == 0 and out.split()[:2] == ["released", "alice"]
    assert "try height 20" in out


@pytest.mark.parametrize("policy", ["flag", "off"])
def test_the_hard_step_budget_stops_a_session_under_every_policy(store_url, open_engine,
                                                                 policy):
    engine = open_engine(store_url, on_loop=policy, freeze=None,
                         detector_factory=lambda: LoopDetector(DetectorConfig(max_steps=5)))
    s = engine.session("busy")
    s.append_message("user", "work")
    with pytest.raises(LoopDetected) as caught:
        for i in range(50):  # different calls: no repeat, only the budget can end this
            with s.step("search", {"q": i}) as call:
                call.ok({"hits": i})
    assert not isinstance(caught.value, LoopWaiting)
    assert caught.value.verdict.rule == "step_budget"
    info = s.info()
    assert info.status == "stopped" and info.steps == 5 and not info.waiting


def test_the_cli_releases_and_stops(tmp_path, capsys, open_engine):
    url = f"sqlite:///{tmp_path}/r.db"
    engine = open_engine(url, on_loop="flag", freeze=None)
    _waiting(engine, "a")
    _waiting(engine, "b")
    assert cli_main(["--store", url, "sessions"]) == 0
    out = capsys.readouterr().out
    assert "waiting for on-call" in out
    assert cli_main(["--store", url, "release", "a", "--actor", "alice", "--reason", "ok",
                     "--note", "go on carefully"]) == 0
    assert "released" in capsys.readouterr().out
    assert cli_main(["--store", url, "stop", "b", "--actor", "alice", "--reason", "broken"]) == 0
    assert "stopped" in capsys.readouterr().out
    # refused: a second decision, a blank reason; exit code says so, nothing written
    assert cli_main(["--store", url, "stop", "a", "--actor", "bob", "--reason", "x"]) != 0
    assert "released already by alice" in capsys.readouterr().err
    assert cli_main(["--store", url, "release", "b", "--actor", "bob", "--reason", " "]) != 0
    assert "needs a reason" in capsys.readouterr().err
    assert [r.action for r in engine.audit()] == ["stop", "release"]
    assert engine.session_info("a").status == "healthy"  # released: it runs again
    assert engine.session_info("b").status == "stopped"
