"""What on-call reads, at 1440x900 and 390x844: no label cut off, plain words
instead of the engine's jargon, and a "Needs you" band of real links, newest first."""

from __future__ import annotations

import contextlib
import re
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import Page, expect
from support.console import sign_in
from support.fleet import LOOPING

from engine import Engine, LoopWaiting

pytestmark = pytest.mark.browser

DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1440x900", "390x844"])

CLIPPED = """(root) => [root, ...root.querySelectorAll('*')]
  .filter(e => e.textContent.trim()
          && e.scrollWidth > e.clientWidth + 1
          && ['hidden', 'clip'].includes(getComputedStyle(e).overflowX))
  .map(e => e.textContent.trim())"""
"""Texts of the elements under `root` that their box cuts off (an ellipsis or a clip)."""


def clipped(locator) -> list[str]:
    return locator.evaluate(CLIPPED)


@VIEWPORTS
def test_fleet_labels_are_whole(console, page: Page, viewport):
    page.set_viewport_size(viewport)
    sign_in(page, console.url, "victor")
    kpi = page.locator('[data-testid="stMetric"]').filter(has_text="Compensations")
    expect(kpi).to_be_visible()
    assert clipped(kpi) == []
    sort = page.get_by_role("combobox", name="Sort by")
    expect(sort).to_have_value("Needs you first")
    # the chosen option is the input's value: it is whole when the input needs no scrolling
    assert sort.evaluate("e => e.scrollWidth <= e.clientWidth + 1"), "Sort by is cut"


@VIEWPORTS
def test_needs_you_lists_real_links(console, page: Page, viewport):
    # A loop of its own: the package's console is shared, and other tests roll the seeded
    # looping session back. "Needs you" ranks by what a loop cost (tests/console covers the
    # order); here the link itself is the point.
    sid = f"needs you {viewport['width']}"  # a space: the link percent-encodes it
    with Engine.open(console.store) as engine:
        s = engine.session(sid, meta={"tenant": "acme", "scenario": "crop"}, on_loop="flag")
        s.snapshot("start")
        with contextlib.suppress(LoopWaiting):  # under flag the agent waits for on-call
            for _ in range(4):
                with s.step("image_crop", {"x": 10}) as call:
                    call.fail("invalid slice")
        assert s.info().status == "looping"
    page.set_viewport_size(viewport)
    sign_in(page, console.url, "victor")
    band = page.locator(".st-key-needs-you")
    expect(band).to_be_visible()
    links = band.get_by_role("link")
    link = band.get_by_role("link", name=re.compile(rf"^{re.escape(sid)} · "))
    expect(link).to_be_visible()
    expect(links.first).to_be_visible()
    href = link.get_attribute("href") or ""
    path, _, query = href.rpartition("/")[2].partition("?")
    assert path == "session" and parse_qs(query) == {"session": [sid]}, href
    # a real link: the browser opens it in a new tab, where it works on its own
    with page.context.expect_page() as opened:
        link.click(button="middle")  # Streamlit handles a plain click in place
    tab = opened.value
    tab.wait_for_load_state()
    assert parse_qs(urlsplit(tab.url).query) == {"session": [sid]}, tab.url
    tab.close()


def test_the_session_header_speaks_plainly(console, page: Page):
    sign_in(page, f"{console.url}/session?session={LOOPING}", "victor")
    expect(page.get_by_role("heading", name=LOOPING)).to_be_visible()
    header = page.get_by_text(re.compile(r"messages in the conversation now")).first
    # a loop still going says "flagged N times in this loop"; one rolled back, how often it was
    expect(header).to_contain_text(re.compile(r"flagged (as looping )?(once|\d+ times)"))
    for jargon in ("epoch", "loop verdicts", "live messages"):
        expect(header).not_to_contain_text(jargon)


def test_every_session_tab_is_on_a_phone_screen(console, page: Page):
    page.set_viewport_size(PHONE)
    sign_in(page, f"{console.url}/session?session={LOOPING}", "victor")
    tabs = page.get_by_role("tab")
    expect(tabs.first).to_be_visible()
    names = tabs.all_inner_texts()
    assert len(names) == 6, names
    for i in range(len(names)):
        box = tabs.nth(i).bounding_box()
        assert box and 0 <= box["x"] and box["x"] + box["width"] <= PHONE["width"], (names[i], box)
    page.get_by_role("tab", name=names[-1]).click()  # the last one works without scrolling
    expect(page.get_by_role("tab", name=names[-1])).to_have_attribute("aria-selected", "true")
