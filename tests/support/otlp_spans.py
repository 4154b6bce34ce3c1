"""OTLP payloads for the receiver's tests, built with the official `opentelemetry-proto`
messages (one span per call, requests, OTLP/JSON as the Collector writes it), and posting them
over loopback HTTP."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from typing import Any

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from engine.integrations.otlp import Receiver

PROTOBUF, JSON = "application/x-protobuf", "application/json"
SECOND = 1_000_000_000
T0 = 1_764_590_000 * SECOND
NEVER = 3600.0  # a settle window no test waits for: tests flush when they mean to


# -- payloads ---------------------------------------------------------------------------------
def _any(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def _kvs(attrs: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=_any(v)) for k, v in attrs.items()]


def span(n: int, attrs: dict[str, Any], *, start: int | None = None, trace: int = 1,
         error: str | None = None, name: str = "span") -> Span:
    """Span number `n` (its id) of trace `trace`, starting `n` seconds after T0 unless told."""
    begin = T0 + (n if start is None else start) * SECOND
    return Span(trace_id=trace.to_bytes(16, "big"), span_id=n.to_bytes(8, "big"), name=name,
                start_time_unix_nano=begin, end_time_unix_nano=begin + SECOND // 10,
                attributes=_kvs(attrs),
                status=Status(code=Status.STATUS_CODE_ERROR, message=error) if error
                else Status(code=Status.STATUS_CODE_OK))


def request(*spans: Span, resource: dict[str, Any] | None = None) -> ExportTraceServiceRequest:
    rs = ResourceSpans(scope_spans=[ScopeSpans(spans=list(spans))])
    rs.resource.attributes.extend(_kvs(resource or {"service.name": "crop-bot"}))
    return ExportTraceServiceRequest(resource_spans=[rs])


def as_otlp_json(req: ExportTraceServiceRequest) -> bytes:
    """OTLP/JSON as the Collector writes it: protobuf's JSON mapping with hex ids."""
    doc = json_format.MessageToDict(req)

    def hexify(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("traceId", "spanId", "parentSpanId"):
                    node[key] = base64.b64decode(value).hex()
                else:
                    hexify(value)
        elif isinstance(node, list):
            for item in node:
                hexify(item)

    hexify(doc)
    return json.dumps(doc).encode()


def gen_ai_tool(n: int, tool: str = "image_crop", args: str = '{"x": 10, "y": 4}', *,
                conversation: str | None = "conv-1", error: str | None = None,
                **extra: Any) -> Span:
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
             "gen_ai.tool.call.id": f"call_{n}", "gen_ai.tool.call.arguments": args,
             **({"gen_ai.conversation.id": conversation} if conversation else {}),
             **({"error.type": "ValueError"} if error else
                {"gen_ai.tool.call.result": '{"ok": true}'}), **extra}
    return span(n, attrs, error=error, name=f"execute_tool {tool}")


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def post(url: str, body: bytes, content_type: str = PROTOBUF,
         **headers: str) -> tuple[int, bytes, Any]:
    """(status, body, headers: case-insensitive, as HTTP header names are)."""
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": content_type, **headers})
    try:
        with _OPENER.open(req, timeout=30) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def send(r: Receiver, *spans: Span, **kwargs: Any) -> int:
    status, body, _ = post(r.endpoint, request(*spans, **kwargs).SerializeToString())
    assert status == 200, body
    return status
