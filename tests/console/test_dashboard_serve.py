"""How `rewind dashboard` serves the console (dashboard/serve.py): no
page may frame it, `/_stcore/metrics` answers only a demo console, the tables' own CSV export is
off, and SIGTERM to `rewind dashboard` stops the Streamlit server it started."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from support.paths import ROOT
from support.ports import free_port

from dashboard.serve import ConsoleGuard
from engine import Engine


def _call(guard: ConsoleGuard, path: str) -> tuple[int, dict[bytes, bytes], bool]:
    """(status, headers, whether the wrapped app ran) for one HTTP GET of `path`."""
    ran = []
    sent: list[dict] = []

    async def inner(scope, receive, send):
        ran.append(scope["path"])
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"text/html"), (b"x-frame-options", b"ALLOW")]})
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive():
        return {"type": "http.request"}

    async def send(message):
        sent.append(message)

    guard.app = inner
    asyncio.run(guard({"type": "http", "path": path}, receive, send))
    start = sent[0]
    return start["status"], dict(start["headers"]), bool(ran)


@pytest.mark.parametrize("path", ["/", "/session", "/_stcore/health", "/static/app.js"])
def test_every_answer_forbids_framing(path):
    status, headers, ran = _call(ConsoleGuard(None, metrics_allowed=lambda: False), path)
    assert ran and status == 200
    assert headers[b"x-frame-options"] == b"DENY"  # the app's own ALLOW was replaced
    assert headers[b"content-security-policy"] == b"frame-ancestors 'none'"


@pytest.mark.parametrize("path", ["/_stcore/metrics", "/_stcore/metrics/", "/base/_stcore/metrics"])
def test_metrics_are_shut_while_accounts_are_configured(path):
    status, headers, ran = _call(ConsoleGuard(None, metrics_allowed=lambda: False), path)
    assert status == 404 and not ran and headers[b"x-frame-options"] == b"DENY"
    status, _, ran = _call(ConsoleGuard(None, metrics_allowed=lambda: True), path)
    assert status == 200 and ran


def test_metrics_open_only_in_demo_mode(monkeypatch):
    from dashboard import serve
    from dashboard.signin import access

    monkeypatch.setattr(access, "read_secrets", lambda: {})
    assert serve.metrics_open()
    monkeypatch.setattr(access, "read_secrets", lambda: {"rewind": {"users": {"a": {}}}})
    assert not serve.metrics_open()

    def broken():
        raise serve.SecretsFileError("/x/secrets.toml", "is not valid TOML", 3)

    monkeypatch.setattr(access, "read_secrets", broken)
    assert not serve.metrics_open()


def test_the_tables_builtin_export_is_off():
    import tomllib

    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert config["client"]["disableDataExport"] is True
    assert 'st.set_option("client.disableDataExport", True)' in (
        ROOT / "dashboard" / "app.py").read_text()


def _wait_healthy(url: str, process: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "rewind dashboard exited early"
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    raise AssertionError("the console did not become healthy")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


def test_rewind_dashboard_sends_the_headers_and_sigterm_stops_the_server(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "REWIND_STORE": f"sqlite:///{tmp_path}/rewind.db"}
    Engine.open(env["REWIND_STORE"]).close()  # the console reads a store, never creates one
    process = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "dashboard", "--port", str(port)],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_healthy(url, process)
        with urllib.request.urlopen(url, timeout=5) as resp:
            assert resp.headers["X-Frame-Options"] == "DENY"
            assert "frame-ancestors 'none'" in resp.headers.get_all("Content-Security-Policy")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) is not None
        deadline = time.monotonic() + 30
        while _answers(url) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not _answers(url), "the Streamlit server outlived `rewind dashboard`"
    finally:
        if process.poll() is None:
            process.kill()
