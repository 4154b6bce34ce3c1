"""Prometheus counters for loop detections and rollbacks, so existing alerting can page on them.

Counters live in a module-level registry, `REGISTRY`, separate from prometheus-client's global one
so that importing Rewind never clashes with an application's own metric names. Serve it with
`serve_metrics` (an HTTP endpoint on a daemon thread) or embed `render_metrics()` in an existing
endpoint. Example alert: ``increase(rewind_loop_detected_total{rule="exact_repeat"}[10m]) > 20``.

Names: ``rewind_loop_detected_total`` and ``rewind_rollbacks_total``. The names of earlier
releases, ``agent_loop_detected_total`` and ``agent_rollbacks_total``, are still exported with
the same labels and values for one more release (`DEPRECATED_NAMES`), so dashboards and alerts
can move over; they will then be removed.

Label values: ``rule`` and ``actor_kind`` come from Rewind (a fixed set). ``tool``, ``scenario``
and ``prompt_version`` come from callers, so each is bounded (`LabelBound`): the first
`LABEL_VALUES` distinct values a process sees keep their name, and every later new value is
counted under ``other``; a missing value is ``unknown`` (``none`` for the tool of an agent turn)
and every value is cut to 100 characters. A fleet that knows its tools or scenarios can fix the
set instead (`bound_labels(tool=[...])`): only those values keep their name. So the number of
series is bounded whatever callers send.

Incidents: ``rewind_incidents_opened_total{tool, rule}`` (counted by the process whose loop
opened one; ``tool`` bounded as above) and ``rewind_incidents_open`` (the fleet's open incidents
when this process last read them: the alert worker reads them every round).

prometheus_client is imported when the first counter is touched (a loop flagged, a rollback, a
scrape), not with the engine: an agent process that never loops pays nothing for it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge

    REGISTRY: CollectorRegistry
    LOOPS_DETECTED: Counter
    ROLLBACKS: Counter
    INCIDENTS_OPENED: Counter
    INCIDENTS_OPEN: Gauge

__all__ = [
    "DEPRECATED_NAMES",
    "INCIDENTS_OPEN",
    "INCIDENTS_OPENED",
    "LABEL_VALUES",
    "LOOPS_DETECTED",
    "OTHER",
    "REGISTRY",
    "ROLLBACKS",
    "LabelBound",
    "bound_labels",
    "record_incident_opened",
    "record_loop",
    "record_rollback",
    "render_metrics",
    "sample",
    "serve_metrics",
    "set_open_incidents",
]

DEPRECATED_NAMES = {
    "agent_loop_detected_total": "rewind_loop_detected_total",
    "agent_rollbacks_total": "rewind_rollbacks_total",
}
"""Old name -> new name of the counters still exported under their old names for one release."""

_LOOP_LABELS = ("rule", "tool", "scenario", "prompt_version")
_ROLLBACK_LABELS = ("scenario", "prompt_version", "actor_kind", "rule")
_lock = threading.Lock()
_made: dict[str, Any] = {}


def _build() -> dict[str, Any]:
    """The registry and its series, made once, on first use."""
    with _lock:
        if not _made:
            from prometheus_client import CollectorRegistry, Counter, Gauge

            registry = CollectorRegistry(auto_describe=True)
            _made["LOOPS_DETECTED"] = Counter(
                "rewind_loop_detected_total", "Loops flagged by the Rewind loop detector.",
                labelnames=_LOOP_LABELS, registry=registry)
            _made["ROLLBACKS"] = Counter(
                "rewind_rollbacks_total",
                "Sessions rolled back by Rewind, automatically or by an operator.",
                labelnames=_ROLLBACK_LABELS, registry=registry)
            _made["_OLD_LOOPS"] = Counter(
                "agent_loop_detected_total",
                "Deprecated: rewind_loop_detected_total (removed in the next release).",
                labelnames=_LOOP_LABELS, registry=registry)
            _made["_OLD_ROLLBACKS"] = Counter(
                "agent_rollbacks_total",
                "Deprecated: rewind_rollbacks_total (removed in the next release).",
                labelnames=_ROLLBACK_LABELS, registry=registry)
            _made["INCIDENTS_OPENED"] = Counter(
                "rewind_incidents_opened_total",
                "Incidents (loops grouped by cause) this process opened.",
                labelnames=("tool", "rule"), registry=registry)
            _made["INCIDENTS_OPEN"] = Gauge(
                "rewind_incidents_open",
                "Open incidents in the store, as this process last read them (the alert worker "
                "reads them every round).", registry=registry)
            _made["REGISTRY"] = registry
    return _made


def __getattr__(name: str) -> Any:
    """``REGISTRY`` (the registry holding Rewind's series; read it in tests with `sample`),
    ``LOOPS_DETECTED`` (``rewind_loop_detected_total{rule, tool, scenario, prompt_version}``),
    ``ROLLBACKS`` (``rewind_rollbacks_total{scenario, prompt_version, actor_kind, rule}``;
    actor_kind is ``automatic`` or ``operator``; rule is the verdict's rule for automatic
    rollbacks, else ``none``), ``INCIDENTS_OPENED`` and ``INCIDENTS_OPEN``, made on first
    access."""
    if name in ("REGISTRY", "LOOPS_DETECTED", "ROLLBACKS", "INCIDENTS_OPENED", "INCIDENTS_OPEN"):
        return _build()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_UNKNOWN = "unknown"
_MAX_LABEL = 100
OTHER = "other"
"""The value that stands for every value of a bounded label past its bound."""
LABEL_VALUES = 50
"""Distinct values each bounded label keeps by default (per process); later ones are `OTHER`."""


class LabelBound:
    """The values one label may take: a fixed set, or the first `limit` distinct values seen;
    any other value is `OTHER`. Thread-safe."""

    def __init__(self, limit: int = LABEL_VALUES, fixed: Iterable[str] | None = None):
        self._lock = threading.Lock()
        self.limit = limit
        self.fixed = None if fixed is None else frozenset(fixed)
        self._seen: set[str] = set()

    def __call__(self, value: str) -> str:
        if value in (_UNKNOWN, "none", OTHER):
            return value
        if self.fixed is not None:
            return value if value in self.fixed else OTHER
        with self._lock:
            if value in self._seen:
                return value
            if len(self._seen) < self.limit:
                self._seen.add(value)
                return value
        return OTHER


_BOUNDS: dict[str, LabelBound] = {
    name: LabelBound() for name in ("tool", "scenario", "prompt_version")
}


def bound_labels(limit: int = LABEL_VALUES, **fixed: Iterable[str] | None) -> None:
    """Set how ``tool``, ``scenario`` and ``prompt_version`` are bounded from now on: each named
    label to its fixed set of values (None: the first `limit` seen), the others to the first
    `limit` seen. Forgets the values seen so far.

    Raises:
        ValueError: an unknown label name, or a `limit` below 1.
    """
    unknown = sorted(set(fixed) - set(_BOUNDS))
    if unknown:
        raise ValueError(f"cannot bound label {unknown[0]!r}: bounded labels are "
                         f"{', '.join(_BOUNDS)}")
    if limit < 1:
        raise ValueError("limit must be >= 1: the distinct values a label keeps")
    for name in _BOUNDS:
        _BOUNDS[name] = LabelBound(limit, fixed.get(name))


def _label(value: Any, missing: str = _UNKNOWN) -> str:
    if value is None or value == "":
        return missing
    text = str(value)
    return text if len(text) <= _MAX_LABEL else text[:_MAX_LABEL]


def _meta(meta: Mapping[str, Any] | None, key: str) -> str:
    return _BOUNDS[key](_label((meta or {}).get(key)))


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
    labels = {
        "rule": _label(verdict.rule),
        "tool": _BOUNDS["tool"](
            _label(tool if tool is not None else getattr(verdict, "tool", None), "none")),
        "scenario": _meta(meta, "scenario"),
        "prompt_version": _meta(meta, "prompt_version"),
    }
    made = _build()
    made["LOOPS_DETECTED"].labels(**labels).inc()
    made["_OLD_LOOPS"].labels(**labels).inc()


def record_rollback(
    meta: Mapping[str, Any] | None, automatic: bool, rule: str | None = None
) -> None:
    """Count one rollback.

    Args:
        meta: the session's meta (``scenario`` and ``prompt_version`` are used).
        automatic: True when Rewind rolled back on a verdict, False for an operator's rollback.
        rule: the rule that caused an automatic rollback (``none`` when not given).
    """
    labels = {
        "scenario": _meta(meta, "scenario"),
        "prompt_version": _meta(meta, "prompt_version"),
        "actor_kind": "automatic" if automatic else "operator",
        "rule": _label(rule, "none"),
    }
    made = _build()
    made["ROLLBACKS"].labels(**labels).inc()
    made["_OLD_ROLLBACKS"].labels(**labels).inc()


def record_incident_opened(tool: str | None, rule: str) -> None:
    """Count one incident opened (``none`` for loops of agent turns without a tool)."""
    _build()["INCIDENTS_OPENED"].labels(tool=_BOUNDS["tool"](_label(tool, "none")),
                                        rule=_label(rule)).inc()


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

    return start_http_server(port, addr=addr, registry=_build()["REGISTRY"])


def render_metrics() -> bytes:
    """The Prometheus text exposition of `REGISTRY` (to embed in an existing endpoint)."""
    from prometheus_client import generate_latest

    return generate_latest(_build()["REGISTRY"])


def sample(name: str, **labels: str) -> float:
    """Current value of one series (0.0 when it was never incremented), e.g.
    ``sample("rewind_loop_detected_total", rule="cycle", tool="fetch", scenario="refund",
    prompt_version="v7")``."""
    value = _build()["REGISTRY"].get_sample_value(name, labels)
    return 0.0 if value is None else value
