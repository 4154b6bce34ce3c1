"""The session page's snapshot picker stays open while the page runs again: a run on-call did not
ask for (the page's first runs finishing, a chart reporting its selection) must not close the
menu they are reading, at 1440x900 and 390x844.

The page has no timed refresh of its own (only the fleet refreshes itself), and a full run does
not close the menu. What closed it in the browser tests was the click: one sent within moments of
the tab's plotly chart being drawn (Playwright clicks at once, and presses and releases in one
instant) can close the menu it opens; the same click a few hundred milliseconds later, or a press
held as long as a person's, leaves it open. A bare Streamlit page shows the same with a plotly
chart above a selectbox in a tab, and not without the chart or the tab."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect
from support.console import rerun_the_page
from support.fleet import AUTO_ROLLED_BACK

from tests.e2e.test_session_page_legibility import VIEWPORTS, chart_drawn, open_session, settle

pytestmark = pytest.mark.browser

PICKER = "Snapshot (or click a node)"

def press(page: Page, locator, hold_ms: int = 100) -> None:
    """Press and release the mouse on `locator` as a person does, not in one instant."""
    locator.scroll_into_view_if_needed()
    box = locator.bounding_box()
    page.mouse.move(box["x"] + min(20, box["width"] / 2), box["y"] + box["height"] / 2)
    page.mouse.down()
    page.wait_for_timeout(hold_ms)
    page.mouse.up()


@VIEWPORTS
def test_the_snapshot_picker_stays_open_while_the_page_runs_again(console, page: Page, viewport):
    open_session(page, console.url, AUTO_ROLLED_BACK, "Snapshot tree", viewport)
    chart_drawn(page)
    settle(page)
    press(page, page.get_by_role("combobox", name=PICKER))
    options = page.get_by_role("option")
    expect(options.first).to_be_visible()
    shown = options.all_inner_texts()
    rerun_the_page(page)
    expect(options.first).to_be_visible()
    assert options.all_inner_texts() == shown
