"""The session page's history (`dashboard.data.session_bundle`): read again whenever the
session's summary moved, kept between refreshes only while nothing it shows can have changed
unseen, and what the page builds from it (the timeline's figure) built once per read."""

from __future__ import annotations

import time

import pytest

from dashboard import data
from engine import Engine


@pytest.fixture
def store(tmp_path):
    url = f"sqlite:///{tmp_path / 'history.db'}"
    with Engine.open(url) as engine:
        s = engine.session("quiet", meta={"tenant": "acme"})
        s.snapshot("start")
        for i in range(3):
            with s.step("search", {"q": i}) as call:
                call.ok(i)
    data.forget_histories()
    yield url
    data.forget_histories()


def counting_reads(url, monkeypatch) -> list[str]:
    """Session ids whose steps the console's engine reads, from now on."""
    reads: list[str] = []
    engine = data.engine_for(url)
    real = engine.get_session

    def get_session(sid):
        s = real(sid)
        steps = s.steps
        s.steps = lambda **kw: reads.append(sid) or steps(**kw)  # type: ignore[method-assign]
        return s

    monkeypatch.setattr(engine, "get_session", get_session)
    return reads


def test_a_quiet_session_is_read_once_until_its_summary_moves(store, monkeypatch):
    reads = counting_reads(store, monkeypatch)
    later = time.time() + 45  # the session has been quiet for most of a minute
    first = data.session_bundle(store, "quiet", now=later)
    again = data.session_bundle(store, "quiet", now=later + 20)
    assert reads == ["quiet"] and [s.n for s in again.steps] == [1, 2, 3]
    assert again.memo is first.memo  # the figure built from it is kept with it
    with Engine.open(store) as engine:
        with engine.get_session("quiet").step("fetch", {"url": "x"}) as call:
            call.ok("y")
    moved = data.session_bundle(store, "quiet", now=later + 21)
    assert reads == ["quiet", "quiet"] and [s.n for s in moved.steps] == [1, 2, 3, 4]
    assert moved.memo is not first.memo


def test_a_quiet_history_is_read_again_after_its_longest_age(store, monkeypatch):
    reads = counting_reads(store, monkeypatch)
    later = time.time() + 45
    data.session_bundle(store, "quiet", now=later)
    data.session_bundle(store, "quiet", now=later + data.HISTORY_MAX_AGE_S)
    assert reads == ["quiet", "quiet"]


def test_a_busy_or_unfinished_session_is_read_again_within_the_ttl(store, monkeypatch):
    reads = counting_reads(store, monkeypatch)
    now = time.time()  # the session's last write was a moment ago: a step may end unseen
    data.session_bundle(store, "quiet", now=now)
    data.session_bundle(store, "quiet", now=now + data.SESSION_TTL)
    assert reads == ["quiet", "quiet"]
    # The same summary seen HISTORY_QUIET_S apart by the console's own clock (whatever the
    # agent's says): the second read missed nothing, and is kept.
    data.session_bundle(store, "quiet", now=now + data.SESSION_TTL + 20)
    assert reads == ["quiet", "quiet"]
    with Engine.open(store) as engine:
        call = engine.get_session("quiet").step("book", {"flight": "LH 400"})
        call.__enter__()  # under way when the page reads it; its end may move no summary field
    later = time.time() + 45
    first = data.session_bundle(store, "quiet", now=later)
    assert first.steps[-1].status == "running"
    data.session_bundle(store, "quiet", now=later + data.SESSION_TTL)
    assert reads == ["quiet", "quiet", "quiet", "quiet"]


def test_an_action_forgets_every_history(store, monkeypatch):
    reads = counting_reads(store, monkeypatch)
    later = time.time() + 45
    data.session_bundle(store, "quiet", now=later)
    data.forget_session("quiet")
    data.session_bundle(store, "quiet", now=later + 1)
    assert reads == ["quiet", "quiet"]
