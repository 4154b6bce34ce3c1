"""The fleet page's reads at fleet scale (`dashboard.data`): the unfiltered table reads only
the rows it shows, in the order the page sorts them, and the menus and the band never list the
whole fleet."""

from __future__ import annotations

import time

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


def test_menus_take_in_sessions_active_since_and_keep_to_the_window(fleet, monkeypatch):
    monkeypatch.setattr(data, "FACETS_WINDOW", 4)
    newest = [m["tenant"] for m in data.facet_window(fleet)]
    assert sorted(newest) == ["t0", "t1", "t2", "t2"]  # s-08 to s-11
    reads: list[dict] = []
    engine = data.engine_for(fleet)
    real = engine.sessions
    monkeypatch.setattr(engine, "sessions", lambda **f: reads.append(f) or real(**f))
    writer = Engine.open(fleet)
    writer.session("s-new", meta={"tenant": "t-new", "scenario": "refund",
                                  "prompt_version": "v9"}).snapshot("start")
    writer.close()
    menus = views.facets(data.facet_window(fleet))
    assert "t-new" in menus["tenant"] and "v9" in menus["prompt_version"]
    assert len(data.facet_window(fleet)) == 4  # s-08, the oldest of the window, left it
    assert all("updated_since" in r for r in reads)  # only what moved, not the window again
    reads.clear()
    data.facet_window(fleet, now=time.time() + data.FACETS_FULL_S)
    assert reads and "updated_since" not in reads[0]  # the whole window, now and then
