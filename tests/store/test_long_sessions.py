"""Sessions as long as real use makes them.

- On Redis no session script does work that grows with the session's history: the commands the
  scripts of a guarded step, a snapshot and a rollback issue (seen with MONITOR) are the same
  commands, with no whole-collection read, at 200 and at 10,000 steps of history (200: past
  every window a step reads, the detector's horizon, the 50 step snapshots retention keeps and
  the 32 remembered request ids, which a 10-step session has not filled yet).
- A long, healthy session (10,000 steps, a user message every 50) runs to the end on every store
  (slow).
"""

from __future__ import annotations

import collections
import re
import threading

import pytest
from support.redis_servers import fresh_prefix, single_server

from engine import Engine, LoopDetector

WHOLE_COLLECTION_READS = {"HGETALL", "HKEYS", "HVALS", "SMEMBERS", "LREM", "SORT"}
"""Commands that read every element of a key: allowed only on the session's summary hash."""


class Monitor:
    """The commands Lua scripts issue on a Redis server while the block runs (MONITOR)."""

    def __init__(self, server):
        self.client = server.client()
        self.commands: list[list[str]] = []
        self._stop = threading.Event()
        self._ready = threading.Event()

    def __enter__(self) -> Monitor:
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        self._ready.wait(10)
        return self

    def _read(self) -> None:
        with self.client.monitor() as m:
            self._ready.set()
            while True:
                cmd = m.next_command()
                if cmd["command"].startswith("ECHO rewind-monitor-end"):
                    return
                if cmd.get("client_type") == "lua":
                    self.commands.append(cmd["command"].split())

    def __exit__(self, *exc) -> None:
        self.client.echo("rewind-monitor-end")
        self._thread.join(10)


def _shape(command: list[str]) -> str:
    """A command with its numbers and the session's own ids blurred: what it does, not where."""
    key = re.sub(r"\{[^}~]*\}", "{sid}", command[1]) if len(command) > 1 else ""
    key = re.sub(r":s:[^\s\"]+", ":s:sid", key)
    return re.sub(r"\d+(\.\d+)?", "#", f"{command[0].upper()} {key}")


def _session_work(s, tag: str) -> None:
    with s.step("search", {"q": tag}) as call:
        call.ok({"hits": 1})
    with s.step("refund_api", {"order": tag}, side_effect=True,
                compensation=("refund_api.undo", {"order": tag})) as call:
        call.ok()
    snap = s.snapshot(f"operator {tag}")
    with s.step("search", {"q": f"{tag} after"}) as call:
        call.ok()
    s.rollback(to=snap, actor="alice", reason="test")


@pytest.mark.redis
@pytest.mark.slow
def test_redis_scripts_do_the_same_work_at_200_and_10000_steps():
    server = single_server()
    engine = Engine.open(server.url(prefix=fresh_prefix()),
                         detector_factory=lambda: LoopDetector(max_steps=None))
    shapes = {}
    for length in (200, 10_000):
        s = engine.session(f"len-{length}")
        for i in range(length):
            with s.step("search", {"q": i}) as call:
                call.ok({"hits": i})
            if i % 50 == 0:
                s.append_message("user", f"task {i}")
        _session_work(s, "warm")  # scripts loaded, detector window built
        with Monitor(server) as mon:
            _session_work(s, "measured")
        assert mon.commands, "MONITOR saw no script commands"
        wide = [c for c in mon.commands if c[0].upper() in WHOLE_COLLECTION_READS
                and not c[1].endswith(":s")]
        assert wide == [], f"whole-collection reads at {length} steps: {wide}"
        ranges = [c for c in mon.commands if c[0].upper() in ("LRANGE", "ZRANGE")
                  and c[2:4] == ["0", "-1"]]
        assert ranges == [], f"unbounded range reads at {length} steps: {ranges}"
        shapes[length] = sorted(_shape(c) for c in mon.commands)
    assert collections.Counter(shapes[10_000]) - collections.Counter(shapes[200]) == {}
    assert shapes[10_000] == shapes[200]
    engine.close()


@pytest.mark.slow
def test_a_long_healthy_session_runs_to_the_end(store_url):
    """10,000 guarded steps with a user message every 50 (a new task), default settings."""
    engine = Engine.open(store_url)
    s = engine.session("day-long-chat", meta={"tenant": "acme"})
    for i in range(10_000):  # a LoopDetected here fails the test: the budget counts per task
        if i % 50 == 0:
            s.append_message("user", f"question {i // 50}")
        with s.step(f"tool_{i % 7}", {"q": f"question {i // 50} part {i % 50}"}) as call:
            call.ok({"answer": i})
    info = s.info()
    assert info.status == "healthy" and info.loops == 0
    assert len(s.steps(last=5)) == 5 and s.steps(last=1)[0].n == 10_000
    engine.close()
