"""The console as `rewind dashboard` serves it: `streamlit run dashboard/serve.py` runs
`dashboard/app.py` (Streamlit's `st.App`) behind `ConsoleGuard`.

Why a wrapper: Streamlit has no option for response headers. Its `st.App` takes ASGI middleware,
so the guard adds them to every HTTP answer, and keeps Streamlit's `/_stcore/metrics` (which
answers without sign-in) shut while accounts are configured. `app.py` alone still runs (tests,
`streamlit run dashboard/app.py`), and refuses to show anything inside another page's frame by
itself (`views.FRAME_GUARD`), headers or not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import streamlit as st
from starlette.middleware import Middleware

from dashboard.secrets_file import SecretsFileError
from dashboard.signin import access

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

FRAME_HEADERS = [(b"x-frame-options", b"DENY"),
                 (b"content-security-policy", b"frame-ancestors 'none'")]
"""No page of another origin (nor of this one) may frame the console: a framed console is a
clickjacking target (three clicks roll a session back)."""
METRICS_PATH = "/_stcore/metrics"


def metrics_open() -> bool:
    """True only in demo mode (no accounts, loopback only): with accounts configured, or a
    secrets file that cannot be read, the metrics endpoint would answer without sign-in."""
    try:
        return access.access_mode(access.read_secrets()) == "demo"
    except SecretsFileError:
        return False


class ConsoleGuard:
    """ASGI middleware: frame-refusing headers on every HTTP answer, metrics shut unless demo.

    Args:
        app: the ASGI app it wraps (Streamlit).
        metrics_allowed: asked per request whether `/_stcore/metrics` may answer.
    """

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]],
                 metrics_allowed: Callable[[], bool] = metrics_open) -> None:
        self.app = app
        self.metrics_allowed = metrics_allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", "")).rstrip("/")
        if path.endswith(METRICS_PATH) and not self.metrics_allowed():
            body = b"Metrics are off while the console has accounts: they need no sign-in.\n"
            await send({"type": "http.response.start", "status": 404,
                        "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                    (b"content-length", str(len(body)).encode()),
                                    *FRAME_HEADERS]})
            await send({"type": "http.response.body", "body": body})
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


app = st.App("app.py", middleware=[Middleware(ConsoleGuard)])
