"""The console answers only its own pages, and failed sign-ins slow guessers without locking the
owner out: the pure decisions (`dashboard.signin.decisions`) and the ASGI guard's refusals and
cookie routes (`dashboard.serve`), without a browser (tests/e2e/test_cross_origin.py has one)."""

from __future__ import annotations

import asyncio

import pytest

from dashboard.serve import ConsoleGuard
from dashboard.signin.decisions import (
    AccessConfigError,
    SignInThrottle,
    allowed_origins,
    client_address,
    same_origin_request,
    shared_client,
    trusted_proxies,
)
from dashboard.signin.sessions import SESSION_COOKIE, SIGN_IN_PATH, SIGN_OUT_PATH

# -- origins -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("origin", "host", "allowed"), [
    (None, "127.0.0.1:8501", True),                    # a navigation, a tool
    ("http://127.0.0.1:8501", "127.0.0.1:8501", True),
    ("https://console.example.com", "console.example.com", True),
    ("http://127.0.0.1:9999", "127.0.0.1:8501", False),  # another port of the same host
    ("http://localhost:8501", "127.0.0.1:8501", False),  # another name: another origin
    ("https://evil.test", "console.example.com", False),
    ("null", "127.0.0.1:8501", False),                   # a sandboxed frame, a file
    ("http://127.0.0.1:8501", None, False),
])
def test_only_the_consoles_own_origin_is_same_origin(origin, host, allowed):
    assert same_origin_request(origin, host) is allowed


def test_a_configured_origin_is_allowed_for_a_proxy_that_rewrites_the_host():
    assert same_origin_request("https://console.example.com", "10.0.0.7:8501",
                               ("https://console.example.com",))
    assert allowed_origins({"rewind": {"allowed_origins": ["https://c.example.com"]}}) == (
        "https://c.example.com",)
    for bad in ("https://c.example.com", ["c.example.com"], ["https://c.example.com/path"]):
        with pytest.raises(AccessConfigError, match="allowed_origins"):
            allowed_origins({"rewind": {"allowed_origins": bad}})


# -- which client ------------------------------------------------------------------------------


def test_x_forwarded_for_is_believed_only_from_a_trusted_proxy():
    xff = ["198.51.100.7, 10.0.0.5"]
    assert client_address("203.0.113.9", xff, ()) == "203.0.113.9"  # not a proxy of ours
    assert client_address("203.0.113.9", xff, ("10.0.0.5",)) == "203.0.113.9"
    # the proxy is the peer: the rightmost address it did not add itself is the client
    assert client_address("10.0.0.5", ["198.51.100.7"], ("10.0.0.5",)) == "198.51.100.7"
    assert client_address("10.0.0.5", ["1.2.3.4, 198.51.100.7"], ("10.0.0.5",)) == \
        "198.51.100.7"  # the client wrote 1.2.3.4 itself: not believed
    assert client_address(None, ["198.51.100.7"], ("127.0.0.1",)) == "198.51.100.7"  # local
    assert client_address(None, ["198.51.100.7"], ()) is None
    assert client_address("10.0.0.5", ["garbage"], ("10.0.0.5",)) == "10.0.0.5"
    assert trusted_proxies({"rewind": {"trusted_proxies": ["10.0.0.5", "::1"]}}) == (
        "10.0.0.5", "::1")
    with pytest.raises(AccessConfigError, match="trusted_proxies"):
        trusted_proxies({"rewind": {"trusted_proxies": ["proxy.local"]}})


def test_loopback_and_unknown_clients_are_shared():
    assert shared_client(None) and shared_client("127.0.0.1") and shared_client("::1")
    assert not shared_client("203.0.113.9")


# -- the throttle --------------------------------------------------------------------------------


def test_twenty_made_up_names_from_loopback_do_not_lock_the_owner_out():
    now = [0.0]
    throttle = SignInThrottle(clock=lambda: now[0])
    for i in range(20):
        throttle.failed(f"made-up-{i}", None)
    assert 0 < throttle.locked_for("olivia", None) <= 5  # seconds, not the old 900 s
    now[0] += 5
    assert throttle.locked_for("olivia", None) == 0
    for i in range(200):
        throttle.failed(f"more-{i}", "127.0.0.1")
    assert throttle.locked_for("olivia", "127.0.0.1") <= 5


def test_a_distinct_client_spraying_names_is_still_slowed_steeply():
    now = [0.0]
    throttle = SignInThrottle(clock=lambda: now[0])
    for i in range(30):
        throttle.failed(f"made-up-{i}", "203.0.113.9")
    assert throttle.locked_for("olivia", "203.0.113.9") > 60
    assert throttle.locked_for("olivia", "198.51.100.7") == 0


def test_guessing_the_owners_name_from_a_shared_address_costs_the_owner_a_minute_at_most():
    now = [0.0]
    throttle = SignInThrottle(clock=lambda: now[0])
    for _ in range(30):
        throttle.failed("olivia", None)
    assert 0 < throttle.locked_for("olivia", None) <= 60


def test_failures_decay_so_typos_spread_over_days_never_lock_anyone():
    now = [0.0]
    throttle = SignInThrottle(limit=5, clock=lambda: now[0])
    for _ in range(20):  # a typo a day for 20 days, then one more
        throttle.failed("olivia", None)
        now[0] += 24 * 3600
    throttle.failed("olivia", None)
    assert throttle.locked_for("olivia", None) == 0
    assert throttle.locked_for("someone", None) == 0


def test_a_success_clears_the_clients_count():
    now = [0.0]
    throttle = SignInThrottle(limit=2, lock_s=10, clock=lambda: now[0])
    for i in range(8):
        throttle.failed(f"user-{i}", "203.0.113.9")
    assert throttle.locked_for("olivia", "203.0.113.9") > 0
    now[0] += 3600
    throttle.succeeded("olivia", "203.0.113.9")
    assert throttle.locked_for("someone", "203.0.113.9") == 0


# -- the guard -----------------------------------------------------------------------------------


def _run(guard: ConsoleGuard, scope: dict, body: bytes = b"") -> tuple[list[dict], bool]:
    ran = []

    async def inner(scope, receive, send):
        ran.append(scope["path"])
        if scope["type"] == "websocket":
            await send({"type": "websocket.accept"})
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    sent: list[dict] = []

    async def send(message):
        sent.append(message)

    guard.app = inner
    asyncio.run(guard(scope, receive, send))
    return sent, bool(ran)


def _scope(kind: str, path: str, origin: str | None, host: str = "127.0.0.1:8501",
           method: str = "GET", cookie: str | None = None) -> dict:
    headers = [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    if cookie is not None:
        headers.append((b"cookie", cookie.encode()))
    return {"type": kind, "path": path, "method": method, "headers": headers, "scheme": "http"}


def guard(**options) -> ConsoleGuard:
    return ConsoleGuard(None, metrics_allowed=lambda: False, origins=lambda: (), **options)


@pytest.mark.parametrize("origin", ["http://127.0.0.1:9999", "http://localhost:8501",
                                    "https://evil.test", "null"])
def test_a_websocket_or_request_from_another_origin_is_refused(origin):
    sent, ran = _run(guard(), _scope("websocket", "/_stcore/stream", origin))
    assert not ran and sent == [{"type": "websocket.close", "code": 1008}]
    sent, ran = _run(guard(), _scope("http", "/", origin))
    assert not ran and sent[0]["status"] == 403


def test_the_consoles_own_page_gets_through():
    for origin in (None, "http://127.0.0.1:8501"):
        sent, ran = _run(guard(), _scope("websocket", "/_stcore/stream", origin))
        assert ran and sent == [{"type": "websocket.accept"}]
        sent, ran = _run(guard(), _scope("http", "/", origin))
        assert ran and sent[0]["status"] == 200


def _set_cookie(sent: list[dict]) -> str | None:
    found = [bytes(v).decode() for k, v in sent[0]["headers"] if k == b"set-cookie"]
    return found[0] if found else None


def test_the_sign_in_route_exchanges_a_code_for_an_httponly_cookie():
    codes = {"good-code": ("the-token", 3600)}
    g = guard(redeem=lambda code: codes.pop(code, None))
    own = "http://127.0.0.1:8501"
    sent, ran = _run(g, _scope("http", SIGN_IN_PATH, own, method="POST"), b"good-code")
    assert not ran and sent[0]["status"] == 204
    assert _set_cookie(sent) == (f"{SESSION_COOKIE}=the-token; Max-Age=3600; Path=/; HttpOnly; "
                                 "SameSite=Strict")
    sent, _ = _run(g, _scope("http", SIGN_IN_PATH, own, method="POST"), b"good-code")
    assert sent[0]["status"] == 403 and _set_cookie(sent) is None  # spent
    codes["good-code"] = ("t2", 60)
    for scope in (_scope("http", SIGN_IN_PATH, own),  # GET
                  _scope("http", SIGN_IN_PATH, None, method="POST"),  # no page of ours
                  _scope("http", SIGN_IN_PATH, "http://127.0.0.1:9999", method="POST")):
        sent, ran = _run(g, scope, b"good-code")
        assert not ran and sent[0]["status"] in (403, 405) and _set_cookie(sent) is None
    assert "good-code" in codes  # none of them spent it
    sent, _ = _run(g, _scope("http", SIGN_IN_PATH, own, method="POST"), b"x" * 10_000)
    assert sent[0]["status"] == 403
    sent, _ = _run(g, _scope("http", SIGN_IN_PATH, "https://c.example.com",
                             host="c.example.com", method="POST"), b"good-code")
    assert _set_cookie(sent).endswith("; Secure")


def test_the_sign_out_route_deletes_the_cookie_and_ends_its_session():
    ended = []
    g = guard(revoke=ended.append)
    sent, _ = _run(g, _scope("http", SIGN_OUT_PATH, "http://127.0.0.1:8501", method="POST",
                             cookie=f"{SESSION_COOKIE}=the-token"))
    assert sent[0]["status"] == 204 and ended == ["the-token"]
    assert _set_cookie(sent).startswith(f"{SESSION_COOKIE}=; Max-Age=0; Path=/; HttpOnly")
    sent, _ = _run(g, _scope("http", SIGN_OUT_PATH, "http://127.0.0.1:9999", method="POST",
                             cookie=f"{SESSION_COOKIE}=the-token"))
    assert sent[0]["status"] == 403 and ended == ["the-token"]


def test_the_guard_tells_the_app_it_is_there_and_a_client_cannot_say_so():
    seen = []

    async def inner(scope, receive, send):
        seen.append([(k, v) for k, v in scope["headers"] if k == b"x-rewind-console-guard"])
        await send({"type": "websocket.accept"})

    async def receive():
        return {}

    async def send(message):
        pass

    g = guard()
    g.app = inner
    scope = _scope("websocket", "/_stcore/stream", None)
    scope["headers"].append((b"x-rewind-console-guard", b"forged"))
    asyncio.run(g(scope, receive, send))
    assert seen == [[(b"x-rewind-console-guard", b"1")]]
