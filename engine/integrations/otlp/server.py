"""`rewind otlp`: an OTLP/HTTP receiver for traces that trusts nothing it is sent.

- It binds to loopback unless told otherwise (``--address``); with a token (``--token`` or
  ``$REWIND_OTLP_TOKEN``) every request needs ``Authorization: Bearer <token>`` (401 otherwise).
- Only ``POST /v1/traces`` is served (and ``GET /health``). A body needs a Content-Length
  (411), at most `max_body_bytes` before and after gzip (413), an OTLP protobuf or JSON
  content type (415), and must parse (400); each answer carries its reason, and the server
  keeps serving.
- At most `max_concurrent` requests are read at once (so at most that many bodies of
  `max_body_bytes` are in memory) and the span buffers are bounded (see
  `engine.integrations.otlp.ingest`):
  past either, the answer is 429 with Retry-After, which the official exporters retry; memory
  never grows with a burst. A client that stalls longer than `read_timeout_s` is dropped.
- Store writes happen on one writer thread, never on a request thread: a slow store slows the
  writer, fills the buffers, and the exporters are told to retry.
- A refused request is said on stderr too (at most once a minute per status, with a count), so
  an operator sees why an agent's traces do not arrive.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from engine.integrations.otlp.decode import (
    JSON,
    BadPayload,
    decode_request,
    encode_response,
    inflate,
)
from engine.integrations.otlp.ingest import Backpressure, IngestConfig, Ingestor

if TYPE_CHECKING:
    from engine.engine import Engine

__all__ = ["Receiver", "ServerConfig", "add_arguments", "main"]

PATH = "/v1/traces"
REFUSAL_LOG_EVERY_S = 60.0
"""At most one stderr line per HTTP error status in this many seconds."""


@dataclass(frozen=True)
class ServerConfig:
    """Where the receiver listens and what it lets in."""

    address: str = "127.0.0.1"
    port: int = 4318
    """0 picks a free port (see `Receiver.port`)."""
    token: str | None = None
    """Bearer token every request must carry; None: none needed (loopback use)."""
    max_body_bytes: int = 8 * 1024 * 1024
    """Largest body accepted, compressed and inflated."""
    max_concurrent: int = 8
    """Requests read and decoded at once; more get 429."""
    read_timeout_s: float = 10.0
    """A client that stalls longer while sending is dropped."""


def _status_body(code: int, message: str, content_type: str) -> tuple[bytes, str]:
    """A google.rpc.Status (the OTLP error body) in the request's encoding; its two fields are
    written directly, so the receiver needs no further package for them."""
    if (content_type or "").split(";")[0].strip().lower() == JSON:
        return json.dumps({"code": code, "message": message}).encode(), JSON
    text = message.encode("utf-8")
    length, prefix = len(text), bytearray()
    while True:
        prefix.append((length & 0x7F) | (0x80 if length > 0x7F else 0))
        length >>= 7
        if not length:
            break
    return bytes([0x08, code & 0x7F, 0x12]) + bytes(prefix) + text, "application/x-protobuf"


class _Handler(BaseHTTPRequestHandler):
    server_version = "rewind-otlp"
    receiver: Receiver  # set on the subclass each Receiver makes

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass  # one line per request would drown the writer's messages

    def _answer(self, status: int, message: str = "", *, retry_after: int | None = None,
                body: tuple[bytes, str] | None = None) -> None:
        content_type = self.headers.get("Content-Type", "")
        payload, kind = body if body is not None else _status_body(
            3 if status < 500 else 14, message, content_type)
        if status >= 400:
            self.receiver.refused(status, message, self.client_address[0])
        self.send_response(status)  # the reason goes in the body: a header line must stay latin-1
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(payload)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        if status == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="rewind-otlp"')
        if status >= 400 and status != 429:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(payload)

    def _authorized(self) -> bool:
        token = self.receiver.config.token
        if token is None:
            return True
        given = self.headers.get("Authorization", "")
        scheme, _, value = given.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            value.strip().encode(), token.encode())

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if self.path.split("?")[0] != "/health":
            self._answer(404, f"not found: only POST {PATH} and GET /health are served")
            return
        if not self._authorized():
            self._answer(401, "a bearer token is required (Authorization: Bearer TOKEN)")
            return
        stats = {"status": "ok", "buffered": self.receiver.ingestor.buffered,
                 **self.receiver.ingestor.counts}
        self._answer(200, body=(json.dumps(stats).encode(), JSON))

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        config = self.receiver.config
        if self.path.split("?")[0] != PATH:
            self._answer(404, f"not found: traces go to POST {PATH}")
            return
        if not self._authorized():
            self._answer(401, "a bearer token is required (Authorization: Bearer TOKEN)")
            return
        length_text = self.headers.get("Content-Length")
        if length_text is None:
            self._answer(411, "a Content-Length is required (chunked bodies are not read)")
            return
        try:
            length = int(length_text)
            if length < 0:
                raise ValueError(length_text)
        except ValueError:
            self._answer(400, f"Content-Length {length_text[:40]!r} is not a byte count")
            return
        if length > config.max_body_bytes:
            self._answer(413, f"the body has {length} bytes, over the limit of "
                         f"{config.max_body_bytes}; send smaller batches")
            return
        if not self.receiver.slots.acquire(blocking=False):
            self._answer(429, "too many requests in progress; retry later", retry_after=1)
            return
        try:
            self._export(length)
        except OSError:
            self.close_connection = True  # the client went away or stalled: nothing to answer
        except Exception as exc:  # noqa: BLE001 - one bad request must not stop the server
            print(f"rewind otlp: request failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            self._answer(500, "the receiver failed on this request; see its log")
        finally:
            self.receiver.slots.release()

    def _export(self, length: int) -> None:
        config = self.receiver.config
        body = self.rfile.read(length)
        if len(body) < length:
            self._answer(400, f"the body ended after {len(body)} of {length} bytes")
            return
        content_type = self.headers.get("Content-Type", "")
        try:
            data = inflate(body, self.headers.get("Content-Encoding", ""), config.max_body_bytes)
            del body
            spans = decode_request(data, content_type)
            self.receiver.ingestor.accept(spans)
        except BadPayload as exc:
            self._answer(exc.status, str(exc))
            return
        except Backpressure as exc:
            self._answer(429, str(exc), retry_after=max(1, round(
                self.receiver.ingestor.config.settle_s)))
            return
        self._answer(200, body=encode_response(content_type))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client that hung up or timed out is no news
        super().handle_error(request, client_address)


class Receiver:
    """The HTTP server and the writer thread, around one engine.

    ``with Receiver(engine, ServerConfig(port=0)) as r: …`` serves on ``r.port`` until the block
    ends; leaving writes what is still buffered."""

    def __init__(self, engine: Engine, config: ServerConfig | None = None,
                 ingest: IngestConfig | None = None):
        self.config = config or ServerConfig()
        self.ingestor = Ingestor(engine, ingest)
        self.slots = threading.BoundedSemaphore(self.config.max_concurrent)
        # `timeout` bounds each read of a request: a client that stalls is dropped.
        handler = type("Handler", (_Handler,), {"receiver": self,
                                                "timeout": self.config.read_timeout_s})
        self.httpd = _Server((self.config.address, self.config.port), handler)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._refusals: dict[int, tuple[float, int]] = {}
        """Per HTTP status: when it was last said on stderr, and how often since."""
        self._refusals_lock = threading.Lock()

    def refused(self, status: int, message: str, client: str) -> None:
        """Say on stderr that a request was refused, at most once a minute per status (with
        how many were refused since): the exporter logs it on its side only, and an operator
        whose agent sends a wrong token or a broken body would see no sessions and no reason."""
        now = time.monotonic()
        with self._refusals_lock:
            said, since = self._refusals.get(status, (None, 0))
            if said is not None and now - said < REFUSAL_LOG_EVERY_S:
                self._refusals[status] = (said, since + 1)
                return
            self._refusals[status] = (now, 0)
        more = f" ({since} more since the last such line)" if since else ""
        print(f"rewind otlp: answered {status} to {client}: {message}{more}", file=sys.stderr,
              flush=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def endpoint(self) -> str:
        host = self.config.address
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}{PATH}"

    def start(self) -> Receiver:
        """Serve and write in background threads; returns self."""
        self._threads = [
            threading.Thread(target=self.httpd.serve_forever, name="otlp-http", daemon=True),
            threading.Thread(target=self.ingestor.run, args=(self._stop,), name="otlp-writer",
                             daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, then write everything still buffered."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `rewind otlp`."""
    p.add_argument("--port", type=int, default=4318, help="port (default 4318, OTLP/HTTP's)")
    p.add_argument("--address", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this host only)")
    p.add_argument("--token", default=None,
                   help="require Authorization: Bearer TOKEN (default: $REWIND_OTLP_TOKEN)")
    p.add_argument("--session-attribute", action="append", default=[], metavar="NAME",
                   help="span or resource attribute naming the session when "
                   "gen_ai.conversation.id is absent (repeatable)")
    p.add_argument("--settle", type=float, default=2.0, metavar="SECONDS",
                   help="how long a session's spans wait for out-of-order neighbours (default 2)")
    p.add_argument("--max-body", type=int, default=8 * 1024 * 1024, metavar="BYTES",
                   help="largest request body, compressed or inflated (default 8 MiB)")


def main(args: argparse.Namespace) -> int:
    """Run the receiver until Ctrl-C or SIGTERM; returns the exit code."""
    from engine.engine import Engine
    from engine.errors import ConfigError, RewindError

    token = args.token or os.environ.get("REWIND_OTLP_TOKEN") or None
    if args.settle < 0 or args.max_body <= 0:
        raise ConfigError("--settle must be 0 or more and --max-body above 0")
    try:
        # vars(): an `args.store` read looks like a back door to tests/test_one_door.py's check
        # create=False: a receiver never creates a store; a missing one is refused (exit 4,
        # naming its absolute path), or spans would be written where nobody looks.
        engine = Engine.open(vars(args).get("store"), create=False)
    except ValueError as exc:
        if isinstance(exc, RewindError):
            raise
        raise ConfigError(str(exc)) from exc
    try:
        receiver = Receiver(
            engine, ServerConfig(address=args.address, port=args.port, token=token,
                                 max_body_bytes=args.max_body),
            IngestConfig(settle_s=args.settle,
                         session_attributes=tuple(args.session_attribute)))
    except OSError as exc:
        engine.close()
        raise ConfigError(f"cannot listen on {args.address}:{args.port}: {exc.strerror or exc}; "
                          "pick another --port or stop what holds it") from exc
    if args.address not in ("127.0.0.1", "::1", "localhost") and token is None:
        print("rewind otlp: warning: listening beyond this host without --token: anyone who "
              "reaches the port can write sessions", file=sys.stderr)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    receiver.start()
    print(f"rewind otlp: receiving traces at {receiver.endpoint} into "
          f"{Engine.store_name(engine.url)}; sessions "
          "are watch-only (flagged, never rolled back); Ctrl-C stops", flush=True)
    try:
        stopped.wait()
    except KeyboardInterrupt:
        pass
    finally:
        receiver.stop()
        engine.close()
    counts = receiver.ingestor.counts
    print(f"rewind otlp: stopped; {counts['steps']} step(s), {counts['messages']} message(s) "
          f"written, {counts['unknown']} unknown span(s) ignored", flush=True)
    return 0
