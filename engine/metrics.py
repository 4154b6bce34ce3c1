"""Prometheus counters for loop detections and rollbacks, so existing alerting can page on them.

Counters live in a module-level registry, `REGISTRY`, separate from prometheus-client's global one
so that importing Rewind never clashes with an application's own metric names. Serve it with
`serve_metrics` (an HTTP endpoint on a daemon thread) or embed `render_metrics()` in an existing
endpoint. Example alert: ``increase(agent_loop_detected_total{rule="exact_repeat"}[10m]) > 20``.

prometheus_client is imported when the first counter is touched (a loop flagged, a rollback, a
scrape), not with the engine: an agent process that never loops pays nothing for it.

Label values come from the session's meta; missing values become ``unknown`` and every value is
cut to 100 characters, so a misbehaving caller cannot explode the series count with huge labels.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge

    REGISTRY: CollectorRegistry
    LOOPS_DETECTED: Counter
    ROLLBACKS: Counter
    INCIDENTS_OPENED: Counter
    INCIDENTS_OPEN: Gauge

__all__ = [
    "REGISTRY",
    "LOOPS_DETECTED",
    "ROLLBACKS",
    "record_loop",
    "record_rollback",
    "INCIDENTS_OPENED",
    "INCIDENTS_OPEN",
    "record_incident_opened",
    "set_open_incidents",
    "serve_metrics",
    "render_metrics",
    "sample",
]

_lock = threading.Lock()
_counters: dict[str, Any] = {}


def _build() -> dict[str, Any]:
    """The registry and its counters, made once, on first use."""
    with _lock:
        if not _counters:
            from prometheus_client import CollectorRegistry, Counter, Gauge

            registry = CollectorRegistry(auto_describe=True)
            _counters["LOOPS_DETECTED"] = Counter(
                "agent_loop_detected_total",
                "Loops flagged by the Rewind loop detector.",
                labelnames=("rule", "tool", "scenario", "prompt_version"),
                registry=registry,
            )
            _counters["ROLLBACKS"] = Counter(
                "agent_rollbacks_total",
                "Sessions rolled back by Rewind, automatically or by an operator.",
                labelnames=("scenario", "prompt_version", "actor_kind", "rule"),
                registry=registry,
            )
            _counters["INCIDENTS_OPENED"] = Counter(
                "agent_incidents_opened_total",
                "Incidents (loops grouped by cause) this process opened.",
                labelnames=("tool", "rule"),
                registry=registry,
            )
            _counters["INCIDENTS_OPEN"] = Gauge(
                "agent_incidents_open",
                "Open incidents in the store, as this process last read them (the alert worker "
                "reads them every round).",
                registry=registry,
            )
            _counters["REGISTRY"] = registry
    return _counters


def __getattr__(name: str) -> Any:
    """``REGISTRY`` (the registry holding Rewind's counters, read it in tests with `sample`),
    ``LOOPS_DETECTED`` (``agent_loop_detected_total{rule, tool, scenario, prompt_version}``)
    and ``ROLLBACKS`` (``agent_rollbacks_total{scenario, prompt_version, actor_kind, rule}``;
    actor_kind is ``automatic`` or ``operator``; rule is the verdict's rule for automatic
    rollbacks, else ``none``), ``INCIDENTS_OPENED`` (``agent_incidents_opened_total{tool,
    rule}``, counted by the process whose loop opened it) and ``INCIDENTS_OPEN``
    (``agent_incidents_open``, the fleet's open incidents when this process last read them), made
    on first access."""
    if name in ("REGISTRY", "LOOPS_DETECTED", "ROLLBACKS", "INCIDENTS_OPENED", "INCIDENTS_OPEN"):
        return _build()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _registry() -> CollectorRegistry:
    registry: CollectorRegistry = _build()["REGISTRY"]
    return registry


def _counter(name: str) -> Counter:
    counter: Counter = _build()[name]
    return counter


_UNKNOWN = "unknown"
_MAX_LABEL = 100


def _label(value: Any, missing: str = _UNKNOWN) -> str:
    if value is None or value == "":
        return missing
    text = str(value)
    return text if len(text) <= _MAX_LABEL else text[:_MAX_LABEL]


def _meta(meta: Mapping[str, Any] | None, key: str) -> str:
    return _label((meta or {}).get(key))


def record_loop(
    verdict: Any, tool: str | None = None, meta: Mapping[str, Any] | None = None
) -> None:
    """Count one flagged loop.

    Args:
        verdict: the detector's `Verdict`; healthy verdicts are ignored.
        tool: the tool the loop is about; defaults to ``verdict.tool``, ``none`` for agent turns.
        meta: the session's meta (``scenario`` and ``prompt_version`` are used).
    """
    if not getattr(verdict, "looping", False):
        return
    _counter("LOOPS_DETECTED").labels(
        rule=_label(verdict.rule),
        tool=_label(tool if tool is not None else getattr(verdict, "tool", None), "none"),
        scenario=_meta(meta, "scenario"),
        prompt_version=_meta(meta, "prompt_version"),
    ).inc()


def record_rollback(
    meta: Mapping[str, Any] | None, automatic: bool, rule: str | None = None
) -> None:
    """Count one rollback.

    Args:
        meta: the session's meta (``scenario`` and ``prompt_version`` are used).
        automatic: True when Rewind rolled back on a verdict, False for an operator's rollback.
        rule: the rule that caused an automatic rollback (``none`` when not given).
    """
    _counter("ROLLBACKS").labels(
        scenario=_meta(meta, "scenario"),
        prompt_version=_meta(meta, "prompt_version"),
        actor_kind="automatic" if automatic else "operator",
        rule=_label(rule, "none"),
    ).inc()


def record_incident_opened(tool: str | None, rule: str) -> None:
    """Count one incident opened (``none`` for loops of agent turns without a tool)."""
    _build()["INCIDENTS_OPENED"].labels(tool=_label(tool, "none"), rule=_label(rule)).inc()


def set_open_incidents(count: int) -> None:
    """Set the number of open incidents in the store, as just read."""
    _build()["INCIDENTS_OPEN"].set(count)


def serve_metrics(port: int, addr: str = "127.0.0.1"):
    """Serve `REGISTRY` at ``http://addr:port/metrics`` from a daemon thread.

    Args:
        port: TCP port; 0 picks a free one (read it from ``server.server_port``).
        addr: interface to bind; the default keeps the endpoint local to the host.

    Returns:
        ``(server, thread)``; call ``server.shutdown()`` to stop serving.

    Raises:
        OSError: when the address cannot be bound (port in use, no such interface).
    """
    from prometheus_client import start_http_server

    return start_http_server(port, addr=addr, registry=_registry())


def render_metrics() -> bytes:
    """The Prometheus text exposition of `REGISTRY` (to embed in an existing endpoint)."""
    from prometheus_client import generate_latest

    return generate_latest(_registry())


def sample(name: str, **labels: str) -> float:
    """Current value of one series (0.0 when it was never incremented), e.g.
    ``sample("agent_loop_detected_total", rule="cycle", tool="fetch", scenario="refund",
    prompt_version="v7")``."""
    value = _registry().get_sample_value(name, labels)
    return 0.0 if value is None else value
