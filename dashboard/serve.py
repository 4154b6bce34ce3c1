"""The console as `rewind dashboard` serves it: `streamlit run dashboard/serve.py` runs
`dashboard/app.py` (Streamlit's `st.App`) behind `ConsoleGuard`.

Why a wrapper: Streamlit has no option for response headers. Its `st.App` takes ASGI middleware,
so the guard adds them to every HTTP answer, and keeps Streamlit's `/_stcore/metrics` (which
answers without sign-in) shut while accounts are configured. `app.py` alone still runs (tests,
`streamlit run dashboard/app.py`), and refuses to show anything inside another page's frame by
itself (`views.FRAME_GUARD`), headers or not.

The guard also refuses, in every mode, an HTTP request or a websocket whose Origin is not the
console's own (another site, or another port of the same host: cookies ignore ports, so such a
page could otherwise drive the console as the signed-in operator), and answers the two routes
that set and delete the HttpOnly sign-in cookie (`dashboard.signin.sessions`): no page script
ever sees the token.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import streamlit as st
from starlette.middleware import Middleware

from dashboard.secrets_file import SecretsFileError
from dashboard.signin import access, sessions
from dashboard.signin.decisions import AccessConfigError, allowed_origins, same_origin_request

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

FRAME_HEADERS = [(b"x-frame-options", b"DENY"),
                 (b"content-security-policy", b"frame-ancestors 'none'")]
"""No page of another origin (nor of this one) may frame the console: a framed console is a
clickjacking target (three clicks roll a session back)."""
METRICS_PATH = "/_stcore/metrics"
GUARD_HEADER = sessions.GUARD_HEADER.encode("ascii")
MAX_CODE_BYTES = 256
"""A one-time code is 43 characters; a longer body is not one."""


def metrics_open() -> bool:
    """True only in demo mode (no accounts, loopback only): with accounts configured, or a
    secrets file that cannot be read, the metrics endpoint would answer without sign-in."""
    try:
        return access.access_mode(access.read_secrets()) == "demo"
    except SecretsFileError:
        return False


def console_origins() -> tuple[str, ...]:
    """`[rewind] allowed_origins` now; none when the secrets cannot be read or are wrong (the
    request's own Host then decides alone)."""
    try:
        return allowed_origins(access.read_secrets())
    except (SecretsFileError, AccessConfigError):
        return ()


def redeem_code(code: str) -> tuple[str, int] | None:
    """(token, cookie lifetime in seconds) of the session a one-time sign-in code stands for;
    None when it stands for none (used, expired, forged) or local sign-in is off."""
    try:
        secrets = access.read_secrets()
        if access.access_mode(secrets) != "local":
            return None
        idle_s, lifetime_s = access.session_limits(secrets)
    except (SecretsFileError, AccessConfigError):
        return None
    tokens = access.session_tokens()
    tokens.idle_s, tokens.lifetime_s = idle_s, lifetime_s
    token = tokens.redeem(code)
    return None if token is None else (token, int(lifetime_s))


def end_session(token: str | None) -> None:
    """Revoke the session of `token` (a sign-out's cookie), when there is a store to ask."""
    if token:
        try:
            access.session_tokens().revoke(token)
        except Exception:  # noqa: BLE001 - the cookie is deleted anyway; the run revoked it too
            pass


def _header(scope: Scope, name: bytes) -> str | None:
    """The value of header `name`; None when absent or sent more than once."""
    found = [v for k, v in scope.get("headers", []) if bytes(k).lower() == name]
    return bytes(found[0]).decode("latin-1") if len(found) == 1 else None


def _origin(scope: Scope) -> tuple[bool, str | None]:
    """(whether an Origin header was sent, its value when sent once)."""
    found = [v for k, v in scope.get("headers", []) if bytes(k).lower() == b"origin"]
    return bool(found), bytes(found[-1]).decode("latin-1") if len(found) == 1 else None


class ConsoleGuard:
    """ASGI middleware: frame-refusing headers on every HTTP answer, metrics shut unless demo,
    requests and websockets from another origin refused, and the sign-in cookie's routes.

    Args:
        app: the ASGI app it wraps (Streamlit).
        metrics_allowed: asked per request whether `/_stcore/metrics` may answer.
        origins: asked per request for the origins allowed besides the request's own Host.
        redeem: one-time code -> (token, lifetime) or None (`redeem_code`).
        revoke: ends the session of a token (`end_session`).
    """

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]],
                 metrics_allowed: Callable[[], bool] = metrics_open,
                 origins: Callable[[], tuple[str, ...]] = console_origins,
                 redeem: Callable[[str], tuple[str, int] | None] = redeem_code,
                 revoke: Callable[[str | None], None] = end_session) -> None:
        self.app = app
        self.metrics_allowed = metrics_allowed
        self.origins = origins
        self.redeem = redeem
        self.revoke = revoke

    def _same_origin(self, scope: Scope) -> bool:
        sent, origin = _origin(scope)
        if not sent:
            return True
        return origin is not None and same_origin_request(origin, _header(scope, b"host"),
                                                          self.origins())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        if kind in ("http", "websocket"):
            scope = dict(scope)
            scope["headers"] = [*((k, v) for k, v in scope.get("headers", [])
                                  if bytes(k).lower() != GUARD_HEADER),
                                (GUARD_HEADER, b"1")]
        if kind == "websocket":
            if not self._same_origin(scope):
                # closing before accepting: the handshake is answered 403
                await send({"type": "websocket.close", "code": 1008})
                return
            await self.app(scope, receive, send)
            return
        if kind != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", "")).rstrip("/")
        if not self._same_origin(scope):
            await _answer(send, 403, b"This request came from a page of another origin; the "
                          b"console answers only its own pages.\n")
            return
        if path.endswith(METRICS_PATH) and not self.metrics_allowed():
            await _answer(send, 404, b"Metrics are off while the console has accounts: they "
                          b"need no sign-in.\n")
            return
        if path.endswith(sessions.SIGN_IN_PATH) or path.endswith(sessions.SIGN_OUT_PATH):
            await self._cookie_route(scope, receive, send, path.endswith(sessions.SIGN_IN_PATH))
            return

        async def send_guarded(message: Message) -> None:
            if message.get("type") == "http.response.start":
                # A second CSP adds to Streamlit's own (browsers enforce both); a second
                # X-Frame-Options would void both, so any other one is dropped.
                headers = [(k, v) for k, v in message.get("headers", [])
                           if bytes(k).lower() != b"x-frame-options"]
                message["headers"] = headers + FRAME_HEADERS
            await send(message)

        await self.app(scope, receive, send_guarded)

    async def _cookie_route(self, scope: Scope, receive: Receive, send: Send,
                            sign_in: bool) -> None:
        """POST from the console's own page (an Origin is required: browsers send it with
        every POST, so a request without one is no page of ours): sign-in exchanges a one-time
        code for the HttpOnly cookie, sign-out deletes it and ends its session."""
        if scope.get("method") != "POST":
            await _answer(send, 405, b"POST only.\n", [(b"allow", b"POST")])
            return
        sent, origin = _origin(scope)
        if not sent or origin is None:
            await _answer(send, 403, b"Only the console's own page may do this.\n")
            return
        secure = origin.lower().startswith("https:") or scope.get("scheme") == "https"
        if not sign_in:
            token = sessions.cookie_value(_header(scope, b"cookie"))
            await asyncio.to_thread(self.revoke, token)
            await _answer(send, 204, b"", [(b"set-cookie",
                                            sessions.cookie_header(None, 0, secure))])
            return
        body = await _body(receive, MAX_CODE_BYTES)
        code = body.decode("ascii", "replace").strip() if body is not None else ""
        found = await asyncio.to_thread(self.redeem, code) if code else None
        if found is None:
            await _answer(send, 403, b"That sign-in code is not valid (used, expired or never "
                          b"issued): sign in again.\n")
            return
        token, lifetime = found
        await _answer(send, 204, b"", [(b"set-cookie",
                                        sessions.cookie_header(token, lifetime, secure)),
                                       (b"cache-control", b"no-store")])


async def _body(receive: Receive, limit: int) -> bytes | None:
    """The request body, or None once it grows past `limit` bytes."""
    body = b""
    while True:
        message = await receive()
        if message.get("type") != "http.request":
            return None
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body"):
            return body


async def _answer(send: Send, status: int, body: bytes,
                  headers: list[tuple[bytes, bytes]] | None = None) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()),
                            *(headers or []), *FRAME_HEADERS]})
    await send({"type": "http.response.body", "body": body})


app = st.App("app.py", middleware=[Middleware(ConsoleGuard)])
