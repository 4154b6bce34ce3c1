"""Sign-in sessions of local accounts: tokens, where they are kept, and how the browser gets one.

Signing in issues a random token (`secrets.token_urlsafe`, 256 bits). The browser keeps it in the
`rewind_session` cookie, which only the console's server side sets: ``HttpOnly`` (no page script,
the console's own included, can read it), ``SameSite=Strict`` and ``Path=/`` (``Secure`` over
https). The sign-in form runs over Streamlit's websocket, which cannot set cookies, so a
successful sign-in hands the page a one-time code (`SessionTokens.issue_code`, single use, a
minute at most); the page posts it to `SIGN_IN_PATH`, where the console's ASGI guard
(`dashboard.serve`) redeems it for the token and answers with the ``Set-Cookie``. The token
itself never reaches a page script.

The store keeps the sessions (fleet documents of namespace `NAMESPACE`, through the engine's
API), under the SHA-256 of their token only: a console restart keeps everyone signed in, every
replica of the console knows every session, and a copy of the store holds no token that works.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from secrets import token_urlsafe
from typing import Any, Protocol

from dashboard.signin.decisions import User

SESSION_COOKIE = "rewind_session"
"""The cookie that carries a local account's session token."""
SIGN_IN_PATH = "/_rewind/sign-in"
"""Where the page posts a one-time code; the answer sets the session cookie."""
SIGN_OUT_PATH = "/_rewind/sign-out"
"""Where the page posts to end the browser's session; the answer deletes the cookie."""
GUARD_HEADER = "x-rewind-console-guard"
"""Request header the ASGI guard adds (after dropping any a client sent) to every request it
passes on: a run that sees it knows the cookie routes exist. `streamlit run dashboard/app.py`
alone has no guard, so a sign-in there lasts only as long as the page (no cookie at all)."""
NAMESPACE = "console_sign_ins"
"""Fleet-document namespace of sign-in sessions (``s_<digest>``) and codes (``c_<digest>``)."""


class FleetDocuments(Protocol):
    """What the sessions need of the engine (`Engine.documents` has both)."""

    def fleet(self, ns: str) -> dict[str, Any]: ...

    def put_fleet(self, ns: str, values: Mapping[str, Any]) -> None: ...


class MemoryDocuments:
    """`FleetDocuments` in this process's memory (tests, programs without a store)."""

    def __init__(self) -> None:
        self._docs: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def fleet(self, ns: str) -> dict[str, Any]:
        with self._lock:
            return json.loads(json.dumps(self._docs.get(ns, {})))

    def put_fleet(self, ns: str, values: Mapping[str, Any]) -> None:
        with self._lock:
            docs = self._docs.setdefault(ns, {})
            for key, value in values.items():
                if value is None:
                    docs.pop(key, None)
                else:
                    docs[key] = json.loads(json.dumps(value))


@dataclass(frozen=True)
class SignedInSession:
    """What the console keeps of one sign-in, under the digest of its token."""

    name: str
    """The local account it signed in."""
    credential: str
    """Digest of the account's password hash at sign-in: a changed password ends the session."""
    issued_at: float
    """When it was issued (wall clock, seconds: replicas share it)."""
    used_at: float
    """When a run last presented it (same clock, to `SessionTokens.TOUCH_S`)."""


def credential_stamp(password_hash: str) -> str:
    """What a session remembers of the account's password hash: its SHA-256, so that a new
    password (a new hash) ends every session of the account, and no hash is copied."""
    return hashlib.sha256(password_hash.encode("utf-8")).hexdigest()


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


class SessionTokens:
    """Sign-in sessions of local accounts, kept in the store (`documents`: the engine).

    A session ends after `idle_s` without a run presenting it, `lifetime_s` after sign-in
    whatever its use, on sign-out (`revoke`), and when its account is deleted or its password
    changed (the console checks the accounts on every run). At most `max_sessions` are kept;
    the least recently used goes first. The console sets `idle_s` and `lifetime_s` from the
    secrets on every run (`session_limits`), so a change applies at once to sessions already
    open.
    """

    TOKEN_BYTES = 32
    MAX_TOKEN_CHARS = 128
    """Longer cookie values (and codes) are not ours and are refused before they are hashed."""
    TOUCH_S = 60.0
    """A run records a session's use only when the last record is older: not a write per run."""
    CODE_S = 60.0
    """How long a one-time code may wait to be redeemed."""

    def __init__(self, documents: FleetDocuments | None = None,
                 idle_s: float = 12 * 3600.0, lifetime_s: float = 7 * 24 * 3600.0,
                 max_sessions: int = 1_000, clock: Callable[[], float] = time.time):
        self.documents: FleetDocuments = documents if documents is not None else MemoryDocuments()
        self.idle_s = idle_s
        self.lifetime_s = lifetime_s
        self.max_sessions = max_sessions
        self.clock = clock
        self._lock = threading.Lock()

    # -- reading ------------------------------------------------------------------------------
    def _all(self) -> dict[str, Any]:
        return self.documents.fleet(NAMESPACE)

    @staticmethod
    def _entry(doc: Any) -> SignedInSession | None:
        try:
            return SignedInSession(str(doc["name"]), str(doc["credential"]),
                                   float(doc["issued_at"]), float(doc["used_at"]))
        except (KeyError, TypeError, ValueError):
            return None

    def _live(self, entry: SignedInSession, now: float) -> bool:
        return now - entry.used_at < self.idle_s and now - entry.issued_at < self.lifetime_s

    def _sessions(self, docs: Mapping[str, Any]) -> dict[str, SignedInSession | None]:
        return {key: self._entry(doc) for key, doc in docs.items() if key.startswith("s_")}

    @classmethod
    def _valid_secret(cls, secret: Any) -> bool:
        return isinstance(secret, str) and 0 < len(secret) <= cls.MAX_TOKEN_CHARS

    # -- sessions -----------------------------------------------------------------------------
    def _new_session(self, name: str, credential: str, now: float,
                     docs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """A new token, and the writes that store its session and forget ended ones (and the
        least recently used beyond `max_sessions`)."""
        token = token_urlsafe(self.TOKEN_BYTES)
        writes: dict[str, Any] = {}
        live = []
        for key, entry in self._sessions(docs).items():
            if entry is None or not self._live(entry, now):
                writes[key] = None
            else:
                live.append((entry.used_at, key))
        for key, doc in docs.items():
            if key.startswith("c_") and not self._code_live(doc, now):
                writes[key] = None
        live.sort()
        for _, key in live[: max(0, len(live) + 1 - self.max_sessions)]:
            writes[key] = None
        writes[f"s_{_digest(token)}"] = {"name": name, "credential": credential,
                                         "issued_at": now, "used_at": now}
        return token, writes

    def issue(self, name: str, credential: str) -> str:
        """A new token for account `name` (signed in with the password whose hash has stamp
        `credential`). The token is returned once and never kept."""
        now = self.clock()
        with self._lock:
            token, writes = self._new_session(name, credential, now, self._all())
            self.documents.put_fleet(NAMESPACE, writes)
        return token

    def validate(self, token: str | None) -> SignedInSession | None:
        """The session `token` stands for, marked used now; None for a token never issued,
        revoked, idle too long or past its lifetime (an expired one is forgotten)."""
        if not self._valid_secret(token):
            return None
        assert token is not None
        key = f"s_{_digest(token)}"
        now = self.clock()
        docs = self._all()
        if key not in docs:
            return None
        entry = self._entry(docs[key])
        if entry is None or not self._live(entry, now):
            self.documents.put_fleet(NAMESPACE, {key: None})
            return None
        if now - entry.used_at >= self.TOUCH_S:
            entry = SignedInSession(entry.name, entry.credential, entry.issued_at, now)
            self.documents.put_fleet(NAMESPACE, {key: {
                "name": entry.name, "credential": entry.credential,
                "issued_at": entry.issued_at, "used_at": now}})
        return entry

    def revoke(self, token: str | None) -> None:
        """End the session of `token` (sign-out); unknown tokens are ignored."""
        if self._valid_secret(token):
            assert token is not None
            self.documents.put_fleet(NAMESPACE, {f"s_{_digest(token)}": None})

    def revoke_account(self, name: str) -> int:
        """End every session of account `name` (deleted, or its password changed); returns
        how many ended."""
        ended = {key: None for key, entry in self._sessions(self._all()).items()
                 if entry is not None and entry.name == name}
        if ended:
            self.documents.put_fleet(NAMESPACE, ended)
        return len(ended)

    def __len__(self) -> int:
        now = self.clock()
        return sum(1 for e in self._sessions(self._all()).values()
                   if e is not None and self._live(e, now))

    # -- one-time codes -------------------------------------------------------------------------
    def _code_live(self, doc: Any, now: float) -> bool:
        try:
            return now < float(doc["expires_at"])
        except (KeyError, TypeError, ValueError):
            return False

    def issue_code(self, name: str, credential: str) -> str:
        """A one-time code for a sign-in of `name` that just succeeded: the page posts it to
        `SIGN_IN_PATH`, which redeems it (`redeem`) for the session cookie. Kept hashed, for
        `CODE_S` at most."""
        code = token_urlsafe(self.TOKEN_BYTES)
        self.documents.put_fleet(NAMESPACE, {f"c_{_digest(code)}": {
            "name": name, "credential": credential, "expires_at": self.clock() + self.CODE_S}})
        return code

    def redeem(self, code: str | None) -> str | None:
        """The token of a new session for the sign-in `code` stands for, or None when the code
        was never issued, was redeemed already or waited too long. The code is spent in the
        same write that stores the session."""
        if not self._valid_secret(code):
            return None
        assert code is not None
        key = f"c_{_digest(code)}"
        now = self.clock()
        with self._lock:
            docs = self._all()
            doc = docs.get(key)
            if doc is None:
                return None
            if not self._code_live(doc, now):
                self.documents.put_fleet(NAMESPACE, {key: None})
                return None
            token, writes = self._new_session(str(doc["name"]), str(doc["credential"]), now,
                                              docs)
            writes[key] = None
            self.documents.put_fleet(NAMESPACE, writes)
        return token


def restored_user(entry: SignedInSession | None, accounts: Mapping[str, Mapping]) -> User | None:
    """The user a valid session restores: its account as the secrets hold it now (the role read
    again), or None when the account was deleted or its password changed since sign-in."""
    if entry is None:
        return None
    account = accounts.get(entry.name)
    if account is None or credential_stamp(account["password_hash"]) != entry.credential:
        return None
    return User(entry.name, account["role"], "local")


# -- the cookie, as the server side sets it ---------------------------------------------------
def cookie_header(token: str | None, max_age_s: int, secure: bool) -> bytes:
    """The ``Set-Cookie`` value that stores `token` (None: deletes the cookie)."""
    age = max(1, int(max_age_s)) if token else 0
    value = token or ""
    return (f"{SESSION_COOKIE}={value}; Max-Age={age}; Path=/; HttpOnly; SameSite=Strict"
            + ("; Secure" if secure else "")).encode("ascii")


def cookie_value(header: str | None) -> str | None:
    """The session token in a request's ``Cookie`` header, if any."""
    if not header:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return None
    morsel = jar.get(SESSION_COOKIE)
    return morsel.value if morsel is not None and morsel.value else None


# -- what the page runs -----------------------------------------------------------------------
_HIDDEN = ("<style>[data-testid=\"stElementContainer\"]:has(script[data-rw-cookie])"
           "{display:none}</style>")


def exchange_script(code: str, path: str) -> str:
    """The script that posts a one-time `code` to `path` (`SIGN_IN_PATH` under the console's
    base path) and reloads the page once the server has set the cookie: the reloaded page's
    connection carries it, and the requested page and its query string stay.

    The script blanks its own text once run, so the code does not stay in the page, and its
    style takes the element out of the layout.
    """
    return (
        f"{_HIDDEN}<script data-rw-cookie>(() => {{"
        f"const code = {json.dumps(code)};"
        "if (document.currentScript) document.currentScript.textContent = '';"
        f"fetch({json.dumps(path)}, {{method: 'POST', body: code, credentials: 'same-origin',"
        " headers: {'Content-Type': 'text/plain'}})"
        ".then((r) => { if (r.ok) { location.reload(); } else { throw new Error(r.status); } })"
        ".catch(() => { const p = document.createElement('p'); p.id = 'rw-sign-in-failed';"
        " p.textContent = 'Signing in did not finish: reload the page and sign in again.';"
        " document.body.appendChild(p); });"
        "})();</script>"
    )


def sign_out_script(path: str) -> str:
    """The script that posts to `path` (`SIGN_OUT_PATH`), whose answer deletes the cookie (a
    page script cannot: it is HttpOnly) and ends its session."""
    return (
        f"{_HIDDEN}<script data-rw-cookie>"
        f"fetch({json.dumps(path)}, {{method: 'POST', credentials: 'same-origin'}});"
        "</script>"
    )
