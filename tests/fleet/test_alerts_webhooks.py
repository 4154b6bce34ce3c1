"""Webhook delivery as a production network expects it, against real HTTP servers on loopback: a
429 with ``Retry-After`` (what Slack sends) holds the alert back at least that long, the proxy
named in the environment carries the POST, and retries are jittered."""

from __future__ import annotations

import json
import threading
import time
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from test_alerts import _loop

from engine.fleet.alerts import NAMESPACE, AlertConfig, AlertWorker
from engine.fleet.webhooks import (
    RETRY_AFTER_MAX_S,
    http_post,
    retry_after,
    retry_delay,
    webhook_id,
)


class Server:
    """A loopback HTTP server answering every POST with `status` (and `headers`); it records
    each request's line (method and target) and body."""

    def __init__(self, status: int = 200, headers: dict[str, str] | None = None):
        self.requests: list[tuple[str, str, bytes]] = []
        self.status = status
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.requests.append((self.command, self.path, body))
                self.send_response(server.status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.http.daemon_threads = True
        self.address = f"127.0.0.1:{self.http.server_address[1]}"
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


@pytest.fixture
def servers():
    made: list[Server] = []

    def make(*args, **kwargs) -> Server:
        made.append(Server(*args, **kwargs))
        return made[-1]

    yield make
    for server in made:
        server.close()


@pytest.fixture
def no_proxy_env(monkeypatch):
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def test_a_429_with_retry_after_holds_the_alert_back_that_long(engine, servers, no_proxy_env):
    slack = servers(429, {"Retry-After": "120"})
    url = f"http://{slack.address}/services/T0/B0/secret"
    answer = http_post(url, b"{}", 5.0)
    assert answer == 429 and answer.retry_after == 120.0

    worker = AlertWorker(engine, [url], AlertConfig(rules=("loop",), backoff_s=0.05))
    _loop(engine, "s-429")
    before = time.time()
    result = worker.run_once()
    assert result["failed"] == 1 and result["waiting"] == 1
    worker.run_once()  # not due yet: no second POST; the outcome is saved with the state
    [item] = engine.documents.fleet(NAMESPACE)["default"]["outbox"][webhook_id(url)]
    assert item["next_at"] >= before + 120  # not the 0.05 s backoff: the webhook's own wait
    assert item["error"] == "HTTP 429: rate limited, asked to wait 120 s"
    assert "secret" not in item["error"]
    assert len(slack.requests) == 2  # the direct http_post above and the worker's one


def test_retry_after_reads_seconds_and_http_dates():
    now = time.time()
    assert retry_after("30") == 30.0
    assert retry_after(formatdate(now + 90, usegmt=True), now) == pytest.approx(90, abs=1)
    assert retry_after(formatdate(now - 90, usegmt=True), now) == 0.0
    assert retry_after(None) is None and retry_after("soon") is None and retry_after("") is None


def test_backoff_is_jittered_and_never_sooner_than_the_webhook_asks():
    assert retry_delay(3, 1.0, 300.0, rand=lambda: 0.0) == 2.0  # half of 1 s doubled twice
    assert retry_delay(3, 1.0, 300.0, rand=lambda: 1.0) == 4.0
    assert retry_delay(20, 1.0, 300.0, rand=lambda: 1.0) == 300.0  # capped
    draws = {retry_delay(4, 1.0, 300.0) for _ in range(50)}
    assert all(4.0 <= d <= 8.0 for d in draws) and len(draws) > 1  # spread, not in step
    assert retry_delay(1, 1.0, 300.0, asked=45.0) == 45.0
    assert retry_delay(1, 1.0, 300.0, asked=10 * RETRY_AFTER_MAX_S) == RETRY_AFTER_MAX_S


def test_the_proxy_from_the_environment_carries_the_post(engine, servers, no_proxy_env):
    """A webhook on the internet, reached through the proxy the host is told to use: the proxy
    (a loopback server) receives the POST for the webhook's URL; the webhook's name is never
    resolved here (``.invalid`` cannot be)."""
    proxy = servers(200)
    no_proxy_env.setenv("HTTP_PROXY", f"http://{proxy.address}")
    url = "http://hooks.example.invalid/services/T0/B0/secret"
    assert http_post(url, b'{"text": "hi"}', 5.0) == 200
    assert proxy.requests == [("POST", url, b'{"text": "hi"}')]

    worker = AlertWorker(engine, [url], AlertConfig(rules=("loop",)))
    _loop(engine, "s-proxy")
    assert worker.run_once()["delivered"] == 1
    method, target, body = proxy.requests[-1]
    assert (method, target) == ("POST", url)
    assert json.loads(body)["session"] == "s-proxy"


def test_no_proxy_keeps_a_webhook_direct(servers, no_proxy_env):
    proxy, hook = servers(200), servers(200)
    no_proxy_env.setenv("HTTP_PROXY", f"http://{proxy.address}")
    no_proxy_env.setenv("NO_PROXY", "127.0.0.1")
    assert http_post(f"http://{hook.address}/hook", b"{}", 5.0) == 200
    assert proxy.requests == [] and [r[1] for r in hook.requests] == ["/hook"]
