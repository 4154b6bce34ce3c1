"""Delivery under hostile or broken webhooks, against real
HTTP servers on loopback ports: a webhook that trickles one byte at a time is cut off at its
deadline and holds back neither the healthy webhooks nor the cursor; SIGTERM stops `rewind alert`
in the middle of such a POST; a redirect is a failure, not a delivery; a webhook URL with
credentials delivers with basic authorization, and its secrets reach no message or log."""

from __future__ import annotations

import base64
import logging
import signal
import subprocess
import threading

import pytest
from test_alerts import _loop, _rewind_alert, _until, made_hooks

from engine import Engine
from engine.fleet.alerts import NAMESPACE, AlertConfig, AlertWorker
from engine.fleet.webhooks import http_post


@pytest.fixture
def hooks():
    yield from made_hooks()


def _cursor(engine: Engine, name: str = "default") -> int:
    return int((engine.documents.fleet(NAMESPACE).get(name) or {}).get("cursor") or 0)


def _newest_event(engine: Engine) -> int:
    cursor = 0
    while events := engine.events(since=cursor, limit=1000):
        cursor = events[-1].id
    return cursor


def test_one_post_ends_at_its_deadline_though_bytes_keep_trickling(hooks):
    slow = hooks(trickle=0.3)  # never more than 0.3 s without a byte: no socket timeout fires
    outcome: list[BaseException | int] = []

    def post() -> None:
        try:
            outcome.append(http_post(slow.url, b"{}", 1.0))
        except BaseException as exc:  # noqa: BLE001 - what the POST ended with is the point
            outcome.append(exc)

    thread = threading.Thread(target=post, daemon=True)
    thread.start()
    thread.join(60)  # generous: the deadline is 1 s; a worker without one never ends
    assert not thread.is_alive(), "the POST outlived its deadline"
    [result] = outcome
    assert isinstance(result, TimeoutError), result
    assert "1 s" in str(result)


def test_a_trickling_webhook_holds_back_neither_the_healthy_one_nor_the_cursor(engine, hooks):
    slow, healthy = hooks(trickle=0.3), hooks()
    worker = AlertWorker(engine, [slow.url, healthy.url],
                         AlertConfig(timeout_s=60.0, backoff_s=0.05, rules=("loop",)))
    runner = threading.Thread(target=worker.run, kwargs={"interval_s": 0.05}, daemon=True)
    runner.start()
    try:
        _loop(engine, "one")
        _until(lambda: len(healthy.keys()) == 1 and slow.trickling >= 1)
        # The slow webhook is mid-POST (for a minute, at one byte per 0.3 s); the feed moves on.
        _loop(engine, "two")
        _until(lambda: len(healthy.keys()) == 2)
        _until(lambda: _cursor(engine) == _newest_event(engine))
        assert not slow.received  # still mid-POST: its deadline is a minute
    finally:
        worker.stop()
        worker.close()
        slow.close()  # ends the trickle, so a worker stuck in it would let go
        runner.join(60)
    assert not runner.is_alive()


def test_sigterm_stops_rewind_alert_in_the_middle_of_a_slow_post(store_url, hooks):
    if store_url.endswith(":memory:"):
        pytest.skip("n/a: the pager is another process (an in-memory store is not shared)")
    slow, healthy = hooks(trickle=2.0), hooks()  # the webhook: one byte every 2 s
    engine = Engine.open(store_url)
    proc = _rewind_alert(store_url, slow.url, healthy.url)
    try:
        # A first run starts at the newest event; once it has saved that, what follows pages.
        _until(lambda: "default" in engine.documents.fleet(NAMESPACE), 60)
        _loop(engine, "one")
        _until(lambda: len(healthy.keys()) == 2 and slow.trickling >= 1, 60)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)  # generous; it used to wait for the trickle forever
        except subprocess.TimeoutExpired:
            pytest.fail("rewind alert ignored SIGTERM during a slow POST")
        assert code == 0, proc.stderr.read() if proc.stderr else code
        # What it read is saved: a restart goes on after these events, not before them.
        assert _cursor(engine) == _newest_event(engine)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        if proc.stderr:
            proc.stderr.close()
        engine.close()


def test_a_redirect_is_a_failure_not_a_delivery(engine, hooks, caplog):
    internal = hooks()
    redirecting = hooks(redirect_to=internal.url)
    _loop(engine, "one")
    worker = AlertWorker(engine, [redirecting.url], AlertConfig(rules=("loop",), backoff_s=60))
    try:
        with caplog.at_level(logging.WARNING, logger="rewind.alerts"):
            result = worker.run_once()
    finally:
        worker.close()
    assert result["delivered"] == 0 and result["failed"] == 1
    assert internal.headers == [] and internal.received == []  # never followed
    assert "HTTP 302" in caplog.text and "redirect" in caplog.text
    outbox = engine.documents.fleet(NAMESPACE)["default"]["outbox"]
    assert [len(box) for box in outbox.values()] == [1]  # kept for a retry


def test_a_webhook_url_with_credentials_delivers_with_basic_authorization(engine, hooks):
    hook = hooks(auth="pager:s3cr3t:pw")
    url = hook.url.replace("http://", "http://pager:s3cr3t%3Apw@")
    _loop(engine, "one")
    worker = AlertWorker(engine, [url], AlertConfig(rules=("loop",)))
    try:
        result = worker.run_once()
    finally:
        worker.close()
    assert result == {**result, "delivered": 1, "failed": 0}
    assert [b["session"] for b in hook.received] == ["one"]
    expected = "Basic " + base64.b64encode(b"pager:s3cr3t:pw").decode()
    assert [h.get("Authorization") for h in hook.headers] == [expected]


def test_a_webhooks_secrets_reach_no_message_and_no_log(engine, hooks, caplog):
    dead = hooks()
    port = dead.url.split(":")[2].split("/")[0]
    dead.close()  # nothing listens there any more
    url = f"http://pager:s3cr3t@127.0.0.1:{port}/services/T0/B0/tok3nXYZ?key=k3yQ"
    _loop(engine, "one")
    worker = AlertWorker(engine, [url], AlertConfig(rules=("loop",), attempts=1))
    try:
        with caplog.at_level(logging.DEBUG, logger="rewind.alerts"):
            result = worker.run_once()
    finally:
        worker.close()
    assert result["failed"] == 1
    reported = caplog.text + " ".join(worker.failures.values())
    assert "127.0.0.1" in reported
    for secret in ("s3cr3t", "tok3nXYZ", "k3yQ"):
        assert secret not in reported
    for bad in ("ftp://pager:s3cr3t@example.com/tok3nXYZ", "http://pager:s3cr3t@/tok3nXYZ",
                "http://pager:s3cr3t@example.com:notaport/tok3nXYZ"):
        with pytest.raises(ValueError) as refused:
            AlertWorker(engine, [bad])
        assert "s3cr3t" not in str(refused.value) and "tok3nXYZ" not in str(refused.value)
