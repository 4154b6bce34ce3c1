"""OTLP/HTTP trace bodies to plain span records: gzip, protobuf and JSON, decoded by the
official `opentelemetry-proto` package and nothing hand-rolled.

Every failure is a `BadPayload` whose message says what was wrong with the body, so the server
can answer 400 (or 413 for a body that inflates past the limit) with that reason.
"""

from __future__ import annotations

import base64
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

__all__ = ["BadPayload", "SpanData", "decode_request", "encode_response"]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


class BadPayload(ValueError):
    """A body that is not an OTLP trace export request; `status` is the HTTP answer."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class SpanData:
    """One span of an export request, with its resource's attributes beside it."""

    trace_id: str
    """Hex, 32 characters ("" when the exporter sent none)."""
    span_id: str
    """Hex, 16 characters; what makes a redelivered span recognisable."""
    name: str
    start_ns: int
    """Start time, nanoseconds since the epoch (what orders a session's steps)."""
    end_ns: int
    attributes: dict[str, Any]
    """Span attributes as plain Python values (lists and dicts for arrays and kvlists)."""
    resource: dict[str, Any] = field(default_factory=dict)
    """Attributes of the resource that emitted the span (service.name, …)."""
    status_code: int = 0
    """0 unset, 1 ok, 2 error (OTLP's StatusCode)."""
    status_message: str = ""
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(name, attributes) of each span event; `exception` events carry a failure's text."""


def inflate(body: bytes, encoding: str, max_bytes: int) -> bytes:
    """`body` without its Content-Encoding (identity or gzip), refusing to grow past
    `max_bytes` (a gzip bomb costs no more memory than the limit).

    Raises:
        BadPayload: an unknown encoding (415), broken gzip (400), too large inflated (413).
    """
    encoding = (encoding or "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding != "gzip":
        raise BadPayload(f"Content-Encoding {encoding!r} is not supported; send gzip or "
                         "identity", 415)
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(body, max_bytes + 1)
    except zlib.error as exc:
        raise BadPayload(f"the body is not valid gzip: {exc}") from exc
    if len(data) > max_bytes or inflater.unconsumed_tail:
        raise BadPayload(f"the body inflates past the limit of {max_bytes} bytes; send smaller "
                         "batches (the exporter's max export batch size)", 413)
    return data


def _value(v: Any) -> Any:
    """An OTLP AnyValue as a plain Python value."""
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(v.bytes_value).decode("ascii")
    return getattr(v, kind)


def _attributes(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        v = kv.value
        # most attributes are strings: read them without the general path's call
        out[kv.key] = v.string_value if v.WhichOneof("value") == "string_value" else _value(v)
    return out


def _hex_ids_to_base64(doc: Any) -> None:
    """OTLP/JSON writes trace and span ids in hex, where protobuf's JSON mapping expects base64
    for bytes fields: rewrite them in place before the official parser reads the document."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key in ("traceId", "spanId", "parentSpanId", "trace_id", "span_id",
                       "parent_span_id") and isinstance(value, str):
                try:
                    doc[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
                except ValueError as exc:
                    raise BadPayload(f"{key} {value[:40]!r} is not hex") from exc
            else:
                _hex_ids_to_base64(value)
    elif isinstance(doc, list):
        for item in doc:
            _hex_ids_to_base64(item)


def decode_request(body: bytes, content_type: str) -> list[SpanData]:
    """The spans of an OTLP `ExportTraceServiceRequest` body (already inflated).

    Raises:
        BadPayload: an unsupported content type (415) or a body that does not parse (400).
    """
    from google.protobuf import json_format
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    kind = (content_type or "").split(";")[0].strip().lower()
    request = ExportTraceServiceRequest()
    if kind == PROTOBUF:
        try:
            request.ParseFromString(body)
        except (DecodeError, ValueError) as exc:
            raise BadPayload(f"the body is not an OTLP protobuf trace request: {exc}") from exc
    elif kind == JSON:
        try:
            doc = json.loads(body)
            if not isinstance(doc, dict):
                raise BadPayload("the JSON body must be an object with resourceSpans")
            _hex_ids_to_base64(doc)
            json_format.ParseDict(doc, request, ignore_unknown_fields=True)
        except BadPayload:
            raise
        except (ValueError, json_format.ParseError, RecursionError) as exc:
            raise BadPayload(f"the body is not an OTLP JSON trace request: "
                             f"{str(exc)[:200]}") from exc
    else:
        raise BadPayload(f"Content-Type {content_type or 'missing'!r} is not supported; send "
                         f"{PROTOBUF} or {JSON}", 415)
    spans = []
    for rs in request.resource_spans:
        resource = _attributes(rs.resource.attributes)
        for ss in rs.scope_spans:
            for sp in ss.spans:
                spans.append(SpanData(
                    trace_id=sp.trace_id.hex(), span_id=sp.span_id.hex(), name=sp.name,
                    start_ns=int(sp.start_time_unix_nano), end_ns=int(sp.end_time_unix_nano),
                    attributes=_attributes(sp.attributes), resource=resource,
                    status_code=int(sp.status.code), status_message=sp.status.message,
                    events=[(ev.name, _attributes(ev.attributes)) for ev in sp.events]
                    if sp.events else []))
    return spans


def encode_response(content_type: str, rejected: int = 0, message: str = "") -> tuple[bytes, str]:
    """An `ExportTraceServiceResponse` in the request's encoding, with a partial success when
    some spans were rejected. Returns (body, content type)."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceResponse,
    )

    response = ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    if (content_type or "").split(";")[0].strip().lower() == JSON:
        return json_format.MessageToJson(response).encode(), JSON
    return response.SerializeToString(), PROTOBUF
