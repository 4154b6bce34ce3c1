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
- ``otlp``: made by the OpenTelemetry SDK in another process (the agent's side, as deployed),
  then sent by the official OTLP/HTTP exporter, 512 spans per request (BatchSpanProcessor's
  batch size), protobuf, one request after the other, to a `Receiver` on loopback with a
  settle window of 0; timed from the first request sent until every span is a step in the
  store. ``receive`` is the part of that time the request threads spent decoding and buffering.

``CPU s`` is this process's CPU time for the path: for ``otlp`` the receiver's whole cost (HTTP,
decode, ordering, writer; not the exporter's, nor Redis's), so ``spans/CPU s`` is what one core
would ingest whatever the machine's load. ``--same-process`` runs the exporter as a thread of
this process instead (its encoding then counts, and competes for the GIL).

    python bench/otlp.py [--spans N] [--sessions S] [--no-redis] [--same-process]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
import types
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from engine import Engine  # noqa: E402
from engine.integrations.otlp import IngestConfig, Receiver, ServerConfig  # noqa: E402


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


def _exporter(endpoint: str, spans: int, sessions: int, ready: Any, go: Any, done: Any,
              spent: Any) -> None:
    """The agent's side, in a process of its own as in a real deployment: `spans` tool spans made
    by the OpenTelemetry SDK, then sent by the official OTLP/HTTP exporter, 512 a request; the
    CPU seconds the sending took go to `spent.value`."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    made = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(made))
    tracer = provider.get_tracer("bench")
    for n in range(spans):
        with tracer.start_as_current_span("execute_tool lookup") as span:
            span.set_attribute("gen_ai.operation.name", "execute_tool")
            span.set_attribute("gen_ai.tool.name", "lookup")
            span.set_attribute("gen_ai.conversation.id", f"otlp-{n % sessions}")
            span.set_attribute("gen_ai.tool.call.arguments", f'{{"order": "A-{n}"}}')
            span.set_attribute("gen_ai.tool.call.result", f"order A-{n}: shipped")
    finished = list(made.get_finished_spans())
    exporter = OTLPSpanExporter(endpoint=endpoint)
    ready.set()
    go.wait()
    cpu = time.thread_time()
    for lo in range(0, len(finished), 512):  # BatchSpanProcessor's max_export_batch_size
        exporter.export(finished[lo:lo + 512])
    spent.value = time.thread_time() - cpu
    exporter.shutdown()
    done.set()


def via_otlp(url: str, spans: int, sessions: int,
             same_process: bool = False) -> tuple[float, float, float, float]:
    """Seconds from the first request sent to the last span written, the seconds the server
    spent receiving (decode + buffer, request threads), the CPU seconds of this process
    meanwhile (the receiver's whole cost when the exporter runs in a process of its own, as an
    agent does; with `same_process` the exporter is a thread of this process and its encoding
    is counted too, and competes with the receiver for the GIL), and the CPU seconds the
    exporter spent encoding and sending."""
    import multiprocessing

    ctx: Any = threading if same_process else multiprocessing.get_context("spawn")
    ready, go, done = ctx.Event(), ctx.Event(), ctx.Event()
    spent = types.SimpleNamespace(value=0.0) if same_process else ctx.Value("d", 0.0)
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
        child = (threading.Thread if same_process else ctx.Process)(
            target=_exporter, args=(receiver.endpoint, spans, sessions, ready, go, done, spent),
            daemon=True)
        child.start()
        if not ready.wait(600):
            raise SystemExit("the exporter process did not start")
        t0, cpu0 = time.perf_counter(), time.process_time()
        go.set()
        deadline = time.monotonic() + 600
        while receiver.ingestor.counts["steps"] < spans and time.monotonic() < deadline:
            time.sleep(0.005)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        done.wait(60)
        child.join(60)
        if receiver.ingestor.counts["steps"] != spans:
            raise SystemExit(f"only {receiver.ingestor.counts} of {spans} spans were written")
        return elapsed, received[0], cpu, float(spent.value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=5_000)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--no-redis", action="store_true")
    parser.add_argument("--same-process", action="store_true",
                        help="run the exporter as a thread of the receiver's process")
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
          f"{'CPU s':>7} {'spans/CPU s':>12} {'vs s.step':>10}")
    rates: dict[str, float] = {}
    try:
        for name, (direct_url, otlp_url) in stores.items():
            cpu0 = time.process_time()
            base = direct(direct_url, args.spans, args.sessions)
            cpu1 = time.process_time()
            batch = batched(direct_url, args.spans, args.sessions)
            cpu2 = time.process_time()
            total, received, cpu, exporter = via_otlp(otlp_url, args.spans, args.sessions,
                                            args.same_process)
            rows = [("s.step", base, "-", cpu1 - cpu0), ("batch", batch, "-", cpu2 - cpu1),
                    ("otlp", total, f"{received:.2f}", cpu)]
            for path, seconds, receive, used in rows:
                print(f"{name:<8} {path:<8} {seconds:8.2f} {args.spans / seconds:9.0f} "
                      f"{receive:>10} {used:7.2f} {args.spans / used:12.0f} "
                      f"{base / seconds:9.2f}x")
            print(f"{'':<8} {'':<8} (the exporter spent {exporter:.2f} CPU s encoding and "
                  "sending)")
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
