"""DNS rebinding against a demo console (no accounts): a Chromium that resolves a foreign name to
127.0.0.1 must never get operator rights, neither with the shipped `server.allowedHosts` (the
WebSocket is refused) nor without it (the app's own Host check refuses demo mode)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect
from support.console import CHROMIUM, CHROMIUM_ARGS, start_console, stop_console
from support.fleet import seed_fleet

pytestmark = pytest.mark.browser

FOREIGN = "rebind.evil.test"
WAIT = 30_000  # ms: the first run of a page imports the engine and reads the store


@pytest.fixture(scope="module")
def rebinding_browser(browser):
    """A second Chromium (same Playwright) whose resolver maps the foreign name to 127.0.0.1."""
    chromium = browser.browser_type.launch(
        executable_path=CHROMIUM,
        headless=True,
        args=[*CHROMIUM_ARGS, f"--host-resolver-rules=MAP {FOREIGN} 127.0.0.1"],
    )
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory) -> str:
    workdir = tmp_path_factory.mktemp("demo-host")
    store = f"sqlite:///{workdir}/rewind.db"
    seed_fleet(store, background=4)
    return store


def demo_console(tmp_path, store, monkeypatch, allowed_hosts: str | None):
    if allowed_hosts is None:
        monkeypatch.delenv("STREAMLIT_SERVER_ALLOWED_HOSTS", raising=False)
    else:  # as if someone removed the setting: only the app's own check stands
        monkeypatch.setenv("STREAMLIT_SERVER_ALLOWED_HOSTS", allowed_hosts)
    return start_console(tmp_path, store, secrets=None)


def open_page(chromium, url: str, sockets: list | None = None) -> Page:
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    if sockets is not None:
        page.on("websocket", lambda ws: sockets.append(ws))
    page.goto(url)
    return page


def wait_until(page: Page, condition, seconds: float = 30.0) -> bool:
    for _ in range(int(seconds * 10)):
        if condition():
            return True
        page.wait_for_timeout(100)
    return condition()


def assert_no_operator_controls(page: Page) -> None:
    expect(page.locator("body")).not_to_contain_text("· operator")  # the signed-in badge
    expect(page.get_by_role("heading", name="Fleet")).to_have_count(0)
    expect(page.get_by_role("button", name=re.compile("Roll back|Send notice"))).to_have_count(0)
    expect(page.locator('[data-testid="stDataFrame"]')).to_have_count(0)


def test_shipped_config_refuses_the_foreign_host_and_serves_localhost(
    tmp_path, demo_store, monkeypatch, rebinding_browser
):
    console = demo_console(tmp_path, demo_store, monkeypatch, allowed_hosts=None)
    try:
        port = console.url.rsplit(":", 1)[1]
        local = open_page(rebinding_browser, f"http://localhost:{port}/")
        expect(local.get_by_role("heading", name="Fleet")).to_be_visible(timeout=WAIT)
        expect(local.get_by_text("demo · operator")).to_be_visible()
        local.context.close()

        sockets: list = []
        page = open_page(rebinding_browser, f"http://{FOREIGN}:{port}/", sockets)
        # The app's WebSocket is refused (server.allowedHosts), so the app never runs here.
        assert wait_until(
            page, lambda: any("_stcore/stream" in ws.url and ws.is_closed() for ws in sockets)
        ), [ws.url for ws in sockets]
        assert_no_operator_controls(page)
        page.context.close()
    finally:
        stop_console(console.process)


def test_without_allowed_hosts_the_app_still_refuses_demo_mode(
    tmp_path, demo_store, monkeypatch, rebinding_browser
):
    console = demo_console(tmp_path, demo_store, monkeypatch, allowed_hosts="*")
    try:
        port = console.url.rsplit(":", 1)[1]
        page = open_page(rebinding_browser, f"http://{FOREIGN}:{port}/session?session=x")
        expect(page.get_by_text("only serves localhost")).to_be_visible(timeout=WAIT)
        expect(page.get_by_text(f"{FOREIGN}:{port}", exact=True)).to_be_visible()
        expect(page.get_by_text("[rewind.users.<name>]")).to_be_visible()
        assert_no_operator_controls(page)
        assert page.locator(f'a[href*="{FOREIGN}"]').count() == 0
        page.context.close()

        local = open_page(rebinding_browser, f"http://127.0.0.1:{port}/")
        expect(local.get_by_role("heading", name="Fleet")).to_be_visible(timeout=WAIT)
        local.context.close()
    finally:
        stop_console(console.process)
