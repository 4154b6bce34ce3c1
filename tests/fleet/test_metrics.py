"""Prometheus counters for loops and rollbacks: named ``rewind_*`` (the ``agent_*`` names still
exported for one release), with a bounded number of label values."""

from __future__ import annotations

import urllib.request

import pytest

from engine import metrics
from engine.loops.detector import HEALTHY, LoopDetector, Step, Verdict

META = {"tenant": "acme", "scenario": "refund", "prompt_version": "v7"}


def loops(**labels) -> float:
    return metrics.sample("rewind_loop_detected_total", **labels)


def rollbacks(**labels) -> float:
    return metrics.sample("rewind_rollbacks_total", **labels)


@pytest.fixture(autouse=True)
def fresh_bounds():
    """Each test starts with no label values seen (the process's other tests saw many)."""
    metrics.bound_labels()
    yield
    metrics.bound_labels()


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
    assert metrics.render_metrics().count(b"rewind_loop_detected_total{") == before.count(
        b"rewind_loop_detected_total{"
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
    assert "# TYPE rewind_loop_detected_total counter" in body
    assert 'rewind_rollbacks_total{actor_kind="automatic"' in body
    # the names of the previous release, still served for one more
    assert "# TYPE agent_loop_detected_total counter" in body
    assert 'agent_rollbacks_total{actor_kind="automatic"' in body
    thread.join(timeout=5)


def test_the_old_names_count_the_same_for_one_release():
    assert metrics.DEPRECATED_NAMES == {
        "agent_loop_detected_total": "rewind_loop_detected_total",
        "agent_rollbacks_total": "rewind_rollbacks_total",
    }
    labels = {"rule": "cycle", "tool": "fetch", "scenario": "old-names", "prompt_version": "v1"}
    before = (loops(**labels), metrics.sample("agent_loop_detected_total", **labels))
    metrics.record_loop(metrics_verdict("cycle", "fetch"), None,
                        {"scenario": "old-names", "prompt_version": "v1"})
    assert (loops(**labels), metrics.sample("agent_loop_detected_total", **labels)) == (
        before[0] + 1, before[1] + 1)


def metrics_verdict(rule: str, tool: str) -> Verdict:
    return Verdict(looping=True, rule=rule, tool=tool)


def series(name: str, label: str) -> set[str]:
    """The values `label` takes among the series of `name`."""
    return {s.labels[label] for m in metrics.REGISTRY.collect() for s in m.samples
            if s.name == name and label in s.labels}


def test_caller_label_values_are_bounded_with_an_other_bucket():
    """A caller sending a new tool and scenario name on every call (ids, timestamps) adds at most
    the bound's series, then counts under "other"."""
    metrics.bound_labels(limit=3)
    for i in range(40):
        metrics.record_loop(metrics_verdict("exact_repeat", f"tool-{i}"), None,
                            {"scenario": f"scenario-{i}", "prompt_version": f"pv-{i}"})
    tools = series("rewind_loop_detected_total", "tool")
    assert {"tool-0", "tool-1", "tool-2", "other"} <= tools
    assert not any(t.startswith("tool-") and t not in ("tool-0", "tool-1", "tool-2")
                   for t in tools)
    assert loops(rule="exact_repeat", tool="other", scenario="other",
                 prompt_version="other") == 37
    # a value seen before the bound filled keeps its name
    metrics.record_loop(metrics_verdict("exact_repeat", "tool-1"), None,
                        {"scenario": "scenario-1", "prompt_version": "pv-1"})
    assert loops(rule="exact_repeat", tool="tool-1", scenario="scenario-1",
                 prompt_version="pv-1") == 2


def test_a_fixed_set_of_values_keeps_only_those():
    metrics.bound_labels(tool=["refund_api", "image_crop"], scenario=["refund"])
    metrics.record_rollback({"scenario": "refund", "prompt_version": "v9"}, automatic=True)
    metrics.record_rollback({"scenario": "made-up", "prompt_version": "v9"}, automatic=True)
    metrics.record_loop(metrics_verdict("cycle", "image_crop"), None, {"scenario": "x"})
    metrics.record_loop(metrics_verdict("cycle", "rm_rf"), None, {"scenario": "x"})
    assert rollbacks(scenario="refund", prompt_version="v9", actor_kind="automatic",
                     rule="none") == 1
    assert rollbacks(scenario="other", prompt_version="v9", actor_kind="automatic",
                     rule="none") >= 1
    assert loops(rule="cycle", tool="image_crop", scenario="other", prompt_version="unknown") >= 1
    assert loops(rule="cycle", tool="other", scenario="other", prompt_version="unknown") >= 1
    with pytest.raises(ValueError, match="cannot bound label 'tenant'"):
        metrics.bound_labels(tenant=["acme"])
