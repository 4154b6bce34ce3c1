"""A 200 from `rewind otlp` means the spans are durable: real receiver processes, fed by the
official OTLP/HTTP exporter, killed with SIGKILL right after their 200s and started again, lose
no acknowledged span; a receiver whose store's disk is full (a small tmpfs) answers 503 with
Retry-After and a Rewind error, and one stopped while it cannot write says how many spans it
kept and exits non-zero; the next one writes them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExportResult
from support.ports import free_port

from engine import Engine

ROOT = Path(__file__).resolve().parents[3]


def start(url: str, port: int, *extra: str) -> subprocess.Popen[str]:
    """`rewind otlp` in its own process, once it says it receives."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "otlp", "--store", url, "--port", str(port),
         *extra], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready = proc.stdout.readline() if proc.stdout else ""
    if "receiving traces at" not in ready:
        proc.kill()
        raise AssertionError(ready + (proc.stderr.read() if proc.stderr else ""))
    return proc


class Recording(OTLPSpanExporter):
    """The official exporter, noting the span ids of every batch the receiver answered 200."""

    def __init__(self, endpoint: str):
        super().__init__(endpoint=endpoint, timeout=30)
        self.acknowledged: list[int] = []

    def export(self, spans):  # type: ignore[no-untyped-def]
        result = super().export(spans)
        if result is SpanExportResult.SUCCESS:
            self.acknowledged.extend(s.context.span_id for s in spans)
        return result


def export_tool_spans(endpoint: str, n: int, conversation: str, args_bytes: int = 20) -> list[int]:
    """`n` GenAI tool spans through a BatchSpanProcessor; the ids the receiver acknowledged."""
    exporter = Recording(endpoint)
    provider = TracerProvider(resource=Resource.create({"service.name": "crop-bot"}))
    provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=10,
                                                   schedule_delay_millis=50))
    tracer = provider.get_tracer("test")
    for i in range(n):
        with tracer.start_as_current_span("execute_tool image_crop", attributes={
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "image_crop",
                "gen_ai.conversation.id": conversation,
                "gen_ai.tool.call.arguments": json.dumps({"x": i, "pad": "p" * args_bytes}),
                "gen_ai.tool.call.result": '{"ok": true}'}):
            pass
    assert provider.force_flush(30_000)
    provider.shutdown()
    return exporter.acknowledged


def wait_for_steps(url: str, sid: str, n: int) -> int:
    with Engine.open(url, create=False, freeze=None) as engine:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            info = engine.session_info(sid)
            if info is not None and info.steps >= n:
                break
            time.sleep(0.1)
        info = engine.session_info(sid)
        return 0 if info is None else info.steps


def step_args(url: str, sid: str) -> list[int]:
    with Engine.open(url, create=False, freeze=None) as engine:
        return [s.args["x"] for s in engine.get_session(sid).steps()]


def test_spans_acknowledged_before_a_kill_9_are_written_by_the_next_receiver(tmp_path):
    url, port = f"sqlite:///{tmp_path}/rewind.db", free_port()
    Engine.open(url).close()  # the agent side creates the store; a receiver never does
    # A settle window no test waits for: nothing is written as steps before the kill.
    proc = start(url, port, "--settle", "3600")
    try:
        acked = export_tool_spans(f"http://127.0.0.1:{port}/v1/traces", 50, "conv-1")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert len(acked) == 50
    with Engine.open(url, create=False, freeze=None) as engine:
        assert engine.session_info("otel-conv-1") is None  # no steps yet: all in the spool

    again = start(url, port, "--settle", "0.2")
    try:
        assert wait_for_steps(url, "otel-conv-1", 50) == 50
        assert sorted(step_args(url, "otel-conv-1")) == list(range(50))  # each once
        again.send_signal(signal.SIGTERM)
        assert again.wait(timeout=60) == 0
    finally:
        if again.poll() is None:
            again.kill()
    with Engine.open(url, create=False, freeze=None) as engine:
        assert engine.documents.fleet("otlp_spool") == {}  # emptied once written


@pytest.fixture
def tiny_disk() -> Iterator[Path]:
    """A 2 MiB tmpfs, unmounted after the test."""
    folder = Path(tempfile.mkdtemp(prefix="rewind-tiny-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)
        folder.rmdir()


def fill(folder: Path) -> Path:
    """Fill the disk holding `folder`; returns the file that holds the space."""
    filler = folder / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def test_a_full_disk_gets_503_and_a_stop_keeps_and_counts_what_it_could_not_write(tiny_disk):
    import urllib.error
    import urllib.request

    from support.otlp_spans import gen_ai_tool, request

    url, port = f"sqlite:///{tiny_disk}/rewind.db", free_port()
    Engine.open(url).close()
    proc = start(url, port, "--settle", "3600")
    endpoint = f"http://127.0.0.1:{port}/v1/traces"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(first: int, n: int) -> tuple[int, str, str | None]:
        body = request(*(gen_ai_tool(first + i, args=json.dumps({"x": first + i,
                                                                "pad": "p" * 2000}))
                         for i in range(n))).SerializeToString()
        req = urllib.request.Request(endpoint, data=body, method="POST",
                                     headers={"Content-Type": "application/x-protobuf"})
        try:
            with opener.open(req, timeout=60) as r:
                return r.status, "", None
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode("utf-8", "replace"), e.headers.get("Retry-After")

    acked: list[int] = []
    try:
        assert post(1, 20)[0] == 200
        acked += range(1, 21)
        filler = fill(tiny_disk)
        refused = None
        for batch in range(200):  # the disk is finite: one of these no longer fits
            first = 1_000 + batch * 20
            status, text, retry = post(first, 20)
            if status != 200:
                refused = (status, text, retry)
                break
            acked += range(first, first + 20)
        assert refused is not None
        status, text, retry = refused
        assert status == 503 and retry is not None
        assert "disk holding the store is full" in text and "OperationalError" not in text
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
        err = proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 1, err
    assert "could not be written" in err and "kept in the store's spool" in err

    filler.unlink()
    again = start(url, port, "--settle", "0.2")
    try:
        assert wait_for_steps(url, "otel-conv-1", len(acked)) == len(acked)
        assert sorted(step_args(url, "otel-conv-1")) == sorted(acked)  # 0 lost, none twice
        again.send_signal(signal.SIGTERM)
        assert again.wait(timeout=60) == 0
    finally:
        if again.poll() is None:
            again.kill()


def test_a_full_disk_is_a_store_error_that_says_what_to_do(tiny_disk):
    from engine import StoreFull

    url = f"sqlite:///{tiny_disk}/rewind.db"
    with Engine.open(url, freeze=None) as engine:
        s = engine.session("s-1")
        s.append_message("user", "hello")
        fill(tiny_disk)
        with pytest.raises(StoreFull) as caught:
            for n in range(1_000):  # the disk is finite
                s.append_message("user", f"{n} " + "x" * 20_000)
        text = str(caught.value)
        assert "disk holding the store is full" in text and "Free space" in text
        assert url.split("///")[1] in text or "rewind.db" in text
