"""Agent processes on a shared store: the stand-in agent (`tests/workers/agent.py`) spawned as a
real process, SIGKILLed at random points, and the invariants a reader relies on afterwards.

Used by the SQLite multi-process tests and by the same scenarios on Redis and Redis Cluster.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engine import Engine, NothingToRollBack, SnapshotNotRestorable

AGENT = Path(__file__).resolve().parents[1] / "workers" / "agent.py"


def spawn_agent(url: str, sid: str, steps: int, rollback_every: int = 0,
                stop_file: Path | None = None) -> subprocess.Popen:
    """Start the stand-in agent on `url`; it prints "ACK <step> <content>" per acknowledged
    step and "ROLLBACK <snapshot>" when it rolls itself back every `rollback_every` steps. With
    `stop_file`, it keeps stepping after `steps` until that file exists."""
    args = [sys.executable, str(AGENT), url, sid, str(steps)]
    if rollback_every:
        args += ["--rollback-every", str(rollback_every)]
    if stop_file is not None:
        args += ["--stop-file", str(stop_file)]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def assert_consistent(engine: Engine, sid: str) -> None:
    """The invariants a reader relies on, whatever happened before."""
    s = engine.get_session(sid)
    info = s.info()
    records = s.messages()
    live = sorted((m for m in records if m.branch is None), key=lambda m: m.pos)
    assert [m.pos for m in live] == list(range(len(live)))
    assert info.messages == len(live)
    assert s.state().messages == [m.message for m in live]
    abandoned = {m.message["content"] for m in records if m.branch is not None}
    assert not abandoned & {m.message["content"] for m in live}
    nodes = {n.id: n for n in s.tree()}
    if info.head is not None:
        assert nodes[info.head].on_live_line
    branches = {b.id for b in s.branches()}
    for rec in s.steps():
        assert rec.on_live_line or rec.branch in branches
    assert info.steps == max((r.n for r in s.steps()), default=0)


def operator_rolls_back_while_the_agent_steps(url: str) -> None:
    """An agent process steps on session "busy" while this process, as an operator, keeps
    rolling it back; afterwards the session is consistent and nothing acknowledged was lost."""
    with Engine.open(url) as engine, tempfile.TemporaryDirectory() as tmp:
        stop = Path(tmp) / "stop"
        # The agent runs until this process has rolled back often enough (however fast either
        # is on this machine), then stops at the next step after its first 300.
        agent = spawn_agent(url, "busy", 300, stop_file=stop)
        rollbacks = 0
        s = None
        deadline = time.time() + 60
        while agent.poll() is None and time.time() < deadline and rollbacks < 8:
            time.sleep(0.02)
            try:
                s = s or engine.get_session("busy")
                target = s.suggested_target()
                if target:
                    engine.rollback(
                        "busy", to=target, actor="operator", reason="test", notice=False
                    )
                    rollbacks += 1
            except (SnapshotNotRestorable, NothingToRollBack, LookupError):
                continue  # the agent moved on between reading the target and rolling back
        stop.touch()
        out, err = agent.communicate(timeout=120)
        assert agent.returncode == 0, err
        assert rollbacks > 3
        assert_consistent(engine, "busy")
        # every acknowledged message is somewhere: live, or on an abandoned branch
        acked = [line.split()[2] for line in out.splitlines() if line.startswith("ACK")]
        stored = {m.message["content"] for m in engine.get_session("busy").messages()}
        assert set(acked) <= stored
        # and nothing abandoned ever came back to the live line
        live = [m["content"] for m in engine.get_session("busy").state().messages]
        assert len(live) == len(set(live))


def kill_rounds(
    url: str, rounds: int, seed: int, restart=None, survivors: list | None = None
) -> dict[str, set[int]]:
    """Run agents on `url` and SIGKILL each at a random moment once it acknowledged a step;
    `restart(round_no)` may kill and restart the server while an agent runs (`survivors` then
    collects whether that agent was still running when killed). Returns the acknowledged step
    numbers per session."""
    rng = random.Random(seed)
    acked: dict[str, set[int]] = {}
    for round_no in range(rounds):
        sid = f"crash-{round_no % 3}"
        proc = spawn_agent(url, sid, 10_000, rollback_every=rng.choice([0, 3, 7]))
        first = proc.stdout.readline()  # the agent is up and stepping, however slow the machine
        time.sleep(rng.uniform(0.05, 0.8))
        if restart is not None and restart(round_no):
            time.sleep(rng.uniform(0.3, 0.6))
            survivors.append(proc.poll() is None)
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        acked.setdefault(sid, set()).update(
            int(line.split()[1]) for line in (first + out).splitlines() if line.startswith("ACK")
        )
    return acked


def check_after_kills(engine: Engine, acked: dict[str, set[int]]) -> None:
    """Every session is consistent, every acknowledged step is stored, the store still works."""
    for sid, steps in acked.items():
        assert steps, "the agent acknowledged nothing before the kill"
        assert_consistent(engine, sid)
        stored = {rec.n for rec in engine.get_session(sid).steps() if rec.status != "running"}
        assert steps <= stored
    s = engine.session("crash-0")
    snap = s.snapshot("after crash")
    s.append_message("user", "still here")
    s.rollback(to=snap, actor="test", reason="check", notice=False)
    assert_consistent(engine, "crash-0")
