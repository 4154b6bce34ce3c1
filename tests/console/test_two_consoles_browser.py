"""Two consoles on one Redis store agree, as two replicas behind one load balancer must: a sign-in
made on one works on the other (the sign-in sessions live in the store), a rollback taken on one
shows on the other, and the fleet's figures are the same on both.

Two `streamlit run dashboard/serve.py` servers (as `rewind dashboard` serves it) on free ports,
one real redis-server, and Debian's Chromium through Playwright. Cookies are kept per host, not
per port, so one browser sends the session cookie one console set to the other, as a browser
behind a load balancer sends it to whichever replica answers.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from support.console import (
    ACCOUNTS,
    CHROMIUM,
    chromium,
    fresh_page,
    sign_in,
    start_console,
    stop_console,
    write_secrets,
)
from support.redis_servers import RedisServer, require_redis

from dashboard.signin.access import SESSION_COOKIE
from engine import Engine, LoopWaiting

pytestmark = [pytest.mark.browser, pytest.mark.redis]

LOOPING = ("loop-a", "loop-b")
REASON = "Reason (required, written to the audit log)"


@pytest.fixture(scope="module")
def consoles(tmp_path_factory):
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip("no Chromium at /usr/bin/chromium (apt-get install -y chromium)")
    require_redis()
    server = RedisServer().start()
    store = server.url(prefix="replicas")
    with Engine.open(store, freeze=None) as engine:
        for n in range(4):
            s = engine.session(f"healthy-{n}", meta={"tenant": "acme"})
            with s.step("search", {"q": n}) as call:
                call.ok({"hits": n})
        for sid in LOOPING:
            s = engine.session(sid, meta={"tenant": "acme", "scenario": "receipts"},
                               on_loop="flag")
            s.append_message("user", "crop the receipt")
            s.snapshot("start")
            with pytest.raises(LoopWaiting):
                for _ in range(4):
                    with s.step("image_crop", {"x": 10}) as call:
                        call.fail("invalid slice")
    workdir = tmp_path_factory.mktemp("replicas")
    secrets = workdir / "secrets.toml"
    write_secrets(secrets, ACCOUNTS, freeze=False)
    first = start_console(workdir, store, secrets)
    try:
        second = start_console(workdir, store, secrets)
    except Exception:
        stop_console(first.process)
        server.remove()
        raise
    yield first, second
    stop_console(first.process)
    stop_console(second.process)
    server.remove()


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser):
    pg = fresh_page(browser)
    yield pg
    pg.context.close()


def _figures(page: Page) -> dict[str, str]:
    """The fleet's KPI tiles as {label: value}."""
    tiles = page.locator('[data-testid="stMetric"]')
    expect(tiles.first).to_be_visible()
    out = {}
    for i in range(tiles.count()):
        tile = tiles.nth(i)
        label = tile.locator('[data-testid="stMetricLabel"]').inner_text().strip()
        out[label] = tile.locator('[data-testid="stMetricValue"]').inner_text().strip()
    return out


def _until_same(first: Page, second: Page, url_a: str, url_b: str, want: dict[str, str],
                seconds: float = 60.0) -> dict[str, str]:
    """Reload both fleet pages until their figures agree and hold `want`; returns them."""
    deadline = time.monotonic() + seconds
    a = b = {}
    while time.monotonic() < deadline:
        first.goto(url_a)
        second.goto(url_b)
        a, b = _figures(first), _figures(second)
        if a == b and all(a.get(k) == v for k, v in want.items()):
            return a
        time.sleep(1.0)
    raise AssertionError(f"the consoles disagree: {a} vs {b} (want {want})")


def test_two_consoles_on_one_redis_store_agree(consoles, page, browser):
    first, second = consoles

    # A sign-in on the first console works on the second: one browser, the second console
    # never saw the password, only the session cookie, which it looks up in the store.
    sign_in(page, first.url, "olivia")
    assert any(c["name"] == SESSION_COOKIE for c in page.context.cookies())
    page.goto(f"{second.url}/session?session=loop-a")
    expect(page.get_by_text("olivia · operator")).to_be_visible()
    expect(page.get_by_role("textbox", name="Password")).to_have_count(0)
    expect(page.get_by_text("Waiting for on-call", exact=False)).to_be_visible()

    # A rollback taken on the first shows on the second.
    other = page.context.new_page()
    other.goto(f"{first.url}/session?session=loop-a")
    expect(other.get_by_role("heading", name="loop-a")).to_be_visible()
    other.get_by_role("button", name="Roll back…").click()
    dialog = other.get_by_role("dialog")
    dialog.get_by_role("textbox", name=REASON).fill("image_crop is broken")
    dialog.get_by_role("textbox", name=REASON).press("Enter")
    dialog.get_by_role("button", name="Roll back", exact=True).click()
    expect(other.get_by_text(re.compile(r"^Rolled back to snap-"))).to_be_visible()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the second's cache of the page lives seconds
        page.goto(f"{second.url}/session?session=loop-a")
        expect(page.get_by_role("heading", name="loop-a")).to_be_visible()
        if page.get_by_text("Rolled back.", exact=False).count():
            break
        time.sleep(1.0)
    expect(page.get_by_text("Rolled back.", exact=False).first).to_be_visible()
    expect(page.get_by_text("Waiting for on-call", exact=False)).to_have_count(0)

    # The fleet's figures are the same on both, and what the store holds.
    with Engine.open(first.store, freeze=None) as engine:
        looping = engine.fleet.stats()["looping"]
        assert looping == 1 and [r.actor for r in engine.audit(action="rollback")] == [
            "olivia"]
    figures = _until_same(other, page, first.url, second.url,
                          {"Looping now": str(looping), "Rollbacks, last hour": "1"})
    assert figures["Looping now"] == "1"
