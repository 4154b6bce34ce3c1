"""Prometheus counters for loops and rollbacks."""

from __future__ import annotations

import urllib.request

from engine import metrics
from engine.loops.detector import HEALTHY, LoopDetector, Step, Verdict

META = {"tenant": "acme", "scenario": "refund", "prompt_version": "v7"}


def loops(**labels) -> float:
    return metrics.sample("agent_loop_detected_total", **labels)


def rollbacks(**labels) -> float:
    return metrics.sample("agent_rollbacks_total", **labels)


def test_record_loop_counts_by_rule_tool_scenario_and_prompt_version():
    labels = {
        "rule": "exact_repeat",
        "tool": "image_crop",
        "scenario": "refund",
        "prompt_version": "v7",
    }
    before = loops(**labels)
    detector = LoopDetector()
    step = Step(tool="image_crop", args={"x": 10}, ok=False, error="invalid slice")
    verdict = [detector.observe(step) for _ in range(3)][-1]
    metrics.record_loop(verdict, "image_crop", META)
    assert loops(**labels) == before + 1


def test_tool_defaults_to_the_verdict_and_missing_meta_is_unknown():
    labels = {"rule": "cycle", "tool": "fetch", "scenario": "unknown", "prompt_version": "unknown"}
    before = loops(**labels)
    metrics.record_loop(Verdict(looping=True, rule="cycle", tool="fetch"), None, None)
    assert loops(**labels) == before + 1
    turn = {
        "rule": "idle_turns",
        "tool": "none",
        "scenario": "unknown",
        "prompt_version": "unknown",
    }
    before = loops(**turn)
    metrics.record_loop(Verdict(looping=True, rule="idle_turns"), None, {})
    assert loops(**turn) == before + 1


def test_healthy_verdicts_are_not_counted():
    before = metrics.render_metrics()
    metrics.record_loop(HEALTHY, "fetch", META)
    assert metrics.render_metrics().count(b"agent_loop_detected_total{") == before.count(
        b"agent_loop_detected_total{"
    )


def test_counters_survive_many_calls():
    labels = {
        "rule": "near_duplicate",
        "tool": "run_sql",
        "scenario": "bulk",
        "prompt_version": "v1",
    }
    before = loops(**labels)
    verdict = Verdict(looping=True, rule="near_duplicate", tool="run_sql")
    for _ in range(5000):
        metrics.record_loop(verdict, None, {"scenario": "bulk", "prompt_version": "v1"})
    assert loops(**labels) == before + 5000


def test_rollbacks_by_actor_kind_and_rule():
    auto = {
        "scenario": "refund",
        "prompt_version": "v7",
        "actor_kind": "automatic",
        "rule": "exact_repeat",
    }
    manual = {
        "scenario": "refund",
        "prompt_version": "v7",
        "actor_kind": "operator",
        "rule": "none",
    }
    before_auto, before_manual = rollbacks(**auto), rollbacks(**manual)
    metrics.record_rollback(META, automatic=True, rule="exact_repeat")
    metrics.record_rollback(META, automatic=False)
    metrics.record_rollback(META, automatic=False)
    assert rollbacks(**auto) == before_auto + 1
    assert rollbacks(**manual) == before_manual + 2


def test_huge_label_values_are_cut():
    meta = {"scenario": "s" * 5000, "prompt_version": "v"}
    metrics.record_rollback(meta, automatic=True)
    assert (
        rollbacks(scenario="s" * 100, prompt_version="v", actor_kind="automatic", rule="none") >= 1
    )


def test_http_endpoint_serves_the_counters():
    metrics.record_rollback(META, automatic=True, rule="cycle")
    server, thread = metrics.serve_metrics(0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            body = response.read().decode()
    finally:
        server.shutdown()
        server.server_close()
    assert "# TYPE agent_loop_detected_total counter" in body
    assert 'agent_rollbacks_total{actor_kind="automatic"' in body
    thread.join(timeout=5)
