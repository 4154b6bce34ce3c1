"""Who is using the console and what they may do: viewer or operator.

Three modes, chosen from `.streamlit/secrets.toml`:

- **oidc**: an `[auth]` section is present. `st.login` signs people in; `[rewind.roles]` maps
  identities (e-mail or subject, shell-style patterns allowed) to roles.
- **local**: `[rewind.users.<name>]` tables with `role` and `password_hash` (scrypt, printed by
  `rewind hash-password`). A form with "Username", "Password" and "Sign in". Signing in starts a
  session (`SessionTokens`): a random token the browser keeps in the `rewind_session` cookie
  (SameSite=Strict, Secure over https) and this process keeps only hashed, so a reload, a
  second tab or a shared link stays signed in. It ends on sign-out, after 12 hours unused or 7
  days in all (`[rewind] session_idle_minutes`, `session_max_hours`), when the account is
  deleted or its password changed, and when the console restarts (sessions live in its
  memory). Failed sign-ins are throttled (`SignInThrottle`).
- **demo**: neither is configured. Everyone the console serves acts as the operator `demo`, so
  it serves only a browser on this machine: the server must be bound to loopback, the peer must be
  loopback, the request's Host must be ``localhost``, ``127.0.0.1`` or ``[::1]`` (any port; a DNS
  rebinding name such as ``rebind.evil.test`` resolving to 127.0.0.1 is refused), and an Origin,
  when sent, must be that same host (a page on another localhost port is refused). Anyone else
  sees how to configure accounts. `server.allowedHosts` in `.streamlit/config.toml` refuses
  foreign Host names again, before the app runs.

The pure functions at the top hold every decision and are tested without Streamlit; the functions
at the bottom only draw. Hiding buttons is a courtesy: the engine checks the actor's role again in
every action (see `dashboard.actions`), and asks the secrets file for it at that moment: the
`Actor` of a console user carries an authority (`role_authority`) that re-reads the accounts and
the OIDC role map, so a dialog left open by an account since demoted or deleted acts no more.
A secrets file that exists but cannot be read or parsed fails closed (`dashboard.secrets_file`).
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import ipaddress
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from secrets import token_urlsafe
from typing import Any
from urllib.parse import urlsplit

import streamlit as st

from dashboard import secrets_file
from dashboard.secrets_file import SecretsFileError
from dashboard.settings import section
from dashboard.signin.passwords import hash_password, verify_password
from engine import Actor, PermissionDenied, Role

ROLES = ("viewer", "operator")
SESSION_KEY = "rewind_user"
TOKEN_KEY = "rewind_session_token"
"""Where this Streamlit session keeps its sign-in token (server side; never drawn)."""
COOKIE_READ_KEY = "rewind_cookie_read"
"""True once this Streamlit session has looked at the session cookie its browser sent."""
COOKIE_KEY = "rewind_cookie_change"
"""The cookie change the next run hands the browser: a token to store, or None to delete."""
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


# -- decisions (pure) -------------------------------------------------------------------------
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


class SignInThrottle:
    """Slows password guessing without letting a stranger lock the owner out.

    Failures are counted three ways: per client and name, per client (any name), and per name
    (any client). After `limit` failures in a row a key waits `lock_s`, doubling with each
    further failure up to `max_s`: a guessing client slows down steeply. The per-name wait is
    capped at `account_max_s`, so failures from elsewhere cost the real user a few seconds at
    most, never a lock-out; a success clears the client's counts for that name.
    """

    MAX_TRACKED = 10_000
    """Keys tracked at most; the stalest are forgotten first, so guessing at random names
    cannot grow the table without bound."""

    def __init__(self, limit: int = 5, lock_s: float = 30.0, max_s: float = 900.0,
                 account_max_s: float = 5.0, clock: Callable[[], float] = time.monotonic):
        self.limit = limit
        self.lock_s = lock_s
        self.max_s = max_s
        self.account_max_s = account_max_s
        self.clock = clock
        self._failures: dict[tuple[str, ...], tuple[int, float]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _keys(username: str, client: str | None) -> list[tuple[str, ...]]:
        name = normalize_username(username)
        who = client or ""
        # the per-client key counts every name, so it allows more failures (see _wait)
        return [("pair", who, name), ("client", who), ("name", name)]

    def _wait(self, key: tuple[str, ...]) -> float:
        count, last = self._failures.get(key, (0, 0.0))
        limit = self.limit * 4 if key[0] == "client" else self.limit
        if count < limit:
            return 0.0
        wait = min(self.lock_s * 2 ** (count - limit), self.max_s)
        if key[0] == "name":
            wait = min(wait, self.account_max_s)
        return max(0.0, last + wait - self.clock())

    def locked_for(self, username: str, client: str | None = None) -> float:
        """Seconds until `client` may try `username` again (0 when it may now). Names are
        compared as sign-in compares them (`normalize_username`)."""
        with self._lock:
            return max(self._wait(key) for key in self._keys(username, client))

    def failed(self, username: str, client: str | None = None) -> None:
        """Count a failed attempt of `client` on `username`."""
        now = self.clock()
        with self._lock:
            for key in self._keys(username, client):
                count, _ = self._failures.pop(key, (0, 0.0))
                self._failures[key] = (count + 1, now)  # re-inserted: newest last
            while len(self._failures) > self.MAX_TRACKED:
                del self._failures[next(iter(self._failures))]

    def succeeded(self, username: str, client: str | None = None) -> None:
        """The owner got in: forget this client's failures on this name, and the name's."""
        with self._lock:
            for key in self._keys(username, client):
                if key[0] != "client":  # a client that sprays names stays slowed
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


@dataclass(frozen=True)
class SignedInSession:
    """What the console keeps of one sign-in, under the digest of its token."""

    name: str
    """The local account it signed in."""
    credential: str
    """Digest of the account's password hash at sign-in: a changed password ends the session."""
    issued_at: float
    """When it was issued (the token store's clock, seconds)."""
    used_at: float
    """When a run last presented it (same clock)."""


def credential_stamp(password_hash: str) -> str:
    """What a session remembers of the account's password hash: its SHA-256, so that a new
    password (a new hash) ends every session of the account, and no hash is copied."""
    return hashlib.sha256(password_hash.encode("utf-8")).hexdigest()


class SessionTokens:
    """Sign-in sessions of local accounts, so a reload or a second tab stays signed in.

    Signing in issues a random token (`secrets.token_urlsafe`, 256 bits) that the browser keeps
    in a cookie and presents when it opens the console again. Only the token's SHA-256 is kept
    here, in this process's memory: a console restart signs everyone out, and a memory dump
    holds no token that would work. A session ends after `idle_s` without a run presenting it,
    `lifetime_s` after sign-in whatever its use, on sign-out (`revoke`), and when its account
    is deleted or its password changed (the console checks the accounts on every run). At most
    `max_sessions` are kept; the least recently used goes first. The console sets `idle_s` and
    `lifetime_s` from the secrets on every run (`session_limits`), so a change applies at once
    to sessions already open.
    """

    TOKEN_BYTES = 32
    MAX_TOKEN_CHARS = 128
    """Longer cookie values are not ours and are refused before they are hashed."""

    def __init__(self, idle_s: float = SESSION_IDLE_MINUTES * 60.0,
                 lifetime_s: float = SESSION_MAX_HOURS * 3600.0,
                 max_sessions: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self.idle_s = idle_s
        self.lifetime_s = lifetime_s
        self.max_sessions = max_sessions
        self.clock = clock
        self._sessions: OrderedDict[str, SignedInSession] = OrderedDict()  # oldest use first
        self._lock = threading.Lock()

    @staticmethod
    def _digest(token: str) -> str:
        return hashlib.sha256(token.encode("utf-8")).hexdigest()

    def _live(self, entry: SignedInSession, now: float) -> bool:
        return now - entry.used_at < self.idle_s and now - entry.issued_at < self.lifetime_s

    def issue(self, name: str, credential: str) -> str:
        """A new token for account `name` (signed in with the password whose hash has stamp
        `credential`). The token is returned once and never kept."""
        token = token_urlsafe(self.TOKEN_BYTES)
        now = self.clock()
        with self._lock:
            for digest in [d for d, e in self._sessions.items() if not self._live(e, now)]:
                del self._sessions[digest]
            self._sessions[self._digest(token)] = SignedInSession(name, credential, now, now)
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)
        return token

    def validate(self, token: str | None) -> SignedInSession | None:
        """The session `token` stands for, marked used now; None for a token never issued
        here, revoked, idle too long or past its lifetime (an expired one is forgotten)."""
        if not token or not isinstance(token, str) or len(token) > self.MAX_TOKEN_CHARS:
            return None
        digest = self._digest(token)
        now = self.clock()
        with self._lock:
            entry = self._sessions.get(digest)
            if entry is None:
                return None
            if not self._live(entry, now):
                del self._sessions[digest]
                return None
            entry = SignedInSession(entry.name, entry.credential, entry.issued_at, now)
            self._sessions[digest] = entry
            self._sessions.move_to_end(digest)
            return entry

    def revoke(self, token: str | None) -> None:
        """End the session of `token` (sign-out); unknown tokens are ignored."""
        if token and isinstance(token, str) and len(token) <= self.MAX_TOKEN_CHARS:
            with self._lock:
                self._sessions.pop(self._digest(token), None)

    def revoke_account(self, name: str) -> int:
        """End every session of account `name` (deleted, or its password changed); returns
        how many ended."""
        with self._lock:
            ended = [d for d, e in self._sessions.items() if e.name == name]
            for digest in ended:
                del self._sessions[digest]
        return len(ended)

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)


def restored_user(entry: SignedInSession | None, accounts: Mapping[str, Mapping]) -> User | None:
    """The user a valid session restores: its account as the secrets hold it now (the role read
    again), or None when the account was deleted or its password changed since sign-in."""
    if entry is None:
        return None
    account = accounts.get(entry.name)
    if account is None or credential_stamp(account["password_hash"]) != entry.credential:
        return None
    return User(entry.name, account["role"], "local")


SESSION_COOKIE = "rewind_session"
"""The cookie that carries a local account's session token."""


def cookie_script(token: str | None, max_age_s: int) -> str:
    """The script that stores `token` in the session cookie (None: deletes the cookie).

    Why a script: Streamlit sends no Set-Cookie from a script run (its cookies are read-only,
    `st.context.cookies`), so the browser sets it itself. `SameSite=Strict`: no other site's
    page can make the browser send it; `Secure` when the console is served over https. The
    script blanks its own text once run, so the token does not stay in the page, and its style
    takes the element out of the layout (an empty element would still push the page down).
    """
    value = json.dumps(token or "")
    age = max_age_s if token else 0
    return (
        "<style>[data-testid=\"stElementContainer\"]:has(script[data-rw-cookie])"
        "{display:none}</style>"
        "<script data-rw-cookie>(() => {"
        "const secure = location.protocol === 'https:' ? '; Secure' : '';"
        f"document.cookie = '{SESSION_COOKIE}=' + {value} + "
        f"'; Max-Age={age}; Path=/; SameSite=Strict' + secure;"
        "if (document.currentScript) document.currentScript.textContent = '';"
        "})();</script>"
    )


# -- Streamlit glue ---------------------------------------------------------------------------
def read_secrets() -> dict:
    """The secrets as the files hold them now, as a plain dict; {} when there are none.

    Raises:
        SecretsFileError: a secrets file exists but cannot be read or parsed (`current_user`
            then serves only that error).
    """
    return secrets_file.current_secrets()


def _authority_now(source: str, paths: Sequence[str], name: str) -> str | None:
    try:
        return role_now(secrets_file.current_secrets(paths), source, name)
    except (SecretsFileError, AccessConfigError) as exc:
        raise PermissionDenied(
            f"the console's access settings cannot be read now, so nothing was done: {exc}"
        ) from exc


def role_authority(source: str, paths: Sequence[str] | None = None) -> Callable[[str], str | None]:
    """What the engine asks for a console user's role when an action runs: the secrets files
    (`paths`, else those configured now) are read again (parsed only when changed), so a
    demotion or deletion applies to dialogs and fragments already open.

    The returned callable raises PermissionDenied when the files cannot be read or parsed.
    """
    return functools.partial(_authority_now, source,
                             tuple(secrets_file.configured_paths() if paths is None else paths))


@st.cache_resource
def _throttle() -> SignInThrottle:
    return SignInThrottle()


@st.cache_resource
def _session_tokens() -> SessionTokens:
    return SessionTokens()


def require_user() -> User:
    """The signed-in user. Otherwise draws the sign-in screen and stops this run.

    Every page calls it first, so no page renders for someone who is not signed in, whichever
    way the page was reached.
    """
    user = current_user()
    if user is None:
        st.stop()
    return user


def current_user() -> User | None:
    """The signed-in user, or None after drawing what it takes to sign in, or the error that
    stops the console when its access settings cannot be read."""
    try:
        secrets = read_secrets()
        mode = access_mode(secrets)
        if mode == "demo":
            user = _demo_user()
        elif mode == "oidc":
            user = _oidc_user(secrets)
        else:
            user = _local_user(local_accounts(secrets), session_limits(secrets))
    except SecretsFileError as exc:
        st.title("Rewind console")
        st.error("The console's secrets file cannot be read, so it serves nothing (never demo "
                 "mode) until the file is fixed:")
        st.text(str(exc))  # plain text: a path and a parser message
        return None
    except AccessConfigError as exc:
        st.error(f"The console's access settings are wrong: {exc}")
        return None
    if user is None:
        return None
    return User(user.name, user.role, user.source, authority=role_authority(user.source))


def browser_request() -> BrowserRequest | None:
    """The browser connection behind this run, or None when there is none (AppTest, bare run).

    A WebSocket handshake always carries headers (Host, Upgrade, Sec-WebSocket-Key, …), so an
    empty header set means no browser is connected.
    """
    headers = st.context.headers
    if not headers:
        return None
    hosts = headers.get_all("host")
    origins = headers.get_all("origin")
    ip = st.context.ip_address
    return BrowserRequest(
        host=hosts[0] if len(hosts) == 1 else None,
        origin=origins[-1] if origins else None,
        peer=ip if isinstance(ip, str) else None,
    )


def _demo_user() -> User | None:
    request = browser_request()
    if demo_request_allowed(st.get_option("server.address"), request):
        return DEMO_USER
    st.error(
        "No accounts are configured, and without accounts the console only serves localhost: "
        "a browser on this machine that opens it as http://localhost:PORT, "
        "http://127.0.0.1:PORT or http://[::1]:PORT."
    )
    if request is not None and not is_local_host_header(request.host):
        st.caption("This request named the console as:")
        st.text(request.host or "(no Host header)")  # plain text: the name is the client's
    st.markdown(
        "To serve the console to other machines or under another name, configure accounts in "
        "`.streamlit/secrets.toml` (see `.streamlit/secrets.example.toml`):\n"
        "- local accounts: `[rewind.users.<name>]` tables with `role` (`viewer` or `operator`) "
        "and `password_hash` printed by `rewind hash-password`;\n"
        "- or single sign-on: an `[auth]` section and `[rewind.roles]`.\n\n"
        "Then start it with `rewind dashboard --address 0.0.0.0 --allowed-host NAME`, where "
        "NAME is the host name people use (it extends `server.allowedHosts`)."
    )
    return None


def _oidc_user(secrets: dict) -> User | None:
    if not st.user.is_logged_in:
        st.title("Rewind console")
        providers = oidc_providers(section(secrets, "auth"))
        if not providers:
            st.error("[auth] needs client_id, client_secret and server_metadata_url, directly "
                     "or in [auth.<provider>] tables.")
            return None
        for provider in providers:
            label = f"Sign in with {provider}" if provider else "Sign in"
            if st.button(label, key=f"login-{provider}", type="primary"):
                try:
                    st.login(provider) if provider else st.login()
                except Exception as exc:  # noqa: BLE001 - e.g. Authlib missing: say so
                    st.error(f"Sign-in failed: {exc}. OIDC sign-in needs "
                             "`pip install \"streamlit[auth]\"`.")
        return None
    identity = oidc_identity(st.user.to_dict())
    role = role_for_identity(identity, section(secrets, "rewind", "roles"))
    if role is None:
        st.error("You are signed in, but [rewind.roles] gives this identity no role (an e-mail "
                 "counts only when the provider marks it verified). Ask an administrator to add "
                 "it to operators or viewers:")
        st.text(identity or "(no e-mail and no subject)")  # plain text: the provider's claim
        st.button("Sign out", on_click=st.logout)
        return None
    return User(str(identity), role, "oidc")


def _local_user(accounts: dict[str, dict], limits: tuple[float, float]) -> User | None:
    """The signed-in local user, restored from the session cookie on a fresh Streamlit session
    (a reload, a second tab, a shared link); the role is the account's as the secrets hold it
    now. A session that ended (signed out, expired, account deleted or its password changed)
    shows the sign-in form again and deletes the cookie."""
    # Drawn on every run, filled only when the browser is owed a cookie change: an element
    # that came and went would shift every element after it, and the page would draw them
    # anew (closing an open menu) on the run after sign-in.
    slot = st.empty()
    tokens = _session_tokens()
    tokens.idle_s, tokens.lifetime_s = limits
    user: User | None = st.session_state.get(SESSION_KEY)
    token: str | None = st.session_state.get(TOKEN_KEY)
    if user is None and not st.session_state.get(COOKIE_READ_KEY):
        # once per Streamlit session: the cookie is the one the browser sent when it connected,
        # stale after a sign-out here, and a later run must not delete another tab's new one
        st.session_state[COOKIE_READ_KEY] = True
        token = session_cookie()
        user = restored_user(tokens.validate(token), accounts) if token else None
        if user is not None:
            st.session_state[SESSION_KEY] = user
            st.session_state[TOKEN_KEY] = token
        elif token:  # forged, expired, revoked, or its account is gone: forget it everywhere
            tokens.revoke(token)
            st.session_state[COOKIE_KEY] = None
    elif user is not None and token is not None:
        # signed in here: the session must still hold (it may have ended in another tab)
        restored = restored_user(tokens.validate(token), accounts)
        if restored is None or restored.name != user.name:
            tokens.revoke(token)
            user = None
    if user is not None:
        account = accounts.get(user.name)
        if account is not None:  # roles are re-read on every run, so a demotion applies now
            _send_cookie(slot)
            return User(user.name, account["role"], "local")
        tokens.revoke_account(user.name)
    if st.session_state.pop(SESSION_KEY, None) is not None:
        st.session_state[COOKIE_KEY] = None
    st.session_state.pop(TOKEN_KEY, None)
    _send_cookie(slot)
    _sign_in_form(accounts)
    return None


def _sign_in_form(accounts: dict[str, dict]) -> None:
    st.title("Rewind console")
    st.caption("Sign in with your console account.")
    with st.form("sign-in"):
        username = st.text_input("Username")
        password = st.text_input("Password", type="password")
        submitted = st.form_submit_button("Sign in", type="primary")
    if not submitted:
        return
    name = normalize_username(username)  # the throttle keys on the name sign-in checks
    request = browser_request()
    client = request.peer if request is not None else None
    throttle = _throttle()
    wait = throttle.locked_for(name, client)
    if wait > 0:
        st.error(f"Too many failed attempts; try again in {wait:.0f} s.")
        return
    user = authenticate(accounts, name, password)
    if user is None:
        throttle.failed(name, client)
        st.error("Unknown username or wrong password.")
        return
    throttle.succeeded(name, client)
    token = _session_tokens().issue(user.name, credential_stamp(accounts[name]["password_hash"]))
    st.session_state[SESSION_KEY] = user
    st.session_state[TOKEN_KEY] = token
    st.session_state[COOKIE_KEY] = token  # the next run (signed in) hands it to the browser
    st.rerun()


def session_cookie() -> str | None:
    """The session token the browser sent when this Streamlit session connected, if any."""
    return st.context.cookies.get(SESSION_COOKIE)


def _send_cookie(slot: Any) -> None:
    """Hand the browser the cookie change this session owes it, once, in `slot` (an
    `st.empty`): a new token after sign-in, or (None) the deletion after sign-out or an ended
    session."""
    if COOKIE_KEY not in st.session_state:
        return
    token = st.session_state.pop(COOKIE_KEY)
    slot.html(cookie_script(token, max(1, int(_session_tokens().lifetime_s))),
              unsafe_allow_javascript=True)


def sign_out(user: User) -> None:
    """End the user's console session: a local account's session token is revoked here, and
    the next run deletes the browser's cookie."""
    _session_tokens().revoke(st.session_state.pop(TOKEN_KEY, None))
    if st.session_state.pop(SESSION_KEY, None) is not None and user.source == "local":
        st.session_state[COOKIE_KEY] = None
    if user.source == "oidc":
        st.logout()
