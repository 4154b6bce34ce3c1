"""Redis and Redis Cluster store, for fleets of agent workers on many hosts.

URLs: ``redis://[user:password@]host:port/db``, ``rediss://…`` (TLS), and
``redis+cluster://host:port`` / ``rediss+cluster://…`` for Redis Cluster (any node as seed).
Rewind's own options go in the query string or as keyword arguments (keyword wins):

=========================  =======  ===================================================
option                     default  meaning
=========================  =======  ===================================================
ttl                        1800     seconds of inactivity after which a session's keys
                                    expire; 0 keeps sessions forever
prefix                     rewind   first part of every key (several deployments can
                                    share one Redis)
events_maxlen              100000   the live feed keeps about this many events (MAXLEN ~)
session_events_maxlen      10000    the feed of one session keeps about this many
retries                    3        retries of a command after a connection error
retry_base / retry_cap     0.05/1   exponential backoff between retries (seconds)
timeout / connect_timeout  10 / 5   socket timeouts (seconds)
=========================  =======  ===================================================

Any other query parameter or keyword goes to redis-py (``ssl_ca_certs=…``, ``ssl_cert_reqs=…``).

How it stays correct:

- Every state-changing operation on a session is one Lua script over keys that share the
  session's hash tag (see `engine.store.redis.keys`), so it happens entirely or not at all, on a
  single Redis and on Redis Cluster. A client killed mid-operation leaves no torn state.
- A snapshot is one record; a rollback pops what is newer than its target from the tails of the
  session's live lists, so its cost follows what leaves the live line.
- A guarded step is two round trips: `begin_step` (write-ahead snapshot and step record) and
  `end_step` are one script each. On Redis Cluster the fleet outbox adds at most one request per
  step, off the agent's path (and fewer under load: it batches).
- Every write carries a request id; when a connection drops after the server ran the script, the
  retry returns the remembered reply instead of writing twice.
- Fleet views (session indexes, audit, event feed, compensation outbox) live under the fleet hash
  tag. On a single Redis the session script updates them itself. On Redis Cluster they are in
  another slot: the session script appends the change to the session's own outbox list (atomic
  with the change), and a second call applies it to the fleet keys — right away for rollbacks,
  notices, status changes and deletions (their callers read the result), and off the caller's
  path for the high-frequency writes (steps, messages, variables, snapshots), batched by a
  background thread (`begin_step` makes no entry: its only fleet effect, the activity time, is
  superseded by `end_step`). Applying an outbox entry twice is a no-op, so any later writer of
  the session, or `rebuild_indexes` (`rewind doctor`), finishes what a killed client left. Fleet
  reads flush first, so a process always sees its own writes; other processes see them within
  milliseconds.
- A failure to reach Redis, after the retries, raises `StoreUnavailable` naming host and port
  (never the password). Nothing is dropped silently.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import (
    ClusterDownError,
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
    RollbackConflict,
    SnapshotNotRestorable,
    StoreError,
    StoreUnavailable,
    UnknownSession,
    UnknownSnapshot,
)
from engine.records import (
    AuditEvent,
    BranchInfo,
    Compensation,
    Event,
    MessageRecord,
    RollbackResult,
    SessionInfo,
    SnapshotNode,
    StepRecord,
)
from engine.store import redact
from engine.store.base import Retention, StepTicket
from engine.store.redis import keys
from engine.store.redis.scripts import OUTBOX_BATCH, sources
from engine.store.sqlite.store import _dumps

log = logging.getLogger("rewind.redis")

DEFAULTS: dict[str, Any] = {
    "ttl": 1800, "prefix": keys.DEFAULT_PREFIX, "events_maxlen": 100_000,
    "session_events_maxlen": 10_000, "retries": 3, "retry_base": 0.05, "retry_cap": 1.0,
    "timeout": 10.0, "connect_timeout": 5.0,
}
_CONVERT = {
    "ttl": lambda v: int(float(v)), "prefix": keys.check_prefix,
    "events_maxlen": int, "session_events_maxlen": int, "retries": int,
    "retry_base": float, "retry_cap": float, "timeout": float, "connect_timeout": float,
}
_CONNECTION_ERRORS = (RedisConnectionError, RedisTimeoutError, RedisClusterException, OSError)
_STATUSES = ("healthy", "looping", "rolled_back", "stopped")
_META_FIELDS = ("tenant", "scenario", "prompt_version")


def _rid() -> str:
    return uuid.uuid4().hex


def _num(value: float) -> str:
    """A float as JSON number text that reads back exactly."""
    return repr(float(value))


def _index_lines(meta: dict) -> str:
    lines = []
    for field in _META_FIELDS:
        value = meta.get(field)
        if value is not None:
            lines.append(keys.meta_index_suffix(field, _dumps(value)))
    return "\n".join(lines)


def _session_info(d: dict) -> SessionInfo:
    return SessionInfo(
        id=d["id"], meta=json.loads(d["meta"]), status=d["status"], head=d["head"] or None,
        epoch=int(d["epoch"]), created_at=float(d["created"]), updated_at=float(d["updated"]),
        steps=int(d["steps"]), messages=int(d["msgs"]), loops=int(d["loops"]),
        rollbacks=int(d["rollbacks"]), last_verdict=json.loads(d["verdict"]) if d["verdict"]
        else None,
    )


def _comp_field(name: str, args_json: str) -> str:
    """The step's compensation as stored: handler name (JSON) and args (JSON), newline apart."""
    return json.dumps(name, ensure_ascii=False) + "\n" + args_json


class RedisStore:
    """Store on Redis or Redis Cluster (see the module docstring for URLs and options)."""

    def __init__(self, url: str, **options: Any):
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in {"redis", "rediss", "redis+cluster", "rediss+cluster"}:
            raise ValueError(f"{redact(url)!r} is not a redis://, rediss:// or "
                             "redis+cluster:// URL")
        query = parse_qsl(parts.query, keep_blank_values=True)
        ours = {k: v for k, v in query if k in DEFAULTS or k == "fallback"}
        settings = {**DEFAULTS, **ours, **{k: v for k, v in options.items() if k in DEFAULTS}}
        if "fallback" in ours or "fallback" in options:
            raise ValueError(
                "the fallback option is implemented by engine.store.fallback.open_redis "
                "(open_store uses it); RedisStore itself never falls back"
            )
        extra = {k: v for k, v in options.items() if k not in DEFAULTS}
        for name, convert in _CONVERT.items():
            try:
                settings[name] = convert(settings[name])
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{redact(url)}: bad value for {name}: {exc}") from exc
        if settings["ttl"] < 0:
            raise ValueError("ttl must be 0 (never expire) or a number of seconds")

        self.url = redact(url)
        self.cluster = scheme.endswith("+cluster")
        self.host = parts.hostname or "localhost"
        self.port = parts.port or 6379
        self.ttl: int = settings["ttl"]
        self.prefix: str = settings["prefix"]
        self.events_maxlen: int = settings["events_maxlen"]
        self.session_events_maxlen: int = settings["session_events_maxlen"]
        self.retries: int = settings["retries"]
        self._password = parts.password
        self._fb = keys.fleet_base(self.prefix)
        self._sources = sources()
        self._shas: dict[str, str] = {}
        self._acks: dict[str, tuple[str, int]] = {}
        self._acks_lock = threading.Lock()
        self._last_sweep = 0.0
        self.round_trips = 0
        """Requests this store sent (scripts and commands; a pipeline counts once)."""

        client_url = urlunsplit((scheme.replace("+cluster", ""), parts.netloc, parts.path,
                                 urlencode([(k, v) for k, v in query if k not in ours]), ""))
        retry = Retry(ExponentialBackoff(cap=settings["retry_cap"], base=settings["retry_base"]),
                      self.retries)
        common = dict(decode_responses=True, socket_timeout=settings["timeout"],
                      socket_connect_timeout=settings["connect_timeout"], **extra)
        try:
            if self.cluster:
                self._r = redis.RedisCluster.from_url(client_url, retry=retry, **common)
            else:
                common.setdefault("health_check_interval", 30)
                self._r = redis.Redis.from_url(
                    client_url, retry=retry,
                    retry_on_error=[RedisConnectionError, RedisTimeoutError], **common,
                )
            self._r.ping()
        except TypeError as exc:  # an option redis-py does not know (for this scheme)
            raise ValueError(f"{self.url}: {exc}") from None
        except _CONNECTION_ERRORS as exc:
            raise self._unavailable(exc) from None
        except RedisError as exc:
            raise self._failed(exc) from None
        self._flusher = _OutboxFlusher(self) if self.cluster else None

    # -- plumbing ---------------------------------------------------------------------------
    @property
    def where(self) -> str:
        """host:port of the Redis server (the seed node on Redis Cluster)."""
        return f"{self.host}:{self.port}"

    def _clean(self, text: str) -> str:
        if self._password:
            text = text.replace(self._password, "***")
        return text

    def _unavailable(self, exc: BaseException) -> StoreUnavailable:
        kind = "Redis Cluster" if self.cluster else "Redis"
        cause = (self._clean(str(exc)) or type(exc).__name__).rstrip(".")
        error = StoreUnavailable(
            f"cannot reach {kind} at {self.where} ({self.url}) after {self.retries} retries: "
            f"{cause}. Check that the server runs and that the URL, user and password are "
            "right; open the store with ?fallback=sqlite:///.rewind/fallback.db to run on the "
            "embedded store while Redis is down"
        )
        error.where, error.cause = self.where, cause
        return error

    def _failed(self, exc: BaseException) -> StoreError:
        return StoreError(f"Redis at {self.where} ({self.url}) refused the operation: "
                          f"{self._clean(str(exc))}")

    def _guard(self, fn, *args, **kwargs):
        """Run one client call, translating connection failures (after retries)."""
        self.round_trips += 1
        try:
            return fn(*args, **kwargs)
        except (*_CONNECTION_ERRORS, ClusterDownError) as exc:
            raise self._unavailable(exc) from None
        except NoScriptError:
            raise
        except ResponseError as exc:
            if str(exc).startswith("REWIND "):  # a script's own error: the caller maps it
                raise
            raise self._failed(exc) from None
        except RedisError as exc:
            raise self._failed(exc) from None

    def _script(self, name: str, keys_: list[str], args: list) -> Any:
        sha = self._shas.get(name)
        try:
            if sha is None:
                raise NoScriptError("not loaded yet")
            return self._guard(self._r.evalsha, sha, len(keys_), *keys_, *args)
        except NoScriptError:  # first use, or the server restarted and lost its script cache
            sha = self._shas[name] = self._guard(self._r.script_load, self._sources[name])
            return self._guard(self._r.evalsha, sha, len(keys_), *keys_, *args)

    def _fleet(self, name: str, args: list) -> Any:
        return self._script("fleet_" + name, [self._fb], args)

    def _read(self, name: str, sid: str, args: list | None = None) -> Any:
        return self._script("read_" + name, [keys.session_base(sid, self.prefix)], args or [])

    def _write(self, name: str, sid: str, now: float, args: list, *,
               sync: bool = False) -> tuple[str, str]:
        """Run session script `name`; returns (result, extra). On Redis Cluster the fleet views
        follow from the session's outbox: now when `sync`, else off the caller's path."""
        base = keys.session_base(sid, self.prefix)
        enc = keys.encode(sid)
        if self.cluster:
            with self._acks_lock:
                ack = self._acks.get(enc)
            mode = f"c{ack[0]}:{ack[1]}" if ack else "c"
            script_keys = [base]
        else:
            mode = "i"
            script_keys = [base, self._fb]
        argv = [_rid(), _num(now), self.ttl, sid, enc, mode, self.events_maxlen,
                self.session_events_maxlen, *args]
        try:
            reply = self._script(name, script_keys, argv)
        except ResponseError as exc:
            raise self._rewind_error(exc, sid, args) from None
        result, extra = reply[0], reply[1]
        if self.cluster and len(reply) > 2:
            entries = reply[2:]
            if not sync:
                self._flusher.submit(entries)
            elif len(entries) < OUTBOX_BATCH:  # the script's own entry is the last one
                rows = self._apply_outbox(entries)
                extra = rows[-1][2] if rows else ""
            else:  # a long backlog (the fleet node was down): apply all of it, in order
                self._apply_outbox(self._guard(self._r.lrange, keys.fleet_outbox(base), 0, -1))
                extra = ""
        return result, extra

    def _rewind_error(self, exc: ResponseError, sid: str, args: list) -> Exception:
        text = str(exc)
        if not text.startswith("REWIND "):
            return self._failed(exc)
        code, _, detail = text[7:].partition(" ")
        detail = detail.split(" script: ")[0].strip()
        if code == "UNKNOWN_SESSION":
            return UnknownSession(f"no session {sid!r} in this store")
        target = args[0] if args else None
        if code == "UNKNOWN_SNAPSHOT":
            return UnknownSnapshot(f"session {sid!r} has no snapshot {target!r}")
        if code == "ABANDONED":
            return SnapshotNotRestorable(
                f"snapshot {target!r} lies on the abandoned branch {detail}; "
                "roll back to a snapshot on the live line"
            )
        if code == "EPOCH_MOVED":
            return RollbackConflict(
                f"session {sid!r} was rolled back by someone else (epoch is now {detail}); "
                "look at it again before rolling back"
            )
        if code == "RETIRED":
            return SnapshotNotRestorable(
                f"snapshot {target!r} was retired by the retention window; pick a newer snapshot"
            )
        return StoreError(f"Redis at {self.where}: {text}")

    # -- Redis Cluster: fleet outbox --------------------------------------------------------
    def _apply_outbox(self, entries: Iterable[str]) -> list[tuple[str, str, str]]:
        """Apply outbox entries to the fleet keys (idempotent); returns (sid, mark, comp ids)."""
        unique = list(dict.fromkeys(entries))
        rows: list[tuple[str, str, str]] = []
        for start in range(0, len(unique), 200):
            flat = self._fleet("apply", [self.events_maxlen, self.session_events_maxlen,
                                         *unique[start:start + 200]])
            rows += [tuple(flat[i:i + 3]) for i in range(0, len(flat), 3)]
        with self._acks_lock:
            for sid, mark, _ in rows:
                inc, _, q = mark.rpartition(":")
                enc = keys.encode(sid)
                old = self._acks.get(enc)
                if old is None or old[0] < inc or (old[0] == inc and old[1] < int(q)):
                    self._acks[enc] = (inc, int(q))
            if len(self._acks) > 100_000:
                self._acks.clear()
        return rows

    def flush(self, timeout: float = 30.0) -> None:
        """Bring the fleet views up to date with this process's writes (Redis Cluster; a no-op
        on a single Redis). Fleet reads call it, so a process always sees its own writes."""
        if self._flusher is not None:
            self._flusher.flush(timeout)

    def _fleet_read(self) -> None:
        self.flush()
        if time.monotonic() - self._last_sweep > 1.0:
            self._sweep()

    def close(self) -> None:
        if self._flusher is not None:
            try:
                self._flusher.close()
            except StoreError as exc:  # pragma: no cover - the outbox keeps what was not applied
                log.warning("fleet views not brought up to date on close: %s", exc)
        self._r.close()

    # -- sessions ---------------------------------------------------------------------------
    def ensure_session(self, sid: str, meta: dict | None, now: float) -> SessionInfo:
        new = dict(meta or {})
        incarnation = f"{time.time_ns():020x}{uuid.uuid4().hex[:8]}"
        create = [_dumps(new), _index_lines(new), incarnation]
        merge = ["1" if meta else "0", "", "", ""]
        for _ in range(20):
            result, extra = self._write("ensure", sid, now, create + merge)
            if result != "MERGE":
                return _session_info(json.loads(result))
            current = json.loads(extra)
            merged = {**json.loads(current["meta"]), **new}
            if _dumps(merged) == current["meta"]:
                return _session_info(current)
            merge = ["1", current["meta"], _dumps(merged), _index_lines(merged)]
        raise StoreError(f"session {sid!r}: its metadata kept changing under concurrent writers")

    def get_session(self, sid: str) -> SessionInfo | None:
        d = self._guard(self._r.hgetall, keys.session_hash(keys.session_base(sid, self.prefix)))
        return _session_info(d) if d else None

    def _fetch_sessions(self, sids: list[str]) -> list[dict]:
        pipe = self._r.pipeline(transaction=False)
        for sid in sids:
            pipe.hgetall(keys.session_hash(keys.session_base(sid, self.prefix)))
        return self._guard(pipe.execute)

    def _sweep(self) -> None:
        """Drop sessions whose keys expired from the fleet indexes."""
        self._last_sweep = time.monotonic()
        while True:
            sids = self._fleet("expired", [500])
            if not sids:
                return
            pipe = self._r.pipeline(transaction=False)
            for sid in sids:
                pipe.pttl(keys.session_hash(keys.session_base(sid, self.prefix)))
            ttls = self._guard(pipe.execute)
            gone, alive = [], []
            for sid, pttl in zip(sids, ttls, strict=True):
                if pttl == -2:
                    gone += [sid, keys.encode(sid), ""]
                else:  # alive: its deadline moved (or it no longer expires)
                    alive += [sid, pttl if pttl >= 0 else 10 * 365 * 86400 * 1000]
            if gone:
                self._fleet("forget", ["expired", *gone])
            if alive:
                self._fleet("extend", alive)
            if len(sids) < 500:
                return

    def list_sessions(self, *, status=None, tenant=None, scenario=None, prompt_version=None,
                      updated_since=None, limit=200, offset=0) -> list[SessionInfo]:
        self._fleet_read()
        index = keys.session_index(self._fb)
        meta_filters = {"tenant": tenant, "scenario": scenario, "prompt_version": prompt_version}
        for field, value in meta_filters.items():
            if value is not None:
                index = keys.meta_index(self._fb, keys.meta_index_suffix(field, _dumps(value)))
                break
        else:
            if status is not None:
                index = keys.status_index(self._fb, status)
        low = "-inf" if updated_since is None else _num(updated_since)
        want = offset + limit
        out: list[SessionInfo] = []
        missing: list[str] = []
        start, page = 0, max(100, want)
        while len(out) < want:
            members = self._guard(self._r.zrevrangebyscore, index, "+inf", low, start=start,
                                  num=page, withscores=True)
            if not members:
                break
            start += len(members)
            for (sid, score), d in zip(members, self._fetch_sessions([m[0] for m in members]),
                                       strict=True):
                if not d:
                    missing += [sid, keys.encode(sid), _num(score)]
                    continue
                info = _session_info(d)
                if status is not None and info.status != status:
                    continue
                if any(v is not None and info.meta.get(f) != v for f, v in meta_filters.items()):
                    continue
                if updated_since is not None and info.updated_at < updated_since:
                    continue
                out.append(info)
            if len(members) < page:
                break
        if missing:
            self._fleet("forget", ["missing", *missing])
        return out[offset:offset + limit]

    def count_sessions(self, *, status=None, updated_since=None) -> int:
        self._fleet_read()
        index = keys.session_index(self._fb) if status is None \
            else keys.status_index(self._fb, status)
        low = "-inf" if updated_since is None else _num(updated_since)
        return self._guard(self._r.zcount, index, low, "+inf")

    def set_status(self, sid: str, status: str, verdict: dict | None, now: float) -> None:
        if status not in _STATUSES:
            raise ValueError(f"status must be one of {', '.join(_STATUSES)}, not {status!r}")
        self._write("set_status", sid, now, [status, "" if verdict is None else _dumps(verdict)],
                    sync=True)

    # -- history ----------------------------------------------------------------------------
    def append_messages(self, sid: str, messages: list[dict], now: float) -> int:
        if not messages:
            info = self.get_session(sid)
            if info is None:
                raise UnknownSession(f"no session {sid!r} in this store")
            return info.epoch
        roles = _dumps([m["role"] for m in messages])
        result, _ = self._write("append", sid, now, [roles, *(_dumps(m) for m in messages)])
        return int(result)

    def put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> int:
        if not ns.isidentifier():
            raise ValueError(f"a key-value namespace must be an identifier, not {ns!r}")
        args: list[str] = [ns, _dumps({"keys": sorted(items)[:20], "count": len(items)})]
        for key, value in items.items():
            args += [key, "" if value is None else _dumps(value)]
        result, _ = self._write("put", sid, now, args)
        return int(result)

    def get_all(self, sid: str, ns: str) -> dict[str, Any]:
        base = keys.session_base(sid, self.prefix)
        raw = self._guard(self._r.hgetall, keys.kv_values(base, ns))
        return {k: json.loads(v) for k, v in raw.items()}

    def live_messages(self, sid: str) -> list[dict]:
        base = keys.session_base(sid, self.prefix)
        rows = self._guard(self._r.lrange, keys.live_messages(base), 0, -1)
        return [json.loads(r)[3] for r in rows]

    def all_messages(self, sid: str) -> list[MessageRecord]:
        live, abandoned = self._read("messages", sid)
        out = []
        for r in live:
            seq, pos, at, body = json.loads(r)
            out.append(MessageRecord(seq=seq, pos=pos, message=body, branch=None, created_at=at))
        for r in abandoned:
            branch, _, rec = r.partition(" ")
            seq, pos, at, body = json.loads(rec)
            out.append(MessageRecord(seq=seq, pos=pos, message=body, branch=branch,
                                     created_at=at))
        out.sort(key=lambda m: m.seq)
        return out

    # -- snapshots --------------------------------------------------------------------------
    def _retention_args(self, retention: Retention) -> list[int]:
        return [retention.keep_snapshots, retention.keep_step_snapshots]

    def take_snapshot(self, sid, label, kind, now, retention) -> SnapshotNode:
        if not kind.isidentifier():
            raise ValueError(f"a snapshot kind must be an identifier, not {kind!r}")
        label_json = "null" if label is None else _dumps(label)
        result, _ = self._write("snapshot", sid, now,
                                [label_json, kind, *self._retention_args(retention)])
        snap_id, parent, messages, next_step = json.loads(result)
        return SnapshotNode(
            id=snap_id, parent=parent, label=label, created_at=now, on_live_line=True,
            abandoned_reason=None, kind=kind, restorable=True, next_step=next_step,
            messages=messages, is_head=True,
        )

    def snapshots(self, sid: str) -> list[SnapshotNode]:
        head, flat, branch_flat, restorable = self._read("snapshots", sid)
        branches = self._branch_infos(branch_flat)
        restorable = set(restorable)
        records, abandoned = {}, {}
        for i in range(0, len(flat), 2):
            field, value = flat[i], flat[i + 1]
            if field.endswith("b"):
                abandoned[field[:-1]] = value
            else:
                records[field] = value
        out = []
        for seq in sorted(records, key=int):
            messages, next_step, kind, parent, label, created = json.loads(records[seq])
            snap_id = f"snap-{seq}"
            branch_id = abandoned.get(seq)
            branch = branches.get(branch_id) if branch_id else None
            reason = None
            if branch is not None:
                reason = f"rolled back to {branch.from_snapshot} by {branch.actor}: {branch.reason}"
            out.append(SnapshotNode(
                id=snap_id, parent=parent, label=label, created_at=created,
                on_live_line=branch_id is None, abandoned_reason=reason, kind=kind,
                restorable=branch_id is None and seq in restorable, next_step=next_step,
                messages=messages, branch=branch_id, is_head=snap_id == head,
            ))
        return out

    def restorable_snapshot(self, sid: str, before_step: int | None) -> str | None:
        result = self._read("restorable", sid, ["+inf" if before_step is None else before_step])
        return result or None

    @staticmethod
    def _branch_infos(flat: list[str]) -> dict[str, BranchInfo]:
        out = {}
        for i in range(0, len(flat), 2):
            _seq, epoch, target, actor, reason, created = json.loads(flat[i + 1])
            out[flat[i]] = BranchInfo(id=flat[i], from_snapshot=target, actor=actor,
                                      reason=reason, created_at=created, epoch=epoch)
        return out

    def branches(self, sid: str) -> list[BranchInfo]:
        base = keys.session_base(sid, self.prefix)
        flat = self._guard(self._r.hgetall, keys.branches(base))
        infos = self._branch_infos([x for kv in flat.items() for x in kv])
        return sorted(infos.values(), key=lambda b: int(b.id.rpartition("-")[2]))

    # -- steps ------------------------------------------------------------------------------
    def begin_step(self, sid, step, snapshot_label, now, retention) -> StepTicket:
        fields = dict(step)
        args_text = fields.pop("args")
        comp = fields.pop("compensation", None)
        body = _dumps({**fields, "side_effect": bool(fields.get("side_effect")),
                       "started_at": now})
        record = '{"args":' + args_text + "," + body[1:]
        comp_field = ""
        if comp is not None:
            name, comp_args = json.loads(comp)
            mark = "r" if fields.get("side_effect") else "x"
            comp_field = mark + _comp_field(name, _dumps(comp_args))
        label = "" if snapshot_label is None else _dumps(snapshot_label)
        result, _ = self._write("begin_step", sid, now, [
            "0" if snapshot_label is None else "1", label, *self._retention_args(retention),
            record, comp_field,
        ])
        n, epoch, snap, seq = json.loads(result)
        return StepTicket(n=n, epoch=epoch, snapshot=snap, seq=seq)

    def end_step(self, sid, ticket: StepTicket, outcome: dict, now: float) -> bool:
        verdict = outcome.get("verdict")
        record = _dumps({**outcome, "ended_at": now})
        result, _ = self._write("end_step", sid, now, [
            ticket.n, ticket.epoch, outcome["status"], record,
            "" if verdict is None else _dumps(verdict),
        ])
        return result == "1"

    @staticmethod
    def _to_steps(fields: dict[str, str]) -> list[StepRecord]:
        out = []
        for n in sorted((f for f in fields if f.isdigit()), key=int):
            seq, epoch, snap, begin = json.loads(fields[n])
            late, end = json.loads(fields[n + "e"]) if n + "e" in fields else (0, {})
            branch = fields.get(n + "b")
            comp = fields.get(n + "c")
            compensation = None
            if comp:
                name_json, _, args = comp[1:].partition("\n")
                compensation = (json.loads(name_json), json.loads(args))
            args = begin.get("args")
            out.append(StepRecord(
                n=int(n), tool=begin.get("tool"), args=args,
                fingerprint=begin.get("fingerprint"), status=end.get("status", "running"),
                error=end.get("error"), result_digest=end.get("result_digest"),
                result_preview=end.get("result_preview"), started_at=begin["started_at"],
                ended_at=end.get("ended_at"), side_effect=bool(begin.get("side_effect")),
                compensation=compensation, verdict=end.get("verdict"),
                on_live_line=branch is None, branch=branch, late=bool(late),
                snapshot=snap, text=begin.get("text"), epoch=epoch, budget=end.get("budget"),
            ))
        return out

    def steps(self, sid: str, *, live_only: bool = False, last: int | None = None):
        flat = self._read("steps", sid, ["1" if live_only else "0",
                                         "" if last is None else max(int(last), 0)])
        return self._to_steps({flat[i]: flat[i + 1] for i in range(0, len(flat), 2)})

    # -- rollback ---------------------------------------------------------------------------
    def rollback(self, sid, target, *, actor, reason, notice, now,
                 expect_epoch=None, kind="rollback") -> RollbackResult:
        notice_text = None if notice is None else notice.get("content")
        result, extra = self._write("rollback", sid, now, [
            target, _dumps(actor), _dumps(reason), "" if notice is None else _dumps(notice),
            _dumps(notice_text), "" if expect_epoch is None else str(int(expect_epoch)),
            "fork" if kind == "fork" else "rollback",
        ], sync=True)
        r = json.loads(result)
        ids = [int(x) for x in extra.split(",") if x]
        if len(ids) != len(r["compensations"]):  # a replayed reply: find them by their keys
            found = self._guard(self._r.hmget, keys.comp_keys(self._fb),
                                [f"{sid}#{n}@{r['incarnation']}"
                                 for n, _, _ in r["compensations"]])
            ids = [int(x) for x in found if x is not None]
            r["compensations"] = [c for c, x in zip(r["compensations"], found, strict=True)
                                  if x is not None]
        queued = tuple(
            Compensation(id=cid, session=sid, step=n, name=name, args=args,
                         idempotency_key=f"{sid}#{n}@{r['incarnation']}", status="pending",
                         attempts=0,
                         error=None, created_at=now, updated_at=now, branch=r["branch"])
            for cid, (n, name, args) in zip(ids, r["compensations"], strict=True)
        )
        return RollbackResult(
            session=sid, target=target, branch=r["branch"], epoch=r["epoch"], actor=actor,
            reason=reason, at=now, abandoned_messages=r["messages"],
            abandoned_steps=r["steps"], abandoned_snapshots=r["snapshots"],
            abandoned_memories=r["memories"], compensations=queued, notice=notice_text,
        )

    def add_notice(self, sid: str, message: dict, actor: str, now: float) -> None:
        self._write("notice", sid, now, [_dumps(message), _dumps(actor),
                                         _dumps(message.get("content"))], sync=True)

    # -- audit and feed ---------------------------------------------------------------------
    def _ids_newest_first(self, index: str, ids_filter, wanted: int, fetch) -> list:
        out, start, page = [], 0, max(100, wanted)
        while len(out) < wanted:
            ids = self._guard(self._r.zrevrange, index, start, start + page - 1)
            if not ids:
                break
            start += len(ids)
            out += [x for x in fetch(ids) if x is not None and ids_filter(x)]
            if len(ids) < page:
                break
        return out[:wanted]

    def _audit_records(self, ids: list[str]) -> list[AuditEvent | None]:
        raw = self._guard(self._r.hmget, keys.audit_records(self._fb), ids) if ids else []
        out = []
        for text in raw:
            if text is None:
                out.append(None)
                continue
            d = json.loads(text)
            out.append(AuditEvent(id=d["id"], at=d["at"], actor=d["actor"], action=d["action"],
                                  session=d["session"], snapshot=d["snapshot"],
                                  reason=d["reason"], detail=d["detail"]))
        return out

    def audit(self, *, session=None, actor=None, action=None, since=None, limit=1000):
        self.flush()

        def keep(e: AuditEvent) -> bool:
            return ((session is None or e.session == session)
                    and (actor is None or e.actor == actor)
                    and (action is None or e.action == action)
                    and (since is None or e.at >= since))

        if since is not None:
            ids = self._guard(self._r.zrangebyscore, keys.audit_by_time(self._fb), _num(since),
                              "+inf")
            ids.sort(key=int, reverse=True)
            out = []
            for start in range(0, len(ids), 500):
                out += [e for e in self._audit_records(ids[start:start + 500])
                        if e is not None and keep(e)]
                if len(out) >= limit:
                    break
            return out[:limit]
        if session is not None:
            index = keys.audit_by_session(self._fb, keys.encode(session))
        elif action is not None:
            index = keys.audit_by_action(self._fb, action)
        else:
            index = keys.audit_all(self._fb)
        return self._ids_newest_first(index, keep, limit, self._audit_records)

    def count_audit(self, action: str, since: float) -> int:
        self.flush()
        # audit ids grow with time: find the first id at or after `since`, count from there
        first = self._guard(self._r.zrangebyscore, keys.audit_by_time(self._fb), _num(since),
                            "+inf", start=0, num=1)
        if not first:
            return 0
        return int(self._guard(self._r.zcount, keys.audit_by_action(self._fb, action),
                               int(first[0]), "+inf"))

    def add_audit(self, actor, action, session, snapshot, reason, detail, now) -> None:
        self._fleet("audit", [
            self.events_maxlen, self.session_events_maxlen, _num(now), session or "",
            keys.encode(session) if session else "", action, _dumps(actor), _dumps(snapshot),
            _dumps(reason), _dumps(detail), _dumps({"actor": actor, **detail}), self.ttl,
        ])

    def events(self, since: int = 0, limit: int = 1000, session: str | None = None):
        self.flush()
        key = keys.events(self._fb) if session is None \
            else keys.session_events(self._fb, keys.encode(session))
        rows = self._guard(self._r.xrange, key, f"{max(int(since), 0) + 1}-0", "+", count=limit)
        return [Event(id=int(xid.partition("-")[0]), at=float(f["a"]), session=f["s"] or None,
                      type=f["t"], data=json.loads(f["d"])) for xid, f in rows]

    def last_event_id(self) -> int:
        self.flush()
        return int(self._guard(self._r.get, keys.event_counter(self._fb)) or 0)

    # -- saga -------------------------------------------------------------------------------
    def _comp_records(self, ids: list[str]) -> list[Compensation | None]:
        pipe = self._r.pipeline(transaction=False)
        for cid in ids:
            pipe.hgetall(keys.compensation(self._fb, cid))
        return [self._to_comp(d) if d else None for d in self._guard(pipe.execute)]

    @staticmethod
    def _to_comp(d: dict) -> Compensation:
        return Compensation(
            id=int(d["id"]), session=d["session"], step=int(d["step"]),
            name=d["name"], args=json.loads(d["args"]), idempotency_key=d["key"],
            status=d["status"], attempts=int(d["attempts"]), error=d.get("error"),
            created_at=float(d["created"]), updated_at=float(d["updated"]),
            branch=d.get("branch") or None,
        )

    def compensations(self, *, session=None, status=None, limit=1000) -> list[Compensation]:
        self.flush()
        if session is not None:
            index = keys.comp_by_session(self._fb, keys.encode(session))
        elif status is not None:
            index = keys.comp_by_status(self._fb, status)
        else:
            index = keys.comp_all(self._fb)

        def keep(c: Compensation) -> bool:
            return (session is None or c.session == session) and \
                (status is None or c.status == status)

        return self._ids_newest_first(index, keep, limit, self._comp_records)

    def count_compensations(self, status: str) -> int:
        self.flush()
        return int(self._guard(self._r.zcard, keys.comp_by_status(self._fb, status)))

    def claim_compensation(self, names, owner, lease_s, now) -> Compensation | None:
        if not names:
            return None
        self.flush()
        flat = self._fleet("claim", [owner, _num(now + lease_s), _num(now), *names])
        if not flat:
            return None
        return self._to_comp(dict(zip(flat[::2], flat[1::2], strict=True)))

    def finish_compensation(self, cid, owner, ok, error, now, final) -> None:
        status = "done" if ok else ("failed" if final else "pending")
        self._fleet("finish", [
            self.events_maxlen, self.session_events_maxlen, str(int(cid)), owner, status,
            "null" if error is None else _dumps(error), error or "", _num(now), self.ttl,
        ])

    # -- documents --------------------------------------------------------------------------
    def doc_put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> None:
        if not ns.isidentifier():
            raise ValueError(f"a document namespace must be an identifier, not {ns!r}")
        args: list[str] = [ns]
        for key, value in items.items():
            args += [key, "" if value is None else _dumps(value)]
        self._write("doc_put", sid, now, args)

    def _docs(self, sid: str, args: list[str]) -> dict[str, Any]:
        flat = self._read("docs", sid, args)
        return {flat[i]: json.loads(flat[i + 1]) for i in range(0, len(flat), 2)}

    def doc_get(self, sid: str, ns: str, keys_: list[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i in range(0, len(keys_), 500):
            out.update(self._docs(sid, [ns, "keys", *keys_[i:i + 500]]))
        return out

    def doc_scan(self, sid: str, ns: str, prefix: str = "") -> dict[str, Any]:
        return self._docs(sid, [ns, "scan", prefix])

    def delete_session(self, sid: str, now: float) -> bool:
        self.flush()  # this process's pending fleet changes first, then the forgetting
        result, _ = self._write("delete", sid, now, [], sync=True)
        return result == "1"

    # -- retention --------------------------------------------------------------------------
    def purge_branches(self, before: float, now: float) -> dict:
        self.flush()
        removed = {"branches": 0, "messages": 0, "steps": 0, "snapshots": 0, "kv_writes": 0}
        members = self._guard(self._r.zrangebyscore, keys.branch_index(self._fb), "-inf",
                              "(" + _num(before))
        by_session: dict[str, list[str]] = {}
        for member in members:
            enc, _, branch = member.partition("/")
            by_session.setdefault(enc, []).append(branch)
        names = []
        for enc, branch_ids in by_session.items():
            sid = keys.decode(enc)
            base = keys.session_base(sid, self.prefix)
            argv = ["", _num(now), 0, sid, enc, "i", 0, 0, *branch_ids]
            counts = json.loads(self._script("purge", [base], argv))
            for name in removed:
                removed[name] += counts[name]
            names += [f"{sid}/{b}" for b in branch_ids]
        if members:
            self._fleet("purged", [
                self.events_maxlen, self.session_events_maxlen, _num(now), _dumps(removed),
                _dumps({**removed, "branch_ids": names[:100]}), *members,
            ])
        return removed

    # -- doctor -----------------------------------------------------------------------------
    def rebuild_indexes(self) -> dict:
        """Rebuild the fleet indexes from the sessions themselves (``rewind doctor``).

        Applies every fleet outbox entry a killed client left (Redis Cluster), re-indexes every
        session by last activity, status, tenant, scenario and prompt version, re-registers
        abandoned branches for retention, and drops index entries of sessions that no longer
        exist. Safe to run while agents write.

        Returns:
            Counts: sessions, outbox_entries, branches, stale_removed.
        """
        self.flush()
        counts = {"sessions": 0, "outbox_entries": 0, "branches": 0, "stale_removed": 0}
        seen = set()
        for key in self._guard(lambda: list(self._r.scan_iter(
                match=keys.session_pattern(self.prefix), count=1000))):
            sid = keys.sid_of_session_hash(key)
            base = keys.session_base(sid, self.prefix)
            pipe = self._r.pipeline(transaction=False)
            pipe.hgetall(keys.session_hash(base))
            pipe.lrange(keys.fleet_outbox(base), 0, -1)
            pipe.hgetall(keys.branches(base))
            pipe.ttl(keys.session_hash(base))
            d, outbox, branch_flat, ttl = self._guard(pipe.execute)
            if not d:
                continue
            seen.add(sid)
            if outbox:
                self._apply_outbox(outbox)
                counts["outbox_entries"] += len(outbox)
            entry = "st:" + d["status"] + ("\n" + d["ix"] if d.get("ix") else "")
            self._fleet("index", [sid, entry, d["updated"], max(int(ttl), 0)])
            counts["sessions"] += 1
            enc = keys.encode(sid)
            for branch in self._branch_infos(
                    [x for kv in branch_flat.items() for x in kv]).values():
                self._guard(self._r.zadd, keys.branch_index(self._fb),
                            {f"{enc}/{branch.id}": branch.created_at})
                counts["branches"] += 1
        indexed = self._guard(self._r.zrange, keys.session_index(self._fb), 0, -1)
        stale = [sid for sid in indexed if sid not in seen]
        if stale:
            still = self._fetch_sessions(stale)
            gone = [x for sid, d in zip(stale, still, strict=True) if not d
                    for x in (sid, keys.encode(sid), "")]
            if gone:
                counts["stale_removed"] = self._fleet("forget", ["missing", *gone])
        self._last_sweep = 0.0
        return counts

    def verify_session(self, sid: str) -> list[str]:
        """Check the invariants of one session's keys; returns the problems found (none: [])."""
        s_json, live, live_steps, live_snaps, snap_flat, step_fields = self._read("check", sid)
        s = json.loads(s_json)
        if not s:
            return [f"session {sid!r} does not exist"]
        problems = []
        records = [json.loads(r) for r in live]
        if [r[1] for r in records] != list(range(len(records))):
            problems.append("live message positions are not 0..n-1")
        if len(records) != int(s["msgs"]):
            problems.append(f"msg count {s['msgs']} != {len(records)} live messages")
        seqs = [r[0] for r in records]
        if seqs != sorted(seqs) or (seqs and seqs[-1] > int(s["seq"])):
            problems.append("live message seqs are not increasing or exceed the session seq")
        snaps = dict(zip(snap_flat[::2], snap_flat[1::2], strict=True))
        if s["head"]:
            head_seq = s["head"].removeprefix("snap-")
            if head_seq not in live_snaps or head_seq + "b" in snaps:
                problems.append(f"head {s['head']} is not on the live line")
        numbers = [int(n) for n in live_steps]
        if numbers != sorted(set(numbers)):
            problems.append("live steps are not strictly increasing")
        existing = {int(f) for f in step_fields if f.isdigit()}
        if any(n not in existing for n in numbers):
            problems.append("a live step has no record")
        if existing and max(existing) > int(s["steps"]):
            problems.append("a step number exceeds the session's step count")
        return problems


class _OutboxFlusher:
    """Applies fleet-view changes of Redis Cluster writes off the caller's path, in batches.

    The changes are already durable in each session's outbox list; this thread only makes the
    fleet views (indexes, feed, audit) catch up within milliseconds. A process killed before it
    flushed leaves the entries in the outbox, applied by the session's next writer or by
    `RedisStore.rebuild_indexes`.
    """

    def __init__(self, store: RedisStore):
        self._store = weakref.proxy(store)
        self._cond = threading.Condition()
        self._pending: list[str] = []
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        atexit.register(self._at_exit, weakref.ref(self))

    @staticmethod
    def _at_exit(ref) -> None:
        flusher = ref()
        if flusher is not None and not flusher._closed:
            try:
                flusher.flush(timeout=2.0)
            except Exception:  # noqa: BLE001 - exiting; the outbox keeps the entries
                pass

    def submit(self, entries: list[str]) -> None:
        with self._cond:
            if os.getpid() != self._pid:  # forked: the parent's thread and queue are not ours
                self._pid, self._thread, self._pending, self._busy = os.getpid(), None, [], False
            self._pending.extend(entries)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="rewind-fleet-outbox",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _run(self) -> None:
        failures = 0
        while True:
            with self._cond:
                while not self._pending and not self._closed:
                    self._cond.wait()
                if not self._pending:
                    return
                batch, self._pending = self._pending, []
                self._busy = True
            try:
                self._store._apply_outbox(batch)
                failures = 0
            except ReferenceError:
                return
            except Exception as exc:  # noqa: BLE001 - keep the batch, retry with backoff
                failures += 1
                log.warning("fleet views behind (will retry): %s", exc)
                with self._cond:
                    self._pending[:0] = batch if len(self._pending) < 100_000 else []
                time.sleep(min(0.05 * 2 ** failures, 5.0))
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def flush(self, timeout: float) -> None:
        with self._cond:
            batch, self._pending = self._pending, []
        if batch:
            self._store._apply_outbox(batch)
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._busy and time.monotonic() < deadline:
                self._cond.wait(timeout=0.05)

    def close(self) -> None:
        self.flush(timeout=5.0)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
