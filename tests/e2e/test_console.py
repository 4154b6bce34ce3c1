"""The console in headless Chromium against `streamlit run` and a seeded SQLite store: what AppTest
cannot reach (dialogs, the live fragment, plotly charts, a deep link surviving sign-in).

Screenshots of the fleet and session pages go to $REWIND_SCREENSHOTS (else a temp dir); never point
it at docs/: the README's images come from the demo fleet (scripts/screenshots.py).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect
from support.console import WATCH_RUNS, rerun_the_page, sign_in, wait_for_run_to_end
from support.fleet import AUTO_ROLLED_BACK, LOOPING, seed_looping

from dashboard import views
from engine import Engine
from engine.recovery.notices import TEMPLATES

pytestmark = pytest.mark.browser

CHART = '[data-testid="stPlotlyChart"]'
LOOP_CHART = '[data-testid="stVegaLiteChart"]'
VEGA_DRAWN = f"{LOOP_CHART} svg.marks, {LOOP_CHART} canvas"
"""A Vega-Lite chart drawn (the fleet's loop charts, the session's timeline)."""
"""The fleet's loop charts are Vega-Lite (tests/e2e/test_fleet_first_screen.py says why)."""
DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1440x900", "390x844"])
"""Every on-call job runs on a laptop and on a phone."""


def open_tab(page: Page, name: str) -> None:
    """Click a tab until it is selected: a click that lands while the run after sign-in (the
    one that hands the browser its session cookie) redraws the tabs is lost, as for a user."""
    tab = page.get_by_role("tab", name=name)
    for _ in range(3):
        tab.click()
        try:
            expect(tab).to_have_attribute("aria-selected", "true", timeout=7_000)
            return
        except AssertionError:
            settle(page)
    expect(tab).to_have_attribute("aria-selected", "true")


def on_screen(page: Page, locator) -> None:
    """`locator` is visible inside the viewport as it is now (no scrolling)."""
    expect(locator).to_be_visible()
    box = locator.bounding_box()
    size = page.viewport_size
    assert box["y"] >= 0 and box["y"] + box["height"] <= size["height"], (box, size)
    assert box["x"] >= 0 and box["x"] + box["width"] <= size["width"], (box, size)


def settle(page: Page) -> None:
    """Wait until the script run triggered by the last interaction has finished."""
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"stApp\"]')"
        "?.getAttribute('data-test-script-state') === 'notRunning'")


def test_wrong_password_is_refused(console, page):
    page.goto(console.url)
    page.get_by_role("textbox", name="Username").fill("olivia")
    page.get_by_role("textbox", name="Password").fill("guess")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_text("Unknown username or wrong password.")).to_be_visible()
    expect(page.get_by_text("Active sessions")).to_have_count(0)


def test_fleet_is_live_and_can_be_paused(console, page, shots):
    sign_in(page, console.url, "olivia")
    expect(page.get_by_role("heading", name="Fleet")).to_be_visible()
    banner = page.get_by_test_id("stAlertContentWarning").filter(has_text="Holiday change freeze")
    expect(banner).to_be_visible()
    for label in ("Active sessions", "Looping now", "Rollbacks, last hour"):
        expect(page.get_by_text(label, exact=True)).to_be_visible()
    expect(page.locator(LOOP_CHART)).to_have_count(2)
    expect(page.locator(f"{LOOP_CHART} svg.marks").first).to_be_visible()
    caption = page.get_by_text(re.compile(r"matching sessions · updated"))
    expect(caption).to_contain_text("26 of 26")
    page.wait_for_timeout(1500)  # let the charts finish drawing before the screenshot
    page.screenshot(path=str(shots / "console-fleet.png"), full_page=True)

    with Engine.open(console.store) as engine:  # a new session appears without a reload
        engine.session("late-arrival", meta={"tenant": "acme", "scenario": "refund"})
    expect(caption).to_contain_text("27 of 27", timeout=30_000)

    page.get_by_text(re.compile("^Live: refresh every")).click()
    expect(caption).to_contain_text("paused")
    with Engine.open(console.store) as engine:
        engine.session("while-paused", meta={"tenant": "acme"})
    page.wait_for_timeout(8_000)  # > refresh interval + cache TTL: a live view would have moved
    expect(caption).to_contain_text("27 of 27")


@VIEWPORTS
def test_on_call_finds_the_looping_session_on_the_first_screen(console, page, shots, viewport):
    """From the fleet's first screen, without scrolling: the band names the looping session;
    its page says since when and how bad."""
    page.set_viewport_size(viewport)
    sign_in(page, console.url, "olivia")
    link = page.get_by_role("link", name=re.compile(rf"^{LOOPING} · refund · looping"))
    on_screen(page, link)  # no scrolling needed
    expect(link).to_contain_text("steps in the loop")
    on_screen(page, page.get_by_text(re.compile(r"^Needs you: \d+ looping session")))
    if viewport is DESKTOP:
        page.screenshot(path=str(shots / "console-fleet-needs-you.png"))
    link.click()
    expect(page.get_by_role("heading", name=LOOPING)).to_be_visible()
    for label in ("Loop began", "Looping for", "Steps wasted", "Side effects in the loop"):
        expect(page.get_by_text(label, exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="Roll back…")).to_be_visible()


def test_looping_kpi_links_to_the_filtered_table(console, page):
    sign_in(page, console.url, "victor")
    expect(page.get_by_text("needs you", exact=True)).to_be_visible()
    page.get_by_role("button", name="Show the looping sessions").click()
    expect(page.get_by_text(re.compile(r"^1 of 1 matching sessions"))).to_be_visible()
    expect(page).to_have_url(re.compile(r"status=looping"))  # the filtered table can be shared


def test_selecting_a_fleet_row_opens_the_session(console, page):
    sign_in(page, console.url, "victor")
    search = page.get_by_role("textbox", name="Search")
    search.fill(AUTO_ROLLED_BACK)
    search.press("Enter")
    expect(page.get_by_text(re.compile(r"^1 of \d+ matching sessions"))).to_be_visible()
    page.get_by_text(re.compile("^Live: refresh every")).click()  # hold the table still
    expect(page.get_by_text(re.compile(r"matching sessions .* paused"))).to_be_visible()
    table = page.locator('[data-testid="stDataFrame"]').first
    table.scroll_into_view_if_needed()  # the needs-you band sits above it now
    grid = table.bounding_box()
    page.mouse.click(grid["x"] + 18, grid["y"] + 35 + 17)  # the first row's selection cell
    page.get_by_role("button", name=f"Open {AUTO_ROLLED_BACK}").click()  # rows: multi-select
    expect(page.get_by_role("heading", name=AUTO_ROLLED_BACK)).to_be_visible()
    assert page.url.endswith(f"/session?session={AUTO_ROLLED_BACK}")


@VIEWPORTS
def test_operator_rolls_back_a_looping_session_through_the_dialog(console, page, shots, viewport):
    page.set_viewport_size(viewport)
    desktop = viewport is DESKTOP
    sid = LOOPING if desktop else f"{LOOPING}-phone"
    with Engine.open(console.store) as engine:
        if not desktop:  # the desktop run rolled LOOPING back: the same loop, another session
            seed_looping(engine, sid)
        s = engine.get_session(sid)
        explanation = s.info().last_verdict["explanation"]
        suggested = s.suggested_target()
        live_before = len(s.state().messages)

    sign_in(page, f"{console.url}/session?session={sid}", "olivia")
    expect(page.get_by_role("heading", name=sid)).to_be_visible()  # the deep link survived
    expect(page.get_by_text(explanation).first).to_be_visible()
    expect(page.get_by_text(f"Suggested rollback target: {suggested}")).to_be_visible()
    expect(page.locator(VEGA_DRAWN).first).to_be_visible()  # the timeline
    page.wait_for_timeout(1000)
    page.screenshot(path=str(shots / ("console-session.png" if desktop
                                      else "console-session-390.png")), full_page=True)

    open_tab(page, "Why flagged")
    expect(page.get_by_text("Evidence", exact=True)).to_be_visible()
    expect(page.get_by_text("identical in every evidence step")).to_be_visible()

    page.get_by_role("button", name="Roll back…").click()
    dialog = page.get_by_role("dialog")
    target = dialog.get_by_role("combobox", name="Target snapshot")
    expect(target).to_have_value(re.compile(rf"^{suggested} · before refund_api .*· suggested$"))
    expect(dialog.get_by_text("Compensations: none")).to_be_visible()
    # Go back further, to before the points were debited: the preview lists the refund.
    target.click()
    page.get_by_role("option", name=re.compile(r"· start ·")).click()
    expect(target).to_have_value(re.compile(r" · start · "))
    expect(dialog.get_by_text("Compensations that will be queued (1)")).to_be_visible()
    expect(dialog.get_by_text(re.compile(r"\d+ messages and 8 steps"))).to_be_visible()
    expect(dialog.get_by_text(TEMPLATES["en"])).to_be_visible()  # the exact notice preview
    reason = dialog.get_by_role("textbox", name="Reason (required, written to the audit log)")
    confirm = dialog.get_by_role("button", name="Roll back", exact=True)
    on_screen(page, reason)  # reason and confirm on screen without scrolling, whatever the width
    on_screen(page, confirm)
    expect(confirm).to_be_disabled()  # no reason yet
    page.screenshot(path=str(shots / ("console-rollback-dialog.png" if desktop
                                      else "console-rollback-dialog-390.png")))
    reason.fill("refund_api keeps failing with HTTP 500; undo the debit too")
    reason.press("Enter")
    settle(page)
    expect(confirm).to_be_enabled()
    confirm.click()

    expect(page.get_by_role("dialog")).to_have_count(0)
    expect(page.get_by_text(re.compile(r"^Rolled back to snap-\d+: 8 steps"))).to_be_visible()
    expect(page.get_by_text("points_refund (step 2)", exact=False)).to_be_visible()
    expect(page.get_by_text("Rolled back.", exact=False).first).to_be_visible()

    open_tab(page, "Snapshot tree")
    tree = page.locator(CHART).first
    expect(tree.get_by_text(re.compile(r"branch-\d+ \(olivia\)"))).to_be_visible()
    expect(tree.get_by_text("taken out by a rollback", exact=True)).to_be_visible()

    open_tab(page, "Messages")
    expect(page.locator("del").first).to_be_visible()
    assert page.locator("del").count() == live_before - 1
    notice = page.locator(".rw-notice")
    expect(notice).to_contain_text(TEMPLATES["en"])
    expect(page.get_by_text(re.compile(r"^2 live and \d+ abandoned messages"))).to_be_visible()
    if desktop:
        page.screenshot(path=str(shots / "console-session-rolled-back.png"), full_page=True)

    with Engine.open(console.store) as engine:
        event = engine.audit(action="rollback", session=sid)[0]
        assert (event.actor, event.reason) == (
            "olivia", "refund_api keeps failing with HTTP 500; undo the debit too")
        assert [c.name for c in engine.compensations(session=sid)] == ["points_refund"]
        assert engine.get_session(sid).state().messages[-1]["content"] == TEMPLATES["en"]


@VIEWPORTS
def test_operator_sends_a_chinese_notice(console, page, viewport):
    page.set_viewport_size(viewport)
    sign_in(page, f"{console.url}/session?session={AUTO_ROLLED_BACK}&tab=Messages", "olivia")
    page.get_by_role("button", name="Send notice…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_role("radio", name="Chinese template")).to_be_checked()
    # The automatic rollback already told the user: the dialog says so and asks before another.
    on_screen(page, dialog.get_by_text("The user already got a notice"))
    send = dialog.get_by_role("button", name="Send notice", exact=True)
    on_screen(page, send)
    expect(send).to_be_disabled()
    dialog.get_by_text("Send another notice anyway").click()
    settle(page)
    dialog.get_by_text("Custom text").click()
    dialog.get_by_role("textbox", name="Notice text").fill("图片已经裁好了，请查看。")
    dialog.get_by_role("textbox", name="Notice text").press("Control+Enter")
    expect(dialog.locator(".rw-notice-preview")).to_have_text("图片已经裁好了，请查看。")
    dialog.get_by_role("button", name="Send notice", exact=True).click()
    expect(page.get_by_text("Notice sent")).to_be_visible()
    expect(page.locator(".rw-notice").last).to_contain_text("图片已经裁好了，请查看。")
    with Engine.open(console.store) as engine:
        assert engine.audit(action="notice", session=AUTO_ROLLED_BACK)[0].actor == "olivia"


def test_clicking_a_snapshot_in_the_tree_offers_rolling_back_to_it(console, page):
    sign_in(page, f"{console.url}/session?session={AUTO_ROLLED_BACK}&tab=Snapshot+tree",
            "olivia")
    picker = page.get_by_role("combobox", name="Snapshot (or click a node)")
    expect(picker).to_have_value(re.compile(r"· latest"))
    first = page.locator(f"{CHART} .scatterlayer path.point").first
    first.scroll_into_view_if_needed()  # below the fold at 1440x900: a person scrolls to it
    oldest = first.bounding_box()
    # plotly's drag layer takes the pointer and picks the point under it, as for a person
    page.mouse.click(oldest["x"] + oldest["width"] / 2, oldest["y"] + oldest["height"] / 2)
    expect(picker).to_have_value(re.compile(r"· start · before step 1"))
    start = picker.input_value().split(" · ")[0]
    page.get_by_role("button", name=f"Roll back to {start}…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_role("combobox", name="Target snapshot")).to_have_value(
        re.compile(rf"^{start} · start"))
    expect(dialog.get_by_text("Compensations that will be queued (1)")).to_be_visible()
    dialog.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("dialog")).to_have_count(0)
    with Engine.open(console.store) as engine:  # cancelled: nothing happened
        assert engine.get_session(AUTO_ROLLED_BACK).info().rollbacks == 1


def test_rolling_back_a_session_that_is_not_looping_says_what_it_removes(console, page):
    sign_in(page, f"{console.url}/session?session={AUTO_ROLLED_BACK}", "olivia")
    expect(page.get_by_role("heading", name=AUTO_ROLLED_BACK)).to_be_visible()
    button = page.get_by_role("button", name="Roll back anyway…")
    expect(button).to_be_visible()
    button.click()  # at once, while the page may still be running: the dialog stays open
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_text(re.compile(r"This session is not looping"))).to_be_visible()
    expect(dialog.get_by_text(re.compile(r"notice\(s\) the user already got"))).to_be_visible()
    confirm = dialog.get_by_role("button", name="Roll back", exact=True)
    expect(confirm).to_be_disabled()  # no reason yet
    dialog.get_by_text(views.PRESET_REASONS[3], exact=True).click()
    settle(page)
    expect(confirm).to_be_enabled()
    confirm_box = confirm.bounding_box()
    assert confirm_box["y"] + confirm_box["height"] <= page.viewport_size["height"]
    dialog.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("dialog")).to_have_count(0)
    with Engine.open(console.store) as engine:  # cancelled: nothing happened
        assert engine.get_session(AUTO_ROLLED_BACK).info().rollbacks == 1


def test_the_theme_follows_the_browser_preference(console, browser):
    backgrounds = {}
    for scheme in ("dark", "light"):
        context = browser.new_context(viewport={"width": 1440, "height": 900},
                                      color_scheme=scheme)
        page = context.new_page()
        try:
            sign_in(page, console.url, "victor")
            app = page.locator('[data-testid="stApp"]')
            backgrounds[scheme] = app.evaluate("e => getComputedStyle(e).backgroundColor")
        finally:
            context.close()
    assert backgrounds == {"dark": "rgb(17, 22, 28)", "light": "rgb(247, 248, 250)"}


def test_viewer_finds_no_way_to_act(console, page):
    sign_in(page, f"{console.url}/session?session={LOOPING}", "victor")
    expect(page.get_by_role("heading", name=LOOPING)).to_be_visible()
    expect(page.get_by_text("signed in as a viewer")).to_be_visible()
    actions = re.compile(r"Roll back|Send notice")
    expect(page.get_by_role("button", name=actions)).to_have_count(0)
    for tab in ("Why flagged", "Snapshot tree", "Messages"):
        open_tab(page, tab)
        settle(page)
        expect(page.get_by_role("button", name=actions)).to_have_count(0)
    page.goto(f"{console.url}/audit")  # a new browser session keeps the sign-in and the role
    expect(page.get_by_text("victor · viewer")).to_be_visible()
    expect(page.get_by_role("textbox", name="Username")).to_have_count(0)


EVIL_HREF = 'a[href*="evil.test"], [*|href*="evil.test"]'
"""A link (HTML, or SVG as plotly or Vega draws it) anywhere near the attacker's domain."""
OFFSITE_EVIL_HREF = 'a[href*="//evil.test"], a[href*="//www.evil.test"], a[href^="mailto:"]'
"""A link that leaves for the attacker's domain (in-app links may carry an encoded id)."""
TABS = ["Timeline", "Why flagged", "Snapshot tree", "Memory", "Token budget", "Messages"]


def test_hostile_names_never_become_links(console, page):
    from urllib.parse import quote

    from support.fleet import HOSTILE_LOOPING, HOSTILE_ROLLED_BACK, seed_hostile

    seed_hostile(console.store)  # runs last in this file: earlier tests count the fleet
    sign_in(page, console.url, "olivia")
    expect(page.get_by_text(re.compile(r"^\d+ of \d+ matching sessions"))).to_be_visible(
        timeout=30_000)  # the table (drawn on a canvas) lists the hostile sessions too
    expect(page.locator(LOOP_CHART)).to_have_count(2, timeout=30_000)
    expect(page.locator(f"{LOOP_CHART} svg.marks").last).to_be_visible(timeout=30_000)
    # "Needs you" links to the hostile sessions with their ids percent-encoded, in the app
    expect(page.get_by_role("link", name=re.compile(r"^\[Your session expired"))).to_be_visible()
    assert page.locator(OFFSITE_EVIL_HREF).count() == 0
    assert all(href.rsplit("/", 1)[-1].startswith("session?session=%5BYour")
               for href in page.locator(EVIL_HREF).evaluate_all(
                   "els => els.map(e => e.getAttribute('href'))"))

    page.get_by_role("link", name="Session", exact=True).click()  # lists the looping ones
    expect(page.get_by_role("heading", name="Session", exact=True)).to_be_visible(timeout=30_000)
    expect(page.get_by_role("link", name=re.compile(r"\[Your session expired"))).to_be_visible(
        timeout=30_000)
    assert page.locator(OFFSITE_EVIL_HREF).count() == 0

    for sid in (HOSTILE_LOOPING, HOSTILE_ROLLED_BACK):
        sign_in(page, f"{console.url}/session?session={quote(sid, safe='')}", "olivia")
        # shown as text (a word joiner, invisible, splits the "https://" Markdown would link)
        shown = re.compile("^" + re.escape(sid.split("https")[0]))
        expect(page.get_by_role("heading", name=shown)).to_be_visible(timeout=30_000)
        for tab in TABS:
            open_tab(page, tab)
            settle(page)
            if tab == "Timeline":
                expect(page.locator(VEGA_DRAWN).first).to_be_visible(timeout=30_000)
            elif tab in ("Snapshot tree", "Memory"):
                expect(page.locator(f"{CHART} .main-svg").first).to_be_visible(timeout=30_000)
            assert page.locator(EVIL_HREF).count() == 0, (sid, tab)
        if sid == HOSTILE_LOOPING:
            page.get_by_role("button", name="Roll back…").click()
            expect(page.get_by_role("dialog")).to_be_visible(timeout=30_000)
            settle(page)
            assert page.locator(EVIL_HREF).count() == 0, (sid, "rollback dialog")



@VIEWPORTS
def test_a_dialog_opened_while_the_session_page_loads_stays_open(console, page, viewport):
    """The operator opens the rollback dialog before the deep-linked page has settled: the
    page's later runs neither close it nor lose the reason picked in it; Cancel closes it for
    good."""
    page.set_viewport_size(viewport)
    sign_in(page, f"{console.url}/session?session={AUTO_ROLLED_BACK}", "olivia")
    page.get_by_role("button", name="Roll back anyway…").click()  # at once
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_text(re.compile(r"This session is not looping"))).to_be_visible()
    settle(page)
    rerun_the_page(page)
    reason = dialog.get_by_text(views.PRESET_REASONS[3], exact=True)
    expect(reason).to_be_visible()
    reason.click()
    settle(page)
    confirm = dialog.get_by_role("button", name="Roll back", exact=True)
    expect(confirm).to_be_enabled()
    rerun_the_page(page)
    expect(confirm).to_be_enabled()  # still open, with its reason
    dialog.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("dialog")).to_have_count(0)
    settle(page)
    rerun_the_page(page)  # a later run does not bring it back
    expect(page.get_by_role("dialog")).to_have_count(0)
    with Engine.open(console.store) as engine:  # cancelled: nothing happened
        assert engine.get_session(AUTO_ROLLED_BACK).info().rollbacks == 1


def test_a_dismissed_dialog_stays_closed(console, page):
    """Escape closes the notice dialog for good: the page's next run does not open it again."""
    sign_in(page, f"{console.url}/session?session={AUTO_ROLLED_BACK}", "olivia")
    page.get_by_role("button", name="Send notice…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_role("button", name="Send notice")).to_be_visible()
    settle(page)
    dialog.get_by_role("heading", name="Send notice").click()
    page.evaluate(WATCH_RUNS)
    page.keyboard.press("Escape")
    expect(page.get_by_role("dialog")).to_have_count(0)
    # the run the dismissal asks for (its on_dismiss callback) has reached the server and ended:
    # the browser hides the dialog before that run starts, so "idle" alone can come too early
    wait_for_run_to_end(page)
    rerun_the_page(page)
    expect(page.get_by_role("dialog")).to_have_count(0)
