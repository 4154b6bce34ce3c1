"""`rewind otlp`: agents Rewind does not run, watched through their OpenTelemetry spans.

Payloads are built with the official `opentelemetry-proto` messages, one convention at a time
(OpenTelemetry GenAI, OpenInference, OpenLLMetry), and posted over loopback HTTP to a `Receiver`
on a free port, as protobuf or OTLP/JSON, plain or gzipped. The receiver's settle window is set
far out so the test decides when the buffers are written (`flush(force=True)`); the window itself
is tested with a clock the test moves. The real OpenAI Agents SDK run, exported by the official
exporter to a `rewind otlp` process, is in tests/test_otlp_agents.py.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from support.otlp_spans import (  # noqa: F401 - the payload helpers other files import too
    JSON,
    NEVER,
    PROTOBUF,
    SECOND,
    T0,
    _any,
    _kvs,
    as_otlp_json,
    gen_ai_tool,
    post,
    request,
    send,
    span,
)

from engine import Engine
from engine.cli.parser import main
from engine.integrations.otlp import IngestConfig, Ingestor, Receiver, ServerConfig
from engine.integrations.otlp.decode import BadPayload, decode_request


# -- the receiver -----------------------------------------------------------------------------
@pytest.fixture
def engine(open_engine) -> Engine:
    return open_engine("sqlite:///:memory:", freeze=None)


@pytest.fixture
def receiver(engine) -> Iterator[Receiver]:
    with Receiver(engine, ServerConfig(address="127.0.0.1", port=0),
                  IngestConfig(settle_s=NEVER)) as r:
        yield r


def steps(engine: Engine, sid: str) -> list[tuple[str | None, Any, str]]:
    return [(s.tool, s.args, str(s.status.value)) for s in engine.get_session(sid).steps()]


# -- conventions --------------------------------------------------------------------------------
def test_a_genai_agent_repeating_a_failing_tool_is_flagged_and_never_rolled_back(
        receiver, engine):
    send(receiver, *(gen_ai_tool(n, error="invalid slice") for n in range(1, 7)))
    receiver.ingestor.flush(force=True)
    info = engine.session_info("otel-conv-1")
    assert info is not None and info.status == "looping"
    assert info.last_verdict and info.last_verdict["rule"] == "exact_repeat"
    assert info.meta["source"] == "otlp" and info.meta["watch_only"] is True
    assert info.scenario == "crop-bot" and info.rollbacks == 0
    recorded = engine.get_session("otel-conv-1").steps()
    assert len(recorded) == 6 and all(s.on_live_line for s in recorded)
    assert recorded[0].tool == "image_crop" and recorded[0].args == {"x": 10, "y": 4}
    assert recorded[0].error == "ValueError: invalid slice"
    assert engine.get_session("otel-conv-1").tree() == []  # nothing to restore an outside agent to
    assert engine.audit(session="otel-conv-1", action="rollback") == []


def test_openinference_tool_spans_over_gzipped_otlp_json_become_steps(receiver, engine):
    oi = {"openinference.span.kind": "TOOL", "tool.name": "lookup", "session.id": "ticket-9",
          "input.value": '{"order": "A-1"}', "output.value": "order A-1: shipped"}
    body = gzip.compress(as_otlp_json(request(span(1, oi), span(2, {**oi, "input.value":
                                                                      '{"order": "A-2"}'}))))
    status, answer, headers = post(receiver.endpoint, body, JSON, **{"Content-Encoding": "gzip"})
    assert status == 200 and headers["Content-Type"] == JSON
    assert json.loads(answer) == {}  # an ExportTraceServiceResponse: no partial success
    receiver.ingestor.flush(force=True)
    assert steps(engine, "otel-ticket-9") == [("lookup", {"order": "A-1"}, "ok"),
                                         ("lookup", {"order": "A-2"}, "ok")]
    assert engine.session_info("otel-ticket-9").status == "healthy"


def test_openllmetry_tool_spans_use_the_association_session_and_unwrap_kwargs(receiver, engine):
    tl = {"traceloop.span.kind": "tool", "traceloop.entity.name": "charge",
          "traceloop.entity.input": json.dumps({"args": [], "kwargs": {"order": "A-1"}}),
          "traceloop.entity.output": '"charged"',
          "traceloop.association.properties.session_id": "chat-77"}
    send(receiver, span(1, tl), span(2, tl, error="card declined"))
    receiver.ingestor.flush(force=True)
    recorded = engine.get_session("otel-chat-77").steps()
    assert [(s.tool, s.args, s.status.value) for s in recorded] == [
        ("charge", {"order": "A-1"}, "ok"), ("charge", {"order": "A-1"}, "error")]
    assert recorded[1].error == "card declined"


def test_chat_spans_add_the_conversation_once_and_unknown_spans_are_only_counted(
        receiver, engine):
    genai_chat = {"gen_ai.operation.name": "chat", "gen_ai.conversation.id": "conv-2",
                  "gen_ai.input.messages": json.dumps([
                      {"role": "user", "parts": [{"type": "text", "content": "crop it"}]}]),
                  "gen_ai.output.messages": json.dumps([
                      {"role": "assistant", "parts": [{"type": "text", "content": "cropping"}]}])}
    oi_llm = {"openinference.span.kind": "LLM", "session.id": "conv-2",
              "llm.input_messages.0.message.role": "user",
              "llm.input_messages.0.message.content": "crop it",
              "llm.output_messages.0.message.role": "assistant",
              "llm.output_messages.0.message.content": "done"}
    unknown = [span(10, {"http.method": "GET"}), span(11, {"openinference.span.kind": "AGENT"}),
               span(12, {"gen_ai.operation.name": "invoke_agent"})]
    send(receiver, span(1, genai_chat), span(3, oi_llm), *unknown)
    receiver.ingestor.flush(force=True)
    assert engine.get_session("otel-conv-2").state().messages == [
        {"role": "user", "content": "crop it"}, {"role": "assistant", "content": "cropping"},
        {"role": "assistant", "content": "done"}]
    counts = receiver.ingestor.counts
    assert (counts["chat"], counts["unknown"], counts["steps"]) == (2, 3, 0)
    assert {i.id for i in engine.sessions()} == {"otel-conv-2"}


def test_the_session_comes_from_the_conversation_a_configured_attribute_or_the_trace(engine):
    ingestor = Ingestor(engine, IngestConfig(settle_s=NEVER, session_attributes=("user.id",)))
    ingestor.accept(decode(request(
        gen_ai_tool(1, conversation=None, **{"user.id": "u-7"}),
        gen_ai_tool(2, conversation="c-1", **{"user.id": "u-7"}),
        span(3, {"openinference.span.kind": "TOOL", "tool.name": "a"}, trace=5),
        span(4, {"openinference.span.kind": "TOOL", "tool.name": "b", "session.id": "s-5"},
             trace=5),
        span(5, {"openinference.span.kind": "TOOL", "tool.name": "c"}, trace=6),
        gen_ai_tool(6, conversation="x" * 300))))
    ingestor.flush(force=True)
    by_session = {i.id: [s.tool for s in engine.get_session(i.id).steps()]
                  for i in engine.sessions()}
    long_id = next(sid for sid in by_session if sid.startswith("otel-otlp-"))
    assert by_session == {"otel-u-7": ["image_crop"], "otel-c-1": ["image_crop"],
                          "otel-s-5": ["a", "b"],  # a span with no session joins its trace's
                          f"otel-trace-{6:032x}": ["c"], long_id: ["image_crop"]}


def decode(req: ExportTraceServiceRequest):
    return decode_request(req.SerializeToString(), PROTOBUF)


# -- delivery -----------------------------------------------------------------------------------
def test_a_redelivered_batch_is_written_once_even_after_a_restart(receiver, engine):
    batch = [gen_ai_tool(n, args=json.dumps({"page": n})) for n in range(1, 4)]
    send(receiver, *batch)
    send(receiver, *batch)  # the exporter retried: same span ids
    receiver.ingestor.flush(force=True)
    send(receiver, *batch)
    receiver.ingestor.flush(force=True)
    assert len(engine.get_session("otel-conv-1").steps()) == 3
    assert receiver.ingestor.counts["duplicate"] == 6
    restarted = Ingestor(engine, IngestConfig(settle_s=NEVER))  # the ids live in the store
    restarted.accept(decode(request(*batch)))
    restarted.flush(force=True)
    assert len(engine.get_session("otel-conv-1").steps()) == 3


def test_a_failure_right_after_the_steps_were_written_does_not_write_them_twice(
        engine, monkeypatch):
    from engine.sessions.session import Session

    ingestor = Ingestor(engine, IngestConfig(settle_s=NEVER))
    ingestor.accept(decode(request(*[gen_ai_tool(n, args=json.dumps({"page": n}))
                                     for n in range(1, 4)])))
    record = Session.record_steps

    def written_then_lost(self, calls, **kwargs):  # the answer is lost after the write
        record(self, calls, **kwargs)
        monkeypatch.setattr(Session, "record_steps", record)
        raise ConnectionError("the store went away")

    monkeypatch.setattr(Session, "record_steps", written_then_lost)
    ingestor.flush(force=True)
    assert ingestor.counts["errors"] == 1 and ingestor.buffered == 3  # kept to retry
    ingestor.flush(force=True)  # the span ids were written with the steps: all known
    assert len(engine.get_session("otel-conv-1").steps()) == 3
    assert ingestor.counts["duplicate"] == 3 and ingestor.buffered == 0


def test_span_ids_remembered_by_an_earlier_receiver_still_count(engine):
    engine.session("otel-conv-1", meta={"source": "otlp", "watch_only": True}, on_loop="flag")
    engine.documents.put("otel-conv-1", "otlp", {"state": {
        "seen": [f"{n:016x}" for n in (1, 2)], "high_ns": T0 + 2 * SECOND}})
    ingestor = Ingestor(engine, IngestConfig(settle_s=NEVER))
    ingestor.accept(decode(request(*[gen_ai_tool(n, args=json.dumps({"page": n}))
                                     for n in range(1, 4)])))
    ingestor.flush(force=True)
    assert [s.args for s in engine.get_session("otel-conv-1").steps()] == [{"page": 3}]
    assert ingestor.counts["duplicate"] == 2


def test_batches_out_of_order_within_the_settle_window_are_written_in_start_order(engine):
    clock = [100.0]
    ingestor = Ingestor(engine, IngestConfig(settle_s=2.0), clock=lambda: clock[0])
    later = [gen_ai_tool(n, args=json.dumps({"page": n})) for n in (4, 5, 6)]
    earlier = [gen_ai_tool(n, args=json.dumps({"page": n})) for n in (3, 1, 2)]
    ingestor.accept(decode(request(*later)))
    clock[0] += 1.0
    ingestor.accept(decode(request(*earlier)))
    assert ingestor.flush() == 0  # the oldest span has waited 1 s of its 2
    assert engine.session_info("otel-conv-1") is None
    clock[0] += 1.5
    assert ingestor.flush() == 6
    assert [s.args["page"] for s in engine.get_session("otel-conv-1").steps()] == [1, 2, 3, 4, 5, 6]


def test_a_late_span_is_recorded_but_never_judged(receiver, engine):
    """Two identical failures were written; a third, identical one that started before them
    arrives after: judged, it would complete a loop. It is recorded, after them, and the
    session stays healthy; the late span's place is kept in the session's documents."""
    send(receiver, gen_ai_tool(5, error="invalid slice"), gen_ai_tool(6, error="invalid slice"))
    receiver.ingestor.flush(force=True)
    send(receiver, gen_ai_tool(4, error="invalid slice"))
    receiver.ingestor.flush(force=True)
    info = engine.session_info("otel-conv-1")
    assert info.status == "healthy" and info.steps == 3 and info.last_verdict is None
    assert receiver.ingestor.counts["late"] == 1
    late = engine.documents.get("otel-conv-1", "otlp", ["late"])["late"]
    assert late == [{"span": f"{4:016x}", "step": 3, "start_ns": T0 + 4 * SECOND}]
    send(receiver, gen_ai_tool(7, error="invalid slice"))  # on time again: judged
    receiver.ingestor.flush(force=True)
    assert engine.session_info("otel-conv-1").status == "looping"


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.permutations(list(range(1, 9))),
       cuts=st.lists(st.integers(0, 8), max_size=3),
       again=st.lists(st.integers(1, 8), max_size=5))
def test_any_batching_order_and_redelivery_within_the_window_gives_each_step_once_in_order(
        open_engine, order, cuts, again):
    engine = open_engine("sqlite:///:memory:", freeze=None)
    ingestor = Ingestor(engine, IngestConfig(settle_s=NEVER))
    spans = {n: gen_ai_tool(n, args=json.dumps({"page": n})) for n in range(1, 9)}
    delivery = [spans[n] for n in order] + [spans[n] for n in again]
    bounds = sorted({0, *cuts, len(delivery)})
    for a, b in zip(bounds, bounds[1:], strict=False):
        if a < b:
            ingestor.accept(decode(request(*delivery[a:b])))
    ingestor.flush(force=True)
    assert [s.args["page"] for s in engine.get_session("otel-conv-1").steps()] == list(range(1, 9))


# -- a listener that trusts nothing ---------------------------------------------------------------
@pytest.mark.parametrize(("body", "headers", "status", "reason"), [
    (b"\xff\x00garbage", {}, 400, "not an OTLP protobuf"),
    (b"{not json", {"Content-Type": JSON}, 400, "not an OTLP JSON"),
    (b"[1, 2]", {"Content-Type": JSON}, 400, "must be an object"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"spanId": "zz"}]}]}]}',
     {"Content-Type": JSON}, 400, "not hex"),
    (b"x", {"Content-Type": "text/plain"}, 415, "Content-Type"),
    (b"x", {"Content-Encoding": "br"}, 415, "Content-Encoding"),
    (b"not gzip", {"Content-Encoding": "gzip"}, 400, "gzip"),
])
def test_a_malformed_body_gets_a_4xx_with_its_reason_and_the_server_keeps_serving(
        receiver, engine, body, headers, status, reason):
    code, answer, _ = post(receiver.endpoint, body, **{"Content-Type": PROTOBUF, **headers})
    assert code == status
    assert reason in (json.loads(answer)["message"] if headers.get("Content-Type") == JSON
                      else answer.decode("utf-8", "replace"))
    send(receiver, gen_ai_tool(1))
    receiver.ingestor.flush(force=True)
    assert len(engine.get_session("otel-conv-1").steps()) == 1


def test_oversized_bodies_and_gzip_bombs_are_refused_before_they_cost_memory(engine):
    with Receiver(engine, ServerConfig(port=0, max_body_bytes=10_000),
                  IngestConfig(settle_s=NEVER)) as r:
        code, answer, _ = post(r.endpoint, b"\0" * 20_000)
        assert code == 413 and b"over the limit of 10000" in answer
        bomb = gzip.compress(b"\0" * 5_000_000)
        assert len(bomb) < 10_000
        code, answer, _ = post(r.endpoint, bomb, **{"Content-Encoding": "gzip"})
        assert code == 413 and b"inflates past the limit" in answer
        send(r, gen_ai_tool(1))


def test_with_a_token_every_request_needs_the_bearer(engine):
    with Receiver(engine, ServerConfig(port=0, token="s3cret"),
                  IngestConfig(settle_s=NEVER)) as r:
        body = request(gen_ai_tool(1)).SerializeToString()
        assert post(r.endpoint, body)[0] == 401
        assert post(r.endpoint, body, Authorization="Bearer wrong")[0] == 401
        assert post(r.endpoint, body, Authorization="Basic s3cret")[0] == 401
        assert post(r.endpoint, body, Authorization="Bearer s3cret")[0] == 200
        assert post(r.endpoint.replace("/v1/traces", "/v1/logs"), body,
                    Authorization="Bearer s3cret")[0] == 404
        r.ingestor.flush(force=True)
        assert len(engine.get_session("otel-conv-1").steps()) == 1


def test_refused_requests_are_said_on_stderr_once_a_minute_per_status(engine, capsys):
    """An exporter with a wrong token (an empty $REWIND_OTLP_TOKEN in the agent's shell) or a
    broken body is told so, but the receiver's own log said nothing: an operator saw no
    sessions and no reason. Each status is said once a minute, with a count of the rest."""
    with Receiver(engine, ServerConfig(port=0, token="s3cret"),
                  IngestConfig(settle_s=NEVER)) as r:
        body = request(gen_ai_tool(1)).SerializeToString()
        for _ in range(3):
            assert post(r.endpoint, body, Authorization="Bearer ")[0] == 401
        assert post(r.endpoint, b"\xff\x00garbage", Authorization="Bearer s3cret")[0] == 400
        assert post(r.endpoint, body, Authorization="Bearer s3cret")[0] == 200
        said = capsys.readouterr().err.splitlines()
    assert [line.split(":")[1].strip() for line in said] == ["answered 401 to 127.0.0.1",
                                                             "answered 400 to 127.0.0.1"]
    assert "a bearer token is required" in said[0]
    assert "not an OTLP protobuf trace request" in said[1]


def test_a_burst_past_the_buffers_gets_429_and_nothing_of_it_is_kept(engine):
    with Receiver(engine, ServerConfig(port=0),
                  IngestConfig(settle_s=NEVER, max_session_spans=4, max_buffered_spans=6)) as r:
        send(r, *(gen_ai_tool(n) for n in range(1, 4)))
        code, answer, headers = post(r.endpoint, request(
            *(gen_ai_tool(n) for n in range(4, 6))).SerializeToString())
        assert code == 429 and int(headers["Retry-After"]) >= 1
        assert b"session 'otel-conv-1' has 3 spans waiting" in answer
        code, answer, _ = post(r.endpoint, request(
            *(gen_ai_tool(n, conversation=f"c{n}") for n in range(10, 14))).SerializeToString())
        assert code == 429 and b"spans are waiting to be written" in answer
        assert r.ingestor.buffered == 3
        r.ingestor.flush(force=True)
        send(r, *(gen_ai_tool(n) for n in range(4, 6)))  # the exporter's retry now fits
        r.ingestor.flush(force=True)
        assert len(engine.get_session("otel-conv-1").steps()) == 5


def test_a_trace_id_of_another_width_still_names_a_session_its_spans_are_written_to(
        receiver, engine):
    """OTLP/JSON lets an exporter send any hex as traceId; a long one, with no session
    attribute beside it, once made a session id over 200 characters that no write could take:
    the spans were retried forever, one stderr line each time, and kept their buffer space."""
    doc = json.loads(as_otlp_json(request(*(
        gen_ai_tool(n, conversation=None, error="invalid slice") for n in range(1, 4)))))
    for sp in doc["resourceSpans"][0]["scopeSpans"][0]["spans"]:
        sp["traceId"] = "ab" * 100
    code, answer, _ = post(receiver.endpoint, json.dumps(doc).encode(), JSON)
    assert code == 200, answer
    receiver.ingestor.flush(force=True)
    assert receiver.ingestor.counts["errors"] == 0 and receiver.ingestor.buffered == 0
    watched = [s for s in engine.sessions() if s.meta.get("source") == "otlp"]
    assert len(watched) == 1 and len(watched[0].id) <= 200
    assert [t for t, _, _ in steps(engine, watched[0].id)] == ["image_crop"] * 3
    assert engine.session_info(watched[0].id).status == "looping"


def test_a_batch_larger_than_a_sessions_buffer_is_taken_when_nothing_waits(engine):
    """A Collector's batch processor can send more spans of one session in one request than
    the per-session bound: refused with 429 while other spans of the session wait (the retry
    fits once they are written), it is taken when nothing waits, since a retry of the same
    request could never fit (the exporter retried it forever and the spans were lost)."""
    with Receiver(engine, ServerConfig(port=0),
                  IngestConfig(settle_s=NEVER, max_session_spans=4, max_buffered_spans=6)) as r:
        big = request(*(gen_ai_tool(n, args=json.dumps({"page": n})) for n in range(1, 6)))
        assert post(r.endpoint, big.SerializeToString())[0] == 200
        assert r.ingestor.buffered == 5
        code, answer, _ = post(r.endpoint, request(gen_ai_tool(6)).SerializeToString())
        assert code == 429 and b"session 'otel-conv-1' has 5 spans waiting" in answer
        r.ingestor.flush(force=True)
        huge = request(*(gen_ai_tool(n, args=json.dumps({"page": n}), conversation="c2")
                         for n in range(10, 17)))
        assert post(r.endpoint, huge.SerializeToString())[0] == 200  # over both bounds, alone
        r.ingestor.flush(force=True)
        assert len(engine.get_session("otel-conv-1").steps()) == 5
        assert len(engine.get_session("otel-c2").steps()) == 7


def test_decoding_refuses_what_is_not_a_trace_request():
    with pytest.raises(BadPayload) as caught:
        decode_request(b"", "application/xml")
    assert caught.value.status == 415
    assert decode_request(b"", PROTOBUF) == []  # an empty export is a valid, empty request


# -- watch-only in the CLI ----------------------------------------------------------------------
def test_the_cli_marks_watch_only_sessions_and_refuses_to_roll_them_back_or_notify(
        tmp_path, open_engine, capsys):
    url = f"sqlite:///{tmp_path}/rewind.db"
    engine = open_engine(url, freeze=None)
    ingestor = Ingestor(engine, IngestConfig(settle_s=NEVER))
    ingestor.accept(decode(request(*(gen_ai_tool(n, error="invalid slice")
                                     for n in range(1, 5)))))
    ingestor.flush(force=True)
    assert main(["--store", url, "sessions"]) == 0
    assert "looping (watch-only)" in capsys.readouterr().out
    assert main(["--store", url, "show", "otel-conv-1"]) == 0
    assert "cannot be rolled back or notified" in capsys.readouterr().out
    assert main(["--store", url, "rollback", "otel-conv-1", "--actor", "alice",
                 "--reason", "loop"]) == 1
    assert "watch-only" in capsys.readouterr().err
    assert main(["--store", url, "notice", "otel-conv-1", "--actor", "alice"]) == 1
    assert "cannot be sent a notice" in capsys.readouterr().err
    info = engine.session_info("otel-conv-1")
    assert info.rollbacks == 0 and engine.get_session("otel-conv-1").state().messages == []


def test_only_the_cli_imports_the_receiver():
    """The receiver is an outside program on the engine's public API: no engine room depends on
    it, and it reaches the store only through the engine (the rule of tests/test_one_door.py)."""
    import ast
    from pathlib import Path

    from test_one_door import back_doors

    root = Path(__file__).resolve().parents[3] / "engine"
    receiver = root / "integrations" / "otlp"
    importers = set()
    for path in root.rglob("*.py"):
        if path.parent == receiver:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.startswith(("engine.integrations.otlp.", "engine.integrations.otlp"))
                   for n in names if n.split(".")[:3] == ["engine", "integrations", "otlp"]):
                importers.add(str(path.relative_to(root)))
    assert importers == {"cli/parser.py"}
    assert {p.name: hits for p in receiver.glob("*.py") if (hits := back_doors(p))} == {}


def test_a_quarantine_cannot_stop_a_watched_agent_and_its_real_calls_are_kept(receiver, engine):
    engine.quarantine("image_crop", actor="alice", reason="loops in the fleet")
    send(receiver, gen_ai_tool(1, error="invalid slice"), gen_ai_tool(2, tool="lookup"))
    receiver.ingestor.flush(force=True)
    # The engine applies no quarantine to a session it only watches: the agent called the tool
    # anyway, so the call is recorded as it happened and the detector judges it.
    assert receiver.ingestor.counts.get("quarantined", 0) == 0
    steps = engine.get_session("otel-conv-1").steps()
    assert [(s.tool, s.status) for s in steps] == [("image_crop", "error"), ("lookup", "ok")]


def test_a_client_that_hangs_up_mid_body_costs_nothing_and_the_server_keeps_serving(
        receiver, engine):
    import socket

    with socket.create_connection(("127.0.0.1", receiver.port), timeout=30) as sock:
        sock.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     b"application/x-protobuf\r\nContent-Length: 1000\r\n\r\n0123456789")
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer == b""  # nobody is left to answer: the connection is closed, nothing taken
    assert receiver.ingestor.counts["spans"] == 0
    send(receiver, gen_ai_tool(1))
    receiver.ingestor.flush(force=True)
    assert len(engine.get_session("otel-conv-1").steps()) == 1


attribute_values = st.one_of(st.text(), st.integers(), st.floats(allow_nan=False),
                             st.booleans(), st.sampled_from(["{", "[]", "null", '{"a": 1}']))


@settings(max_examples=150, deadline=None)
@given(attrs=st.dictionaries(st.sampled_from([
    "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.tool.call.arguments",
    "gen_ai.conversation.id", "gen_ai.input.messages", "gen_ai.output.messages", "error.type",
    "openinference.span.kind", "tool.name", "input.value", "session.id",
    "llm.output_messages.0.message.role", "llm.output_messages.0.message.content",
    "traceloop.span.kind", "traceloop.entity.input", "gen_ai.completion.0.content"]),
    attribute_values), kind=st.sampled_from(["execute_tool", "chat", "TOOL", "LLM", "tool"]))
def test_classifying_any_attributes_never_raises(attrs, kind):
    from engine.integrations.otlp.conventions import classify
    from engine.integrations.otlp.decode import SpanData

    for key in ("gen_ai.operation.name", "openinference.span.kind", "traceloop.span.kind"):
        attrs.setdefault(key, kind)
        action = classify(SpanData("ab" * 16, "cd" * 8, "x", 1, 2, attrs))
        assert action is None or action.kind in ("tool", "chat")
        del attrs[key]


def test_a_lone_surrogate_in_otlp_json_is_refused_with_its_reason(receiver, engine):
    body = as_otlp_json(request(gen_ai_tool(1, tool="crop"))).replace(b'"crop"', b'"cr\\ud800p"')
    code, answer, _ = post(receiver.endpoint, body, JSON)
    assert code == 400 and "surrogate" in json.loads(answer)["message"]
    assert receiver.ingestor.buffered == 0


def test_spans_over_the_engines_limits_are_kept_by_digest_or_dropped_never_retried(open_engine):
    from engine import Limits

    engine = open_engine("sqlite:///:memory:", freeze=None,
                         limits=Limits(args_bytes=200, message_bytes=200))
    ingestor = Ingestor(engine, IngestConfig(settle_s=NEVER))
    big_args = json.dumps({"blob": "x" * 1000})
    huge_answer = {"gen_ai.operation.name": "chat", "gen_ai.conversation.id": "conv-1",
                   "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
                       {"type": "text", "content": "y" * 1000}]}])}
    ingestor.accept(decode(request(gen_ai_tool(1, args=big_args, error="too big"),
                                   gen_ai_tool(2, args=big_args, error="too big"),
                                   span(3, huge_answer), gen_ai_tool(4, tool="lookup"))))
    ingestor.flush(force=True)
    recorded = engine.get_session("otel-conv-1").steps()
    assert [s.tool for s in recorded] == ["image_crop", "image_crop", "lookup"]
    assert set(recorded[0].args) == {"digest", "bytes"} and recorded[0].args == recorded[1].args
    assert ingestor.counts["malformed"] == 1 and ingestor.buffered == 0
    assert ingestor.flush(force=True) == 0


def test_watched_sessions_are_flagged_and_redeliveries_dropped_on_every_store(store_url,
                                                                              open_engine):
    engine = open_engine(store_url, freeze=None)
    batch = [gen_ai_tool(n, error="invalid slice") for n in range(1, 5)]
    for _ in range(2):  # a second receiver process reads the remembered span ids from the store
        ingestor = Ingestor(engine, IngestConfig(settle_s=NEVER))
        ingestor.accept(decode(request(*batch)))
        ingestor.accept(decode(request(*batch[2:])))
        ingestor.flush(force=True)
    info = engine.session_info("otel-conv-1")
    assert info.steps == 4 and info.status == "looping" and info.meta["watch_only"] is True
    assert info.rollbacks == 0


def test_rewind_otlp_on_a_port_in_use_says_so_and_exits_2(tmp_path, capsys):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        Engine.open(f"sqlite:///{tmp_path}/r.db").close()  # a receiver never creates one
        code = main(["otlp", "--store", f"sqlite:///{tmp_path}/r.db", "--port", str(port)])
    assert code == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_spans_of_a_session_an_embedded_engine_guards_are_not_written_twice(engine):
    s = engine.session("conv-1", meta={"tenant": "acme"})
    with s.step("image_crop", {"x": 10, "y": 4}) as call:
        call.fail("invalid slice")
    ingestor = Ingestor(engine, IngestConfig(settle_s=NEVER))
    ingestor.accept(decode(request(gen_ai_tool(1, error="invalid slice"))))
    ingestor.flush(force=True)
    info = engine.session_info("conv-1")
    assert info.steps == 1 and "watch_only" not in info.meta
    assert ingestor.counts["embedded"] == 1


# -- who may send, and what it costs ----------------------------------------------------------
def raw(port: int, data: bytes, source: str = "127.0.0.1", *, wait: bool = True) -> Any:
    """A socket from `source` that sent `data`; with `wait`, what came back until the server
    closed the connection (bytes), else the open socket."""
    import socket

    sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
    sock.sendall(data)
    if not wait:
        return sock
    answer = b""
    with sock:
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_a_host_header_naming_another_domain_is_refused_and_creates_nothing(engine):
    """A web page whose domain was made to resolve to this host (DNS rebinding) sends its own
    domain in Host: refused. Loopback names, IP addresses and --allowed-host names pass."""
    with Receiver(engine, ServerConfig(port=0, allowed_hosts=("rewind.internal",)),
                  IngestConfig(settle_s=NEVER)) as r:
        body = request(gen_ai_tool(1)).SerializeToString()
        code, answer, _ = post(r.endpoint, body, Host=f"evil.example:{r.port}")
        assert code == 403 and b"Host 'evil.example' is not served here" in answer
        assert r.ingestor.counts["spans"] == 0
        for host in (f"localhost:{r.port}", f"rewind.internal:{r.port}", "[::1]", "10.1.2.3"):
            assert post(r.endpoint, body, Host=host)[0] == 200, host
        r.ingestor.flush(force=True)
    assert [i.id for i in engine.sessions()] == ["otel-conv-1"]


def test_a_request_from_a_web_page_is_refused(receiver, engine):
    body = request(gen_ai_tool(1)).SerializeToString()
    code, answer, _ = post(receiver.endpoint, body, Origin="http://localhost:8501")
    assert code == 403 and b"Origin" in answer
    receiver.ingestor.flush(force=True)
    assert engine.sessions() == []


def test_beyond_loopback_the_receiver_refuses_to_start_without_a_token(engine, tmp_path, capsys,
                                                                        monkeypatch):
    monkeypatch.delenv("REWIND_OTLP_TOKEN", raising=False)
    code = main(["otlp", "--store", f"sqlite:///{tmp_path}/r.db", "--address", "0.0.0.0",
                 "--port", "0"])
    assert code == 2
    assert "refusing to receive traces on 0.0.0.0 without a bearer token" in (
        capsys.readouterr().err)
    with pytest.raises(ValueError, match="without a bearer token"):
        Receiver(engine, ServerConfig(address="0.0.0.0", port=0))


def test_the_token_is_read_from_a_file_or_the_environment(tmp_path, monkeypatch):
    import argparse

    from engine.errors import ConfigError
    from engine.integrations.otlp.server import _token, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    secret = tmp_path / "token"
    secret.write_text("s3cret\n")
    monkeypatch.setenv("REWIND_OTLP_TOKEN", "from-env")
    assert _token(parser.parse_args(["--token-file", str(secret)])) == "s3cret"
    assert _token(parser.parse_args([])) == "from-env"
    (tmp_path / "empty").write_text("")
    with pytest.raises(ConfigError, match="holds no token"):
        _token(parser.parse_args(["--token-file", str(tmp_path / "empty")]))


def test_slow_clients_cannot_hold_every_slot(engine):
    """Connections that send a byte now and then hold a connection each, never a request slot:
    others are served beside them; past its share, one client is refused, others are not."""
    with Receiver(engine, ServerConfig(port=0, per_client_connections=8),
                  IngestConfig(settle_s=NEVER)) as r:
        slow = [raw(r.port, b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n", wait=False)
                for _ in range(7)]
        slow.append(raw(r.port, b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                        b"application/x-protobuf\r\nContent-Length: 5000\r\n\r\n01", wait=False))
        try:
            import time

            deadline = time.monotonic() + 30
            while r._open < 8 and time.monotonic() < deadline:
                time.sleep(0.01)  # the server counts a connection once it accepted it
            answer = raw(r.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 503") and b"at most 8 per client" in answer
            body = request(gen_ai_tool(1)).SerializeToString()
            answer = raw(r.port, b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Type: application/x-protobuf\r\nConnection: close\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body,
                         source="127.0.0.2")
            assert answer.startswith(b"HTTP/1.1 200")
        finally:
            for sock in slow:
                sock.close()
        r.ingestor.flush(force=True)
    assert len(engine.get_session("otel-conv-1").steps()) == 1


def test_a_request_that_does_not_arrive_within_the_deadline_is_dropped(engine):
    with Receiver(engine, ServerConfig(port=0, read_timeout_s=0.5),
                  IngestConfig(settle_s=NEVER)) as r:
        # no answer: the connection is closed, while the client still owes headers or body
        assert raw(r.port, b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n") == b""
        assert raw(r.port, b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                   b"application/x-protobuf\r\nContent-Length: 5000\r\n\r\n0123") == b""
        assert r.ingestor.counts["spans"] == 0
        send(r, gen_ai_tool(1))


def test_bodies_past_the_read_budget_get_429_until_the_budget_is_free(engine):
    with Receiver(engine, ServerConfig(port=0, max_body_bytes=10_000, body_budget_bytes=10_000),
                  IngestConfig(settle_s=NEVER)) as r:
        held = raw(r.port, b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                   b"application/x-protobuf\r\nContent-Length: 9990\r\n\r\n0123", wait=False)
        body = request(gen_ai_tool(1)).SerializeToString()
        import time

        deadline = time.monotonic() + 30
        code, answer, headers = post(r.endpoint, body)
        while code == 200 and time.monotonic() < deadline:  # until the server read the first
            code, answer, headers = post(r.endpoint, body)
        assert code == 429 and headers["Retry-After"] and b"are being read" in answer
        held.close()
        while code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
            code, answer, headers = post(r.endpoint, body)
        assert code == 200


# -- ids are owned ------------------------------------------------------------------------------
def test_spans_never_squat_the_id_an_embedded_agent_opens(store_url, open_engine):
    """A span naming conv-9 writes otel-conv-9; the agent's own conv-9 is an ordinary session
    whose loop is rolled back; and no handle inherits watch-only: opening the receiver's
    session is refused, naming the receiver, and writes nothing."""
    from engine import LoopDetected, WatchOnly

    engine = open_engine(store_url, freeze=None)
    ingestor = Ingestor(engine, IngestConfig(settle_s=NEVER))
    ingestor.accept(decode(request(gen_ai_tool(1, conversation="conv-9"))))
    ingestor.flush(force=True)
    assert engine.session_info("otel-conv-9").meta["watch_only"] is True
    assert engine.session_info("conv-9") is None

    agent = engine.session("conv-9", meta={"tenant": "acme"})
    agent.snapshot(label="start")
    with pytest.raises(LoopDetected):
        for _ in range(10):
            with agent.step("image_crop", {"x": 10}) as call:
                call.fail("invalid slice")
    assert engine.session_info("conv-9").rollbacks == 1

    for meta in (None, {"tenant": "acme"}):
        with pytest.raises(WatchOnly, match="watched by the OTLP receiver .rewind otlp"):
            engine.session("otel-conv-9", meta=meta)
    assert "tenant" not in engine.session_info("otel-conv-9").meta


def test_an_empty_prefix_writes_the_ids_as_the_spans_name_them(engine):
    ingestor = Ingestor(engine, IngestConfig(settle_s=NEVER, session_prefix=""))
    ingestor.accept(decode(request(gen_ai_tool(1))))
    ingestor.flush(force=True)
    assert [i.id for i in engine.sessions()] == ["conv-1"]


def test_the_deadline_is_the_clients_time_only_a_slow_store_still_gets_its_answer(engine):
    """The deadline covers sending the request; storing it is the receiver's time: a request
    whose client asked to close afterwards (as urllib does) still gets its 200."""
    import time

    with Receiver(engine, ServerConfig(port=0, read_timeout_s=0.3),
                  IngestConfig(settle_s=NEVER)) as r:
        accept = r.ingestor.accept

        def slow_accept(spans):  # type: ignore[no-untyped-def]
            time.sleep(1.0)  # a store that takes longer than the client's deadline
            return accept(spans)

        r.ingestor.accept = slow_accept  # type: ignore[method-assign]
        status, _, _ = post(r.endpoint, request(gen_ai_tool(1)).SerializeToString(),
                            Connection="close")
        assert status == 200
        r.ingestor.flush(force=True)
    assert len(engine.get_session("otel-conv-1").steps()) == 1


def test_what_a_receiver_accepted_and_did_not_write_is_written_by_the_next_under_its_name(
        engine):
    first = Ingestor(engine, IngestConfig(settle_s=NEVER, spool_name="host-a:4318"))
    first.accept(decode(request(gen_ai_tool(1), gen_ai_tool(2))))  # then it was killed
    assert engine.session_info("otel-conv-1") is None

    other = Ingestor(engine, IngestConfig(settle_s=NEVER, spool_name="host-b:4318"))
    assert other.replay() == 0 and other.others == {"host-a:4318": 1}

    again = Ingestor(engine, IngestConfig(settle_s=NEVER, spool_name="host-a:4318"))
    assert again.replay() == 2
    again.flush()  # replayed spans have waited long enough already
    assert [s.args for s in engine.get_session("otel-conv-1").steps()] == [{"x": 10, "y": 4}] * 2
    assert engine.documents.fleet("otlp_spool") == {}
    assert Ingestor(engine, IngestConfig(spool_name="host-a:4318")).replay() == 0


def test_a_span_written_but_still_spooled_when_the_receiver_died_is_not_written_twice(engine):
    first = Ingestor(engine, IngestConfig(settle_s=NEVER, spool_name="host-a:4318"))
    first._drop_finished = lambda: None  # type: ignore[method-assign]  # killed right there
    first.accept(decode(request(gen_ai_tool(1), gen_ai_tool(2))))
    first.flush(force=True)
    assert len(engine.get_session("otel-conv-1").steps()) == 2
    assert engine.documents.fleet("otlp_spool") != {}

    again = Ingestor(engine, IngestConfig(settle_s=NEVER, spool_name="host-a:4318"))
    assert again.replay() == 2
    again.flush(force=True)
    assert len(engine.get_session("otel-conv-1").steps()) == 2
    assert again.counts["duplicate"] == 2 and engine.documents.fleet("otlp_spool") == {}
