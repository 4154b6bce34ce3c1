"""The demo fleet: every scenario runs, loops are flagged and rolled back, healthy sessions are
left alone, every compensation runs exactly once, also with worker processes and with rollbacks
done by an operator from another engine. No timing assertions: runs are bounded by a duration or
by `once`, and waits poll the store with a generous deadline."""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from collections import Counter

import pytest
from support.paths import ROOT

from engine import Actor, Engine, FreezeWindow
from engine.cli.parser import main as cli_main
from engine.demo import HEALTHY, LOOPING, SCENARIOS, Ledger, plan_session, run_demo


def _url(tmp_path, name="demo.db") -> str:
    return f"sqlite:///{tmp_path}/{name}"


def _by_scenario(engine: Engine) -> dict[str, list]:
    sessions: dict[str, list] = {name: [] for name in SCENARIOS}
    for info in engine.sessions(limit=100_000):
        sessions[info.scenario].append(info)
    return sessions


def _assert_compensations_ran_once(engine: Engine, ledger: Ledger) -> list:
    comps = engine.compensations(limit=100_000)
    assert all(c.status == "done" for c in comps), [c for c in comps if c.status != "done"]
    calls = ledger.handler_calls()
    assert calls == {c.idempotency_key: 1 for c in comps}
    reversed_refs = ledger.reversals()
    assert {reversed_refs[c.idempotency_key] for c in comps} == {c.args["ref"] for c in comps}
    return comps


def _assert_world_matches_live_lines(engine: Engine, ledger: Ledger) -> None:
    """What a rollback took off the live line was undone in the world; what stayed was not."""
    live_by_ref = {}
    for info in engine.sessions(limit=100_000):
        if info.scenario not in ("refund", "customer_service"):
            continue
        for step in engine.get_session(info.id).steps():
            if step.compensation and step.status == "ok":
                live_by_ref[step.compensation[1]["ref"]] = step.on_live_line
    effects = ledger.effects()
    assert effects
    for effect in effects:
        assert effect.ref in live_by_ref, effect
        assert (effect.reversed_by is None) == live_by_ref[effect.ref], effect


def test_demo_flags_loops_rolls_back_and_compensates_once(tmp_path, open_engine):
    url, ledger_path = _url(tmp_path), str(tmp_path / "world.db")
    # once: each slot runs one whole session, so what is produced does not depend on how fast
    # a loaded machine runs; the duration only caps a run that hangs
    stats = run_demo(url, sessions=16, speed=0, seed=7, duration=120, once=True,
                     ledger=ledger_path, memory=False)
    assert stats.errors == []
    assert stats.warnings == []  # budgets worked

    engine = open_engine(url)
    ledger = Ledger(ledger_path)
    sessions = _by_scenario(engine)
    rolled_back_by_rewind = {e.session for e in engine.audit(action="rollback", limit=100_000)
                             if e.actor == "rewind"}
    for name in SCENARIOS:
        assert sessions[name], f"no {name} session"
        assert stats[name].sessions == len(sessions[name])
    for name in LOOPING:
        flagged = [i for i in sessions[name] if i.loops > 0]
        assert flagged, f"{name}: no session was flagged"
        assert all(i.rollbacks > 0 for i in flagged)
        assert {i.id for i in flagged} <= rolled_back_by_rewind
        assert stats[name].rollbacks >= len(flagged)
    for name in HEALTHY:
        assert not [i for i in sessions[name] if i.loops or i.rollbacks or i.last_verdict]
        assert not {i.id for i in sessions[name]} & rolled_back_by_rewind
        for info in sessions[name][:5]:
            assert all(s.verdict is None for s in engine.get_session(info.id).steps())
    # Only sessions planned to loop were flagged.
    assert all(not s.false_alarms for s in stats.scenarios.values())

    comps = _assert_compensations_ran_once(engine, ledger)
    assert {c.name for c in comps} >= {"points.restore", "inventory.release"}
    assert stats.total("compensations") == len(comps)
    _assert_world_matches_live_lines(engine, ledger)

    # Every console view has data: locales, prompt versions, budgets, notices.
    metas = [i.meta for i in engine.sessions(limit=100_000)]
    assert {m["locale"][:2] for m in metas} == {"en", "zh"}
    assert {"cs-v8", "rf-v2", "mm-v3"} <= {m["prompt_version"] for m in metas}
    refund = next(i for i in sessions["refund"] if i.rollbacks)
    state = engine.get_session(refund.id).state()
    assert any(m.get("rewind_notice") for m in state.messages)
    assert any(s.budget for s in engine.get_session(refund.id).steps())
    zh = next(i for i in sessions["customer_service"] if i.locale.startswith("zh"))
    assert any("工单" in str(m["content"]) for m in engine.get_session(zh.id).state().messages)


def test_demo_worker_processes(tmp_path, open_engine):
    url, ledger_path = _url(tmp_path), str(tmp_path / "world.db")
    # once: every slot runs one whole session (no race against a clock on a loaded machine);
    # the duration only caps a run that hangs
    stats = run_demo(url, sessions=4, speed=0, seed=11, workers=2, duration=120, once=True,
                     ledger=ledger_path, memory=False)
    assert stats.errors == [] and stats.warnings == []
    engine = open_engine(url)
    infos = engine.sessions(limit=100_000)
    # Slots 0 and 2 ran in one process, 1 and 3 in the other.
    assert {int(i.id.rsplit("-", 1)[1]) % 4 for i in infos} == {0, 1, 2, 3}
    assert stats.total("sessions") == len(infos)
    assert stats.total("loops") > 0
    assert sum(i.rollbacks for i in infos) >= stats.total("rollbacks") > 0
    _assert_compensations_ran_once(engine, Ledger(ledger_path))


def test_operator_rollback_is_compensated_by_the_worker(tmp_path, open_engine):
    url, ledger_path = _url(tmp_path), str(tmp_path / "world.db")
    stop = threading.Event()
    result = {}
    demo = threading.Thread(target=lambda: result.setdefault("stats", run_demo(
        url, sessions=4, speed=40, seed=3, stop_event=stop, ledger=ledger_path,
        compensation_interval=0.2, memory=False)))
    demo.start()
    try:
        operator = open_engine(url)  # another engine, as the console's: no handlers registered
        deadline = time.monotonic() + 60
        target = None
        while target is None and time.monotonic() < deadline:
            for info in operator.sessions(scenario="refund", status="stopped"):
                target = info
                break
            time.sleep(0.1)
        assert target is not None, "no refund session finished"
        session = operator.get_session(target.id)
        first = next(n for n in session.tree() if n.on_live_line)
        rollback = operator.rollback(target.id, to=first.id, actor=Actor("alice", "operator"),
                                     reason="customer cancelled the return")
        assert rollback.compensations
        keys = {c.idempotency_key for c in rollback.compensations}
        while time.monotonic() < deadline:
            comps = [c for c in operator.compensations(session=target.id)
                     if c.idempotency_key in keys]
            if all(c.status == "done" for c in comps):
                break
            time.sleep(0.1)
        assert all(c.status == "done" for c in comps), comps
    finally:
        stop.set()
        demo.join(timeout=30)
    assert result["stats"].errors == []
    ledger = Ledger(ledger_path)
    calls = ledger.handler_calls()
    assert all(calls[k] == 1 for k in keys)
    audit = operator.audit(session=target.id, action="rollback")
    assert audit[0].actor == "alice"
    _assert_compensations_ran_once(operator, ledger)


def test_same_seed_same_sessions(tmp_path, open_engine):
    def run(name: str) -> dict:
        url = _url(tmp_path, name)
        run_demo(url, sessions=8, speed=0, seed=5, once=True, run="r",
                 ledger=str(tmp_path / f"{name}.world"), memory=False)
        engine = open_engine(url)
        return {i.id: (i.meta, [(s.tool, s.args, s.status, s.error) for s in
                                engine.get_session(i.id).steps()])
                for i in engine.sessions(limit=1000)}

    first, second = run("a.db"), run("b.db")
    assert len(first) == 8
    assert first == second


def test_plans_are_deterministic_and_cover_every_scenario():
    plans = [plan_session(42, i, "x") for i in range(200)]
    assert plans == [plan_session(42, i, "x") for i in range(200)]
    assert plans != [plan_session(43, i, "x") for i in range(200)]
    first = plans[: len(SCENARIOS)]
    assert {p.scenario for p in first} == set(SCENARIOS)
    assert all(p.loop and p.faulty for p in first if p.scenario in LOOPING)
    assert not any(p.loop for p in plans if p.scenario in HEALTHY)
    assert {p.locale[:2] for p in plans} == {"en", "zh"}
    # Faulty prompt versions loop more, so the console's chart by prompt version shows it.
    for name in LOOPING:
        rate = {}
        for faulty in (True, False):
            group = [p for p in plans[len(SCENARIOS):] if p.scenario == name
                     and p.faulty == faulty]
            rate[faulty] = sum(p.loop for p in group) / max(len(group), 1)
        assert rate[True] > rate[False], name


def test_rewind_demo_command(tmp_path, capsys, open_engine):
    url = _url(tmp_path)
    code = cli_main(["--store", url, "demo", "--sessions", "8", "--speed", "0", "--once",
                     "--seed", "2", "--backfill", "0", "--no-memory",
                     "--ledger", str(tmp_path / "world.db")])
    assert code == 0
    out = capsys.readouterr().out
    assert "SCENARIO" in out and "refund" in out
    assert len(open_engine(url).sessions()) == 8
    assert cli_main(["demo", "--list"]) == 0
    assert "image_inspection" in capsys.readouterr().out


def test_bad_arguments_fail_before_anything_runs():
    with pytest.raises(ValueError, match="in-memory"):
        run_demo("sqlite:///:memory:", workers=2, duration=1)
    with pytest.raises(ValueError, match="unknown scenario"):
        run_demo("sqlite:///:memory:", scenarios=["nope"], duration=1)


def test_scenario_filter(tmp_path, open_engine):
    url = _url(tmp_path)
    stats = run_demo(url, sessions=3, speed=0, seed=1, once=True, scenarios=["refund"],
                     ledger=str(tmp_path / "world.db"), memory=False)
    assert {i.scenario for i in open_engine(url).sessions()} == {"refund"}
    assert stats["refund"].sessions == 3 and stats["refund"].rollbacks >= 1


@pytest.mark.parametrize("workers, signum, backfill",
                         [(1, signal.SIGINT, "0"), (2, signal.SIGTERM, "0"),
                          (1, signal.SIGINT, "30")])
def test_demo_stops_cleanly_on_signal(tmp_path, open_engine, workers, signum, backfill):
    url = _url(tmp_path)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "--store", url, "demo", "--sessions", "4",
         "--speed", "20", "--workers", str(workers), "--backfill", backfill, "--no-memory",
         "--ledger", str(tmp_path / "world.db")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        engine = open_engine(url) if os.path.exists(tmp_path / "demo.db") else None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if engine is None and os.path.exists(tmp_path / "demo.db"):
                engine = open_engine(url)
            if engine is not None and sum(i.steps for i in engine.sessions()) >= 8:
                break
            time.sleep(0.1)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "SCENARIO" in out
    steps = Counter(s.status for i in engine.sessions() for s in engine.get_session(i.id).steps())
    assert steps["running"] == 0  # every step that began also finished


def test_backfill_fills_history_once(tmp_path, open_engine):
    url, ledger_path = _url(tmp_path), str(tmp_path / "world.db")
    stats = run_demo(url, sessions=4, speed=0, seed=1, once=True, run="a", ledger=ledger_path,
                     backfill_minutes=10, memory=False)
    engine = open_engine(url)
    infos = engine.sessions(limit=100_000)
    history = [i for i in infos if "-ah-" in i.id]
    assert len(history) > 4 and len(infos) == len(history) + 4
    assert stats.total("sessions") == len(infos)
    assert min(i.created_at for i in history) < time.time() - 8 * 60
    assert max(i.updated_at for i in history) <= time.time()
    assert any(i.rollbacks for i in history)
    _assert_compensations_ran_once(engine, Ledger(ledger_path))
    # A store that holds sessions is never reseeded.
    run_demo(url, sessions=4, speed=0, seed=1, once=True, run="b", ledger=ledger_path,
             backfill_minutes=10, memory=False)
    assert not [i for i in engine.sessions(limit=100_000) if "-bh-" in i.id]
    assert len(engine.sessions(limit=100_000)) == len(infos) + 4


def test_memories_are_written_and_recalled_once_the_engine_has_memory(tmp_path, monkeypatch,
                                                                       open_engine):
    """The demo writes and recalls session memories (`SessionMemory` is stubbed here, so this
    test does not depend on the memory implementation)."""
    calls = []

    class StubMemory:
        def __init__(self, runtime, sid):
            self.session = types.SimpleNamespace(id=sid)

        def add(self, text, importance=0.5, meta=None, key=None):
            calls.append(("add", self.session.id, text, importance, meta, key))
            return f"m{len(calls)}"

        def recall(self, query, k=10):
            calls.append(("recall", self.session.id, query, k))
            return [types.SimpleNamespace(id="m1", text="FX rate EUR/USD fixed at 1.08",
                                          meta={}, score=1.0)]

    monkeypatch.setattr("engine.memory.session.SessionMemory", StubMemory)
    url = _url(tmp_path)
    stats = run_demo(url, sessions=8, speed=0, seed=4, once=True,
                     ledger=str(tmp_path / "world.db"))
    assert stats.errors == [] and stats.warnings == []
    adds = [c for c in calls if c[0] == "add"]
    assert {c[1].split("-")[0] for c in adds} >= {"finance", "refund", "customer_service"}
    assert all(0 <= c[3] <= 1 and "turn" in c[4] for c in adds)
    finance = [c[5] for c in adds if c[1].startswith("finance")]
    assert finance.count("fx.EUR/USD") >= 2  # the rate, then the treasury's, by one key
    assert [c for c in calls if c[0] == "recall"]
    engine = open_engine(url)
    budgets = [s.budget for i in engine.sessions() for s in engine.get_session(i.id).steps()]
    assert any(b and b.get("memories", 0) > 0 for b in budgets)


def test_finance_memories_with_the_real_memory(tmp_path, open_engine):
    """With the engine's own memory: the rate fixed early is contradicted later, and recall
    answers with the newer one."""
    url = _url(tmp_path)
    stats = run_demo(url, sessions=1, speed=0, seed=1, once=True, scenarios=["finance"],
                     ledger=str(tmp_path / "world.db"))
    assert stats.errors == [] and stats.warnings == []
    engine = open_engine(url)
    (info,) = engine.sessions()
    session = engine.get_session(info.id)
    rate = session.state().variables["fx_rate"]
    hits = session.memory.recall("EUR/USD exchange rate for this invoice", k=5)
    assert hits and str(rate) in hits[0].text
    assert any(s.budget and s.budget.get("memories", 0) > 0 for s in session.steps())


def test_held_sessions_wait_for_on_call_looping_and_labelled(tmp_path):
    """With a hold share, looping sessions run under the flag policy: the engine does not roll
    them back, they stay looping, and their meta says they wait for a person."""
    url = _url(tmp_path)
    stats = run_demo(url, sessions=3, speed=0, seed=1, once=True, scenarios=["refund"],
                     ledger=str(tmp_path / "world.db"), memory=False, hold_share=1.0)
    infos = Engine.open(url).sessions()
    held = [i for i in infos if i.meta.get("hold") == "waits for on-call"]
    assert held and {i.id for i in held} == set(stats["refund"].held)
    for info in held:
        assert info.status == "looping" and info.rollbacks == 0 and info.last_verdict
    assert stats["refund"].rollbacks == 0


def test_hold_share_never_changes_the_rest_of_a_plan():
    plain_plans = [plan_session(4, i) for i in range(60)]
    held_plans = [plan_session(4, i, hold_share=0.5) for i in range(60)]
    assert any(p.hold for p in held_plans) and not any(p.hold for p in plain_plans)
    for a, b in zip(plain_plans, held_plans, strict=True):
        assert (a.session_id, a.scenario, a.prompt_version, a.loop, a.tenant) == (
            b.session_id, b.scenario, b.prompt_version, b.loop, b.tenant)
        assert not b.hold or b.loop
    first_round = held_plans[: len(SCENARIOS)]
    assert any(p.hold for p in first_round), "a fresh fleet has a session waiting at once"
    assert all("hold" not in p.meta for p in plain_plans)


def test_a_held_session_resumes_after_an_operator_rollback(tmp_path):
    url = _url(tmp_path)
    stop = threading.Event()
    done: dict = {}

    def run():
        done["stats"] = run_demo(url, sessions=1, speed=200, seed=1, once=True,
                                 scenarios=["refund"], ledger=str(tmp_path / "world.db"),
                                 memory=False, hold_share=1.0, hold_s=120, stop_event=stop)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        operator = Engine.open(url)
        deadline = time.monotonic() + 60
        info = None
        while time.monotonic() < deadline:
            infos = operator.sessions()
            info = next((i for i in infos if i.status == "looping"), None)
            if info is not None:
                break
            time.sleep(0.1)
        assert info is not None and info.meta.get("hold")
        session = operator.get_session(info.id)
        operator.rollback(info.id, to=session.suggested_target(),
                          actor=Actor("alice", "operator"), reason="on-call")
        worker.join(timeout=60)
        assert not worker.is_alive()
    finally:
        stop.set()
        worker.join()
    after = operator.get_session(info.id).info()
    assert after.status != "looping" and after.rollbacks == 1
    assert after.steps > info.steps  # the agent went on after the rollback


def test_install_skips_pip_when_pyproject_is_unchanged(tmp_path):
    """scripts/install runs pip on the first run and after pyproject.toml changes, not on every
    start (a fake .venv python records what it is asked to do)."""
    root = ROOT
    (tmp_path / "scripts").mkdir()
    shutil.copy(root / "scripts" / "install", tmp_path / "scripts" / "install")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    calls = tmp_path / "calls.log"
    fake = venv_bin / "python"
    fake.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\n')
    fake.chmod(0o755)

    def install() -> list[str]:
        calls.write_text("")
        subprocess.run(["bash", str(tmp_path / "scripts" / "install")], check=True,
                       capture_output=True, text=True)
        return [c for c in calls.read_text().splitlines() if "pip install" in c]

    assert install(), "the first run installs"
    assert install() == [], "nothing changed: no pip"
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "2"\n')
    assert install(), "pyproject.toml changed: pip again"
    assert install() == []


def test_the_demo_prints_progress_lines(tmp_path, capsys):
    code = cli_main(["--store", _url(tmp_path), "demo", "--sessions", "2", "--speed", "20",
                     "--duration", "2", "--progress", "0.5", "--backfill", "0", "--no-memory",
                     "--ledger", str(tmp_path / "world.db")])
    assert code == 0
    out = capsys.readouterr().out
    progress = [line for line in out.splitlines() if "held for on-call" in line]
    assert progress and "looping now" in progress[-1]


def _assert_flagged_for_the_freeze(engine: Engine, name: str) -> None:
    flagged = [i for i in engine.sessions() if i.last_verdict]
    assert flagged
    for info in flagged:
        assert info.last_verdict["policy"] == "flag"
        assert info.last_verdict["policy_reason"] == f"freeze: {name}"
        assert info.status == "looping" and info.rollbacks == 0
    assert not [e for e in engine.audit(action="rollback") if e.actor == "rewind"]


def test_the_demo_follows_the_freeze_the_console_shows(tmp_path, monkeypatch, capsys,
                                                       open_engine):
    """`rewind demo` reads `[rewind.freeze]` from .streamlit/secrets.toml, as the console does:
    while the freeze is in force its loops are flagged for on-call, not rolled back."""
    for var in ("START", "END", "NAME", "ON_LOOP"):
        monkeypatch.delenv(f"REWIND_FREEZE_{var}", raising=False)
    now = time.time()
    (tmp_path / ".streamlit").mkdir()
    (tmp_path / ".streamlit" / "secrets.toml").write_text(
        f'[rewind.freeze]\nstart = {now - 3600:.0f}\nend = {now + 86400:.0f}\n'
        f'name = "Demo freeze"\non_loop = "flag"\n')
    monkeypatch.chdir(tmp_path)
    url = _url(tmp_path)
    code = cli_main(["--store", url, "demo", "--sessions", "4", "--speed", "0", "--once",
                     "--seed", "1", "--backfill", "0", "--no-memory", "--hold", "0",
                     "--scenario", "refund", "--ledger", str(tmp_path / "world.db")])
    assert code == 0
    assert "freeze: Demo freeze" in capsys.readouterr().out
    _assert_flagged_for_the_freeze(open_engine(url), "Demo freeze")


def test_worker_processes_follow_the_freeze_too(tmp_path, open_engine):
    now = dt.datetime.now(dt.UTC)
    window = FreezeWindow(now - dt.timedelta(hours=1), now + dt.timedelta(days=1), "Workers",
                          "flag")
    url = _url(tmp_path)
    stats = run_demo(url, sessions=4, workers=2, speed=0, seed=1, once=True,
                     scenarios=["refund"], ledger=str(tmp_path / "world.db"), memory=False,
                     freeze=window)
    assert stats.errors == [] and stats["refund"].rollbacks == 0
    _assert_flagged_for_the_freeze(open_engine(url), "Workers")


# -- keyed facts: the demo's agents store what they know by key -----------------------------------
def test_the_demo_agents_replace_rates_addresses_and_preferences_by_key(tmp_path):
    from support.demo_memory import run_scenario

    from engine.demo.scenarios import FX_KEY
    from engine.memory.config import MemoryConfig
    from engine.memory.embeddings import HashingEmbedder

    with Engine.open(f"sqlite:///{tmp_path}/keys.db",
                     memory=MemoryConfig(embedder=HashingEmbedder())) as engine:
        for index in (0, 1):  # the first session of a looping scenario loops, the next may not
            finance = engine.get_session(run_scenario(engine, "finance", index)).memory
            support = engine.get_session(run_scenario(engine, "customer_service", index)).memory
            gone = [m for m in finance.items(include_invalid=True) if not m.valid]
            assert [(m.key, m.invalid_by, m.invalid_confidence) for m in gone] == [
                (FX_KEY, "key", 1.0)]
            assert gone[0].invalid_reason == f"replaced by a newer {FX_KEY!r}"
            assert "treasury" in finance.fact(FX_KEY).text or "资金部" in finance.fact(FX_KEY).text
            replaced = {m.key.rsplit(".", 1)[1] for m in support.items(include_invalid=True)
                        if not m.valid and m.invalid_by == "key"}
            assert replaced == {"address", "notify_by"}
            now = {m.key.rsplit(".", 1)[1]: m.text for m in support.facts("customer.")}
            assert "(moved)" in now["address"] or "已搬家" in now["address"]
            assert "text message" in now["notify_by"] or "短信" in now["notify_by"]
            assert {f["judge"] for f in support.corrections()} == {"key"}
