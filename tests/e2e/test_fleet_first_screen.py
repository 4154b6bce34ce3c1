"""The fleet's first screen arrives whole: its loop charts are drawn without
plotly.js (4.7 MB that the browser downloads, parses and runs before the first plotly chart,
holding the KPIs and the table back meanwhile), legible at 1440x900 and 390x844.

No timings here (bench/console.py measures them): what is asserted is what makes the screen
fast, the page never asking for plotly, and that the lighter charts still say what the plotly
ones said (loops per prompt version and per scenario, the freeze).
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect
from support.console import sign_in

pytestmark = pytest.mark.browser

DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
VIEWPORTS = pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1440x900", "390x844"])
LOOP_CHART = '[data-testid="stVegaLiteChart"]'
DRAWN = "svg.marks, canvas"
"""What Vega draws into (SVG, or a canvas for charts of many marks)."""
TABLE = '[data-testid="stDataFrame"] canvas'


@VIEWPORTS
def test_the_fleets_first_screen_never_loads_plotly(console, page: Page, viewport):
    page.set_viewport_size(viewport)
    scripts: list[str] = []
    errors: list[str] = []
    page.on("request", lambda r: scripts.append(r.url) if r.resource_type == "script" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    sign_in(page, console.url, "victor")
    expect(page.locator(TABLE).first).to_be_visible()
    charts = page.locator(LOOP_CHART)
    expect(charts).to_have_count(2)
    for chart in charts.all():
        chart.scroll_into_view_if_needed()
        drawn = chart.locator(DRAWN).first
        expect(drawn).to_be_visible()
        box = drawn.bounding_box()
        assert box and box["x"] >= 0 and box["x"] + box["width"] <= viewport["width"], box
        assert box["height"] >= 200, box  # a plot, not a sliver
    page.wait_for_timeout(1000)  # a late chunk or a late error would show by now
    assert [u for u in scripts if "PlotlyChart" in u] == []
    assert errors == []


@VIEWPORTS
def test_the_loop_charts_say_what_they_draw(console, page: Page, viewport):
    """Each chart's accessible name (Vega's, from the spec's description) counts its loops by
    prompt version or scenario, and names the freeze the fixture's console runs."""
    page.set_viewport_size(viewport)
    sign_in(page, console.url, "victor")
    charts = page.locator(LOOP_CHART)
    expect(charts).to_have_count(2)
    expect(charts.first.locator(DRAWN).first).to_be_visible()
    names = [chart.get_attribute("aria-label") for chart in charts.all()]
    assert re.match(r"^by prompt version: [1-9]\d* loops? \(", names[0]), names
    assert re.match(r"^by scenario: [1-9]\d* loops? \(.*refund \d+", names[1]), names
    assert all("; freeze " in n for n in names), names
