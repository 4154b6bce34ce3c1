"""Alerts at fleet scale: a bulk rollback pages once with a summary (count, batch id, link);
loops page per incident by default (one page for forty sessions looping on one broken tool);
loop and incident alerts never wait behind rollback notices (their own rate budget, sent
first)."""

from __future__ import annotations

import uuid

import pytest
from test_alerts import made_hooks

from engine import LoopDetected, LoopWaiting
from engine.fleet import incidents as incident_module
from engine.fleet.alerts import AlertConfig, AlertWorker
from engine.metrics import sample


@pytest.fixture
def hooks():
    yield from made_hooks()


def _looping(engine, sid: str) -> None:
    s = engine.session(sid, meta={"prompt_version": "v8", "tenant": "acme"})
    s.append_message("user", "crop it")
    s.snapshot("start")
    for _ in range(8):
        try:
            with s.step("image_crop", {"x": 10}) as call:
                call.fail("invalid slice")
        except LoopDetected:
            break
    assert s.info().status == "looping"


def test_a_bulk_rollback_pages_once_with_a_summary(store_url, open_engine, hooks):
    engine = open_engine(store_url, on_loop="flag")
    hook = hooks()
    for i in range(12):
        _looping(engine, f"s{i:02}")
    worker = AlertWorker(engine, [hook.url], AlertConfig(
        rules=("loop", "rollback"), console_url="https://rewind.example/console",
        rate_per_minute=1000))
    try:
        worker.run_once()
        assert sorted(b["rule"] for b in hook.received) == ["loop"] * 12
        items = engine.rollback_many({"status": "looping"}, actor="alice", reason="v8 loops")
        assert sum(i.ok for i in items) == 12
        worker.run_once()
        worker.run_once()
    finally:
        worker.close()
    pages = [b for b in hook.received if b["rule"] != "loop"]
    assert len(pages) == 1, [b["text"] for b in pages]
    (page,) = pages
    batch = items[0].batch
    assert page["rule"] == "rollback_many" and page["key"] == f"rollback_many:{batch}"
    assert page["batch"] == batch and page["count"] == 12 and page["failed"] == 0
    assert page["link"] == f"https://rewind.example/console/audit?batch={batch}"
    assert "12 sessions rolled back" in page["text"] and "alice" in page["text"]
    assert batch in page["text"] and page["link"] in page["text"]


def test_a_bulk_run_that_never_ends_still_pages_its_summary(sqlite_url, open_engine, hooks):
    clock = [1_000_000.0]
    engine = open_engine(sqlite_url, on_loop="flag", clock=lambda: clock[0])
    hook = hooks()
    engine.store.add_audit("alice", "rollback_many.start", None, None, "v8 loops",
                           {"batch": "batch-dead", "sessions": 40, "where": {}}, clock[0])
    worker = AlertWorker(engine, [hook.url], AlertConfig(bulk_wait_s=300))
    try:
        worker.run_once()
        assert hook.received == []  # the run may still be going
        clock[0] += 301
        worker.run_once()
        worker.run_once()
    finally:
        worker.close()
    (page,) = hook.received
    assert page["key"] == "rollback_many:batch-dead" and page["count"] == 0
    assert "no end on record" in page["text"] and "40 planned" in page["text"]


def _pages_after_the_budget_is_spent(engine, hook, rules) -> list[str]:
    """Five operator rollbacks, each paged on its own, spend a budget of three pages a minute;
    then a session loops. The rules of every page sent, in order."""
    for i in range(5):
        s = engine.session(f"r{i}")
        s.append_message("user", "hi")
        s.snapshot("start")
        s.append_message("assistant", "oops")
        s.rollback(actor="alice", reason="wrong answer")
    worker = AlertWorker(engine, [hook.url], AlertConfig(rules=rules, rate_per_minute=3))
    try:
        worker.run_once()
        assert [b["rule"] for b in hook.received] == ["rollback"] * 3  # the budget is spent
        _looping(engine, "x")
        worker.run_once()
    finally:
        worker.close()
    return [b["rule"] for b in hook.received]


def test_loop_alerts_never_wait_behind_rollback_notices(store_url, open_engine, hooks):
    engine = open_engine(store_url, on_loop="flag")
    hook = hooks()
    rules = _pages_after_the_budget_is_spent(engine, hook, ("loop", "rollback"))
    assert "loop" in rules, "the loop alert waited behind rollback notices"
    assert rules.index("loop") == 3  # sent before the notices still queued


def _broken_refund(engine, sid: str, n: int, tenant: str = "acme") -> None:
    """A session looping (policy flag) on refund_api, which answers 503 with ids of its own."""
    s = engine.session(sid, meta={"tenant": tenant, "prompt_version": "v7"}, on_loop="flag")
    s.append_message("user", f"refund order {n}")
    s.snapshot("start")
    for attempt in range(4):
        try:
            with s.step("refund_api", {"order": f"A-{1000 + n}"}) as call:
                call.fail(f"HTTP 503 Service Unavailable: refund of order A-{1000 + n} failed "
                          f"(request {uuid.uuid4()}, took {120 + attempt * 7 + n} ms)")
        except LoopWaiting:  # under flag the agent waits for on-call
            return
    raise AssertionError(f"{sid} did not loop")


def _other_loop(engine, sid: str, i: int) -> None:
    """A loop with a cause of its own: another tool, another error."""
    s = engine.session(sid, meta={"tenant": "globex"}, on_loop="flag")
    s.snapshot("start")
    for _ in range(4):
        try:
            with s.step(f"tool_{i}", {"x": 10}) as call:
                call.fail(f"{['invalid slice', 'no such file', 'quota exceeded'][i % 3]} in "
                          f"tool_{i}")
        except LoopWaiting:
            return
    raise AssertionError(f"{sid} did not loop")


def _pager(engine, hook, start=None, **config):
    return AlertWorker(engine, [hook.url], AlertConfig(
        console_url="https://rewind.example/console", rate_per_minute=1000, **config),
        start=start)


def test_forty_sessions_on_one_broken_tool_page_once_beside_ten_other_loops(
        store_url, open_engine, hooks):
    """The default rules page per incident: forty sessions looping on refund_api are one
    incident and one page; each of ten unrelated loops is an incident (and a page) of its own;
    no session pages on its own, and no spike pages what the incident already says."""
    engine = open_engine(store_url)
    hook = hooks()
    worker = _pager(engine, hook)
    try:
        worker.run_once()  # a first run starts at the newest event
        for n in range(40):
            _broken_refund(engine, f"refund-{n}", n, "acme" if n < 30 else "initech")
        for i in range(10):
            _other_loop(engine, f"other-{i}", i)
        worker.run_once()
        worker.run_once()
        [refund] = [i for i in engine.incidents() if i.tool == "refund_api"]
        assert sorted(refund.sessions) == sorted(f"refund-{n}" for n in range(40))
        others = [i for i in engine.incidents() if i.id != refund.id]
        assert sorted(s for i in others for s in i.sessions) == sorted(
            f"other-{i}" for i in range(10)) and len(others) == 10
        about = [b for b in hook.received if b.get("incident") == refund.id]
        assert len(about) == 1, [b["text"] for b in about]
        [page] = about
        assert page["rule"] == "incident" and page["key"] == f"incident_open:{refund.id}"
        assert "40 sessions (40 waiting)" in page["text"] and "503" in page["text"]
        assert page["tenant"] == "acme, initech" and page["session"] == "refund-0"
        assert page["link"] == f"https://rewind.example/console/incident?incident={refund.id}"
        assert sorted(b["rule"] for b in hook.received) == ["incident"] * 11
        assert {b["incident"] for b in hook.received} == {refund.id, *(i.id for i in others)}
        assert sample("rewind_incidents_open") == 11  # the pager's round keeps the gauge

        # on-call rolls the forty back in one command: one summary, no page per session
        engine.fleet.incident_action(refund.id, "rollback", actor="alice", reason="503s")
        worker.run_once()
        later = hook.received[11:]
        assert [b["rule"] for b in later] == ["rollback_many"] and later[0]["count"] == 40
    finally:
        worker.close()


def test_an_incident_followed_live_pages_when_it_opens_and_past_each_size(
        store_url, open_engine, hooks):
    """A pager that reads the feed while the sessions join pages the incident once when it
    opens (forty sessions on one broken tool: one page, not forty) and again only when it
    grows past 50 sessions."""
    engine = open_engine(store_url)
    hook = hooks()
    worker = _pager(engine, hook)
    try:
        worker.run_once()
        for n in range(55):
            _broken_refund(engine, f"refund-{n}", n)
            worker.run_once()
            if n == 39:
                at_forty = list(hook.received)
    finally:
        worker.close()
    assert [b["key"].split(":")[0] for b in at_forty] == ["incident_open"]
    texts = [b["text"] for b in hook.received]
    assert [b["key"].split(":")[0] for b in hook.received] == [
        "incident_open", "incident_grow"], texts
    assert "1 session (1 waiting)" in texts[0] and "50 sessions" in texts[1]


def test_incident_pages_never_wait_behind_rollback_notices(store_url, open_engine, hooks):
    engine = open_engine(store_url, on_loop="flag")
    hook = hooks()
    rules = _pages_after_the_budget_is_spent(engine, hook, AlertConfig().rules)
    assert rules[3] == "incident", "the incident's page waited behind rollback notices"


def test_a_loop_whose_incident_is_never_written_still_pages(sqlite_url, open_engine, hooks,
                                                           monkeypatch):
    """A loop folds into its incident's page only when the incident exists: one that was never
    written (the store refused it) pages on its own after `fold_wait_s`."""
    clock = [1_000_000.0]
    engine = open_engine(sqlite_url, on_loop="flag", clock=lambda: clock[0])
    hook = hooks()

    def refused(*args, **kwargs):
        raise OSError("the store refused the incident")

    monkeypatch.setattr(incident_module, "note_loop", refused)
    worker = _pager(engine, hook, fold_wait_s=30)
    try:
        worker.run_once()
        _looping(engine, "lonely")
        worker.run_once()
        assert hook.received == []  # its incident may still come
        clock[0] += 31
        worker.run_once()
    finally:
        worker.close()
    [page] = hook.received
    assert page["rule"] == "loop" and page["session"] == "lonely"
    assert engine.incidents() == []


def test_an_incident_opened_before_the_pager_started_pages_once_as_it_grows(
        sqlite_url, open_engine, hooks):
    """A pager's first run starts at the newest event, after the incident's opening: the next
    sessions that join it (no event of their own below the first size) page the incident once,
    not each session."""
    engine = open_engine(sqlite_url)
    hook = hooks()
    for n in range(3):
        _broken_refund(engine, f"refund-{n}", n)
    worker = _pager(engine, hook, start="now", fold_wait_s=3600)  # as `rewind alert` starts
    try:
        worker.run_once()
        assert hook.received == []  # a first run does not page the backlog
        for n in range(3, 6):
            _broken_refund(engine, f"refund-{n}", n)
        worker.run_once()
        worker.run_once()
    finally:
        worker.close()
    [inc] = engine.incidents()
    [page] = hook.received
    assert page["rule"] == "incident" and page["incident"] == inc.id
    assert "6 sessions (6 waiting)" in page["text"]
