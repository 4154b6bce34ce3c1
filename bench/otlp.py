"""Tool spans per second through `rewind otlp`, against the same steps through `s.record_steps`
in the same run.

For each store (a SQLite file; Redis when redis-server is installed, started on a free loopback
port), N tool spans of the OpenTelemetry GenAI conventions, spread over S sessions with new
arguments each (so no loop is flagged and every span takes the full path), become steps two ways:

- ``record_steps`` (the baseline): the best a watcher can do through the engine itself, with no
  receiver: the steps go through ``s.record_steps`` on flag-only session handles, in batches of
  512 (the exporter's batch size) grouped by session, one store write per session and batch.
  (One transaction per span, ``with s.step(...)``, is not the alternative: nobody who learns of
  calls in batches would write them one by one.)
- ``otlp``: an agent in another process (as deployed) makes the spans with the OpenTelemetry SDK
  and exports them as users run it: a `BatchSpanProcessor` over the official OTLP/HTTP exporter
  (protobuf; its defaults: batches of 512, a 5 s schedule), flushed when the agent's run ends.
  Its queue is raised to N spans: the default 2,048 drops spans of a burst made this fast, and
  a dropped span is never a step. The receiver (`Receiver` on loopback) writes with a settle
  window of 0: the default 2 s only delays each write, it does not change its cost. Timed from
  the first span made until every span is a step in the store.

``CPU s`` is this process's CPU time for the path: for ``otlp`` the receiver's whole cost (HTTP,
decode, ordering, writer; not the agent's, nor Redis's), so ``CPU ×base`` (CPU per span against
``record_steps``) is what the receiver costs on top of the engine's own batch path, whatever
the machine's load; ``wall ×base`` is the same for the elapsed time (the agent making its spans
runs meanwhile, on another core if there is one free).

    python bench/otlp.py [--spans N] [--sessions S] [--no-redis]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from engine import Engine  # noqa: E402
from engine.integrations.otlp import IngestConfig, Receiver, ServerConfig  # noqa: E402

BATCH = 512
"""`BatchSpanProcessor`'s default max_export_batch_size: the spans of one export request."""


def record_steps(url: str, spans: int, sessions: int) -> tuple[float, float]:
    """Seconds and CPU seconds to write `spans` steps through `s.record_steps`, `BATCH` spans at
    a time, each batch's spans grouped by session (round-robin over `sessions`, as the agent's
    spans are)."""
    with Engine.open(url, freeze=None) as engine:
        handles = [engine.session(f"batch-{i}", meta={"source": "bench"}, on_loop="flag")
                   for i in range(sessions)]
        t0, cpu0 = time.perf_counter(), time.process_time()
        for lo in range(0, spans, BATCH):
            by_session: dict[int, list] = {}
            for n in range(lo, min(lo + BATCH, spans)):
                call = handles[n % sessions].step("lookup", {"order": f"A-{n}"}, snapshot=False)
                call.ok(f"order A-{n}: shipped")
                by_session.setdefault(n % sessions, []).append(call)
            for i, calls in by_session.items():
                handles[i].record_steps(calls)
        return time.perf_counter() - t0, time.process_time() - cpu0


def _agent(endpoint: str, spans: int, sessions: int, ready: Any, go: Any, spent: Any) -> None:
    """The agent's side, in a process of its own: `spans` tool spans made with the SDK and
    exported by a `BatchSpanProcessor` over the OTLP/HTTP exporter, flushed at the end of the
    run; the seconds it took to make them (and hand them over) go to `spent.value`."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint),
                                                   max_queue_size=max(2048, spans)))
    tracer = provider.get_tracer("bench")
    ready.set()
    go.wait()
    t0 = time.perf_counter()
    for n in range(spans):
        with tracer.start_as_current_span("execute_tool lookup") as span:
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.name", "lookup")
            span.set_attribute("gen_ai.conversation.id", f"otlp-{n % sessions}")
            span.set_attribute("gen_ai.tool.call.arguments", f'{{"order": "A-{n}"}}')
            span.set_attribute("gen_ai.tool.call.result", f"order A-{n}: shipped")
    provider.force_flush()
    spent.value = time.perf_counter() - t0
    provider.shutdown()


def via_otlp(url: str, spans: int, sessions: int) -> tuple[float, float, float]:
    """Seconds from the agent's first span to the last step written, the CPU seconds of this
    process (the receiver) meanwhile, and the seconds the agent took to make and export its
    spans."""
    ctx = multiprocessing.get_context("spawn")
    ready, go = ctx.Event(), ctx.Event()
    spent = ctx.Value("d", 0.0)
    with Engine.open(url, freeze=None) as engine, Receiver(
            engine, ServerConfig(port=0),
            IngestConfig(settle_s=0.0, max_buffered_spans=max(100_000, spans))) as receiver:
        agent = ctx.Process(target=_agent, daemon=True,
                            args=(receiver.endpoint, spans, sessions, ready, go, spent))
        agent.start()
        if not ready.wait(600):
            raise SystemExit("the agent process did not start")
        t0, cpu0 = time.perf_counter(), time.process_time()
        go.set()
        deadline = time.monotonic() + 600
        while receiver.ingestor.counts["steps"] < spans and time.monotonic() < deadline:
            time.sleep(0.005)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        agent.join(60)
        if receiver.ingestor.counts["steps"] != spans:
            raise SystemExit(f"only {receiver.ingestor.counts} of {spans} spans were written")
        return elapsed, cpu, float(spent.value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=5_000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--no-redis", action="store_true")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="rewind-bench-otlp-")
    stores = {"sqlite": (f"sqlite:///{tmp}/base.db", f"sqlite:///{tmp}/otlp.db")}
    server = None
    if not args.no_redis:
        from support.redis_servers import RedisServer, have_redis

        if have_redis():
            server = RedisServer().start()
            stores["redis"] = (server.url(prefix="base"), server.url(prefix="otlp"))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{args.spans} tool spans over {args.sessions} sessions, {os.cpu_count()} cores, "
          f"load average {load}; base: the same steps through s.record_steps, same run")
    print(f"{'store':<8} {'path':<13} {'seconds':>8} {'spans/s':>9} {'wall ×base':>11} "
          f"{'CPU s':>7} {'spans/CPU s':>12} {'CPU ×base':>10}")
    rates: dict[str, float] = {}
    try:
        for name, (base_url, otlp_url) in stores.items():
            base, base_cpu = record_steps(base_url, args.spans, args.sessions)
            total, cpu, agent = via_otlp(otlp_url, args.spans, args.sessions)
            for path, seconds, used in (("record_steps", base, base_cpu), ("otlp", total, cpu)):
                print(f"{name:<8} {path:<13} {seconds:8.2f} {args.spans / seconds:9.0f} "
                      f"{seconds / base:10.2f}x {used:7.2f} {args.spans / used:12.0f} "
                      f"{used / base_cpu:9.2f}x")
            print(f"{'':<8} {'':<13} (the agent made and exported its spans in {agent:.2f} s)")
            rates[name] = args.spans / total
    finally:
        if server is not None:
            server.stop()
    sqlite_rate = rates.get("sqlite", 0.0)
    print(f"\nTargets\n  [{'ok' if sqlite_rate >= 2000 else 'MISS'}] tool spans/s into SQLite "
          f"through rewind otlp >= 2,000: {sqlite_rate:.0f}")
    return 0


if __name__ == "__main__":
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
