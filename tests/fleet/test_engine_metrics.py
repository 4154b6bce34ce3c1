"""Loops and rollbacks reach the Prometheus counters that alerting pages on."""

from __future__ import annotations

import pytest

from engine import LoopDetected, metrics
from engine.fleet.api import Fleet


@pytest.fixture(autouse=True)
def fresh_bounds():
    """No label values seen yet: the process's other tests may have filled the bounds."""
    metrics.bound_labels()
    yield
    metrics.bound_labels()


def test_an_automatic_loop_rollback_is_counted(open_engine):
    engine = open_engine("sqlite:///:memory:")
    meta = {"scenario": "metrics-crop", "prompt_version": "v-metrics"}
    s = engine.session("m", meta=meta)
    labels = dict(scenario="metrics-crop", prompt_version="v-metrics")
    loops_before = metrics.sample("rewind_loop_detected_total", rule="exact_repeat",
                                  tool="image_crop", **labels)
    with pytest.raises(LoopDetected):
        for _ in range(5):
            with s.step("image_crop", {"x": 1}) as call:
                call.fail("invalid slice")
    assert metrics.sample("rewind_loop_detected_total", rule="exact_repeat", tool="image_crop",
                          **labels) == loops_before + 1
    assert metrics.sample("rewind_rollbacks_total", actor_kind="automatic", rule="exact_repeat",
                          **labels) >= 1
    engine.rollback("m", actor="alice", reason="manual", force=True)  # again, on purpose
    assert metrics.sample("rewind_rollbacks_total", actor_kind="operator", rule="none",
                          **labels) == 1


def test_metrics_are_served_over_http():
    import urllib.request

    server, _thread = Fleet.serve_metrics(0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        body = urllib.request.urlopen(url, timeout=5).read().decode()
    finally:
        server.shutdown()
    assert "rewind_loop_detected_total" in body and "rewind_rollbacks_total" in body
    assert "agent_loop_detected_total" in body  # the old names, for one release
