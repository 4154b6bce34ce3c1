"""Which spans are agent steps, and what they say: pure functions, no I/O.

Three conventions are read, first match wins:

- **OpenTelemetry GenAI** (`gen_ai.operation.name`): ``execute_tool`` is a tool call
  (`gen_ai.tool.name`, `gen_ai.tool.call.id`, `gen_ai.tool.call.arguments`,
  `gen_ai.tool.call.result`); ``chat`` / ``text_completion`` / ``generate_content`` carry messages
  (`gen_ai.input.messages`, `gen_ai.output.messages`).
- **OpenInference** (`openinference.span.kind`): ``TOOL`` (`tool.name`, `input.value`,
  `output.value`); ``LLM`` carries messages (`llm.input_messages.N.message.role` / `.content`,
  `llm.output_messages.N…`).
- **OpenLLMetry** (`traceloop.span.kind`): ``tool`` (`traceloop.entity.name`,
  `traceloop.entity.input`, `traceloop.entity.output`); LLM spans carry messages
  (`gen_ai.prompt.N.role` / `.content`, `gen_ai.completion.N…`).

A tool span failed when its status is ERROR or it has `error.type`; the error text is the error
type with the status message (or the `exception` event's type and message). Any other span (agent,
chain, retriever, HTTP, database…) is *unknown*: counted, never an error.

**The session** is the first of: `gen_ai.conversation.id`; the attributes the operator names
(``--session-attribute``); OpenInference's `session.id`; OpenLLMetry's
`traceloop.association.properties.session_id`; else ``trace-<trace id>``. Span attributes are
read before the resource's. An id that is not a valid Rewind session id (over 200 characters,
unprintable) is replaced by ``otlp-`` and a digest of it.

**Facets** for the fleet views come from explicit `rewind.tenant`, `rewind.scenario`,
`rewind.prompt_version` attributes, else `tenant.id`, `gen_ai.agent.name` or `service.name`
(scenario) and `service.version` (prompt version).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.integrations.otlp.decode import SpanData

__all__ = ["Action", "classify", "session_of"]

CHAT_OPERATIONS = ("chat", "text_completion", "generate_content")
SESSION_FALLBACKS = ("session.id", "traceloop.association.properties.session_id")


@dataclass
class Action:
    """What one span means for a Rewind session."""

    kind: Literal["tool", "chat"]
    """A tool call (a step the detector judges) or a model turn (messages only)."""
    convention: Literal["gen_ai", "openinference", "traceloop"]
    span_id: str
    trace_id: str
    start_ns: int
    """Start time of the span (nanoseconds): the order of the session's steps."""
    tool: str | None = None
    args: Any = None
    call_id: str | None = None
    ok: bool = True
    result: Any = None
    error: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    """Chat messages of a model turn: the last user input, then the outputs."""
    session: str | None = None
    """The explicit session id, or None when only the trace names it; once accepted, the
    receiver's session id (under its prefix)."""
    named: str | None = None
    """The session id the span itself named (before the receiver's prefix), once accepted."""
    meta: dict[str, str] = field(default_factory=dict)
    turn: str | None = None
    """The model response that issued the call (`gen_ai.response.id` on the tool span), when
    the instrumentation says; the calls of one response are judged as one attempt. The parent
    span is not used: most instrumentations hang every tool span of a run under one agent span,
    which would make a whole run one attempt."""


def _get(span: SpanData, *keys: str) -> Any:
    for attrs in (span.attributes, span.resource):
        for key in keys:
            value = attrs.get(key)
            if value is not None and value != "":
                return value
    return None


def valid_session_id(value: Any) -> str:
    """`value` as a Rewind session id (1–200 printable characters), else a stable digest."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = text.strip()
    if 0 < len(text) <= 200 and text.isprintable():
        return text
    return "otlp-" + hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


def session_of(span: SpanData, session_attributes: Sequence[str] = ()) -> str | None:
    """The session a span names explicitly (see the module doc), or None."""
    value = _get(span, "gen_ai.conversation.id")
    if value is None:
        value = _get(span, *session_attributes) if session_attributes else None
    if value is None:
        value = _get(span, *SESSION_FALLBACKS)
    return None if value is None else valid_session_id(value)


def _args(value: Any) -> Any:
    """Tool arguments as JSON data: a JSON text is parsed, other text kept under ``input``."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return {"input": value}
        value = parsed
    if isinstance(value, dict) and set(value) == {"args", "kwargs"} and not value["args"]:
        return value["kwargs"]  # OpenLLMetry wraps a call's arguments this way
    return value


def _error(span: SpanData) -> str | None:
    error_type = _get(span, "error.type")
    if span.status_code != 2 and error_type is None:
        return None
    parts = [str(error_type)] if error_type else []
    if span.status_message:
        parts.append(span.status_message)
    for name, attrs in span.events:
        if name == "exception" and not span.status_message:
            parts.append(": ".join(str(attrs[k]) for k in ("exception.type", "exception.message")
                                   if attrs.get(k)))
            break
    return ": ".join(p for p in parts if p) or "error"


def _text(content: Any) -> Any:
    if isinstance(content, list):  # GenAI parts: [{"type": "text", "content": "…"}, …]
        texts = [p.get("content") for p in content
                 if isinstance(p, dict) and p.get("type") == "text" and p.get("content")]
        if texts:
            return "\n".join(str(t) for t in texts)
    return content


def _indexed(span: SpanData, prefix: str, role: str, content: str) -> list[dict[str, Any]]:
    """Messages flattened as ``<prefix>.<i>.<role>`` / ``<prefix>.<i>.<content>``."""
    found = []
    for i in range(1000):
        r, c = span.attributes.get(f"{prefix}.{i}.{role}"), span.attributes.get(
            f"{prefix}.{i}.{content}")
        if r is None and c is None:
            break
        found.append({"role": str(r or "assistant"), "content": c})
    return found


def _json_messages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return []
    if not isinstance(value, list):
        return []
    return [{"role": str(m.get("role") or "assistant"),
             "content": _text(m.get("parts", m.get("content")))}
            for m in value if isinstance(m, dict)]


def _chat(inputs: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The last user input (what the turn answered) and the outputs that say something."""
    picked = [m for m in inputs[-1:] if m["role"] == "user" and m["content"]]
    picked += [m for m in outputs if m["content"]]
    return [{"role": m["role"], "content": m["content"] if isinstance(m["content"], str)
             else json.dumps(m["content"], ensure_ascii=False, default=str)} for m in picked]


def _meta(span: SpanData) -> dict[str, str]:
    found = {
        "tenant": _get(span, "rewind.tenant", "tenant.id"),
        "scenario": _get(span, "rewind.scenario", "gen_ai.agent.name", "service.name"),
        "prompt_version": _get(span, "rewind.prompt_version", "service.version"),
        "service": _get(span, "service.name"),
    }
    # The SDKs name a service they were not told about "unknown_service[:…]": no facet.
    return {k: str(v)[:200] for k, v in found.items()
            if v is not None and not str(v).startswith("unknown_service")}


def classify(span: SpanData, session_attributes: Sequence[str] = ()) -> Action | None:
    """The action a span stands for, or None for a span of no known convention or kind."""

    def make(kind: Any, convention: Any, **fields: Any) -> Action:
        return Action(kind, convention, span.span_id, span.trace_id, span.start_ns, **fields)

    attrs = span.attributes
    action: Action | None = None
    op = attrs.get("gen_ai.operation.name")
    oi_kind = str(attrs.get("openinference.span.kind") or "").upper()
    tl_kind = str(attrs.get("traceloop.span.kind") or "").lower()
    if op == "execute_tool":
        name = attrs.get("gen_ai.tool.name") or span.name.removeprefix("execute_tool ").strip()
        action = make("tool", "gen_ai", tool=str(name),
                      args=_args(attrs.get("gen_ai.tool.call.arguments")),
                      call_id=attrs.get("gen_ai.tool.call.id"),
                      result=attrs.get("gen_ai.tool.call.result"))
    elif oi_kind == "TOOL":
        action = make("tool", "openinference",
                      tool=str(attrs.get("tool.name") or span.name),
                      args=_args(attrs.get("input.value")), result=attrs.get("output.value"))
    elif tl_kind == "tool":
        action = make("tool", "traceloop",
                      tool=str(attrs.get("traceloop.entity.name") or span.name),
                      args=_args(attrs.get("traceloop.entity.input")),
                      result=attrs.get("traceloop.entity.output"))
    elif op in CHAT_OPERATIONS:
        action = make("chat", "gen_ai", messages=_chat(
            _json_messages(attrs.get("gen_ai.input.messages")),
            _json_messages(attrs.get("gen_ai.output.messages"))))
    elif oi_kind == "LLM":
        action = make("chat", "openinference", messages=_chat(
            _indexed(span, "llm.input_messages", "message.role", "message.content"),
            _indexed(span, "llm.output_messages", "message.role", "message.content")))
    elif tl_kind in ("llm", "") and "gen_ai.completion.0.content" in attrs:
        action = make("chat", "traceloop", messages=_chat(
            _indexed(span, "gen_ai.prompt", "role", "content"),
            _indexed(span, "gen_ai.completion", "role", "content")))
    if action is None or not action.tool and action.kind == "tool":
        return None
    if action.kind == "tool":
        action.error = _error(span)
        action.ok = action.error is None
        turn = _get(span, "gen_ai.response.id")
        if isinstance(turn, str) and turn:  # a response id Rewind cannot store: its digest
            action.turn = turn if len(turn) <= 200 and turn.isascii() else "otlp-" + (
                hashlib.sha256(turn.encode("utf-8", "replace")).hexdigest()[:32])
    action.session = session_of(span, session_attributes)
    action.meta = _meta(span)
    return action
