"""Alerts at fleet scale: a bulk rollback pages once with a summary (count, batch id, link), and
loop alerts never wait behind rollback notices (their own rate budget, sent first)."""

from __future__ import annotations

import pytest
from test_alerts import made_hooks

from engine import LoopDetected
from engine.fleet.alerts import AlertConfig, AlertWorker


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


def test_loop_alerts_never_wait_behind_rollback_notices(store_url, open_engine, hooks):
    engine = open_engine(store_url, on_loop="flag")
    hook = hooks()
    for i in range(5):  # five operator rollbacks, each paged on its own
        s = engine.session(f"r{i}")
        s.append_message("user", "hi")
        s.snapshot("start")
        s.append_message("assistant", "oops")
        s.rollback(actor="alice", reason="wrong answer")
    worker = AlertWorker(engine, [hook.url],
                         AlertConfig(rules=("loop", "rollback"), rate_per_minute=3))
    try:
        worker.run_once()
        assert [b["rule"] for b in hook.received] == ["rollback"] * 3  # the budget is spent
        _looping(engine, "x")
        worker.run_once()
    finally:
        worker.close()
    rules = [b["rule"] for b in hook.received]
    assert "loop" in rules, "the loop alert waited behind rollback notices"
    assert rules.index("loop") == 3  # sent before the notices still queued
