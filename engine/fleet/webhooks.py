"""Webhooks: one POST of an alert, with its deadline, redirects refused and credentials sent as
basic authorization; how long to wait before the next try; and how a webhook is named where its
secrets must not show (logs, errors, the worker's state).

An incoming webhook's path is its secret, so nothing here repeats a URL whole: `webhook_label`
gives scheme, host, port and a short id, `redact_webhook` cuts a URL's user, password, path and
query out of an error message. `engine.fleet.alerts` decides what to send and when; this module
only sends.
"""

from __future__ import annotations

import base64
import hashlib
import random
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC
from email.utils import parsedate_to_datetime
from urllib.parse import unquote, urlsplit

import httpx

Poster = Callable[[str, bytes, float], int]
"""Sends one POST (url, JSON body, deadline in seconds) and returns the HTTP status; raises
OSError when the webhook cannot be reached or does not answer in time."""

RETRY_AFTER_MAX_S = 3600.0
"""Longest ``Retry-After`` honoured: a webhook asking for more is tried again after an hour."""


class Answer(int):
    """A webhook's HTTP status, with the wait it asked for before the next POST (its
    ``Retry-After``, in seconds; None when it gave none or one that does not parse)."""

    retry_after: float | None

    def __new__(cls, status: int, retry_after: float | None = None) -> Answer:
        answer = super().__new__(cls, status)
        answer.retry_after = retry_after
        return answer


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait: delta-seconds or an HTTP date (None: no
    header, or one that is neither; a date in the past is 0)."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def retry_delay(attempts: int, backoff_s: float, max_backoff_s: float,
                asked: float | None = None, rand: Callable[[], float] = random.random) -> float:
    """Seconds before try number ``attempts + 1`` of an alert: ``backoff_s`` doubling per
    attempt, at most ``max_backoff_s``, jittered to between half and all of it (webhooks that
    failed together, as one Slack workspace's do, are not retried in step); never less than the
    webhook's own ``Retry-After`` (`asked`), which is honoured up to `RETRY_AFTER_MAX_S`."""
    delay = min(backoff_s * 2 ** (attempts - 1), max_backoff_s)
    delay = delay / 2 + rand() * delay / 2
    if asked is not None:
        delay = max(delay, min(asked, RETRY_AFTER_MAX_S))
    return delay


def http_post(url: str, body: bytes, timeout: float) -> Answer:
    """POST `body` as JSON to `url` within `timeout` seconds in all, and return the HTTP status
    (an `Answer`, with the webhook's ``Retry-After`` when it sent one).

    Sent with httpx: proxies come from the environment (``HTTPS_PROXY``, ``HTTP_PROXY``,
    ``ALL_PROXY``, ``NO_PROXY``), as do ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``. The deadline covers
    connecting, sending and reading the answer's status line: a webhook (or proxy) that trickles
    a byte at a time is cut off at it, which httpx's timeouts (per read) would not do. Name
    resolution is the one step it does not bound. Redirects are not followed (a 3xx status is
    returned). A URL with credentials (``https://user:pw@host/…``) is sent with basic
    authorization and without them in the request line.

    Returns:
        The HTTP status of the answer.

    Raises:
        TimeoutError: no status line within `timeout` seconds. OSError: the webhook cannot be
        reached, or its answer is not HTTP.
    """
    parts = urlsplit(url)
    headers = {"Content-Type": "application/json", "User-Agent": "rewind-alert"}
    if parts.username is not None or parts.password is not None:
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
        url = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    cut = threading.Event()
    sockets: list[socket.socket] = []
    guard = threading.Lock()

    def shut(sock: socket.socket) -> None:
        try:  # the plain socket's shutdown: it wakes a read blocked in another thread
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass

    def traced(event: str, info: dict) -> None:
        # every TCP connection of this POST (to the webhook, or to a proxy) is cut at the
        # deadline, also one that opens after it
        if event != "connection.connect_tcp.complete":
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            with guard:
                sockets.append(sock)
                late = cut.is_set()
            if late:
                shut(sock)

    def cut_off() -> None:
        with guard:
            cut.set()
            open_now = list(sockets)
        for sock in open_now:
            shut(sock)

    timer = threading.Timer(timeout, cut_off)
    timer.daemon = True
    timer.start()
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout), trust_env=True,
                          follow_redirects=False) as client:
            answer = client.post(url, content=body, headers=headers,
                                 extensions={"trace": traced})
        return Answer(answer.status_code, retry_after(answer.headers.get("retry-after")))
    except (OSError, httpx.HTTPError) as exc:
        if cut.is_set() or isinstance(exc, (TimeoutError, httpx.TimeoutException)):
            raise TimeoutError(f"no answer within the deadline of {timeout:g} s") from None
        if isinstance(exc, OSError):
            raise
        if isinstance(exc, (httpx.ConnectError, httpx.ProxyError)):
            raise ConnectionError(f"cannot connect: {exc}") from None
        if isinstance(exc, httpx.TransportError):
            raise ConnectionError(f"the answer is not HTTP ({type(exc).__name__})") from None
        raise ConnectionError(f"{type(exc).__name__}: {exc}") from None
    finally:
        timer.cancel()


def check_webhook(url: str) -> str:
    """`url` when it is an http(s) URL with a host (and a numeric port, if any).

    Raises:
        ValueError: another scheme, no host, a port that is not a number; the message shows
        neither the URL's credentials nor its path.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("a webhook must be an http:// or https:// URL with a host, "
                         f"not {webhook_label(url)}")
    try:
        parts.port  # noqa: B018 - urllib checks the port when it is read
    except ValueError:
        raise ValueError(f"the port of webhook {webhook_label(url)} is not a number") from None
    return url


def webhook_label(url: str) -> str:
    """What logs say about a webhook: scheme, host, port and id, never its credentials, path or
    query (an incoming webhook's path is its secret)."""
    parts = urlsplit(url)
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    host = parts.hostname or ""
    scheme = parts.scheme if parts.scheme.isalnum() else "?"
    return f"{scheme}://{host}{port}/… ({webhook_id(url)})"


def webhook_id(url: str) -> str:
    """Stable short id of a webhook in the state (its URL may hold a secret token)."""
    return hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]


def redact_webhook(text: str, url: str) -> str:
    """`text` (an error message) without the secrets of webhook `url`: its user, password, path
    and query, as written and percent-decoded, each replaced by ***."""
    parts = urlsplit(url)
    pieces = {parts.username, parts.password, parts.query, parts.path, parts.netloc.rpartition(
        "@")[0] or None}
    found = {p for p in pieces if p and p != "/"}
    found |= {unquote(p) for p in found}
    for secret in sorted(found, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
