"""The outbox as a state machine (property-based): whatever each webhook answers, in whatever
order (2xx, 500, a redirect, unreachable), every alert reaches every webhook exactly once once it
heals, in the order of the feed, and one webhook's answers never change what another receives."""

from __future__ import annotations

import json
import threading

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Engine
from engine.fleet.alerts import AlertConfig, AlertWorker

ANSWERS = st.sampled_from(["ok", "500", "302", "unreachable"])
HOOKS = ("https://a.example/hook", "https://b.example/hook")


class Webhooks:
    """A poster that answers each webhook from its own script, then 200 for good."""

    def __init__(self, scripts: dict[str, list[str]]):
        self.scripts = {url: list(script) for url, script in scripts.items()}
        self.received: dict[str, list[str]] = {url: [] for url in scripts}
        self.lock = threading.Lock()

    def post(self, url: str, body: bytes, timeout: float) -> int:
        with self.lock:
            answer = self.scripts[url].pop(0) if self.scripts[url] else "ok"
            if answer == "unreachable":
                raise ConnectionRefusedError("connection refused")
            if answer == "ok":
                self.received[url].append(json.loads(body)["key"])
            return {"ok": 200, "500": 500, "302": 302}[answer]


def _feed(engine: Engine, prefix: str, sessions: int) -> list[str]:
    """`sessions` sessions rolled back once each; returns the keys of their alerts, in order."""
    for i in range(sessions):
        s = engine.session(f"{prefix}{i}")
        s.snapshot("start")
        with s.step("charge", {"n": i}) as call:
            call.ok("charged")
        engine.rollback(f"{prefix}{i}", actor="alice", reason="test", notice=False)
    return [f"rollback:{prefix}{i}:1" for i in range(sessions)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=st.integers(0, 3), after=st.integers(0, 3), a=st.lists(ANSWERS, max_size=12),
       b=st.lists(ANSWERS, max_size=12))
def test_every_alert_reaches_every_webhook_once_in_order(before, after, a, b):
    engine = Engine.open("sqlite:///:memory:")
    hooks = Webhooks({HOOKS[0]: a, HOOKS[1]: b})
    worker = AlertWorker(engine, HOOKS, AlertConfig(rules=("rollback",), backoff_s=0.0,
                                                    attempts=1000), post=hooks.post)
    try:
        expected = _feed(engine, "s", before)
        worker.run_once()  # some events before the first round, some while webhooks fail
        expected += _feed(engine, "t", after)
        for _ in range(len(a) + len(b) + len(expected) + 2):
            result = worker.run_once()
            if result["waiting"] == 0 and all(len(r) == len(expected)
                                              for r in hooks.received.values()):
                break
    finally:
        worker.close()
        engine.close()
    assert hooks.received == {HOOKS[0]: expected, HOOKS[1]: expected}
