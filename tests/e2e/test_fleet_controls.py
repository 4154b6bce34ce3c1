"""Fleet controls for a freeze in the browser, at 1440x900: an operator filters the fleet
to the looping sessions of one prompt version, previews, rolls them all back with one reason,
quarantines a tool, and finds both on the audit page; a viewer finds none of these controls.

Its own console and store (not the package's `console`): the fleet here has more looping
sessions, and test_console.py counts the sessions of its fleet.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from support.console import (
    ACCOUNTS,
    CHROMIUM,
    WAIT_MS,
    sign_in,
    start_console,
    stop_console,
    write_secrets,
)
from support.fleet import LOOPING, seed_fleet, seed_prompt_loops

from dashboard import actions
from engine import Engine

pytestmark = pytest.mark.browser

WIDTH, HEIGHT = 1440, 900
REASON = "v9 deadlocks the model on refunds; freeze, no deploy"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """The console's usual fleet plus looping sessions under v9 (three) and v8 (two more)."""
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip("no Chromium at /usr/bin/chromium (apt-get install -y chromium)")
    workdir = tmp_path_factory.mktemp("fleet-controls")
    store = f"sqlite:///{workdir}/rewind.db"
    seed_fleet(store)
    v9 = seed_prompt_loops(store, "v9", 3)
    v8 = [LOOPING, *seed_prompt_loops(store, "v8", 2)]
    secrets = workdir / "secrets.toml"
    write_secrets(secrets, ACCOUNTS)
    running = start_console(workdir, store, secrets)
    yield running, v9, v8
    stop_console(running.process)


@pytest.fixture
def page(browser):
    expect.set_options(timeout=WAIT_MS)
    context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    pg = context.new_page()
    pg.set_default_timeout(WAIT_MS)
    yield pg
    context.close()


def settle(page: Page) -> None:
    """Wait until the script run triggered by the last interaction has finished."""
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"stApp\"]')"
        "?.getAttribute('data-test-script-state') === 'notRunning'")


def choose(page: Page, label: str, option: str) -> None:
    """Pick `option` in the select box `label` (a rerun can close a menu just opened: retry)."""
    box = page.get_by_role("combobox", name=label)
    for attempt in range(3):
        settle(page)
        box.click()
        # typed, as a person does in a long list: the menu shows only the options that match
        # (an option far down a list that grew, such as the audit actions, is not rendered)
        page.keyboard.type(option)
        item = page.get_by_role("option", name=option, exact=True)
        try:
            item.click(timeout=5_000)
            break
        except Exception:
            if attempt == 2:
                raise
            page.keyboard.press("Escape")
    settle(page)
    expect(box).to_have_value(option)


def cell(scope, text: str | re.Pattern):
    """Data frame cells with exactly `text`. The grid draws on a canvas and mirrors the cells in
    view into a hidden table for screen readers: check them with `to_have_count`, not
    `to_be_visible`."""
    return scope.locator('[role="gridcell"]').filter(
        has_text=re.compile(f"^{re.escape(text)}$") if isinstance(text, str) else text)


def select_rows(page: Page, count: int) -> None:
    """Tick the selection box of the sessions table's first `count` rows."""
    table = page.locator('[data-testid="stDataFrame"]').first
    table.scroll_into_view_if_needed()
    for row in range(count):
        grid = table.bounding_box()
        page.mouse.click(grid["x"] + 18, grid["y"] + 35 + 35 * row + 17)
        settle(page)


def within_screen(page: Page, locator) -> None:
    box = locator.bounding_box()
    assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= HEIGHT, box


def test_operator_rolls_back_one_prompt_version_and_quarantines_a_tool(fleet, page, shots):
    console, v9, v8 = fleet
    sign_in(page, console.url, "olivia")
    live = page.get_by_text(re.compile("^Live: refresh every"))
    caption = page.get_by_text(re.compile(r"matching sessions · updated"))
    live.click()  # a refresh redraws the filters: hold them still while picking
    expect(caption).to_contain_text("paused")
    choose(page, "Status", "looping")
    choose(page, "Prompt version", "v9")
    expect(caption).to_contain_text("3 of 3 matching sessions")
    live.click()
    expect(caption).to_contain_text("live")

    # Rows: selecting pauses the live refresh (a selection is by position) and offers both.
    select_rows(page, 2)
    expect(caption).to_contain_text("paused")
    page.get_by_role("button", name="Roll back 2 selected").click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_text(re.compile(r"^2 selected sessions: 2 match"))).to_be_visible()
    dialog.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("dialog")).to_have_count(0)

    # The filter: everything looping under v9, with a preview first.
    page.get_by_role("button", name="Roll back all 3 matching the filter").click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_text(re.compile(
        r"^All sessions matching status=looping, prompt_version=v9: 3 match · "
        r"3 will be rolled back"))).to_be_visible()
    expect(dialog.get_by_text(f"at most {actions.BULK_CAP} at once", exact=False)).to_be_visible()
    expect(dialog.get_by_text(re.compile(r"9 steps and 9 messages"))).to_be_visible()
    expect(dialog.get_by_text("refund_api.undo ×6", exact=False)).to_be_visible()
    for sid in v9:  # one line per session, with what leaves and what would be undone
        expect(cell(dialog, sid)).to_have_count(1)
    expect(cell(dialog, "refund_api.undo (step 4), refund_api.undo (step 3), "
                        "refund_api.undo (step 2)")).to_have_count(2)
    for sid in v8:
        expect(cell(dialog, sid)).to_have_count(0)
    confirm = dialog.get_by_role("button", name="Roll back 3 sessions")
    expect(confirm).to_be_disabled()  # no reason yet
    reason = dialog.get_by_role("textbox", name="Reason (required, written to the audit log)")
    within_screen(page, reason)
    reason.fill(REASON)
    reason.press("Enter")
    settle(page)
    expect(confirm).to_be_enabled()
    within_screen(page, confirm)
    page.screenshot(path=str(shots / "console-bulk-rollback.png"))
    confirm.click()

    expect(dialog.get_by_text("Rolled back 3 of 3 sessions")).to_be_visible()
    expect(cell(dialog, "rolled back")).to_have_count(3)
    page.screenshot(path=str(shots / "console-bulk-rollback-done.png"))
    batch = dialog.locator("code", has_text=re.compile(r"^batch-")).inner_text()
    dialog.get_by_role("button", name="Done").click()
    expect(page.get_by_role("dialog")).to_have_count(0)
    expect(page.get_by_text(f"Rolled back 3 of 3 sessions (batch {batch})",
                            exact=False)).to_be_visible()
    expect(caption).to_contain_text("0 of 0 matching sessions")  # none of v9 loops any more

    with Engine.open(console.store) as engine:
        assert {engine.get_session(s).info().status for s in v9} == {"rolled_back"}
        assert {engine.get_session(s).info().status for s in v8} == {"looping"}  # untouched
        rollbacks = engine.audit(action="rollback", actor="olivia")
        assert sorted(e.session for e in rollbacks) == sorted(v9)
        assert {(e.reason, e.detail["batch"]) for e in rollbacks} == {(REASON, batch)}

    # Quarantine a tool from the console.
    page.get_by_role("link", name="Quarantine", exact=True).click()
    expect(page.get_by_role("heading", name="Quarantine")).to_be_visible()
    expect(page.get_by_text("No tool is quarantined")).to_be_visible()
    choose(page, "Tool (exactly as agents call it)", "refund_api")
    page.get_by_role("textbox", name=re.compile(r"^Reason \(required; agents")).fill(
        "refund_api answers HTTP 500 for v8; vendor fix after the freeze")
    choose(page, "Prompt version", "v8")
    choose(page, "Ends", "24 hours")
    page.get_by_role("button", name="Quarantine tool").click()
    expect(page.get_by_text(re.compile(
        r"^Quarantined refund_api for prompt_version=v8 until .* \(in 2[34] h"))).to_be_visible()
    expect(cell(page, "refund_api")).to_have_count(1)
    expect(cell(page, "olivia")).to_have_count(1)
    page.screenshot(path=str(shots / "console-quarantine.png"))
    with Engine.open(console.store) as engine:
        (q,) = engine.quarantines()
        assert (q.tool, q.actor, q.scope) == ("refund_api", "olivia", {"prompt_version": "v8"})
        assert q.until is not None

    page.get_by_role("link", name="Fleet", exact=True).click()
    expect(page.get_by_role("link", name="1 tool quarantine in force: refund_api")).to_be_visible()

    # Both on the audit page, legibly.
    page.get_by_role("link", name="Audit", exact=True).click()
    expect(page.get_by_role("heading", name="Audit")).to_be_visible()
    expect(cell(page, "quarantine")).to_have_count(1)
    expect(cell(page, "rollback_many")).to_have_count(1)
    expect(cell(page, "bulk rollback: 3 of 3 sessions rolled back (status=looping, "
                      "prompt_version=v9, 3 listed sessions)")).to_have_count(1)  # batch summary
    expect(cell(page, re.compile(r"^quarantined tool refund_api for prompt_version=v8 until "))
           ).to_have_count(1)
    page.get_by_role("textbox", name="Batch").fill(batch)
    page.get_by_role("textbox", name="Batch").press("Enter")
    settle(page)
    # what was planned (written first), 3 rollbacks and their 3 notices, the summary
    expect(page.get_by_text("8 events", exact=True)).to_be_visible()
    page.screenshot(path=str(shots / "console-audit-batch.png"))
    expect(cell(page, "rollback")).to_have_count(3)
    expect(cell(page, "rollback_many")).to_have_count(1)
    expect(cell(page, "rollback_many.start")).to_have_count(1)
    expect(cell(page, "notice")).to_have_count(3)
    choose(page, "Action", "quarantine")
    page.get_by_role("textbox", name="Batch").fill("")
    page.get_by_role("textbox", name="Batch").press("Enter")
    settle(page)
    expect(page.get_by_text("1 events", exact=True)).to_be_visible()


def test_viewer_finds_no_bulk_or_quarantine_controls(fleet, page):
    console, v9, v8 = fleet
    sign_in(page, console.url, "victor")
    expect(page.get_by_text(re.compile(r"matching sessions · updated"))).to_be_visible()
    controls = re.compile(r"Roll back|Quarantine tool|Lift quarantine")
    expect(page.get_by_role("button", name=controls)).to_have_count(0)
    select_rows(page, 1)  # a viewer may still open a session from the table
    expect(page.get_by_role("button", name=re.compile(r"\bOpen \S"))).to_be_visible()
    expect(page.get_by_role("button", name=controls)).to_have_count(0)

    page.get_by_role("link", name="Quarantine", exact=True).click()
    expect(page.get_by_role("heading", name="Quarantine")).to_be_visible()
    expect(page.get_by_text("You are signed in as a viewer")).to_be_visible()
    expect(page.get_by_role("button", name=controls)).to_have_count(0)
    expect(page.get_by_role("textbox", name=re.compile("Tool name|Reason"))).to_have_count(0)
