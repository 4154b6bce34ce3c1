"""Watch agents Rewind does not run: an OTLP/HTTP receiver that turns OpenTelemetry GenAI,
OpenInference and OpenLLMetry spans into watch-only sessions and steps, and flags their loops.

`decode` reads request bodies (gzip, protobuf, JSON) with the official `opentelemetry-proto`;
`conventions` says which spans are tool calls or model turns (pure); `ingest` spools them in the
store (durable before the 200), orders, dedupes and writes them through the engine's public API;
`server` is the HTTP listener (uvicorn + Starlette) `rewind otlp` runs. Nothing in the engine
imports this room; only the CLI does.
"""

from engine.integrations.otlp.ingest import Backpressure, IngestConfig, Ingestor, Unavailable
from engine.integrations.otlp.server import Receiver, ServerConfig

__all__ = ["Backpressure", "IngestConfig", "Ingestor", "Receiver", "ServerConfig", "Unavailable"]
