"""Who is using the console and what they may do: viewer or operator. The Streamlit glue: it reads
the browser's request and the secrets, asks `dashboard.signin.decisions` (pure decisions) and
`dashboard.signin.sessions` (sign-in sessions in the store), and draws.

Three modes, chosen from `.streamlit/secrets.toml`:

- **oidc**: an `[auth]` section is present. `st.login` signs people in; `[rewind.roles]` maps
  identities (e-mail or subject, shell-style patterns allowed) to roles.
- **local**: `[rewind.users.<name>]` tables with `role` and `password_hash` (scrypt, printed by
  `rewind hash-password`). A form with "Username", "Password" and "Sign in". Signing in starts a
  session (`SessionTokens`, kept in the store): a random token in the `rewind_session` cookie,
  which only the server side sets (HttpOnly, SameSite=Strict; see `dashboard.signin.sessions`),
  so a reload, a second tab, a shared link, a console restart or another replica stays signed
  in. It ends on sign-out, after 12 hours unused or 7 days in all (`[rewind]
  session_idle_minutes`, `session_max_hours`), and when the account is deleted or its password
  changed. Failed sign-ins are throttled (`SignInThrottle`), per client as
  `[rewind] trusted_proxies` lets `X-Forwarded-For` name it.
- **demo**: neither is configured. Everyone the console serves acts as the operator `demo`, so
  it serves only a browser on this machine: the server must be bound to loopback, the peer must be
  loopback, the request's Host must be ``localhost``, ``127.0.0.1`` or ``[::1]`` (any port; a DNS
  rebinding name such as ``rebind.evil.test`` resolving to 127.0.0.1 is refused). Anyone else
  sees how to configure accounts. `server.allowedHosts` in `.streamlit/config.toml` refuses
  foreign Host names again, before the app runs.

In every mode a connection whose Origin is not the console's own (another site, or another port
of the same host) is refused, here and before it reaches Streamlit (`dashboard.serve`).

Hiding buttons is a courtesy: the engine checks the actor's role again in every action (see
`dashboard.actions`), and asks the secrets file for it at that moment: the `Actor` of a console
user carries an authority (`role_authority`) that re-reads the accounts and the OIDC role map, so
a dialog left open by an account since demoted or deleted acts no more. A secrets file that
exists but cannot be read or parsed fails closed (`dashboard.secrets_file`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import streamlit as st

from dashboard import data, secrets_file
from dashboard.secrets_file import SecretsFileError
from dashboard.settings import section
from dashboard.signin.decisions import (
    DEMO_USER,
    LOCAL_HOST_NAMES,
    ROLES,
    SESSION_IDLE_MINUTES,
    SESSION_MAX_HOURS,
    AccessConfigError,
    BrowserRequest,
    SignInThrottle,
    User,
    access_mode,
    allowed_origins,
    authenticate,
    client_address,
    demo_allowed,
    demo_request_allowed,
    host_name,
    is_local_host_header,
    is_loopback,
    local_accounts,
    normalize_username,
    oidc_identity,
    oidc_providers,
    role_for_identity,
    role_now,
    same_origin,
    same_origin_request,
    session_limits,
    trusted_proxies,
)
from dashboard.signin.sessions import (
    GUARD_HEADER,
    SESSION_COOKIE,
    SIGN_IN_PATH,
    SIGN_OUT_PATH,
    SessionTokens,
    SignedInSession,
    credential_stamp,
    exchange_script,
    restored_user,
    sign_out_script,
)
from engine import PermissionDenied

__all__ = [
    "COOKIE_KEY", "COOKIE_READ_KEY", "DEMO_USER", "LOCAL_HOST_NAMES", "ROLES", "SESSION_COOKIE",
    "SESSION_IDLE_MINUTES", "SESSION_KEY", "SESSION_MAX_HOURS", "TOKEN_KEY", "AccessConfigError",
    "BrowserRequest", "SessionTokens", "SignInThrottle", "SignedInSession", "User",
    "access_mode", "authenticate", "browser_request", "credential_stamp", "current_user",
    "demo_allowed", "demo_request_allowed", "host_name", "is_local_host_header", "is_loopback",
    "local_accounts", "normalize_username", "oidc_identity", "oidc_providers", "read_secrets",
    "require_user", "restored_user", "role_authority", "role_for_identity", "role_now",
    "same_origin", "session_cookie", "session_limits", "session_tokens", "sign_out",
]

SESSION_KEY = "rewind_user"
TOKEN_KEY = "rewind_session_token"
"""Where this Streamlit session keeps its sign-in token (server side; never drawn)."""
COOKIE_READ_KEY = "rewind_cookie_read"
"""True once this Streamlit session has looked at the session cookie its browser sent."""
COOKIE_KEY = "rewind_cookie_change"
"""The cookie change the next draw asks the server side for: a one-time code to exchange for
the cookie, or None to delete it."""


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


@st.cache_resource(show_spinner=False)
def _tokens_for(url: str | None) -> SessionTokens:
    return SessionTokens(data.engine_for(url).documents)


def session_tokens() -> SessionTokens:
    """The sign-in sessions of the console's store (one `SessionTokens` per store, over the
    console's engine). Also called by the ASGI guard (`dashboard.serve`), outside any run."""
    return _tokens_for(data.store_url())


def _session_tokens() -> SessionTokens:
    return session_tokens()


def base_path(route: str) -> str:
    """`route` (``/_rewind/…``) under the console's `server.baseUrlPath`."""
    base = str(st.get_option("server.baseUrlPath") or "").strip("/")
    return f"/{base}{route}" if base else route


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
        request = browser_request()  # demo mode checks the origin with the rest (below)
        if mode != "demo" and request is not None and not same_origin_request(
                request.origin, request.host, allowed_origins(secrets)):
            st.title("Rewind console")
            st.error("This connection came from a page of another origin (another site, or "
                     "another port of this host), so the console serves it nothing. Open the "
                     "console's own address directly.")
            return None
        if mode == "demo":
            user = _demo_user()
        elif mode == "oidc":
            user = _oidc_user(secrets)
        else:
            accounts, limits = local_accounts(secrets), session_limits(secrets)
            with data.store_errors():  # sign-in sessions live in the store
                user = _local_user(accounts, limits)
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
        forwarded_for=tuple(headers.get_all("x-forwarded-for")),
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
    (a reload, a second tab, a shared link, the page reloaded after sign-in); the role is the
    account's as the secrets hold it now. A session that ended (signed out, expired, account
    deleted or its password changed) shows the sign-in form again and has the server side
    delete the cookie."""
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
    if _send_cookie(slot):
        st.title("Rewind console")
        st.info("Signing in…", icon=":material/login:")
        return None
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
    client = throttle_client()
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
    stamp = credential_stamp(accounts[name]["password_hash"])
    if guarded():
        # The page exchanges the code for the HttpOnly cookie (`SIGN_IN_PATH`) and reloads;
        # the reloaded page's connection carries the cookie and is signed in.
        st.session_state[COOKIE_KEY] = _session_tokens().issue_code(user.name, stamp)
    else:  # no guard, no cookie route: signed in for this page only
        st.session_state[SESSION_KEY] = user
        st.session_state[TOKEN_KEY] = _session_tokens().issue(user.name, stamp)
    st.rerun()


def guarded() -> bool:
    """Whether the console's ASGI guard (`dashboard.serve`, as `rewind dashboard` runs it)
    passed this connection on, so its cookie routes answer."""
    return st.context.headers.get(GUARD_HEADER) == "1"


def throttle_client() -> str | None:
    """The client the sign-in throttle counts this browser as: its peer address, or what a
    trusted proxy (`[rewind] trusted_proxies`) says in `X-Forwarded-For`."""
    request = browser_request()
    if request is None:
        return None
    try:
        proxies = trusted_proxies(read_secrets())
    except (SecretsFileError, AccessConfigError):
        proxies = ()
    return client_address(request.peer, request.forwarded_for, proxies)


def session_cookie() -> str | None:
    """The session token the browser sent when this Streamlit session connected, if any (the
    cookie is HttpOnly: the server reads it from the websocket's handshake)."""
    return st.context.cookies.get(SESSION_COOKIE)


def _send_cookie(slot: Any) -> bool:
    """Have the server side make the cookie change this session owes the browser, once, from
    `slot` (an `st.empty`): exchange a one-time code for the cookie after sign-in, or delete it
    after sign-out or an ended session. True when a sign-in's exchange was drawn."""
    if COOKIE_KEY not in st.session_state:
        return False
    code = st.session_state.pop(COOKIE_KEY)
    if not guarded():
        return False  # no route to ask; the session it stood for has ended anyway
    if code:
        slot.html(exchange_script(code, base_path(SIGN_IN_PATH)), unsafe_allow_javascript=True)
        return True
    slot.html(sign_out_script(base_path(SIGN_OUT_PATH)), unsafe_allow_javascript=True)
    return False


def sign_out(user: User) -> None:
    """End the user's console session: a local account's session is revoked in the store, and
    the next run has the server side delete the browser's cookie."""
    _session_tokens().revoke(st.session_state.pop(TOKEN_KEY, None))
    if st.session_state.pop(SESSION_KEY, None) is not None and user.source == "local":
        st.session_state[COOKIE_KEY] = None
    if user.source == "oidc":
        st.logout()
