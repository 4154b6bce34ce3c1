"""Tool spans per second through `rewind otlp`, against the same steps through `s.step`, same run.

For each store (a SQLite file; Redis when redis-server is installed, started on a free loopback
port), N tool spans of the OpenTelemetry GenAI conventions, spread over S sessions with new
arguments each (so no loop is flagged and every span takes the full path), are:

- ``s.step``: written straight through the engine, ``with s.step(tool, args, snapshot=False)``
  on a flag-only session handle, one store write per span: what the receiver called per span
  before it batched;
- ``batch``: the same steps through ``s.record_steps`` (the receiver's path: every step judged
  in order, one store write per batch), in batches of 512 spread over the sessions as the
  exporter's requests are;
- ``otlp``: made by the OpenTelemetry SDK, exported by the official OTLP/HTTP exporter
  (`BatchSpanProcessor`, 512 spans per request, protobuf) to a `Receiver` on loopback with a
  settle window of 0, and counted until every span is a step in the store. ``receive`` is the
  part of that time the server spent decoding and buffering requests.

    python bench/otlp.py [--spans N] [--sessions S] [--no-redis]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from engine import Engine  # noqa: E402
from engine.otlp import IngestConfig, Receiver, ServerConfig  # noqa: E402


def direct(url: str, spans: int, sessions: int) -> float:
    """Seconds to write `spans` steps through `s.step`, round-robin over `sessions`."""
    with Engine.open(url, freeze=None) as engine:
        handles = [engine.session(f"direct-{i}", meta={"source": "bench"}, on_loop="flag")
                   for i in range(sessions)]
        t0 = time.perf_counter()
        for n in range(spans):
            with handles[n % sessions].step("lookup", {"order": f"A-{n}"},
                                            snapshot=False) as call:
                call.ok(f"order A-{n}: shipped")
        return time.perf_counter() - t0


def batched(url: str, spans: int, sessions: int, size: int = 512) -> float:
    """Seconds to write `spans` steps through `s.record_steps`, `size` spans a request, each
    request's spans grouped by session (round-robin over `sessions`, as `direct`)."""
    with Engine.open(url, freeze=None) as engine:
        handles = [engine.session(f"batch-{i}", meta={"source": "bench"}, on_loop="flag")
                   for i in range(sessions)]
        t0 = time.perf_counter()
        for lo in range(0, spans, size):
            by_session: dict[int, list] = {}
            for n in range(lo, min(lo + size, spans)):
                call = handles[n % sessions].step("lookup", {"order": f"A-{n}"}, snapshot=False)
                call.ok(f"order A-{n}: shipped")
                by_session.setdefault(n % sessions, []).append(call)
            for i, calls in by_session.items():
                handles[i].record_steps(calls)
        return time.perf_counter() - t0


def via_otlp(url: str, spans: int, sessions: int) -> tuple[float, float]:
    """Seconds from the first span made to the last one written, and the seconds the server
    spent receiving (decode + buffer)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    with Engine.open(url, freeze=None) as engine, Receiver(
            engine, ServerConfig(port=0),
            IngestConfig(settle_s=0.0, max_buffered_spans=max(100_000, spans))) as receiver:
        received = [0.0]
        accept = receiver.ingestor.accept

        def timed_accept(batch):  # type: ignore[no-untyped-def]
            t = time.perf_counter()
            try:
                return accept(batch)
            finally:
                received[0] += time.perf_counter() - t

        receiver.ingestor.accept = timed_accept  # type: ignore[method-assign]
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=receiver.endpoint), max_queue_size=spans + 1,
            max_export_batch_size=512, schedule_delay_millis=50))
        tracer = provider.get_tracer("bench")
        t0 = time.perf_counter()
        for n in range(spans):
            with tracer.start_as_current_span("execute_tool lookup") as span:
                span.set_attribute("gen_ai.operation.name", "execute_tool")
                span.set_attribute("gen_ai.tool.name", "lookup")
                span.set_attribute("gen_ai.conversation.id", f"otlp-{n % sessions}")
                span.set_attribute("gen_ai.tool.call.arguments", f'{{"order": "A-{n}"}}')
                span.set_attribute("gen_ai.tool.call.result", f"order A-{n}: shipped")
        provider.force_flush()
        deadline = time.monotonic() + 600
        while receiver.ingestor.counts["steps"] < spans and time.monotonic() < deadline:
            time.sleep(0.005)
        elapsed = time.perf_counter() - t0
        provider.shutdown()
        if receiver.ingestor.counts["steps"] != spans:
            raise SystemExit(f"only {receiver.ingestor.counts} of {spans} spans were written")
        return elapsed, received[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=5_000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--no-redis", action="store_true")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="rewind-bench-otlp-")
    stores = {"sqlite": (f"sqlite:///{tmp}/direct.db", f"sqlite:///{tmp}/otlp.db")}
    server = None
    if not args.no_redis:
        from support.redis_servers import RedisServer, have_redis

        if have_redis():
            server = RedisServer().start()
            stores["redis"] = (server.url(prefix="direct"), server.url(prefix="otlp"))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{args.spans} tool spans over {args.sessions} sessions, {os.cpu_count()} cores, "
          f"load average {load}")
    print(f"{'store':<8} {'path':<8} {'seconds':>8} {'spans/s':>9} {'receive s':>10} "
          f"{'vs s.step':>10}")
    rates: dict[str, float] = {}
    try:
        for name, (direct_url, otlp_url) in stores.items():
            base = direct(direct_url, args.spans, args.sessions)
            batch = batched(direct_url, args.spans, args.sessions)
            total, received = via_otlp(otlp_url, args.spans, args.sessions)
            print(f"{name:<8} {'s.step':<8} {base:8.2f} {args.spans / base:9.0f} {'-':>10} "
                  f"{'1.00x':>10}")
            print(f"{name:<8} {'batch':<8} {batch:8.2f} {args.spans / batch:9.0f} {'-':>10} "
                  f"{base / batch:9.2f}x")
            print(f"{name:<8} {'otlp':<8} {total:8.2f} {args.spans / total:9.0f} "
                  f"{received:10.2f} {base / total:9.2f}x")
            rates[name] = args.spans / total
    finally:
        if server is not None:
            server.stop()
    sqlite_rate = rates.get("sqlite", 0.0)
    print(f"\nTargets\n  [{'ok' if sqlite_rate >= 2000 else 'MISS'}] tool spans/s into SQLite "
          f"through rewind otlp >= 2,000: {sqlite_rate:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
