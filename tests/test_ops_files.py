"""The Prometheus alerting rules and the Grafana dashboard in ops/ load and use only the metrics
Rewind exports, under their current names (not the deprecated ``agent_*`` ones), with their real
labels."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from engine import metrics

OPS = Path(__file__).resolve().parents[1] / "ops"
METRICS = {
    "rewind_loop_detected_total": set(metrics.LOOPS_DETECTED._labelnames),
    "rewind_rollbacks_total": set(metrics.ROLLBACKS._labelnames),
    "rewind_incidents_opened_total": set(metrics.INCIDENTS_OPENED._labelnames),
    "rewind_incidents_open": set(),
}


def _check_expr(expr: str) -> None:
    assert not re.search(r"\bagent_[a-z_]+_total\b", expr), f"a deprecated name: {expr}"
    names = set(re.findall(r"\brewind_[a-z_]+\b", expr))
    assert names and names <= set(METRICS), expr
    labels = set(re.findall(r"by \(([^)]*)\)", expr))
    used = {label.strip() for group in labels for label in group.split(",")}
    used |= set(re.findall(r"(\w+)=~?\"", expr))
    allowed = set().union(*(METRICS[n] for n in names))
    assert used <= allowed, (expr, used - allowed)


def test_prometheus_rules_load_and_name_real_metrics():
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load((OPS / "prometheus" / "rewind-alerts.yml").read_text("utf-8"))
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert rules
    for rule in rules:
        assert rule["alert"] and rule["labels"]["severity"] and rule["annotations"]["summary"]
        _check_expr(rule["expr"])


def test_grafana_dashboard_loads_and_names_real_metrics():
    dash = json.loads((OPS / "grafana" / "rewind-dashboard.json").read_text("utf-8"))
    assert dash["uid"] and dash["title"] and dash["panels"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        for target in panel["targets"]:
            _check_expr(target["expr"])
