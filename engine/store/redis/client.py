"""The connection to Redis: URL and options, the redis-py client, retries, and what a failure
means for the caller.

URLs: ``redis://[user:password@]host:port/db``, ``rediss://…`` (TLS), and
``redis+cluster://host:port`` / ``rediss+cluster://…`` for Redis Cluster (any node as seed).
The password may also come as ``?password=…``; either way it is never printed: `url` and every
error message show it as ***.
Rewind's own options go in the query string or as keyword arguments (keyword wins):

=========================  =======  ===================================================
option                     default  meaning
=========================  =======  ===================================================
ttl                        1800     seconds of inactivity after which an idle healthy
                                    session without evidence expires (see
                                    `engine.store.redis.store`); 0 keeps every session
prefix                     rewind   first part of every key (several deployments can
                                    share one Redis)
events_maxlen              100000   the live feed keeps about this many events (MAXLEN ~)
session_events_maxlen      10000    the feed of one session keeps about this many
retries                    3        retries of a command after a connection error
retry_base / retry_cap     0.05/1   exponential backoff between retries (seconds)
timeout / connect_timeout  10 / 5   socket timeouts (seconds)
=========================  =======  ===================================================

Any other query parameter or keyword goes to redis-py (``ssl_ca_certs=…``, ``ssl_cert_reqs=…``).

What failures become:

- the server cannot be reached, after the retries: `StoreUnavailable`, naming host and port
  (never the password). Only this error lets ``?fallback=sqlite:///…`` switch stores.
- the server answers but refuses who we are (a wrong or missing password, an unknown or
  disabled user, an ACL that forbids a command: ``WRONGPASS``, ``NOAUTH``, ``NOPERM``):
  `StoreAuthError`, also naming host and port, never the password. It is a configuration
  error, not an outage, so no fallback store takes over.
- a script's own refusal (``REWIND <CODE> …``): the engine's error for it (`script_error`).
- anything else Redis refuses: `StoreError`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    AuthenticationError,
    ClusterDownError,
    NoPermissionError,
    NoScriptError,
    RedisClusterException,
    RedisError,
    ResponseError,
)
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    TimeoutError as RedisTimeoutError,
)
from redis.retry import Retry

from engine.errors import (
    DecisionRefused,
    NothingToRollBack,
    RollbackConflict,
    SnapshotNotRestorable,
    StoreAuthError,
    StoreError,
    StoreUnavailable,
    UnknownSession,
    UnknownSnapshot,
)
from engine.store.redis import keys
from engine.store.requests import decided_message, moved_message, not_waiting_message
from engine.store.urls import redact, secrets

SCHEMES = frozenset({"redis", "rediss", "redis+cluster", "rediss+cluster"})

DEFAULTS: dict[str, Any] = {
    "ttl": 1800,
    "prefix": keys.DEFAULT_PREFIX,
    "events_maxlen": 100_000,
    "session_events_maxlen": 10_000,
    "retries": 3,
    "retry_base": 0.05,
    "retry_cap": 1.0,
    "timeout": 10.0,
    "connect_timeout": 5.0,
}
_CONVERT: dict[str, Callable[[Any], Any]] = {
    "ttl": lambda v: int(float(v)),
    "prefix": keys.check_prefix,
    "events_maxlen": int,
    "session_events_maxlen": int,
    "retries": int,
    "retry_base": float,
    "retry_cap": float,
    "timeout": float,
    "connect_timeout": float,
}
_CONNECTION_ERRORS = (RedisConnectionError, RedisTimeoutError, RedisClusterException, OSError)

_AUTH_MARKERS = ("WRONGPASS", "NOAUTH", "NOPERM", "can't run this command")
"""Texts of ACL refusals that reach us as plain errors (the last one: a command inside a Lua
script that the ACL forbids)."""


def is_auth_failure(exc: BaseException) -> bool:
    """Whether `exc`, or an error that caused it, says the server refused our credentials or
    our ACL (Redis Cluster wraps the cause in a RedisClusterException)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, AuthenticationError | NoPermissionError):
            return True
        if any(marker in str(current) for marker in _AUTH_MARKERS):
            return True
        current = current.__cause__ or current.__context__
    return False


@dataclass(frozen=True)
class Settings:
    """Rewind's own options, parsed (see the module docstring for their meaning)."""

    ttl: int
    """Seconds an idle healthy session without evidence lives; 0: forever."""
    prefix: str
    """First part of every key."""
    events_maxlen: int
    """About how many events the live feed keeps."""
    session_events_maxlen: int
    """About how many events the feed of one session keeps."""
    retries: int
    """Retries of a command after a connection error."""
    retry_base: float
    """Seconds of the first backoff between retries."""
    retry_cap: float
    """Seconds the backoff never exceeds."""
    timeout: float
    """Socket timeout of a command, seconds."""
    connect_timeout: float
    """Socket timeout of a connection attempt, seconds."""


class RedisClient:
    """One redis-py client (single Redis or Redis Cluster) with Rewind's options, retries,
    script cache and error mapping. `RedisStore` sends every request through `call` or
    `script`."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in SCHEMES:
            raise ValueError(
                f"{redact(url)!r} is not a redis://, rediss:// or redis+cluster:// URL"
            )
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in query if k in DEFAULTS or k == "fallback"}
        raw = {**DEFAULTS, **ours, **{k: v for k, v in options.items() if k in DEFAULTS}}
        if "fallback" in ours or "fallback" in options:
            raise ValueError(
                "the fallback option is implemented by engine.store.fallback.open_redis "
                "(open_store uses it); RedisStore itself never falls back"
            )
        extra = {k: v for k, v in options.items() if k not in DEFAULTS}
        for name, convert in _CONVERT.items():
            try:
                raw[name] = convert(raw[name])
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{redact(url)}: bad value for {name}: {exc}") from exc
        if raw["ttl"] < 0:
            raise ValueError("ttl must be 0 (never expire) or a number of seconds")

        self.settings = Settings(**raw)
        self.url = redact(url)
        """The URL without any password (safe to print)."""
        self.cluster = scheme.endswith("+cluster")
        database = parts.path.strip("/")
        if database and not (database.isdigit() and database.isascii()):
            # redis-py would quietly use db 0: the wrong database looks like an empty fleet.
            raise ValueError(f"{redact(url)}: the database after the host must be a number "
                             f"(redis://host:6379/0), not {database[:40]!r}")
        if database and self.cluster and database != "0":
            raise ValueError(f"{redact(url)}: Redis Cluster has only database 0")
        self.host = parts.hostname or "localhost"
        self.port = parts.port or 6379
        self.retries = self.settings.retries
        password_option = extra.get("password")
        self._secrets = sorted(
            {*secrets(url), *([password_option] if isinstance(password_option, str) else [])},
            key=len,
            reverse=True,
        )
        self._shas: dict[str, str] = {}
        self.round_trips = 0
        """Requests sent (scripts and commands; a pipeline counts once)."""

        client_url = urlunsplit(
            (
                scheme.replace("+cluster", ""),
                parts.netloc,
                parts.path,
                urlencode([(k, v) for k, v in query if k not in ours]),
                "",
            )
        )
        retry = Retry(
            ExponentialBackoff(cap=self.settings.retry_cap, base=self.settings.retry_base),
            self.retries,
        )
        common: dict[str, Any] = dict(
            decode_responses=True,
            socket_timeout=self.settings.timeout,
            socket_connect_timeout=self.settings.connect_timeout,
            **extra,
        )
        self.r: redis.Redis | redis.RedisCluster
        try:
            if self.cluster:
                self.r = redis.RedisCluster.from_url(client_url, retry=retry, **common)
            else:
                common.setdefault("health_check_interval", 30)
                self.r = redis.Redis.from_url(
                    client_url,
                    retry=retry,
                    retry_on_error=[RedisConnectionError, RedisTimeoutError],
                    **common,
                )
            self.r.ping()
        except TypeError as exc:  # an option redis-py does not know (for this scheme)
            raise ValueError(f"{self.url}: {self.scrub(str(exc))}") from None
        except (*_CONNECTION_ERRORS, RedisError) as exc:
            raise self.error(exc) from None

    @property
    def where(self) -> str:
        """host:port of the Redis server (the seed node on Redis Cluster)."""
        return f"{self.host}:{self.port}"

    @property
    def kind(self) -> str:
        return "Redis Cluster" if self.cluster else "Redis"

    def scrub(self, text: str) -> str:
        """`text` with every password of the URL replaced by ***."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    # -- what a failure means -----------------------------------------------------------------
    def error(self, exc: BaseException) -> StoreError:
        """The Rewind error for a redis-py failure (see the module docstring)."""
        if is_auth_failure(exc):
            return self.auth_failed(exc)
        if isinstance(exc, (*_CONNECTION_ERRORS, ClusterDownError)):
            return self.unavailable(exc)
        return self.failed(exc)

    def unavailable(self, exc: BaseException) -> StoreUnavailable:
        cause = (self.scrub(str(exc)) or type(exc).__name__).rstrip(".")
        error = StoreUnavailable(
            f"cannot reach {self.kind} at {self.where} ({self.url}) after {self.retries} "
            f"retries: {cause}. Check that the server runs and that host and port are right; "
            "open the store with ?fallback=sqlite:///.rewind/fallback.db to run on the "
            "embedded store while Redis is down"
        )
        error.where, error.cause = self.where, cause  # type: ignore[attr-defined]
        return error

    def auth_failed(self, exc: BaseException) -> StoreAuthError:
        cause = (self.scrub(str(exc)) or type(exc).__name__).rstrip(".")
        error = StoreAuthError(
            f"{self.kind} at {self.where} ({self.url}) refused this client's credentials or "
            f"ACL: {cause}. Check the user and password in the URL (user:password@host or "
            "?password=…) and that its ACL allows EVALSHA, SCRIPT LOAD and the commands the "
            "scripts run on the prefix's keys. A fallback store is not used for this: it is not "
            "an outage"
        )
        error.where, error.cause = self.where, cause  # type: ignore[attr-defined]
        return error

    def failed(self, exc: BaseException) -> StoreError:
        return StoreError(
            f"{self.kind} at {self.where} ({self.url}) refused the operation: "
            f"{self.scrub(str(exc))}"
        )

    # -- requests -----------------------------------------------------------------------------
    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one client call (or a pipeline's execute), translating failures.

        The reply is typed Any: the client decodes every reply to str (decode_responses),
        which redis-py's annotations (``bytes | str``) cannot express."""
        self.round_trips += 1
        try:
            return fn(*args, **kwargs)
        except NoScriptError:
            raise
        except ResponseError as exc:
            if str(exc).startswith("REWIND "):  # a script's own error: the caller maps it
                raise
            raise self.error(exc) from None
        except (*_CONNECTION_ERRORS, ClusterDownError, RedisError) as exc:
            raise self.error(exc) from None

    def script(self, name: str, keys_: list[str], args: list[Any], source: str) -> Any:
        """EVALSHA script `name` (loading `source` on first use or after a server restart)."""
        sha = self._shas.get(name)
        try:
            if sha is None:
                raise NoScriptError("not loaded yet")
            return self.call(self.r.evalsha, sha, len(keys_), *keys_, *args)
        except NoScriptError:  # first use, or the server restarted and lost its script cache
            sha = self._shas[name] = cast(str, self.call(self.r.script_load, source))
            return self.call(self.r.evalsha, sha, len(keys_), *keys_, *args)

    def close(self) -> None:
        self.r.close()


def script_error(exc: ResponseError, client: RedisClient, sid: str, target: Any) -> Exception:
    """The engine's error for a session script's ``REWIND <CODE> <detail>`` refusal."""
    text = str(exc)
    if not text.startswith("REWIND "):
        return client.error(exc)
    code, _, detail = text[7:].partition(" ")
    detail = detail.split(" script: ")[0].strip()
    if code == "UNKNOWN_SESSION":
        return UnknownSession(f"no session {sid!r} in this store")
    if code == "NOT_WAITING":
        return DecisionRefused(not_waiting_message(sid, detail))
    if code == "DECIDED":
        kind, _, actor = detail.partition(" ")
        return DecisionRefused(decided_message(sid, kind, actor))
    if code == "UNKNOWN_SNAPSHOT":
        return UnknownSnapshot(f"session {sid!r} has no snapshot {target!r}")
    if code == "ABANDONED":
        return SnapshotNotRestorable(
            f"snapshot {target!r} lies on the abandoned branch {detail}; "
            "roll back to a snapshot on the live line"
        )
    if code == "MOVED":
        head, _, epoch = detail.rpartition(" ")
        return RollbackConflict(moved_message(sid, (head or None, int(epoch))))
    if code == "EPOCH_MOVED":
        return RollbackConflict(
            f"session {sid!r} was rolled back by someone else (epoch is now {detail}); "
            "look at it again before rolling back"
        )
    if code == "RETIRED":
        return SnapshotNotRestorable(
            f"snapshot {target!r} was retired by the retention window; pick a newer snapshot"
        )
    if code == "NOTHING":
        return NothingToRollBack(
            f"session {sid!r} has nothing after snapshot {target!r} to roll back: no "
            "message, step, snapshot, variable or memory was written since; pick an "
            "earlier snapshot"
        )
    return StoreError(f"Redis at {client.where}: {text}")
