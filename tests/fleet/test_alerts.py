"""`rewind alert` against real local HTTP servers: one POST per key, restarts neither skip nor
repeat, a failing webhook is retried while the others still receive."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from support.paths import ROOT

from engine import Actor, Engine, LoopDetected, LoopWaiting
from engine.fleet.alerts import NAMESPACE, AlertConfig, AlertWorker

PER_SESSION = ("loop", "rollback", "compensation_failed", "loop_spike")
"""Every rule but ``incident``: a loop pages per session (the tests of delivery use it; the
default, which pages per incident, is in tests/fleet/test_alerts_fleet.py)."""


class Hook:
    """A webhook on a free loopback port. `fail_first` answers 500 to the first N POSTs;
    `trickle` (seconds) answers one byte per that many seconds and never finishes its status line;
    `redirect_to` answers 302 with that Location; `auth` ("user:password") answers 401 to a POST
    without that basic authorization. Every request's headers are kept in `headers`."""

    def __init__(self, fail_first: int = 0, *, trickle: float | None = None,
                 redirect_to: str | None = None, auth: str | None = None):
        self.received: list[dict] = []
        self.headers: list[dict[str, str]] = []
        self.attempts = 0
        self.trickling = 0
        self.fail_first = fail_first
        self.lock = threading.Lock()
        self.closed = threading.Event()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - a followed redirect arrives as a GET
                with hook.lock:
                    hook.headers.append(dict(self.headers))
                self.send_response(200)
                self.end_headers()

            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with hook.lock:
                    hook.headers.append(dict(self.headers))
                if trickle is not None:
                    with hook.lock:
                        hook.trickling += 1
                    try:
                        while not hook.closed.is_set():
                            self.wfile.write(b"H")
                            self.wfile.flush()
                            hook.closed.wait(trickle)
                    except OSError:
                        pass
                    self.close_connection = True
                    return
                if redirect_to is not None:
                    self.send_response(302)
                    self.send_header("Location", redirect_to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if auth is not None:
                    expected = "Basic " + base64.b64encode(auth.encode()).decode()
                    if self.headers.get("Authorization") != expected:
                        self.send_response(401)
                        self.end_headers()
                        return
                with hook.lock:
                    hook.attempts += 1
                    failing = hook.attempts <= hook.fail_first
                    if not failing:
                        hook.received.append(json.loads(body))
                self.send_response(500 if failing else 200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def keys(self) -> Counter:
        with self.lock:
            return Counter(b["key"] for b in self.received)

    def close(self):
        self.closed.set()
        self.server.shutdown()
        self.server.server_close()


def made_hooks():
    """The body of the `hooks` fixture (other alert test modules make theirs from it): yields
    `make(fail_first=0, **kinds)`, which starts a `Hook`; closes them all afterwards."""
    made: list[Hook] = []

    def make(fail_first: int = 0, **kinds) -> Hook:
        made.append(Hook(fail_first, **kinds))
        return made[-1]

    yield make
    for h in made:
        h.close()


@pytest.fixture
def hooks():
    yield from made_hooks()


def _loop(engine: Engine, sid: str, prompt_version: str = "v8", tool: str = "image_crop"):
    s = engine.session(sid, meta={"prompt_version": prompt_version, "tenant": "acme"})
    s.append_message("user", "crop it")
    s.snapshot("start")
    with pytest.raises(LoopDetected):
        for _ in range(10):
            with s.step(tool, {"x": 10}) as call:
                call.fail("invalid slice")
    return s


def _until(check, seconds: float = 30.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_a_loop_pages_once_per_key_with_what_on_call_needs(engine, hooks):
    a, b = hooks(), hooks()
    _loop(engine, "sess-1")
    worker = AlertWorker(engine, [a.url, b.url],
                         AlertConfig(PER_SESSION, console_url="https://rewind.example/console/"))
    try:
        first = worker.run_once()
        assert first["queued"] == 2 and first["delivered"] == 4
        for _ in range(3):
            worker.run_once()
    finally:
        worker.close()
    for hook in (a, b):
        keys = hook.keys()
        assert sorted(k.rsplit(":", 1)[0] for k in keys) == ["loop:sess-1", "rollback:sess-1"]
        assert "rollback:sess-1:1" in keys
        assert set(keys.values()) == {1}
    loop = next(x for x in a.received if x["rule"] == "loop")
    assert loop["session"] == "sess-1" and loop["prompt_version"] == "v8"
    assert loop["tenant"] == "acme" and loop["tool"] == "image_crop"
    assert loop["link"] == "https://rewind.example/console/session?session=sess-1"
    assert "Loop detected in session sess-1" in loop["text"] and loop["link"] in loop["text"]
    rollback = next(x for x in a.received if x["rule"] == "rollback")
    assert "rolled back" in rollback["text"] and "rewind" in rollback["text"]


def keys_of(hook: Hook, rule: str) -> list[str]:
    return [b["key"] for b in hook.received if b["rule"] == rule]


def test_a_restart_neither_skips_nor_repeats(engine, hooks):
    a = hooks()
    _loop(engine, "one")
    first = AlertWorker(engine, [a.url], AlertConfig(PER_SESSION))
    first.run_once()
    first.close()  # the pager dies here
    _loop(engine, "two")
    second = AlertWorker(engine, [a.url], AlertConfig(PER_SESSION))
    second.run_once()
    second.run_once()
    second.close()
    keys = a.keys()
    assert set(keys.values()) == {1}
    assert sorted(k.split(":")[0] + ":" + k.split(":")[1] for k in keys) == [
        "loop:one", "loop:two", "rollback:one", "rollback:two"]
    state = engine.store.fleet_docs(NAMESPACE)["default"]
    assert state["cursor"] == engine.store.last_event_id()


def test_a_failing_webhook_is_retried_while_another_receives(engine, hooks):
    failing, healthy = hooks(fail_first=2), hooks()
    _loop(engine, "sess-1")
    worker = AlertWorker(engine, [failing.url, healthy.url],
                         AlertConfig(backoff_s=0.05, rules=("loop",)))
    try:
        result = worker.run_once()
        assert result["failed"] == 1 and result["delivered"] == 1
        assert len(healthy.keys()) == 1 and failing.keys() == Counter()

        def retried():
            worker.run_once()
            return failing.keys()

        _until(lambda: retried() != Counter())
        worker.run_once()
    finally:
        worker.close()
    assert failing.attempts == 3  # two 500s, then the delivery
    assert failing.keys() == healthy.keys() and set(failing.keys().values()) == {1}


def test_an_unreachable_webhook_never_blocks_the_others(engine, hooks):
    healthy = hooks()
    dead = hooks()
    dead_url = dead.url
    dead.close()  # nothing listens there any more
    _loop(engine, "sess-1")
    worker = AlertWorker(engine, [dead_url, healthy.url],
                         AlertConfig(PER_SESSION, backoff_s=60))
    try:
        result = worker.run_once()
    finally:
        worker.close()
    assert result["delivered"] == 2 and result["failed"] == 1  # the dead one stops at its first
    assert len(healthy.keys()) == 2
    outbox = engine.store.fleet_docs(NAMESPACE)["default"]["outbox"]
    assert sum(len(box) for box in outbox.values()) == 2  # kept for the dead one's retries


def test_a_flagged_loop_repeating_its_verdict_pages_once(store_url, hooks):
    a = hooks()
    engine = Engine.open(store_url, on_loop="flag")
    try:
        s = engine.session("s")
        s.holds_on_loops = False  # an agent not held after its flag: its verdict repeats
        for _ in range(6):
            with s.step("image_crop", {"x": 1}) as call:
                call.fail("invalid slice")
        worker = AlertWorker(engine, [a.url], AlertConfig(PER_SESSION))
        worker.run_once()
        with s.step("image_crop", {"x": 2}) as call:  # healthy again: the episode ends
            call.ok("cropped")
        for _ in range(3):
            with s.step("image_crop", {"x": 3}) as call:
                call.fail("invalid slice")
        worker.run_once()
        worker.close()
    finally:
        engine.close()
    assert len(keys_of(a, "loop")) == 2 and set(a.keys().values()) == {1}


def test_a_loop_during_a_freeze_says_the_freeze_policy_left_it_for_on_call(store_url, hooks):
    import datetime as dt

    from engine import FreezeWindow

    a = hooks()
    now = dt.datetime.now(dt.UTC)
    freeze = FreezeWindow(now - dt.timedelta(hours=1), now + dt.timedelta(hours=1),
                          "National Day change freeze", "flag")
    engine = Engine.open(store_url, freeze=freeze)
    try:
        s = engine.session("frozen")
        with pytest.raises(LoopWaiting):  # flagged, not rolled back: the freeze policy
            for _ in range(4):
                with s.step("image_crop", {"x": 1}) as call:
                    call.fail("invalid slice")
        assert s.state().status == "looping" and s.info().waiting
        worker = AlertWorker(engine, [a.url])  # the default: the loop pages as its incident
        worker.run_once()
        worker.close()
    finally:
        engine.close()
    [page] = a.received
    assert page["rule"] == "incident" and page["session"] == "frozen"
    assert "policy flag (freeze: National Day change freeze)" in page["text"]
    assert "it waits for on-call: roll it back, release it or stop it" in page["text"]


def test_loops_of_one_prompt_version_over_the_threshold_page_a_spike(engine, hooks):
    a = hooks()
    for i in range(3):
        _loop(engine, f"s{i}", prompt_version="v8", tool=f"tool{i}")
    _loop(engine, "other", prompt_version="v7", tool="tool9")
    worker = AlertWorker(engine, [a.url], AlertConfig(rules=("loop_spike",),
                                                      spike_threshold=3))
    try:
        worker.run_once()
        _loop(engine, "s3", prompt_version="v8", tool="toolx")  # same window: no second page
        worker.run_once()
    finally:
        worker.close()
    assert keys_of(a, "loop_spike") == ["loop_spike:prompt_version:v8"]
    (spike,) = a.received
    assert "3 loops of prompt version v8" in spike["text"]


def test_a_failed_compensation_pages(engine, hooks):
    a = hooks()

    def broken(args, key):
        raise RuntimeError("refund service down")

    engine.compensations.register("charge.undo", broken)
    engine._runtime.compensation_attempts = 1
    s = engine.session("pay")
    s.snapshot("start")
    with s.step("charge", {"n": 1}, side_effect=True, compensation=("charge.undo", {"n": 1})) as c:
        c.ok("charged")
    engine.rollback("pay", actor="alice", reason="wrong amount", notice=False)
    assert engine.compensations(status="failed")
    worker = AlertWorker(engine, [a.url], AlertConfig(rules=("compensation_failed",)))
    try:
        worker.run_once()
    finally:
        worker.close()
    (alert,) = a.received
    assert alert["rule"] == "compensation_failed" and "NOT undone" in alert["text"]
    # An operator retries it, it fails for good again: that pages again, once.
    [comp] = engine.compensations(status="failed")
    engine.compensations.retry(comp.id, actor=Actor("olivia", "operator"), reason="service back?")
    engine.compensations.run()
    worker = AlertWorker(engine, [a.url], AlertConfig(rules=("compensation_failed",)))
    try:
        worker.run_once()
        worker.run_once()
    finally:
        worker.close()
    assert len(keys_of(a, "compensation_failed")) == 2
    assert set(a.keys().values()) == {1}


def test_config_and_webhooks_are_checked(engine):
    with pytest.raises(ValueError, match="rule"):
        AlertConfig(rules=("everything",))
    with pytest.raises(ValueError, match="http"):
        AlertWorker(engine, ["ftp://example.com/x"])
    with pytest.raises(ValueError, match="webhook"):
        AlertWorker(engine, [])


def _rewind_alert(url: str, *webhooks: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    args = [sys.executable, "-m", "engine.cli", "--store", url, "alert", "--interval", "0.1"]
    args += [arg for rule in PER_SESSION for arg in ("--rule", rule)]
    for hook in webhooks:
        args += ["--webhook", hook]
    return subprocess.Popen(args, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def test_killing_and_restarting_rewind_alert_neither_skips_nor_repeats(store_url, hooks):
    if store_url.endswith(":memory:"):
        pytest.skip("n/a: the pager is another process (an in-memory store is not shared)")
    a = hooks()
    engine = Engine.open(store_url)
    proc = _rewind_alert(store_url, a.url)
    try:
        # A first run starts at the newest event: once it has saved that, what follows pages.
        _until(lambda: "default" in engine.documents.fleet(NAMESPACE), 60)
        _loop(engine, "one")
        _until(lambda: len(a.keys()) == 2, 60)
        time.sleep(0.5)  # let it save the outcome of its last round
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        _loop(engine, "two")  # while no pager runs
        proc = _rewind_alert(store_url, a.url)
        _until(lambda: len(a.keys()) == 4, 60)
        time.sleep(0.5)
        _loop(engine, "three")
        _until(lambda: len(a.keys()) == 6, 60)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        if proc.stderr:
            proc.stderr.close()
        engine.close()
    keys = a.keys()
    assert set(keys.values()) == {1}, keys
    assert sorted({k.split(":")[1] for k in keys}) == ["one", "three", "two"]
