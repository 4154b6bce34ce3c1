"""A page served from another port of the console's host (cookies ignore ports) cannot read the
sign-in cookie, replace it, or drive the console: its websocket and its requests are refused,
while the console's own page connects as before."""

from __future__ import annotations

import http.server
import threading

import pytest
from playwright.sync_api import Page, expect
from support.console import ACCOUNTS, sign_in, start_console, stop_console, write_secrets
from support.fleet import seed_fleet
from support.ports import free_port

from dashboard.signin.sessions import SESSION_COOKIE, SIGN_IN_PATH

pytestmark = pytest.mark.browser

PROBE = """async (console) => {
    const ws = await new Promise((resolve) => {
        const socket = new WebSocket(console.replace('http', 'ws') + '/_stcore/stream');
        socket.onopen = () => { socket.close(); resolve('open'); };
        socket.onerror = () => resolve('refused');
        setTimeout(() => resolve('timeout'), 10000);
    });
    let post;
    try {
        const r = await fetch(console + '""" + SIGN_IN_PATH + """', {
            method: 'POST', body: 'a-code', credentials: 'include', mode: 'no-cors'});
        post = 'sent';
    } catch (e) { post = 'failed'; }
    return {ws, cookie: document.cookie, post};
}"""
"""Run in a page: open the console's websocket, post to its sign-in route, read the cookies."""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("cross-origin")
    store = f"sqlite:///{workdir}/rewind.db"
    seed_fleet(store, background=2)
    secrets = workdir / "secrets.toml"
    write_secrets(secrets, ACCOUNTS, freeze=False)
    running = start_console(workdir, store, secrets)
    yield running
    stop_console(running.process)


@pytest.fixture(scope="module")
def other_port():
    """A plain page on another port of 127.0.0.1: the same host as the console, another
    origin."""

    class Page_(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the standard library's name
            body = b"<!doctype html><title>another app</title><p>another app on this host</p>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Page_)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def console_cookie(page: Page) -> dict | None:
    found = [c for c in page.context.cookies() if c["name"] == SESSION_COOKIE]
    return found[0] if found else None


def test_a_page_on_another_port_cannot_read_the_cookie_or_drive_the_console(served, other_port,
                                                                           page):
    sign_in(page, served.url, "olivia")  # the operator, signed in, in this browser
    for _ in range(100):
        if console_cookie(page) is not None:
            break
        page.wait_for_timeout(100)
    token = console_cookie(page)["value"]

    # the console's own page may open its websocket (the probe works)
    own = page.evaluate(PROBE, served.url)
    assert own["ws"] == "open"

    other = page.context.new_page()
    other.goto(other_port)
    expect(other.get_by_text("another app on this host")).to_be_visible()
    probe = other.evaluate(PROBE, served.url)
    assert probe["ws"] == "refused"  # it cannot drive the console as the operator
    assert SESSION_COOKIE not in probe["cookie"] and token not in probe["cookie"]

    # nor plant a token of its own in place of the operator's
    other.evaluate(f"() => {{ document.cookie = '{SESSION_COOKIE}=planted; Path=/'; }}")
    assert console_cookie(page)["value"] == token

    # the operator's console still works
    page.reload()
    expect(page.get_by_text(f"olivia · {ACCOUNTS['olivia'][0]}")).to_be_visible()
