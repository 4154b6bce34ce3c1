"""The test browser draws Chinese and emoji with real glyphs, not boxes.

Notices go out in Chinese and the console marks statuses with emoji; without CJK and colour emoji
fonts (`scripts/install --test` installs Debian's fonts-noto-cjk and fonts-noto-color-emoji)
Chromium draws every such character as the same empty box, and screenshots show boxes.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser

# Draws `text` alone on a canvas with the page's default sans-serif stack (as the console's text
# falls back to it) and returns the pixels, so that two glyphs can be compared.
DRAW = """([text, colour]) => {
  const c = document.createElement("canvas");
  c.width = 64; c.height = 64;
  const g = c.getContext("2d");
  g.fillStyle = "#fff"; g.fillRect(0, 0, 64, 64);
  g.fillStyle = colour; g.font = "40px sans-serif"; g.textBaseline = "top";
  g.fillText(text, 8, 8);
  return Array.from(g.getImageData(0, 0, 64, 64).data);
}"""


@pytest.fixture
def blank(browser):
    context = browser.new_context()
    page = context.new_page()
    page.set_content("<!doctype html><meta charset=utf-8><body></body>")
    yield page
    context.close()


def test_chinese_characters_have_distinct_glyphs(blank):
    # Without a CJK font every Chinese character is the same .notdef box: identical pixels.
    glyphs = [blank.evaluate(DRAW, [ch, "#000"]) for ch in ("回", "滚", "您")]
    inked = [sum(1 for v in g[0::4] if v < 128) for g in glyphs]
    assert all(n > 20 for n in inked), f"a Chinese character drew (almost) nothing: {inked}"
    assert len({tuple(g) for g in glyphs}) == 3, (
        "Chinese characters all draw the same glyph (boxes): no CJK font for Chromium; "
        "run scripts/install --test (fonts-noto-cjk)")


def test_emoji_are_drawn_in_colour(blank):
    # The red circle drawn with a black fill: only a colour emoji font makes red pixels.
    px = blank.evaluate(DRAW, ["\N{LARGE RED CIRCLE}", "#000"])
    red = sum(1 for i in range(0, len(px), 4)
              if px[i] > 180 and px[i + 1] < 100 and px[i + 2] < 100)
    assert red > 50, ("the red circle emoji is not drawn in colour: no colour emoji font for "
                      "Chromium; run scripts/install --test (fonts-noto-color-emoji)")
