"""`rewind otlp`: an OTLP/HTTP receiver for traces that trusts nothing it is sent.

It is a Starlette app served by uvicorn (both maintained ASGI parts; the console uses
Starlette too), with these rules, each answered with its reason in the body:

- **Durable before 200.** A 200 means the spans are in the store: `Ingestor.accept` writes them
  to the store's spool before the answer (see `engine.integrations.otlp.ingest`). When the
  store cannot take them (down, disk full, or failing the writer) the answer is 503 with
  Retry-After, which the official exporters retry; spans never pile up in memory meanwhile.
- **Who may send.** It binds to loopback unless told otherwise (``--address``), and refuses to
  listen anywhere else without a token (``$REWIND_OTLP_TOKEN`` or ``--token-file``). With a
  token every request needs ``Authorization: Bearer <token>`` (401 otherwise). The Host header
  must name a loopback name (localhost, 127.0.0.1, [::1]), an IP address, or a configured
  ``--allowed-host`` (403 otherwise): a web page whose own domain was made to resolve to this
  host (DNS rebinding) sends its domain there. A request with an Origin header comes from a web
  page, never from an exporter of an agent: refused (403).
- **What is read.** Only ``POST /v1/traces`` is served (and ``GET /health``). A body needs a
  Content-Length (411), at most `max_body_bytes` before and after gzip (413), an OTLP protobuf
  or JSON content type (415), and must parse (400).
- **What it costs.** A request (headers and body) must arrive within `read_timeout_s` of its
  first byte, or the connection is closed; one client address holds at most
  `per_client_connections` connections, all clients `max_connections` (503 past either), so a
  few slow clients cannot hold every slot. At most `body_budget_bytes` of bodies are read at
  once and `decode_budget_bytes` inflated and decoded at once, over all requests (a gzip body
  counts as `max_body_bytes`, what it may inflate to), and at most `max_concurrent` requests
  decode and store at once; past any of these the answer is 429 with Retry-After. Memory does
  not grow with a burst.
- A refused request is said on stderr too (at most once a minute per status, with a count), so
  an operator sees why an agent's traces do not arrive.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import ipaddress
import json
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import h11
import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

from engine import shown_store
from engine.integrations.otlp.decode import (
    JSON,
    BadPayload,
    decode_request,
    encode_response,
    inflate,
)
from engine.integrations.otlp.ingest import Backpressure, IngestConfig, Ingestor, Unavailable

if TYPE_CHECKING:
    from engine.engine import Engine

__all__ = ["TOKEN_ENV", "Receiver", "ServerConfig", "add_arguments", "is_loopback", "main"]

PATH = "/v1/traces"
TOKEN_ENV = "REWIND_OTLP_TOKEN"
"""Environment variable holding the receiver's bearer token."""
REFUSAL_LOG_EVERY_S = 60.0
"""At most one stderr line per HTTP error status in this many seconds."""
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def is_loopback(host: str) -> bool:
    """True when `host` (a name or an address) can be reached from this machine only."""
    host = host.strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def host_name(header: str) -> str:
    """The name in a Host header, without its port (an IPv6 address keeps no brackets)."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


@dataclass(frozen=True)
class ServerConfig:
    """Where the receiver listens and what it lets in."""

    address: str = "127.0.0.1"
    port: int = 4318
    """0 picks a free port (see `Receiver.port`)."""
    token: str | None = None
    """Bearer token every request must carry; None: none needed (loopback only)."""
    allowed_hosts: tuple[str, ...] = ()
    """Host names, besides loopback names and IP addresses, requests may name in Host."""
    max_body_bytes: int = 8 * 1024 * 1024
    """Largest body accepted, compressed and inflated."""
    max_concurrent: int = 8
    """Requests decoded and stored at once; more get 429."""
    body_budget_bytes: int = 32 * 1024 * 1024
    """Bytes of bodies (as their Content-Length declares) read at once over all requests;
    more get 429."""
    decode_budget_bytes: int = 16 * 1024 * 1024
    """Bytes of bodies inflated and decoded at once over all requests (a gzip body counts as
    `max_body_bytes`, what it may inflate to); more get 429."""
    read_timeout_s: float = 10.0
    """A request's headers and body must arrive within this many seconds of its first byte."""
    per_client_connections: int = 16
    """Open connections one client address may hold."""
    max_connections: int = 256
    """Open connections of all clients together."""


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


class _Refused(Exception):
    def __init__(self, status: int, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


_RECEIVED = (h11.DONE, h11.MUST_CLOSE, h11.CLOSED)
"""h11 states of a client whose request is in (MUST_CLOSE: it asked to close after it)."""


class _Connection(H11Protocol):
    """uvicorn's h11 connection, with per-client slots and a deadline per request (uvicorn
    alone lets a client take as long as it likes to send its headers and body)."""

    receiver: Receiver  # set on the subclass each Receiver makes
    _slot: str | None = None
    _refusal: str | None = None
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        client = self.client[0] if self.client else "?"
        reason = self.receiver.take_slot(client)
        if reason is not None:
            # Answered once the request's first bytes are in (closing with them unread would
            # reset the connection, and the client would never read why).
            self._refusal = reason
            self._arm()
            return
        self._slot = client
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._refusal is None:
            super().data_received(data)
            return
        if not self.transport.is_closing():
            reason, client = self._refusal, self.client[0] if self.client else "?"
            self.receiver.refused(503, reason, client)
            self.transport.write(
                b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: "
                b"text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: "
                + str(len(reason.encode())).encode() + b"\r\n\r\n" + reason.encode())
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._slot is not None:
            self.receiver.give_slot(self._slot)
            self._slot = None
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.receiver.config.read_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if self.conn.their_state not in _RECEIVED and not self.transport.is_closing():
            self.transport.close()  # the app sees a disconnect; nothing was accepted

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state in _RECEIVED:
            self._disarm()  # the request is in: deciding and storing are not the client's time

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()


class Receiver:
    """The HTTP server (uvicorn, in a thread) and the writer thread, around one engine.

    ``with Receiver(engine, ServerConfig(port=0)) as r: …`` serves on ``r.port`` until the block
    ends; leaving writes what is still buffered (what cannot be written stays in the store's
    spool: see `unwritten`)."""

    def __init__(self, engine: Engine, config: ServerConfig | None = None,
                 ingest: IngestConfig | None = None):
        self.config = config or ServerConfig()
        if not self.config.token and not is_loopback(self.config.address):
            raise ValueError(
                f"refusing to receive traces on {self.config.address} without a bearer token: "
                f"anyone who reaches it could create sessions. Set ${TOKEN_ENV} or give "
                "--token-file")
        family = socket.AF_INET6 if ":" in self.config.address else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._sock.bind((self.config.address.strip("[]"), self.config.port))
            self._sock.listen(128)
        except OSError:
            self._sock.close()
            raise
        self._sock.setblocking(False)
        self._port = int(self._sock.getsockname()[1])
        ingest = ingest or IngestConfig()
        if ingest.spool_name == IngestConfig.spool_name:
            ingest = _with(ingest, spool_name=f"{socket.gethostname()}:{self.port}")
        self.ingestor = Ingestor(engine, ingest)
        self._slots: dict[str, int] = {}
        self._open = 0
        self._reading = max(self.config.body_budget_bytes, self.config.max_body_bytes)
        """Bytes of the body budget not held by a request being read (event loop only)."""
        self._decoding = max(self.config.decode_budget_bytes, self.config.max_body_bytes)
        """Bytes of the decode budget not held by a request being decoded (event loop only)."""
        self._decoders = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._refusals: dict[int, tuple[float, int]] = {}
        """Per HTTP status: when it was last said on stderr, and how often since."""
        self._refusals_lock = threading.Lock()
        protocol = type("Connection", (_Connection,), {"receiver": self})
        app = Starlette(routes=[Route(PATH, self._export, methods=["POST"]),
                                Route("/health", self._health, methods=["GET"])])
        app.add_exception_handler(404, self._not_found)
        app.add_exception_handler(405, self._not_found)
        self._server = uvicorn.Server(uvicorn.Config(
            app, http=protocol, lifespan="off", log_level="warning", access_log=False,
            server_header=False, timeout_keep_alive=5, timeout_graceful_shutdown=5,
            h11_max_incomplete_event_size=64 * 1024))

    # -- connection slots (event loop thread only) --------------------------------------------
    def take_slot(self, client: str) -> str | None:
        """Count a new connection of `client`; a reason when it is over a limit."""
        if self._open >= self.config.max_connections:
            return (f"{self._open} connections are open (at most "
                    f"{self.config.max_connections}); retry later")
        if self._slots.get(client, 0) >= self.config.per_client_connections:
            return (f"{client} holds {self._slots[client]} connections (at most "
                    f"{self.config.per_client_connections} per client); retry later")
        self._slots[client] = self._slots.get(client, 0) + 1
        self._open += 1
        return None

    def give_slot(self, client: str) -> None:
        self._open -= 1
        left = self._slots.get(client, 1) - 1
        if left > 0:
            self._slots[client] = left
        else:
            self._slots.pop(client, None)

    # -- requests -----------------------------------------------------------------------------
    def _check(self, request: Request) -> None:
        """Host, Origin and token; raises _Refused."""
        host = host_name(request.headers.get("host", ""))
        if not host:
            raise _Refused(400, "a Host header is required")
        if not (is_loopback(host) or _is_ip(host)
                or host in (h.lower() for h in self.config.allowed_hosts)):
            raise _Refused(403, f"Host {host[:100]!r} is not served here: only loopback names, "
                           "IP addresses and the receiver's --allowed-host names are")
        if "origin" in request.headers:
            raise _Refused(403, "a request from a web page (it carries an Origin header) is "
                           "refused: traces come from an exporter, not a browser")
        token = self.config.token
        if token is not None:
            scheme, _, value = request.headers.get("authorization", "").partition(" ")
            if not (scheme.lower() == "bearer" and hmac.compare_digest(
                    value.strip().encode(), token.encode())):
                raise _Refused(401, "a bearer token is required (Authorization: Bearer TOKEN)")

    def _answer(self, request: Request, status: int, message: str = "", *,
                retry_after: int | None = None,
                body: tuple[bytes, str] | None = None) -> Response:
        content_type = request.headers.get("content-type", "")
        payload, kind = body if body is not None else _status_body(
            3 if status < 500 else 14, message, content_type)
        headers: dict[str, str] = {}
        if status >= 400:
            self.refused(status, message, request.client.host if request.client else "?")
        if retry_after is not None:
            headers["Retry-After"] = str(retry_after)
        if status == 401:
            headers["WWW-Authenticate"] = 'Bearer realm="rewind-otlp"'
        if status >= 400 and status not in (429, 503):
            headers["Connection"] = "close"
        return Response(payload, status_code=status, headers=headers, media_type=kind)

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        return self._answer(request, 404,
                            f"not found: traces go to POST {PATH} (and GET /health is served)")

    async def _health(self, request: Request) -> Response:
        try:
            self._check(request)
        except _Refused as exc:
            return self._answer(request, exc.status, str(exc))
        stats = {"status": "ok", "buffered": self.ingestor.buffered, **self.ingestor.counts}
        return self._answer(request, 200, body=(json.dumps(stats).encode(), JSON))

    async def _export(self, request: Request) -> Response:
        try:
            self._check(request)
            return await self._take(request)
        except _Refused as exc:
            return self._answer(request, exc.status, str(exc), retry_after=exc.retry_after)
        except BadPayload as exc:
            return self._answer(request, exc.status, str(exc))
        except (ClientDisconnect, OSError):
            return Response(status_code=400)  # nobody is left to read it

    async def _take(self, request: Request) -> Response:
        config = self.config
        length_text = request.headers.get("content-length")
        if length_text is None:
            raise _Refused(411, "a Content-Length is required (chunked bodies are not read)")
        try:
            length = int(length_text)
            if length < 0:
                raise ValueError(length_text)
        except ValueError:
            raise _Refused(400, f"Content-Length {length_text[:40]!r} is not a byte "
                           "count") from None
        if length > config.max_body_bytes:
            raise _Refused(413, f"the body has {length} bytes, over the limit of "
                           f"{config.max_body_bytes}; send smaller batches")
        encoding = request.headers.get("content-encoding", "")
        content_type = request.headers.get("content-type", "")
        # Bodies being read hold what they declared (a slow client holds it until the
        # request deadline at most); bodies being decoded hold what they may inflate to.
        if length > self._reading:
            raise _Refused(429, f"{config.body_budget_bytes - self._reading} bytes of bodies "
                           "are being read; retry later", retry_after=1)
        self._reading -= length
        try:
            chunks, got = [], 0
            async for chunk in request.stream():
                got += len(chunk)
                if got > length:
                    raise _Refused(400, f"the body is longer than its Content-Length {length}")
                chunks.append(chunk)
            if got < length:
                raise _Refused(400, f"the body ended after {got} of {length} bytes")
            body = b"".join(chunks)
            del chunks
            cost = config.max_body_bytes if encoding.strip().lower() not in (
                "", "identity") else length
            if cost > self._decoding or self._decoders >= config.max_concurrent:
                raise _Refused(429, "too many requests are being decoded; retry later",
                               retry_after=1)
            self._decoding -= cost
            self._decoders += 1
            try:
                await anyio.to_thread.run_sync(self._store, body, encoding, content_type)
            finally:
                self._decoding += cost
                self._decoders -= 1
        finally:
            self._reading += length
        return self._answer(request, 200, body=encode_response(content_type))

    def _store(self, body: bytes, encoding: str, content_type: str) -> None:
        """Decode and accept (durably) one body, off the event loop. Raises _Refused or
        BadPayload."""
        data = inflate(body, encoding, self.config.max_body_bytes)
        del body
        spans = decode_request(data, content_type)
        del data
        try:
            self.ingestor.accept(spans)
        except Backpressure as exc:
            raise _Refused(429, str(exc), retry_after=max(1, round(
                self.ingestor.config.settle_s))) from exc
        except Unavailable as exc:
            raise _Refused(503, str(exc), retry_after=5) from exc
        except Exception as exc:
            print(f"rewind otlp: request failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            raise _Refused(500, "the receiver failed on this request; see its log") from exc

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

    # -- life ---------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._port

    @property
    def endpoint(self) -> str:
        host = self.config.address
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}{PATH}"

    @property
    def unwritten(self) -> int:
        """Spans accepted and not written (after `stop`: kept in the store's spool, written
        when a receiver starts again under the same spool name)."""
        return self.ingestor.buffered

    def start(self) -> Receiver:
        """Replay this receiver's spool, then serve and write in background threads; returns
        self.

        Raises:
            StoreError: the spool cannot be read.
        """
        self.ingestor.replay()
        self._threads = [
            threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                             name="otlp-http", daemon=True),
            threading.Thread(target=self.ingestor.run, args=(self._stop,), name="otlp-writer",
                             daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started and self._threads[0].is_alive() and (
                time.monotonic() < deadline):
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop serving, then write everything still buffered."""
        self._server.should_exit = True
        if self._threads:
            self._threads[0].join()
        self._sock.close()
        self._stop.set()
        for thread in self._threads[1:]:
            thread.join()

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _with(config: IngestConfig, **changes: Any) -> IngestConfig:
    from dataclasses import replace

    return replace(config, **changes)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of `rewind otlp`."""
    p.add_argument("--port", type=int, default=4318, help="port (default 4318, OTLP/HTTP's)")
    p.add_argument("--address", default="127.0.0.1",
                   help="address to bind (default 127.0.0.1: this host only; any other needs a "
                   "token)")
    p.add_argument("--token", default=None,
                   help="require Authorization: Bearer TOKEN (prefer $REWIND_OTLP_TOKEN or "
                   "--token-file: a command line is visible to every user of the host)")
    p.add_argument("--token-file", default=None, metavar="PATH",
                   help="read the bearer token from this file (its first line)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="a host name exporters reach the receiver under (repeatable); loopback "
                   "names and IP addresses are accepted otherwise")
    p.add_argument("--session-prefix", default="otel-", metavar="PREFIX",
                   help="every session the receiver writes starts with it (default otel-; '' "
                   "writes the ids the spans name)")
    p.add_argument("--session-attribute", action="append", default=[], metavar="NAME",
                   help="span or resource attribute naming the session when "
                   "gen_ai.conversation.id is absent (repeatable)")
    p.add_argument("--settle", type=float, default=2.0, metavar="SECONDS",
                   help="how long a session's spans wait for out-of-order neighbours (default 2)")
    p.add_argument("--max-body", type=int, default=8 * 1024 * 1024, metavar="BYTES",
                   help="largest request body, compressed or inflated (default 8 MiB)")


def _token(args: argparse.Namespace) -> str | None:
    from engine.errors import ConfigError

    if args.token_file:
        try:
            with open(args.token_file, encoding="utf-8") as f:
                token = f.readline().strip()
        except OSError as exc:
            raise ConfigError(f"--token-file {args.token_file}: {exc.strerror or exc}") from exc
        if not token:
            raise ConfigError(f"--token-file {args.token_file} holds no token on its first "
                              "line")
        return token
    return args.token or os.environ.get(TOKEN_ENV) or None


def main(args: argparse.Namespace) -> int:
    """Run the receiver until Ctrl-C or SIGTERM; returns the exit code (1 when accepted spans
    could not be written: they stay in the store's spool)."""
    from engine.engine import Engine
    from engine.errors import ConfigError, RewindError

    token = _token(args)
    if args.settle < 0 or args.max_body <= 0:
        raise ConfigError("--settle must be 0 or more and --max-body above 0")
    if not token and not is_loopback(args.address):
        print(f"rewind otlp: refusing to receive traces on {args.address} without a bearer "
              f"token: anyone who reaches it could create sessions. Set ${TOKEN_ENV} or give "
              "--token-file", file=sys.stderr)
        return 2
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
                                 allowed_hosts=tuple(args.allowed_host),
                                 max_body_bytes=args.max_body,
                                 body_budget_bytes=4 * args.max_body,
                                 decode_budget_bytes=2 * args.max_body),
            IngestConfig(settle_s=args.settle, session_prefix=args.session_prefix,
                         session_attributes=tuple(args.session_attribute)))
    except OSError as exc:
        engine.close()
        raise ConfigError(f"cannot listen on {args.address}:{args.port}: {exc.strerror or exc}; "
                          "pick another --port or stop what holds it") from exc
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    try:
        receiver.start()
    except BaseException:
        engine.close()
        raise
    for name, docs in sorted(receiver.ingestor.others.items()):
        print(f"rewind otlp: note: the receiver {name} left {docs} spool document(s) of "
              "accepted spans it has not written; it writes them when started again on that "
              "host and port", file=sys.stderr, flush=True)
    replayed = receiver.ingestor.counts["replayed"]
    again = f"; {replayed} span(s) accepted earlier are written now" if replayed else ""
    print(f"rewind otlp: receiving traces at {receiver.endpoint} into {shown_store(engine.url)}; "
          f"sessions are watch-only (flagged, never rolled back){again}; Ctrl-C stops", flush=True)
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
    if receiver.unwritten:
        print(f"rewind otlp: {receiver.unwritten} accepted span(s) could not be written "
              f"({receiver.ingestor.last_error}); they are kept in the store's spool and "
              f"written when rewind otlp starts again on port {receiver.port} of this host",
              file=sys.stderr, flush=True)
        return 1
    return 0
