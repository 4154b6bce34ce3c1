"""The compensations page in headless Chromium: an operator retries a failed compensation and a
worker (here, in the test process, through the engine) runs it to done; another is marked
resolved; a viewer sees no buttons. At 1440x900 and at a phone's 390x844.

The page runs against its own store (not the package's `console`), so its retries and resolves
never change what tests/e2e/test_console.py counts.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from support import console
from support.console import ACCOUNTS, CHROMIUM, start_console, stop_console, write_secrets

from engine import Engine

pytestmark = pytest.mark.browser

VIEWPORTS = [(1440, 900), (390, 844)]
HEADER_PX, ROW_PX = 35, 35
"""Height of the dataframe's header and rows (the grid is drawn on a canvas)."""


@pytest.fixture(scope="module")
def comp_console(tmp_path_factory):
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip("no Chromium at /usr/bin/chromium (apt-get install -y chromium)")
    workdir = tmp_path_factory.mktemp("compensations")
    store = f"sqlite:///{workdir}/rewind.db"
    Engine.open(store).close()  # the schema, before the console opens the file
    secrets = workdir / "secrets.toml"
    write_secrets(secrets, ACCOUNTS, freeze=False)
    running = start_console(workdir, store, secrets)
    yield running
    stop_console(running.process)


def failed_compensation(store: str, sid: str, handler: str, error: str) -> int:
    """A session whose rollback queued `handler`, which then failed for good; returns its id.
    The failure is written through the store's claim/finish, so no process announces the
    handler: the page must say that nobody runs it."""
    with Engine.open(store, compensation_attempts=1) as engine:
        s = engine.session(sid, meta={"tenant": "acme", "scenario": "refund", "locale": "en"})
        s.append_message("user", "Refund order A-7, please.")
        start = s.snapshot("start")
        with s.step("refund_api", {"order": "A-7"}, side_effect=True,
                    compensation=(handler, {"order": "A-7"})) as call:
            call.ok({"refund": "R-1"})
        [comp] = s.rollback(to=start, actor="rewind", reason="loop", notice=False).compensations
        claimed = engine.store.claim_compensation([handler], "seed-worker", 60, time.time())
        assert claimed is not None and claimed.id == comp.id
        engine.store.finish_compensation(comp.id, "seed-worker", False, error, time.time(), True)
        return comp.id


def sign_in(page: Page, url: str, name: str) -> None:
    console.sign_in(page, url, name)
    expect(page.get_by_role("heading", name="Compensations")).to_be_visible()
    page.get_by_role("button", name="Refresh").click()  # past the console's few-second cache
    settle(page)
    expect(page.get_by_text(re.compile(r"compensations · read"))).to_be_visible()


def settle(page: Page) -> None:
    """Wait until the script run triggered by the last interaction has finished."""
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"stApp\"]')"
        "?.getAttribute('data-test-script-state') === 'notRunning'")


def select_row(page: Page, row: int) -> None:
    """Tick row `row` (0 = first) of the compensations table."""
    table = page.locator('[data-testid="stDataFrame"]').first
    table.scroll_into_view_if_needed()
    grid = table.bounding_box()
    page.mouse.click(grid["x"] + 18, grid["y"] + HEADER_PX + row * ROW_PX + ROW_PX // 2)


@pytest.mark.parametrize(("width", "height"), VIEWPORTS, ids=["desktop", "phone"])
def test_operator_retries_and_resolves_failed_compensations(comp_console, page, shots,
                                                            width, height):
    page.set_viewport_size({"width": width, "height": height})
    store = comp_console.store
    handler = f"refund_api.undo_{width}"
    resolved_id = failed_compensation(store, f"points-{width}", f"points_refund_{width}",
                                      "HTTP 409: points already spent")
    retried_id = failed_compensation(store, f"refund-{width}", handler,
                                     "HTTP 503: refund service down")

    sign_in(page, f"{comp_console.url}/compensations?comp-status=failed", "olivia")
    warning = page.locator('[data-testid="stAlert"]').filter(
        has_text="No running process has registered")
    expect(warning).to_contain_text("retrying will not help until one does")
    expect(warning).to_contain_text(handler)
    expect(warning).to_contain_text(f"points_refund_{width}")
    retry = page.get_by_role("button", name="Retry", exact=True)
    expect(retry).to_be_disabled()  # nothing selected, no reason

    settle(page)
    select_row(page, 0)  # newest first: the refund compensation
    expect(page.get_by_text(f"1 selected: #{retried_id} {handler} (failed)")).to_be_visible()
    expect(retry).to_be_disabled()  # still no reason
    page.get_by_role("textbox", name="Reason (required, written to the audit log)").fill(
        "refund service is back")
    expect(retry).to_be_enabled()
    page.screenshot(path=str(shots / f"compensations-retry-{width}.png"), full_page=True)
    retry.click()
    expect(page.get_by_text(f"Retried 1: #{retried_id} {handler}")).to_be_visible()
    expect(page.get_by_text(f"No running process has registered {handler}: it stays pending"
                            )).to_be_visible()

    with Engine.open(store) as worker:  # an agent process with the handler starts
        [comp] = [c for c in worker.compensations(status="pending") if c.id == retried_id]
        assert (comp.attempts, comp.error) == (0, "HTTP 503: refund service down")
        undone = []
        worker.compensations.register(handler, lambda args, key: undone.append((args, key)))

        # its heartbeat is in the store: the page no longer warns about its handler
        sign_in(page, f"{comp_console.url}/compensations?comp-status=needs+attention", "olivia")
        expect(page.get_by_text(re.compile(r"compensations · read"))).to_be_visible()
        warning = page.locator('[data-testid="stAlert"]').filter(
            has_text="No running process has registered")
        expect(warning).to_contain_text(f"points_refund_{width}")
        expect(warning).not_to_contain_text(handler)

        [done] = worker.compensations.run()  # its next pass
        assert (done.id, done.status) == (retried_id, "done")
        assert undone == [({"order": "A-7"}, comp.idempotency_key)]
        [event] = worker.audit(action="compensation.retry", session=f"refund-{width}")
        assert (event.actor, event.reason) == ("olivia", "refund service is back")
        worker.store.heartbeat_worker(worker.config.worker_id, [], worker.clock(), 0)  # it stops

    sign_in(page, f"{comp_console.url}/compensations?comp-status=failed", "olivia")
    select_row(page, 0)  # the points compensation is the only failed one left
    expect(page.get_by_text(f"1 selected: #{resolved_id} points_refund_{width}")).to_be_visible()
    page.get_by_text("Undone by hand outside Rewind", exact=True).click()  # a preset reason
    resolve = page.get_by_role("button", name="Mark resolved")
    expect(resolve).to_be_enabled()
    resolve.click()
    expect(page.get_by_text(f"Marked resolved 1: #{resolved_id} points_refund_{width}")
           ).to_be_visible()
    expect(page.get_by_text("No compensation here.")).to_be_visible()
    page.screenshot(path=str(shots / f"compensations-resolved-{width}.png"), full_page=True)
    with Engine.open(store) as engine:
        [comp] = [c for c in engine.compensations(status="resolved") if c.id == resolved_id]
        assert (comp.resolved_by, comp.resolved_reason) == ("olivia",
                                                            "Undone by hand outside Rewind")
        [event] = engine.audit(action="compensation.resolve", session=f"points-{width}")
        assert event.actor == "olivia"


def test_a_viewer_sees_the_outbox_but_no_buttons(comp_console, page):
    page.set_viewport_size({"width": 390, "height": 844})
    failed_compensation(comp_console.store, "viewer-sees", "mail.recall", "SMTP 421")
    sign_in(page, f"{comp_console.url}/compensations?comp-status=failed", "victor")
    expect(page.locator('[data-testid="stAlert"]').filter(has_text="mail.recall")).to_contain_text(
        "No running process has registered")
    expect(page.get_by_text("Only operators can retry compensations")).to_be_visible()
    expect(page.get_by_role("button", name="Retry", exact=True)).to_have_count(0)
    expect(page.get_by_role("button", name="Mark resolved")).to_have_count(0)
