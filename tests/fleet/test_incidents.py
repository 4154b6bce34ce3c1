"""Incidents: loop verdicts grouped by cause (tool, normalised error, rule), one record every
process sees, and remedies for the whole group; on SQLite, Redis and Redis Cluster."""

from __future__ import annotations

import json
import multiprocessing
import threading
import uuid

import pytest

from engine import (
    Actor,
    Engine,
    IncidentConflict,
    LoopWaiting,
    PermissionDenied,
    ToolQuarantined,
    UnknownIncident,
)
from engine.fleet.api import Fleet
from engine.fleet.incidents import GROWTH_SIZES, signature

VIEWER = Actor("vera", "viewer")


def _broken_refund(engine: Engine, sid: str, tenant: str = "acme", n: int = 0) -> None:
    """A session looping (policy flag) on refund_api, which answers 503 with its own ids."""
    s = engine.session(sid, meta={"tenant": tenant, "scenario": "refund",
                                  "prompt_version": "v7"}, on_loop="flag")
    s.append_message("user", f"refund order {n}")
    s.snapshot("start")
    order = f"A-{1000 + n}"
    for attempt in range(3):
        try:
            with s.step("refund_api", {"order": order}) as call:
                call.fail(f"HTTP 503 Service Unavailable: refund of order {order} failed "
                          f"(request {uuid.uuid4()}, took {120 + attempt * 7 + n} ms) at "
                          f"2026-10-01T14:0{attempt}:{10 + n % 50}Z")
        except LoopWaiting:  # under flag the agent now waits for on-call
            return
        s.append_message("tool", "HTTP 503")


def _other_loop(engine: Engine, sid: str, i: int) -> None:
    """A loop with a cause of its own: another tool, another error."""
    s = engine.session(sid, meta={"tenant": "globex"}, on_loop="flag")
    s.snapshot("start")
    for _ in range(3):
        try:
            with s.step(f"tool_{i}", {"x": 10}) as call:
                kind = ["invalid slice", "no such file", "quota exceeded", "bad json"][i % 4]
                call.fail(f"{kind} in tool_{i}")
        except LoopWaiting:
            return


def _healthy(engine: Engine, sid: str) -> None:
    s = engine.session(sid, meta={"tenant": "acme"})
    for i in range(3):
        with s.step("refund_api", {"order": f"H-{i}"}) as call:
            call.ok({"refunded": True})


def test_the_signature_masks_ids_numbers_paths_and_times_but_keeps_the_status():
    a = signature("HTTP 503 for order A-1234 at 2026-12-07T14:02:11Z in /srv/app/x.py", None)
    b = signature("HTTP 503 for order B-77 at 2026-12-07T15:12:01Z in /srv/app/y.py",
                  {"order": "B-77"})
    assert a == b and "503" in a
    assert signature("HTTP 500 for order A-1", None) != a
    assert signature(None) == signature("  ") == ""


def test_forty_sessions_on_one_broken_tool_make_one_incident_and_one_rollback(engine):
    for n in range(40):
        _broken_refund(engine, f"refund-{n}", tenant="acme" if n < 30 else "initech", n=n)
    for i in range(10):
        _other_loop(engine, f"other-{i}", i)
    _healthy(engine, "healthy")

    refund = [i for i in engine.incidents() if i.tool == "refund_api"]
    assert len(refund) == 1
    [inc] = refund
    assert sorted(inc.sessions) == sorted(f"refund-{n}" for n in range(40))
    assert inc.status == "open" and inc.counts == {"waiting": 40}  # flag: they wait for on-call
    assert "503" in inc.signature and inc.rule
    assert inc.tenants == ["acme", "initech"] and inc.scenarios == ["refund"]
    assert inc.prompt_versions == ["v7"] and inc.first_seen <= inc.last_seen
    others = [i for i in engine.incidents() if i.id != inc.id]
    assert not any(set(o.sessions) & set(inc.sessions) for o in others)
    assert {s for o in others for s in o.sessions} == {f"other-{i}" for i in range(10)}
    assert engine.incident(inc.id) == inc
    assert [i.id for i in engine.incidents(status="open") if i.tool == "refund_api"] == [inc.id]
    assert engine.incidents(status="closed") == []
    assert engine.incidents(since=inc.last_seen + 1) == []

    preview = engine.fleet.incident_action(inc.id, "rollback", actor="alice", reason="",
                                           dry_run=True)
    assert len(preview.sessions) == 40 and all(item.preview for item in preview.results)
    assert engine.incident(inc.id).counts == {"waiting": 40}  # a preview writes nothing

    done = engine.fleet.incident_action(inc.id, "rollback", actor="alice",
                                        reason="refund_api is down")
    assert len(done.results) == 40 and done.failed == {}
    assert engine.incident(inc.id).counts == {"rolled_back": 40}
    assert {i.id for i in engine.sessions(status="looping")} == {f"other-{i}"
                                                               for i in range(10)}
    [claim] = engine.audit(action="incident_rollback")
    assert claim.actor == "alice" and claim.detail["id"] == inc.id
    assert engine.incident(inc.id).actions[0]["action"] == "rollback"


def test_the_cli_lists_incidents_as_json_previews_and_rolls_back_with_yes(store_url, capsys):
    from engine.cli import main

    if store_url.endswith(":memory:"):
        pytest.skip("n/a: a :memory: store lives in one process")
    engine = Engine.open(store_url)
    try:
        for n in range(5):
            _broken_refund(engine, f"r-{n}", n=n)
        _other_loop(engine, "x", 1)
    finally:
        engine.close()
    assert main(["--store", store_url, "incidents", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["incidents"]
    [refund] = [i for i in listed if i["tool"] == "refund_api"]
    assert set(refund) >= {"id", "tool", "signature", "rule", "status", "first_seen",
                           "last_seen", "sessions", "counts"}
    assert sorted(refund["sessions"]) == [f"r-{n}" for n in range(5)]
    assert refund["counts"] == {"waiting": 5} and refund["status"] == "open"

    iid = refund["id"]
    assert main(["--store", store_url, "incident", iid, "rollback", "--actor", "alice",
                 "--reason", "503s"]) == 0
    out = capsys.readouterr().out
    assert "would roll back 5 sessions" in out and "--yes" in out
    assert main(["--store", store_url, "incidents"]) == 0
    assert "waiting 5" in capsys.readouterr().out
    assert main(["--store", store_url, "incident", iid, "rollback", "--actor", "alice",
                 "--reason", "503s", "--yes"]) == 0
    assert "rolled back 5 of 5 sessions" in capsys.readouterr().out
    assert main(["--store", store_url, "incident", iid]) == 0
    shown = capsys.readouterr().out
    assert "rolled_back 5" in shown and "r-0" in shown

    # Bad input: refused clearly, nothing written.
    before = len(Engine.open(store_url).audit())
    assert main(["--store", store_url, "incident", "inc-nope", "close", "--actor", "alice",
                 "--reason", "x", "--yes"]) != 0
    assert "no incident 'inc-nope'" in capsys.readouterr().err
    assert main(["--store", store_url, "incident", iid, "close", "--actor", "alice",
                 "--reason", " ", "--yes"]) != 0
    assert "needs a reason" in capsys.readouterr().err
    assert main(["--store", store_url, "incident", iid, "close", "--actor", "alice",
                 "--reason", "fixed upstream", "--yes"]) == 0
    capsys.readouterr()
    assert main(["--store", store_url, "incident", iid, "quarantine", "--actor", "bob",
                 "--reason", "x", "--yes"]) != 0
    assert "is closed (by alice" in capsys.readouterr().err
    assert len(Engine.open(store_url).audit()) == before + 1  # the close alone


def test_bad_input_is_refused_and_writes_nothing(engine):
    for n in range(3):
        _broken_refund(engine, f"r-{n}", n=n)
    [inc] = engine.incidents()
    before = (len(engine.audit()), engine.incident(inc.id))
    with pytest.raises(PermissionDenied, match="vera is a viewer"):
        engine.fleet.incident_action(inc.id, "rollback", actor=VIEWER, reason="x")
    with pytest.raises(ValueError, match="needs a reason"):
        engine.fleet.incident_action(inc.id, "quarantine", actor="alice", reason="")
    with pytest.raises(ValueError, match="one of rollback"):
        engine.fleet.incident_action(inc.id, "explode", actor="alice", reason="x")
    with pytest.raises(UnknownIncident, match="no incident 'inc-missing'"):
        engine.fleet.incident_action("inc-missing", "close", actor="alice", reason="x")
    with pytest.raises(UnknownIncident):
        engine.incident("inc-missing")
    assert (len(engine.audit()), engine.incident(inc.id)) == before

    engine.fleet.close_incident(inc.id, actor="alice", reason="fixed upstream")
    closed = engine.incident(inc.id)
    assert closed.status == "closed" and closed.closed_by == "alice"
    assert closed.close_reason == "fixed upstream"
    with pytest.raises(IncidentConflict, match="is closed"):
        engine.fleet.incident_action(inc.id, "rollback", actor="alice", reason="x")
    # A new loop of the same cause opens a new incident.
    _broken_refund(engine, "r-late", n=9)
    [fresh] = engine.incidents(status="open")
    assert fresh.id != inc.id and fresh.sessions == ["r-late"]


def test_quarantine_remedy_refuses_the_tool_fleet_wide(engine):
    for n in range(2):
        _broken_refund(engine, f"r-{n}", n=n)
    [inc] = engine.incidents()
    done = engine.fleet.incident_action(inc.id, "quarantine", actor="alice",
                                        reason="503 everywhere")
    assert done.quarantine.tool == "refund_api"
    s = engine.session("new")
    with pytest.raises(ToolQuarantined):
        with s.step("refund_api", {"order": "x"}) as call:
            call.ok(1)


def test_an_incident_closes_after_its_quiet_period(store_url, open_engine):
    now = [1_000_000.0]
    engine = open_engine(store_url, clock=lambda: now[0])
    _broken_refund(engine, "r-0")
    [inc] = engine.incidents()
    with pytest.raises(ValueError, match="positive number"):
        engine.fleet.set_incident_quiet(0, actor="alice", reason="x")
    engine.fleet.set_incident_quiet(600, actor="alice", reason="short freeze")
    now[0] += 601
    [quiet] = engine.incidents()
    assert quiet.status == "closed" and quiet.closed_by == "rewind"  # read: nothing written
    assert [e for e in engine.events() if e.type == "incident_close"] == []
    assert engine.fleet.close_quiet_incidents() == [inc.id]
    [event] = [e for e in engine.events() if e.type == "incident_close"]
    assert event.data["actor"] == "rewind" and event.data["id"] == inc.id
    assert engine.incident(inc.id).close_reason == (
        "no session looped on this cause for 10 min")
    # The engine's own bookkeeping is no one's action: not in the audit log.
    assert [e.action for e in engine.audit()] == ["incident_settings"]
    assert engine.incidents(status="open") == []


def test_two_operators_acting_at_once_one_wins_and_the_other_is_told(engine):
    for n in range(3):
        _broken_refund(engine, f"r-{n}", n=n)
    [inc] = engine.incidents()
    outcomes: list[object] = []
    barrier = threading.Barrier(2)

    def operator(name: str) -> None:
        barrier.wait()
        try:
            outcomes.append(engine.fleet.incident_action(inc.id, "close", actor=name,
                                                   reason=f"{name} closes"))
        except IncidentConflict as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=operator, args=(n,)) for n in ("alice", "bob")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wins = [o for o in outcomes if not isinstance(o, Exception)]
    told = [o for o in outcomes if isinstance(o, IncidentConflict)]
    assert len(wins) == 1 and len(told) == 1
    assert "closed" in str(told[0])
    assert len(engine.audit(action="incident_close")) == 1
    # A page drawn before a remedy was taken is told what changed.
    _broken_refund(engine, "r-9", n=9)
    [fresh] = engine.incidents(status="open")
    engine.fleet.incident_action(fresh.id, "quarantine", actor="alice", reason="x",
                           seen=fresh.revision)
    with pytest.raises(IncidentConflict, match="alice took quarantine"):
        engine.fleet.incident_action(fresh.id, "rollback", actor="bob", reason="y",
                               seen=fresh.revision)


def _agent(url: str, first: int, count: int, healthy: bool) -> None:
    engine = Engine.open(url)
    try:
        for n in range(first, first + count):
            if healthy:
                _healthy(engine, f"ok-{n}")
            else:
                _broken_refund(engine, f"mp-{n}", tenant=f"t{n % 3}", n=n)
    finally:
        engine.close()


def test_agents_in_several_processes_join_one_incident(store_url):
    if store_url.endswith(":memory:"):
        pytest.skip("n/a: a :memory: store lives in one process")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_agent, args=(store_url, i * 6, 6, False)) for i in range(4)]
    procs += [ctx.Process(target=_agent, args=(store_url, i * 5, 5, True)) for i in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(180)
    assert [p.exitcode for p in procs] == [0] * len(procs)
    engine = Engine.open(store_url)
    try:
        [inc] = engine.incidents()
        assert sorted(inc.sessions) == sorted(f"mp-{n}" for n in range(24))
        assert inc.counts == {"waiting": 24} and inc.tenants and len(inc.tenants) == 3
        assert len([e for e in engine.events(limit=10_000) if e.type == "incident_open"]) == 1
    finally:
        engine.close()


def _pager(engine: Engine):
    from engine.fleet.alerts import AlertConfig, AlertWorker

    sent: list[dict] = []

    def post(url: str, body: bytes, timeout: float) -> int:
        sent.append(json.loads(body))
        return 200

    worker = AlertWorker(engine, ["https://hooks.example/rewind"],
                         AlertConfig(rules=("incident",),
                                     console_url="https://rewind.example/console"),
                         post=post)
    return worker, sent


def test_one_page_for_forty_sessions_on_one_cause_and_one_when_it_closes(engine):
    from engine.metrics import sample

    worker, sent = _pager(engine)
    try:
        worker.run_once()
        for n in range(40):
            _broken_refund(engine, f"refund-{n}", tenant="acme" if n < 30 else "initech", n=n)
        for i in range(10):
            _other_loop(engine, f"other-{i}", i)
        [inc] = [i for i in engine.incidents() if i.tool == "refund_api"]
        assert sample("rewind_incidents_open") == 11
        worker.run_once()
        about = [b for b in sent if b.get("incident") == inc.id]
        assert len(about) == 1
        [page] = about
        assert page["rule"] == "incident" and "opened" in page["text"]
        assert "40 sessions" in page["text"] and "503" in page["text"]
        assert page["link"] == f"https://rewind.example/console/incident?incident={inc.id}"
        assert page["tool"] == "refund_api" and page["tenant"] == "acme, initech"
        assert len(sent) == 11  # one per cause, not one per session

        engine.fleet.incident_action(inc.id, "rollback", actor="alice", reason="503s")
        worker.run_once()
        assert len(sent) == 11
        engine.fleet.close_incident(inc.id, actor="alice", reason="refund_api fixed")
        worker.run_once()
        [closed] = [b for b in sent[11:] if b.get("incident") == inc.id]
        assert "closed by alice" in closed["text"] and "refund_api fixed" in closed["text"]
    finally:
        worker.close()


def test_an_incident_pages_again_when_it_grows_or_spreads_to_a_new_tenant(engine):
    worker, sent = _pager(engine)
    try:
        _broken_refund(engine, "r-0", n=0)
        worker.run_once()
        assert len(sent) == 1 and "1 session" in sent[0]["text"]
        for n in range(1, 5):
            _broken_refund(engine, f"r-{n}", n=n)
        worker.run_once()
        assert len(sent) == 1  # 5 sessions: under the first size that pages
        first = GROWTH_SIZES[0]  # 50: forty sessions on one broken tool are one page
        for n in range(5, first):
            _broken_refund(engine, f"r-{n}", n=n)
        worker.run_once()
        assert len(sent) == 2 and "grew" in sent[1]["text"]
        assert f"{first} sessions" in sent[1]["text"]
        _broken_refund(engine, "r-beta", tenant="beta", n=first + 1)
        worker.run_once()
        assert len(sent) == 3 and "spread to tenant beta" in sent[2]["text"]
    finally:
        worker.close()


def test_release_and_stop_act_on_the_waiting_sessions_through_the_engines_verbs(
        engine, monkeypatch):
    from engine.fleet import incidents as incident_module

    for n in range(4):
        _broken_refund(engine, f"r-{n}", n=n)
    [inc] = engine.incidents()
    waiting = {"r-1", "r-3"}
    monkeypatch.setattr(incident_module, "session_state", lambda rt: (
        lambda sid: "waiting" if sid in waiting else "looping"))
    calls: list[tuple] = []

    def release(self, sid, *, actor, reason, note=None):
        calls.append(("release", sid, actor.name, reason, note))

    def stop(self, sid, *, actor, reason):
        if sid == "r-3":
            raise RuntimeError("decided already")
        calls.append(("stop", sid, actor.name, reason))

    monkeypatch.setattr(Fleet, "release", release)
    monkeypatch.setattr(Fleet, "stop", stop)
    preview = engine.fleet.incident_action(inc.id, "release", actor="alice", reason="",
                                           dry_run=True)
    assert preview.sessions == ["r-1", "r-3"] and set(preview.skipped) == {"r-0", "r-2"}
    assert calls == []
    done = engine.fleet.incident_action(inc.id, "release", actor="alice", reason="fixed upstream",
                                  note="refund_api is back")
    assert calls == [("release", "r-1", "alice", "fixed upstream", "refund_api is back"),
                     ("release", "r-3", "alice", "fixed upstream", "refund_api is back")]
    assert done.failed == {}
    done = engine.fleet.incident_action(inc.id, "stop", actor="alice", reason="give up")
    assert calls[-1] == ("stop", "r-1", "alice", "give up")
    assert done.failed == {"r-3": "RuntimeError: decided already"}
    assert [e.action for e in engine.audit()] == ["incident_stop", "incident_release"]


def test_a_session_waiting_for_on_call_or_released_counts_as_such():
    from types import SimpleNamespace

    from engine.fleet.incidents import state_of

    def info(status, verdict):
        return SimpleNamespace(status=status, last_verdict=verdict)

    assert state_of(info("looping", {"rule": "x", "waiting": True})) == "waiting"
    assert state_of(info("looping", {"rule": "x"})) == "looping"
    released = {"rule": "x", "waiting": True, "decision": {"kind": "released"}}
    assert state_of(info("healthy", released)) == "released"
    stopped = {"rule": "x", "waiting": True, "decision": {"kind": "stopped"}}
    assert state_of(info("stopped", stopped)) == "stopped"
    assert state_of(info("rolled_back", None)) == "rolled_back"
    assert state_of(None) == "deleted"


def test_loops_rolled_back_by_the_engine_join_their_incident_too(engine):
    from engine import LoopDetected

    for n in range(3):
        s = engine.session(f"auto-{n}", meta={"tenant": "acme"})  # the default: roll back
        s.snapshot("start")
        with pytest.raises(LoopDetected):
            for attempt in range(10):
                with s.step("refund_api", {"order": f"B-{n}"}) as call:
                    call.fail(f"HTTP 503 for order B-{n}, attempt {attempt}")
    [inc] = engine.incidents()
    assert sorted(inc.sessions) == ["auto-0", "auto-1", "auto-2"]
    assert inc.counts == {"rolled_back": 3} and inc.loops == 3
    preview = engine.fleet.incident_action(inc.id, "rollback", actor="alice", reason="x",
                                     dry_run=True)
    assert all("NothingToRollBack" in (item.error or "") for item in preview.results)
