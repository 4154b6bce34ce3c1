"""A real agent, watched without touching its code: the OpenAI Agents SDK's `Runner` drives a
scripted model (no network, no API key) that keeps calling a failing tool; the published
OpenInference instrumentation turns the SDK's traces into OpenTelemetry spans, the official
OTLP/HTTP exporter sends them to a `rewind otlp` process on a free loopback port, and the loop is
flagged in the store, never rolled back."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
from support.paths import ROOT

pytest.importorskip("agents")
pytest.importorskip("openinference.instrumentation.openai_agents")

from agents import Agent, Runner  # noqa: E402
from agents.run_config import RunConfig  # noqa: E402
from openinference.instrumentation import using_session  # noqa: E402
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import BatchSpanProcessor  # noqa: E402
from support.agents_sdk import Scripted, call, fetch_invoice, say  # noqa: E402
from support.ports import free_port  # noqa: E402

from engine import Engine  # noqa: E402


@pytest.fixture
def rewind_otlp(tmp_path):
    """`rewind otlp` in its own process on a free port: (store URL, endpoint, process)."""
    url, port = f"sqlite:///{tmp_path}/rewind.db", free_port()
    Engine.open(url).close()  # the receiver never creates a store: the fleet's comes first
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "otlp", "--store", url, "--port", str(port),
         "--settle", "0.2"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    ready = proc.stdout.readline() if proc.stdout else ""
    assert "receiving traces at" in ready, proc.stderr.read() if proc.stderr else ready
    yield url, f"http://127.0.0.1:{port}/v1/traces", proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_an_instrumented_agents_sdk_run_that_loops_is_flagged_by_rewind_otlp(rewind_otlp):
    url, endpoint, proc = rewind_otlp
    provider = TracerProvider(resource=Resource.create({"service.name": "billing-agent",
                                                        "service.version": "v8"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        model = Scripted([*(lambda n: call("fetch_invoice", {"invoice": "INV-7"}, n)
                            for _ in range(6)), say("I could not fetch the invoice.", 7)])
        agent = Agent(name="clerk", model=model, tools=[fetch_invoice])
        with using_session("ticket-42"):
            result = asyncio.run(Runner.run(agent, "Fetch invoice INV-7",
                                            run_config=RunConfig(tracing_disabled=False)))
        assert result.final_output == "I could not fetch the invoice."
    finally:
        instrumentor.uninstrument()
        provider.shutdown()  # the exporter sends what it still holds

    with Engine.open(url, create=False, freeze=None) as engine:
        deadline = time.monotonic() + 60
        info = engine.session_info("otel-ticket-42")
        while (info is None or info.steps < 6) and time.monotonic() < deadline:
            time.sleep(0.1)  # the receiver writes once a session's spans settled
            info = engine.session_info("otel-ticket-42")
        assert info is not None and info.steps == 6
        assert info.status == "looping" and info.rollbacks == 0
        assert info.meta["watch_only"] is True and info.meta["source"] == "otlp"
        assert (info.scenario, info.prompt_version) == ("billing-agent", "v8")
        recorded = engine.get_session("otel-ticket-42").steps()
        assert {(s.tool, s.status.value) for s in recorded} == {("fetch_invoice", "error")}
        assert recorded[0].args == {"invoice": "INV-7"}
        assert "Error running tool" in (recorded[0].error or "")
        assert [s.id for s in engine.sessions()] == ["otel-ticket-42"]

    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "6 step(s)" in out
