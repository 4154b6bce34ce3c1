"""The fleet page's reads at fleet scale (`dashboard.data`): the unfiltered table reads only
the rows it shows, in the order the page sorts them, and the menus and the band never list the
whole fleet."""

from __future__ import annotations

import pytest
from support.fleet import StepClock, fail_until_flagged

from dashboard import data, views
from engine import Engine


@pytest.fixture
def fleet(tmp_path):
    clock = StepClock(1_000_000.0)
    url = f"sqlite:///{tmp_path / 'fleet.db'}"
    engine = Engine.open(url, clock=clock)
    for i in range(12):
        clock.t += 10
        s = engine.session(f"s-{i:02d}", meta={"tenant": f"t{i % 3}", "scenario": "refund",
                                                "prompt_version": f"v{i % 2}"},
                           on_loop="flag" if i in (2, 7) else "rollback")
        s.snapshot("start")
        with s.step("search", {"q": i}) as call:
            call.ok(i)
        if i in (2, 7):
            fail_until_flagged(s, "crop", {"box": i}, "invalid slice", 4)
    engine.close()
    data.table_page.clear()
    data.facets.clear()
    data.looping.clear()
    data._sessions.clear()
    yield url


def test_needs_you_first_puts_looping_sessions_first_then_the_most_recent(fleet):
    page = data.table_page(fleet, views.DEFAULT_SORT, 5)
    assert page["session"].tolist()[:2] == ["s-07", "s-02"]
    assert len(page) == 5
    whole = views.select_sessions(data.sessions(fleet), sort=views.DEFAULT_SORT, limit=5)
    assert page["session"].tolist() == whole["session"].tolist()


def test_last_activity_reads_the_most_recently_active(fleet):
    page = data.table_page(fleet, "Last activity", 3)
    whole = views.select_sessions(data.sessions(fleet), sort="Last activity", limit=3)
    assert page["session"].tolist() == whole["session"].tolist()


def test_menus_and_band_come_from_bounded_reads(fleet):
    assert data.facets(fleet) == {"tenant": ["t0", "t1", "t2"], "scenario": ["refund"],
                                  "prompt_version": ["v0", "v1"]}
    assert sorted(data.looping(fleet)["session"]) == ["s-02", "s-07"]
