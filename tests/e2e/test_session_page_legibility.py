"""The session page as on-call reads it, at 1440x900 and 390x844:
a decay chart that decays, with a legend and recall marks; snapshot labels told apart; numbered
timeline steps, upright on a phone, drawn without plotly, hostile text shown as text in its
tooltip; the rollback dialog's sticky bar never over the notice the user will see; plain words;
"Was this a loop?" and watch-only sessions in the browser."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect
from support.console import sign_in
from support.fleet import AUTO_ROLLED_BACK, LOOPING, seed_looping

from engine import Engine

pytestmark = pytest.mark.browser

CHART = '[data-testid="stPlotlyChart"]'
TIMELINE = '[data-testid="stVegaLiteChart"]'
VEGA_DRAWN = "svg.marks, canvas"
"""What Vega draws into (SVG, or a canvas)."""
DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1440x900", "390x844"])

ROTATED = """(root) => [...root.querySelectorAll('g.xtick text, g.textpoint text')]
  .filter(t => /rotate\\((?!0[,)])/.test(t.getAttribute('transform') || ''))
  .map(t => t.textContent)"""
"""Tick labels of the x axis and data labels drawn turned (a rotate() other than 0)."""


def settle(page: Page) -> None:
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"stApp\"]')"
        "?.getAttribute('data-test-script-state') === 'notRunning'")


def open_session(page: Page, url: str, sid: str, tab: str, viewport: dict,
                 user: str = "olivia") -> None:
    page.set_viewport_size(viewport)
    sign_in(page, f"{url}/session?session={sid}&tab={tab.replace(' ', '+')}", user)
    expect(page.get_by_role("tab", name=tab)).to_have_attribute("aria-selected", "true")
    settle(page)


VEGA_ROTATED = """(root) => [...root.querySelectorAll('.role-axis-label text, .mark-text text')]
  .filter(t => /rotate\\((?!0[,)])/.test(t.getAttribute('transform') || ''))
  .map(t => t.textContent)"""
"""The same, for a Vega chart drawn as SVG: axis labels and text marks drawn turned."""


FIRST_CHART_MS = 90_000
"""A fresh browser loads plotly's bundle before its first chart: slow on a loaded machine."""


def chart_drawn(page: Page):
    """The page's first plotly chart, once drawn."""
    chart = page.locator(CHART).first
    expect(chart.locator(".main-svg").first).to_be_visible(timeout=FIRST_CHART_MS)
    return chart


def overlap(a: dict, b: dict) -> bool:
    return (a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"]
            and a["y"] < b["y"] + b["height"] and b["y"] < a["y"] + a["height"])


@VIEWPORTS
def test_the_decay_chart_decays_with_a_legend_and_recall_marks(console, page: Page, viewport,
                                                               shots):
    open_session(page, console.url, AUTO_ROLLED_BACK, "Memory", viewport)
    chart = chart_drawn(page)
    chart.scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    chart.screenshot(path=str(shots / f"session-memory-{viewport['width']}.png"))
    legend = chart.locator("g.legend g.traces")
    expect(legend.first).to_be_visible()
    names = legend.all_text_contents()
    assert "recall" in names and len(names) >= 3, names  # two memories and the recall mark
    recalls = chart.locator("g.scatterlayer path.point")
    assert recalls.count() >= 1
    box = recalls.first.bounding_box()
    plot = chart.locator(".nsewdrag").first.bounding_box()  # the plot area
    assert box and plot
    centre = box["x"] + box["width"] / 2  # a mark at the axis' start overhangs it by its radius
    assert plot["x"] <= centre <= plot["x"] + plot["width"]  # inside the plot
    ticks = chart.locator("g.xtick text").all_text_contents()
    assert "1 day" in ticks and "1 month" in ticks, ticks
    assert chart.evaluate(ROTATED) == []
    # a line falls: its last point far below its first (a curve, not a flat line)
    falls = chart.locator("g.cartesianlayer g.scatterlayer .trace .js-line").evaluate_all(
        "ps => ps.map(p => (p.getAttribute('d').match(/[-\\d.]+,[-\\d.]+/g) || [])"
        "  .map(s => +s.split(',')[1])).map(ys => ys[ys.length - 1] - ys[0])")
    assert max(falls) > 100, falls  # SVG y grows downwards


@VIEWPORTS
def test_invalidated_memories_say_why(console, page: Page, viewport):
    sid = f"keyed-{viewport['width']}"
    with Engine.open(console.store) as engine:
        s = engine.session(sid)
        s.memory.add("The user lives in Lyon", key="user.home_city")
        s.memory.add("The user lives in Porto", key="user.home_city")
    open_session(page, console.url, sid, "Memory", viewport)
    expect(page.get_by_text(re.compile(
        r"^2 memories, 1 invalidated by a newer one \(key \(exact fact\)\)"))).to_be_visible()
    table = page.locator('[data-testid="stDataFrame"]').first
    expect(table).to_be_visible(timeout=FIRST_CHART_MS)  # its cells are drawn on a canvas


@VIEWPORTS
def test_identical_snapshot_labels_are_told_apart(console, page: Page, viewport, shots):
    sid = f"invoices-{viewport['width']}"
    with Engine.open(console.store) as engine:
        s = engine.session(sid, meta={"tenant": "acme", "scenario": "invoice"})
        s.append_message("user", "post the three invoices")
        for n in range(3):  # each step takes a snapshot before it: "before post_invoice"
            with s.step("post_invoice", {"invoice": n}) as call:
                call.ok({"posted": n})
    open_session(page, console.url, sid, "Snapshot tree", viewport)
    chart = chart_drawn(page)
    labels = [t.strip() for t in chart.locator("g.textpoint").all_text_contents()]
    posts = [t for t in labels if t.startswith("before post_invoi")]
    assert len(posts) >= 3 and len(set(posts)) == len(posts), labels
    chart.screenshot(path=str(shots / f"session-tree-{viewport['width']}.png"))


def timeline_drawn(page: Page):
    """The Timeline tab's chart, once drawn."""
    chart = page.locator(TIMELINE).first
    expect(chart.locator(VEGA_DRAWN).first).to_be_visible(timeout=FIRST_CHART_MS)
    return chart


@VIEWPORTS
def test_timeline_steps_are_numbered_upright(console, page: Page, viewport, shots):
    open_session(page, console.url, LOOPING, "Timeline", viewport, user="victor")
    chart = timeline_drawn(page)
    page.wait_for_timeout(500)
    numbers = chart.locator(".mark-text text").all_text_contents()
    assert {"1", "3", "5"} <= set(numbers), numbers
    assert chart.evaluate(VEGA_ROTATED) == []
    box = chart.locator(VEGA_DRAWN).first.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"], box
    chart.screenshot(path=str(shots / f"session-timeline-{viewport['width']}.png"))


@VIEWPORTS
def test_the_timeline_draws_without_plotly_and_says_what_each_mark_is(console, page: Page,
                                                                     viewport):
    """The page's first tab never asks for plotly's bundle (4.7 MB parsed on every visit before
    its first chart); its chart still has lanes named by call, a legend of the statuses, the
    loop's band, and the rollback's dashed line on a session that was rolled back."""
    scripts: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: scripts.append(r.url) if r.resource_type == "script" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    open_session(page, console.url, AUTO_ROLLED_BACK, "Timeline", viewport)
    chart = timeline_drawn(page)
    page.wait_for_timeout(1000)  # a late chunk or a late error would show by now
    assert [u for u in scripts if "PlotlyChart" in u] == []
    assert errors == []
    assert re.match(r"^Timeline: steps \d+ to \d+ in \d+ lanes? \(.*\); \d+ loop windows?; "
                    r"[1-9]\d* rollbacks?$", chart.get_attribute("aria-label") or "")
    legend = chart.locator(".role-legend-label text").all_text_contents()
    assert "ok" in legend and "error" in legend, legend
    lanes = chart.locator(".role-axis-label text").all_text_contents()
    assert any("crop" in lane for lane in lanes), lanes  # a lane named by its call
    assert chart.locator(".mark-rule path, .mark-rule line").count() >= 1  # the rollback
    assert any(t.startswith("↩ ") for t in chart.locator(".mark-text text").all_text_contents())


def test_hostile_text_in_the_timelines_tooltip_is_text(console, page: Page):
    from support.fleet import EVIL_ANCHOR, EVIL_TEXT

    sid = "hostile-timeline"
    with Engine.open(console.store) as engine:
        s = engine.session(sid, on_loop="flag")
        with s.step(EVIL_ANCHOR, {"link": EVIL_TEXT}) as call:
            call.fail(EVIL_TEXT)
    open_session(page, console.url, sid, "Timeline", DESKTOP)
    chart = timeline_drawn(page)
    mark = chart.locator(".mark-symbol.role-mark path").first
    mark.scroll_into_view_if_needed()
    box = mark.bounding_box()
    assert box
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    tip = page.locator("#vg-tooltip-element")
    expect(tip).to_contain_text("step ")
    assert f"step 1 · {EVIL_ANCHOR}" in tip.inner_text()  # the tag shown as typed
    assert "error" in tip.inner_text() and "evil.test" in tip.inner_text()
    assert tip.locator("a, img").count() == 0  # and never a link
    lanes = chart.locator(".role-axis-label text").all_text_contents()
    assert any(lane.startswith("<a") for lane in lanes), lanes  # the lane's name, as text


@VIEWPORTS
def test_the_rollback_dialogs_sticky_bar_never_covers_the_notice(console, page: Page, viewport,
                                                                 shots):
    sid = f"sticky-{viewport['width']}"
    with Engine.open(console.store) as engine:
        seed_looping(engine, sid)
    open_session(page, console.url, sid, "Timeline", viewport)
    page.get_by_role("button", name="Roll back…").click()
    dialog = page.get_by_role("dialog")
    preview = dialog.locator(".rw-notice-preview")
    decide = dialog.locator(".st-key-rw-decide")
    expect(preview).to_be_visible()
    confirm = dialog.get_by_role("button", name="Roll back", exact=True)
    expect(confirm).to_be_visible()
    box = confirm.bounding_box()
    assert box["y"] + box["height"] <= viewport["height"]  # confirm on screen at once
    page.screenshot(path=str(shots / f"session-rollback-dialog-{viewport['width']}.png"))
    assert not overlap(preview.bounding_box(), decide.bounding_box())
    preview.scroll_into_view_if_needed()  # where a person reads it
    assert not overlap(preview.bounding_box(), decide.bounding_box())
    for _ in range(6):  # and wherever the dialog is scrolled to
        page.mouse.wheel(0, 150)
        page.wait_for_timeout(100)
        p, d = preview.bounding_box(), decide.bounding_box()
        visible = 0 <= p["y"] < viewport["height"]
        assert not (visible and overlap(p, d)), (p, d)
    dialog.get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("dialog")).to_have_count(0)


def snapshot_options(page: Page) -> list[str]:
    """The snapshot picker's options (a click within moments of the tree chart being drawn can
    close the menu it opens, tests/e2e/test_snapshot_picker.py: retry)."""
    box = page.get_by_role("combobox", name="Snapshot (or click a node)")
    for attempt in range(4):
        box.click()
        try:
            expect(page.get_by_role("option").first).to_be_visible(timeout=5_000)
            return page.get_by_role("option").all_inner_texts()
        except AssertionError:
            if attempt == 3:
                raise
            page.keyboard.press("Escape")
    return []


@VIEWPORTS
def test_the_session_page_speaks_plainly(console, page: Page, viewport):
    open_session(page, console.url, AUTO_ROLLED_BACK, "Snapshot tree", viewport)
    main = page.locator('[data-testid="stMain"]')
    chart_drawn(page)
    options = snapshot_options(page)
    page.keyboard.press("Escape")
    text = main.inner_text() + "\n".join(options)
    for jargon in (r"\bepoch\b", r"\bhead\b", r"live line", r"retired", r"loop verdicts"):
        assert not re.search(jargon, text, re.IGNORECASE), jargon
    assert any("latest" in o for o in options), options


def test_an_operator_labels_a_session_in_the_browser(console, page: Page):
    sid = "label-me"
    with Engine.open(console.store) as engine:
        seed_looping(engine, sid)
    open_session(page, console.url, sid, "Timeline", DESKTOP)
    block = page.locator(".st-key-loop-label")
    expect(block).to_contain_text("No operator has said yet whether this was a loop.")
    block.get_by_role("textbox", name="Reason (optional)").fill("six identical 500s")
    block.get_by_role("button", name="Yes, a loop").click()
    expect(page.get_by_text("Labelled a loop;")).to_be_visible()
    expect(block).to_contain_text(re.compile(r"Labelled a loop by olivia at .*six identical 500s"))
    with Engine.open(console.store) as engine:
        assert engine.fleet.labels()[sid] == "loop"


@VIEWPORTS
def test_a_watch_only_session_offers_no_rollback(console, page: Page, viewport):
    sid = f"watched-{viewport['width']}"
    with Engine.open(console.store) as engine:
        s = engine.session(sid, meta={"source": "otlp", "watch_only": True}, on_loop="flag")
        for _ in range(4):
            with s.step("book_flight", {"flight": "LH 400"}) as call:
                call.fail("503 upstream")
    open_session(page, console.url, sid, "Timeline", viewport)
    expect(page.get_by_text("watch-only", exact=True).first).to_be_visible()
    expect(page.get_by_text(re.compile(r"Nor can it roll the agent back"))).to_be_visible()
    expect(page.get_by_role("button", name=re.compile(r"Roll back|Send notice"))).to_have_count(0)
    expect(page.get_by_role("button", name="Yes, a loop")).to_be_visible()
