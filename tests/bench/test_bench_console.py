"""bench/console.py writes its tables into the results file, in headless Chromium: each stage's
first chart beside a bare Streamlit page measured in the same run. (The demo-sized fleet's table
needs sessions looping now, which a fleet this small does not have: it is left out here.)"""

from __future__ import annotations

import pytest
from support.bench import printed, run_bench

pytestmark = pytest.mark.browser


@pytest.mark.timeout(900)
def test_the_console_bench_records_every_page_beside_the_bare_page(tmp_path):
    args = ("--demo-sessions", "0", "--sessions", "6", "--steps", "5012",
            "--stages", "1", "--runs", "0", "--workers", "1", "--out", str(tmp_path / "stores"))
    section = run_bench("console.py", *args, results=tmp_path / "RESULTS.md", timeout=900)
    assert "baseline: a bare Streamlit page with one small chart" in section
    table = section.split("navigation -> first chart drawn")[1]
    assert "bare page" in table and "(floor)" in table
    # the session's floor is a Vega-Lite page, as its first chart is; plotly's only a reference
    assert "Vega-Lite points" in section and "bare plotly page" in table
    assert str(tmp_path) not in printed(section)
