"""Who may use the console and do what: the pure decisions behind sign-in, without Streamlit and
without I/O (`dashboard.signin.access` draws, `dashboard.signin.sessions` keeps sign-ins).

Roles from the secrets (local accounts, OIDC role maps, demo mode), password checks, which
browser requests a demo console serves, which origin a request comes from, which client a
request stands for (`client_address`, `X-Forwarded-For` only from a configured proxy), and how
failed sign-ins slow further ones (`SignInThrottle`).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from dashboard.settings import section
from dashboard.signin.passwords import hash_password, verify_password
from engine import Actor, Role

ROLES = ("viewer", "operator")
DEMO_NAME = "demo"


@dataclass(frozen=True)
class User:
    """A signed-in console user."""

    name: str
    """Name written to the audit log (username, e-mail or `demo`)."""
    role: str
    """viewer or operator."""
    source: str
    """local, oidc or demo: how the user signed in."""
    authority: Callable[[str], str | None] | None = field(default=None, compare=False,
                                                          repr=False)
    """Asked by the engine for the account's role at the moment each action runs (see
    `role_authority`); None: `role` as given (tests, programs)."""

    @property
    def can_act(self) -> bool:
        """True for operators: they may roll back and send notices."""
        return self.role == "operator"

    def actor(self) -> Actor:
        """The engine actor for this user; the engine enforces the role again, asking
        `authority` (when set) for the role the account holds at that moment."""
        return Actor(self.name, Role(self.role), authority=self.authority)


DEMO_USER = User(DEMO_NAME, "operator", "demo")


class AccessConfigError(ValueError):
    """Accounts or role mappings in secrets.toml are malformed."""


def access_mode(secrets: Mapping[str, Any] | None) -> str:
    """oidc when `[auth]` is configured, local when `[rewind.users]` has accounts, else demo."""
    if section(secrets, "auth"):
        return "oidc"
    if section(secrets, "rewind", "users"):
        return "local"
    return "demo"


def local_accounts(secrets: Mapping[str, Any] | None) -> dict[str, dict]:
    """`[rewind.users.<name>]` as {name: {"role", "password_hash"}}.

    Raises:
        AccessConfigError: an account lacks a valid role or a password hash.
    """
    accounts = {}
    for name, conf in section(secrets, "rewind", "users").items():
        if not isinstance(conf, Mapping):
            raise AccessConfigError(f"[rewind.users.{name}] must be a table with role and "
                                    "password_hash")
        role = conf.get("role")
        if role not in ROLES:
            raise AccessConfigError(
                f"[rewind.users.{name}] role must be one of {', '.join(ROLES)}, not {role!r}"
            )
        password_hash = conf.get("password_hash")
        if not isinstance(password_hash, str) or not password_hash.startswith("scrypt$"):
            raise AccessConfigError(
                f"[rewind.users.{name}] needs password_hash = \"scrypt$…\"; print one with "
                "`rewind hash-password` (plain passwords are never accepted)"
            )
        accounts[name] = {"role": role, "password_hash": password_hash}
    return accounts


def role_now(secrets: Mapping[str, Any] | None, source: str, name: str) -> str | None:
    """The role `name`, signed in through `source` (local, oidc or demo), holds under `secrets`
    as they are now; None when the account no longer exists, or the console no longer signs
    people in that way (accounts added to a demo console, SSO switched on or off).

    Raises:
        AccessConfigError: the accounts are malformed now.
    """
    if access_mode(secrets) != source:
        return None
    if source == "demo":
        return "operator"
    if source == "local":
        account = local_accounts(secrets).get(name)
        return account["role"] if account is not None else None
    return role_for_identity(name, section(secrets, "rewind", "roles"))


_DUMMY_HASH: list[str] = []


def normalize_username(username: str | None) -> str:
    """The account name a sign-in attempt is for: the typed name without surrounding spaces.

    Sign-in and the lock-out both key on this, so `" alice"` is alice for both.
    """
    return (username or "").strip()


def authenticate(accounts: Mapping[str, Mapping], username: str, password: str) -> User | None:
    """The user when `username` exists and `password` matches its hash, else None.

    Every attempt costs exactly one scrypt run, for unknown names (against a dummy hash) and
    for empty passwords alike, so timing reveals neither which names exist nor anything else.
    """
    username = normalize_username(username)
    account = accounts.get(username)
    if account is None:
        if not _DUMMY_HASH:
            _DUMMY_HASH.append(hash_password("not a real account"))
        verify_password(password or "", _DUMMY_HASH[0])
        return None
    if not verify_password(password or "", account["password_hash"]):
        return None
    return User(username, account["role"], "local")


def oidc_identity(user_info: Mapping[str, Any]) -> str | None:
    """The identity `[rewind.roles]` is matched against: the e-mail only when the provider
    says it is verified (``email_verified`` true), else the subject.

    Without the check anyone who can register an account at the provider with someone else's
    address unverified would get that person's role.
    """
    email = user_info.get("email")
    verified = user_info.get("email_verified")
    if isinstance(verified, str):  # some providers send "true"
        verified = verified.strip().lower() == "true"
    if email and verified is True:
        return str(email)
    sub = user_info.get("sub")
    return str(sub) if sub else None


def role_for_identity(identity: str | None, roles: Mapping[str, Any]) -> str | None:
    """Role of an OIDC identity under `[rewind.roles]`, or None (no access).

    `operators` and `viewers` are lists of identities or shell-style patterns
    (``*@example.com``), compared case-insensitively; operators win over viewers. `default`
    ("viewer" or "operator") applies to anyone else who signed in; leave it out to refuse them.
    """
    if not identity:
        return None
    who = identity.strip().lower()
    for role, key in (("operator", "operators"), ("viewer", "viewers")):
        patterns = roles.get(key) or []
        if isinstance(patterns, str):
            patterns = [patterns]
        if any(fnmatch.fnmatchcase(who, str(p).strip().lower()) for p in patterns):
            return role
    default = roles.get("default")
    return default if default in ROLES else None


def oidc_providers(auth: Mapping[str, Any]) -> Sequence[str | None]:
    """Named providers (`[auth.<name>]` tables with a client_id); [None] for the unnamed one."""
    named = [k for k, v in auth.items() if isinstance(v, Mapping) and "client_id" in v]
    if named:
        return sorted(named)
    return [None] if "client_id" in auth else []


def is_loopback(host: str | None) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def demo_allowed(server_address: str | None, client_ip: str | None) -> bool:
    """Demo mode (no accounts) serves only a server bound to loopback, to a local peer.

    `client_ip` is None when Streamlit sees a localhost connection. See `demo_request_allowed`
    for the whole check of a browser request.
    """
    return is_loopback(server_address) and (client_ip is None or is_loopback(client_ip))


LOCAL_HOST_NAMES = ("localhost", "127.0.0.1", "::1")
"""Host names (any port) under which a demo console serves a browser."""


def host_name(host: str | None) -> str | None:
    """The name in a Host header (``name``, ``name:port``, ``[v6]:port``), lower case; None
    when the header is missing or malformed (user info, a path, a bad port)."""
    if not host or any(ch.isspace() for ch in host):
        return None
    try:
        parts = urlsplit(f"//{host}")
        _ = parts.port  # validates the port
    except ValueError:
        return None
    if parts.username is not None or parts.path or parts.query or parts.fragment:
        return None
    return parts.hostname


def is_local_host_header(host: str | None) -> bool:
    """True when a Host header names this machine by a loopback name: localhost, 127.0.0.1 or
    [::1], with any port. A foreign name that merely resolves to 127.0.0.1 is refused."""
    return host_name(host) in LOCAL_HOST_NAMES


def same_origin(origin: str | None, host: str | None) -> bool:
    """True when no Origin was sent or it is exactly the console's own `host` (a page of the
    console itself, not one served from another port or site)."""
    if origin is None:
        return True
    parts = urlsplit(origin)
    return parts.scheme in ("http", "https") and bool(host) and parts.netloc.lower() == (
        host or ""
    ).lower()


@dataclass(frozen=True)
class BrowserRequest:
    """What the console knows of the browser connection behind a run."""

    host: str | None
    """The Host header of the WebSocket request (None: missing or sent more than once)."""
    origin: str | None
    """The Origin header, if the browser sent one."""
    peer: str | None
    """The peer's IP address; None for a loopback peer (Streamlit reports it so)."""
    forwarded_for: tuple[str, ...] = ()
    """The `X-Forwarded-For` header values, in order (believed only from a trusted proxy)."""


def demo_request_allowed(server_address: str | None, request: BrowserRequest | None) -> bool:
    """Demo mode grants operator rights to `request` only when the server is bound to loopback,
    the peer is loopback, the Host is localhost, 127.0.0.1 or [::1], and the Origin (if any) is
    that same host.

    `request` None means no browser connection stands behind the run (AppTest, a bare script
    run): nothing reaches it over the network, so only the bind address is checked.
    """
    if request is None:
        return demo_allowed(server_address, None)
    return (
        demo_allowed(server_address, request.peer)
        and is_local_host_header(request.host)
        and same_origin(request.origin, request.host)
    )


def same_origin_request(origin: str | None, host: str | None,
                        allowed: Sequence[str] = ()) -> bool:
    """Whether a request may reach the console: no Origin (a plain navigation, a tool), the
    console's own host and port (as the request's Host names it), or one of `allowed`
    (`allowed_origins`: for a proxy that does not pass the Host on). Another port of the same
    host is another origin: a page served there must not drive the console, whose cookies
    ignore ports."""
    if origin is None:
        return True
    origin = origin.strip()
    if origin.rstrip("/").lower() in {a.rstrip("/").lower() for a in allowed}:
        return True
    return same_origin(origin, host)


def allowed_origins(secrets: Mapping[str, Any] | None) -> tuple[str, ...]:
    """`[rewind] allowed_origins`: origins (``https://console.example.com``) the console serves
    besides the one its requests' Host names, for a reverse proxy that rewrites the Host.

    Raises:
        AccessConfigError: not a list of ``http(s)://host[:port]`` origins.
    """
    values = section(secrets, "rewind").get("allowed_origins", [])
    if not isinstance(values, list):
        raise AccessConfigError("[rewind] allowed_origins must be a list of origins such as "
                                f"\"https://console.example.com\", not {values!r}")
    for value in values:
        parts = urlsplit(value) if isinstance(value, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.netloc or (
                parts.path not in ("", "/")) or parts.query or parts.fragment:
            raise AccessConfigError("[rewind] allowed_origins must hold origins such as "
                                    f"\"https://console.example.com\" (no path), not {value!r}")
    return tuple(values)


def trusted_proxies(secrets: Mapping[str, Any] | None) -> tuple[str, ...]:
    """`[rewind] trusted_proxies`: addresses of reverse proxies whose `X-Forwarded-For` the
    sign-in throttle believes (`client_address`); none by default.

    Raises:
        AccessConfigError: not a list of IP addresses.
    """
    values = section(secrets, "rewind").get("trusted_proxies", [])
    if not isinstance(values, list) or not all(isinstance(v, str) and _ip_text(v) for v in values):
        raise AccessConfigError("[rewind] trusted_proxies must be a list of IP addresses such as "
                                f"[\"10.0.0.5\"], not {values!r}")
    return tuple(values)


def client_address(peer: str | None, forwarded_for: Sequence[str],
                   trusted_proxies: Sequence[str]) -> str | None:
    """The client a request stands for, for the sign-in throttle.

    `peer` is the connection's address (None: loopback, as Streamlit reports it).
    `X-Forwarded-For` (`forwarded_for`: its header values, in order) is believed only when the
    peer is one of `trusted_proxies`, and then read from the right: the first address no
    trusted proxy added is the client. Anyone else could write any address there, and so
    escape the throttle or pin it on someone else.
    """
    trusted = {_ip_text(p) for p in trusted_proxies} - {None}
    current = _ip_text(peer) if peer is not None else "127.0.0.1"
    if current not in trusted:
        return peer
    hops = [h.strip() for value in forwarded_for for h in value.split(",") if h.strip()]
    for hop in reversed(hops):
        address = _ip_text(hop)
        if address is None:
            return current  # a malformed entry: nothing left of it can be believed
        if address not in trusted:
            return address
        current = address
    return peer


def _ip_text(text: str | None) -> str | None:
    """`text` as a normalised IP address (brackets and an IPv4 port dropped), else None."""
    if not text:
        return None
    text = text.strip()
    if text.startswith("[") and "]" in text:
        text = text[1:text.index("]")]
    elif text.count(":") == 1:
        text = text.split(":", 1)[0]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def shared_client(client: str | None) -> bool:
    """Whether `client` may stand for several people: unknown, or loopback (every browser on
    the console's host, and every user behind a local proxy not configured as trusted)."""
    return client is None or is_loopback(client)


class SignInThrottle:
    """Slows password guessing without letting a stranger lock the owner out.

    Failures are counted three ways: per client and name, per client (any name), and per name
    (any client). After `limit` failures a key waits `lock_s`, doubling with each further
    failure up to `max_s`: a guessing client slows down steeply. Counts decay: one failure is
    forgotten every `decay_s`, so typos spread over days never add up to a lock-out. Two keys
    are capped at `account_max_s`, so that others' failures cost the real user a few seconds at
    most: the per-name key (anyone may type the owner's name), and the per-client key of a
    client that is unknown or shared (`shared_client`: loopback, where every local browser and
    an untrusted local proxy's users are one client). Guesses at one name from a shared client
    wait at most `shared_max_s`: the owner may be behind that same address. A success clears the
    client's counts and the name's.
    """

    MAX_TRACKED = 10_000
    """Keys tracked at most; the stalest are forgotten first, so guessing at random names
    cannot grow the table without bound."""

    def __init__(self, limit: int = 5, lock_s: float = 30.0, max_s: float = 900.0,
                 account_max_s: float = 5.0, shared_max_s: float = 60.0,
                 decay_s: float = 3600.0, clock: Callable[[], float] = time.monotonic):
        self.limit = limit
        self.lock_s = lock_s
        self.max_s = max_s
        self.account_max_s = account_max_s
        self.shared_max_s = shared_max_s
        self.decay_s = decay_s
        self.clock = clock
        self._failures: dict[tuple[str, ...], tuple[float, float]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _keys(username: str, client: str | None) -> list[tuple[str, ...]]:
        name = normalize_username(username)
        who = client or ""
        # the per-client key counts every name, so it allows more failures (see _wait)
        return [("pair", who, name), ("client", who), ("name", name)]

    def _count(self, key: tuple[str, ...], now: float) -> float:
        """Failures of `key` still counted at `now` (one forgotten per `decay_s` since the last)."""
        count, last = self._failures.get(key, (0.0, 0.0))
        if count <= 0:
            return 0.0
        return max(0.0, count - math.floor(max(0.0, now - last) / self.decay_s))

    def _wait(self, key: tuple[str, ...], now: float) -> float:
        count = self._count(key, now)
        limit = self.limit * 4 if key[0] == "client" else self.limit
        if count < limit:
            return 0.0
        wait = min(self.lock_s * 2 ** min(count - limit, 64), self.max_s)
        if key[0] == "name" or (key[0] == "client" and shared_client(key[1] or None)):
            wait = min(wait, self.account_max_s)
        elif key[0] == "pair" and shared_client(key[1] or None):
            wait = min(wait, self.shared_max_s)
        _, last = self._failures[key]
        return max(0.0, last + wait - now)

    def locked_for(self, username: str, client: str | None = None) -> float:
        """Seconds until `client` may try `username` again (0 when it may now). Names are
        compared as sign-in compares them (`normalize_username`)."""
        now = self.clock()
        with self._lock:
            return max(self._wait(key, now) for key in self._keys(username, client))

    def failed(self, username: str, client: str | None = None) -> None:
        """Count a failed attempt of `client` on `username`."""
        now = self.clock()
        with self._lock:
            for key in self._keys(username, client):
                count = self._count(key, now)
                self._failures.pop(key, None)
                self._failures[key] = (count + 1, now)  # re-inserted: newest last
            while len(self._failures) > self.MAX_TRACKED:
                del self._failures[next(iter(self._failures))]

    def succeeded(self, username: str, client: str | None = None) -> None:
        """The owner got in: forget this client's failures (on any name) and the name's."""
        with self._lock:
            for key in self._keys(username, client):
                self._failures.pop(key, None)


SESSION_IDLE_MINUTES = 12 * 60
"""A session unused this long ends (`[rewind] session_idle_minutes`): an on-call shift."""
SESSION_MAX_HOURS = 7 * 24
"""A session ends this long after sign-in, used or not (`[rewind] session_max_hours`)."""


def session_limits(secrets: Mapping[str, Any] | None) -> tuple[float, float]:
    """(idle, lifetime) of a sign-in session in seconds: `[rewind] session_idle_minutes` and
    `session_max_hours`, else 12 hours and 7 days.

    Raises:
        AccessConfigError: a value that is not a positive number.
    """
    conf = section(secrets, "rewind")
    limits = []
    for key, default, unit in (("session_idle_minutes", SESSION_IDLE_MINUTES, 60.0),
                               ("session_max_hours", SESSION_MAX_HOURS, 3600.0)):
        value = conf.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise AccessConfigError(f"[rewind] {key} must be a positive number, not {value!r}")
        limits.append(float(value) * unit)
    return limits[0], limits[1]

