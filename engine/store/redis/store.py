"""Redis and Redis Cluster store, for fleets of agent workers on many hosts.

URLs and options: see `engine.store.redis.client`. The modules of this package:

==============  ===============================================================================
keys            every key name (the layout table), and the Lua key helpers generated from it
lua/*.lua       one Lua script per operation; `scripts` loads them
client          URL and options, the redis-py client, retries, what a failure raises
codec           canonical JSON, and Redis texts back into engine records
store           `RedisStore`: the `Store` contract; session writes and reads
fleet           the fleet views: session indexes, audit, feed, compensation outbox
outbox          Redis Cluster: fleet views catching up with session writes
doctor          rebuild the fleet views from the sessions; check one session's invariants
==============  ===============================================================================

Retention (the ``ttl`` option, 30 minutes by default; 0 keeps every session):

- The TTL applies only to idle healthy sessions without evidence. Every write of such a session
  sets the TTL again on every key of the session, in the script of the write, so an idle session
  disappears as a whole; the fleet indexes forget it at their next read.
- A session becomes evidence, for good, with the first write that records a loop verdict (a
  step's or `set_status`'s), a status other than healthy (looping, rolled_back, stopped), a
  rollback or fork, a notice, a queued compensation, or any audit event about it (`add_audit`
  goes through the session when it exists). That same Lua script marks the session (``keep`` in
  its hash) and removes the TTL of every key of the session (PERSIST), so the write and the
  retention change are one atomic step: a rolled-back session, its abandoned branches and the
  session of every audit row stay readable. Becoming healthy again does not undo it.
- Evidence leaves only through retention by age (`purge_branches`: abandoned branches older than
  a limit) or an operator's `delete_session`. `purge_sessions` (for stores without a TTL, or
  idle times shorter than it) deletes idle sessions without the ``keep`` mark; its Lua script
  checks the mark and the idle time again, so a session that became evidence meanwhile stays.
- A rollback with nothing to abandon is refused by its script before any write: no branch, no
  notice, no epoch change, no audit event, and so no ``keep`` mark either.
- The session's own feed (a fleet key) expires with the session and loses its TTL when the
  session becomes evidence (on Redis Cluster, when the session's outbox entry is applied).

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
  superseded by `end_step`). See `engine.store.redis.outbox`. Fleet reads flush first, so a
  process always sees its own writes; other processes see them within milliseconds.
- A failure to reach Redis, after the retries, raises `StoreUnavailable` naming host and port
  (never the password). Nothing is dropped silently.
"""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from redis.exceptions import ResponseError

from engine.errors import RollbackConflict, StoreAuthError, StoreError, UnknownSession
from engine.records import (
    AuditEvent,
    BranchInfo,
    Compensation,
    CompensationWorker,
    Event,
    MessageRecord,
    ReplayHistory,
    ReplayStep,
    RollbackResult,
    SessionInfo,
    SnapshotNode,
    StepRecord,
    replay_history,
)
from engine.store.base import (
    ALL_SESSIONS,
    AuditEntry,
    DecisionRequest,
    Retention,
    RollbackRequest,
    SessionCursor,
    SessionFilter,
    SessionWrite,
    StepOutcome,
    StepStart,
    StepTicket,
)
from engine.store.redis import codec, doctor, keys
from engine.store.redis.client import RedisClient, script_error
from engine.store.redis.codec import dumps, num
from engine.store.redis.fleet import FleetViews
from engine.store.redis.fleetdocs import FleetDocs
from engine.store.redis.scripts import OUTBOX_BATCH, SOURCES
from engine.store.requests import moved_message, snapshot_seq
from engine.types import (
    CompensationStatus,
    SessionStatus,
    SnapshotKind,
    StoredVerdict,
)

log = logging.getLogger("rewind.redis")

R = TypeVar("R")


def _step_record(step: StepStart, now: float) -> tuple[str, str]:
    """The JSON record of a step as it begins, and its compensation field ("" none; marked
    "r" for a side effect, "x" otherwise)."""
    comp = step.get("compensation")
    fields = {k: v for k, v in step.items() if k not in ("args", "compensation")}
    body = dumps({**fields, "side_effect": bool(fields.get("side_effect")), "started_at": now})
    record = '{"args":' + step["args"] + "," + body[1:]
    comp_field = ""
    if comp is not None:
        name, comp_args = json.loads(comp)
        mark = "r" if fields.get("side_effect") else "x"
        comp_field = mark + codec.comp_field(name, dumps(comp_args))
    return record, comp_field


def _rid() -> str:
    return uuid.uuid4().hex


class RedisStore:
    """Store on Redis or Redis Cluster (see `engine.store.redis.client` for URLs and options)."""

    def __init__(self, url: str, **options: Any) -> None:
        self._client = RedisClient(url, options)
        settings = self._client.settings
        self.url: str = self._client.url
        self.cluster: bool = self._client.cluster
        self.host: str = self._client.host
        self.port: int = self._client.port
        self.ttl: int = settings.ttl
        self.prefix: str = settings.prefix
        self.events_maxlen: int = settings.events_maxlen
        self.session_events_maxlen: int = settings.session_events_maxlen
        self.retries: int = settings.retries
        self._r = self._client.r
        self._fb = keys.fleet_base(self.prefix)
        self._views = FleetViews(self._client)
        self._fleet_docs = FleetDocs(self._client, self._fb, self._views)
        self._flusher = self._views.flusher
        try:
            self._loops_from: float | None = self._views.loops_from()
        except StoreAuthError:  # scripts are forbidden: so is every write; `loops` asks again
            self._loops_from = None

    # -- plumbing ---------------------------------------------------------------------------
    @property
    def where(self) -> str:
        """host:port of the Redis server (the seed node on Redis Cluster)."""
        return self._client.where

    @property
    def round_trips(self) -> int:
        """Requests this store sent (scripts and commands; a pipeline counts once)."""
        return self._client.round_trips

    def _guard(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run one client call, translating failures (after retries)."""
        return self._client.call(fn, *args, **kwargs)

    def _script(self, name: str, keys_: list[str], args: list[Any]) -> Any:
        return self._client.script(name, keys_, args, SOURCES[name])

    def _read(self, name: str, sid: str, args: list[Any] | None = None) -> Any:
        return self._script("read_" + name, [keys.session_base(sid, self.prefix)], args or [])

    def _write(
        self, name: str, sid: str, now: float, args: list[Any], *, sync: bool = False
    ) -> tuple[str, str]:
        """Run session script `name`; returns (result, extra). On Redis Cluster the fleet views
        follow from the session's outbox: now when `sync`, else off the caller's path."""
        base = keys.session_base(sid, self.prefix)
        enc = keys.encode(sid)
        if self.cluster:
            mode = self._views.outbox_mode(enc)
            script_keys = [base]
        else:
            mode = "i"
            script_keys = [base, self._fb]
        argv = [
            _rid(),
            num(now),
            self.ttl,
            sid,
            enc,
            mode,
            self.events_maxlen,
            self.session_events_maxlen,
            *args,
        ]
        try:
            reply = self._script(name, script_keys, argv)
        except ResponseError as exc:
            raise script_error(exc, self._client, sid, args[0] if args else None) from None
        result, extra = reply[0], reply[1]
        if self.cluster and len(reply) > 2:
            entries = reply[2:]
            if not sync:
                assert self._flusher is not None
                self._flusher.submit(entries)
            elif len(entries) < OUTBOX_BATCH:  # the script's own entry is the last one
                rows = self._views.apply_outbox(entries)
                extra = rows[-1][2] if rows else ""
            else:  # a long backlog (the fleet node was down): apply all of it, in order
                backlog = self._guard(self._r.lrange, keys.fleet_outbox(base), 0, -1)
                self._views.apply_outbox(backlog)
                extra = ""
        return result, extra

    def flush(self, timeout: float = 30.0) -> None:
        """Bring the fleet views up to date with this process's writes (Redis Cluster; a no-op
        on a single Redis). Fleet reads call it, so a process always sees its own writes."""
        self._views.flush(timeout)

    def close(self) -> None:
        try:
            self._views.close()
        except StoreError as exc:  # pragma: no cover - the outbox keeps what was not applied
            log.warning("fleet views not brought up to date on close: %s", exc)
        self._client.close()

    # -- sessions ---------------------------------------------------------------------------
    def ensure_session(self, sid: str, meta: dict[str, Any] | None, now: float) -> SessionInfo:
        new = dict(meta or {})
        incarnation = f"{time.time_ns():020x}{uuid.uuid4().hex[:8]}"
        create = [dumps(new), codec.index_lines(new), incarnation]
        merge = ["1" if meta else "0", "", "", ""]
        for _ in range(20):
            result, extra = self._write("ensure", sid, now, create + merge)
            if result != "MERGE":
                return codec.session_info(json.loads(result))
            current = json.loads(extra)
            merged = {**json.loads(current["meta"]), **new}
            if dumps(merged) == current["meta"]:
                return codec.session_info(current)
            merge = ["1", current["meta"], dumps(merged), codec.index_lines(merged)]
        raise StoreError(f"session {sid!r}: its metadata kept changing under concurrent writers")

    def get_session(self, sid: str) -> SessionInfo | None:
        d = self._guard(self._r.hgetall, keys.session_hash(keys.session_base(sid, self.prefix)))
        return codec.session_info(d) if d else None

    def list_sessions(
        self,
        where: SessionFilter = ALL_SESSIONS,
        *,
        limit: int = 200,
        offset: int = 0,
        after: SessionCursor | None = None,
    ) -> list[SessionInfo]:
        return self._views.list_sessions(where, limit=limit, offset=offset, after=after)

    def count_sessions(self, where: SessionFilter = ALL_SESSIONS) -> int:
        return self._views.count_sessions(where)

    def set_status(
        self, sid: str, status: SessionStatus, verdict: StoredVerdict | None, now: float
    ) -> None:
        try:
            status = SessionStatus(status)
        except ValueError:
            raise ValueError(
                f"status must be one of {', '.join(SessionStatus)}, not {status!r}"
            ) from None
        self._write(
            "set_status", sid, now, [status, "" if verdict is None else dumps(verdict)], sync=True
        )

    # -- history ----------------------------------------------------------------------------
    def append_messages(self, sid: str, messages: list[dict[str, Any]], now: float) -> int:
        if not messages:
            info = self.get_session(sid)
            if info is None:
                raise UnknownSession(f"no session {sid!r} in this store")
            return info.epoch
        roles = dumps([m["role"] for m in messages])
        result, _ = self._write("append", sid, now, [roles, *(dumps(m) for m in messages)])
        return int(result)

    def put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> int:
        if not ns.isidentifier():
            raise ValueError(f"a key-value namespace must be an identifier, not {ns!r}")
        args: list[str] = [ns, dumps({"keys": sorted(items)[:20], "count": len(items)})]
        for key, value in items.items():
            args += [key, "" if value is None else dumps(value)]
        result, _ = self._write("put", sid, now, args)
        return int(result)

    def get_all(self, sid: str, ns: str) -> dict[str, Any]:
        base = keys.session_base(sid, self.prefix)
        raw = self._guard(self._r.hgetall, keys.kv_values(base, ns))
        return {k: json.loads(v) for k, v in raw.items()}

    def get_session_values(self, sid: str, ns: str) -> tuple[SessionInfo | None, dict[str, Any]]:
        base = keys.session_base(sid, self.prefix)
        pipe = self._r.pipeline(transaction=False)  # one round trip; one slot (the hash tag)
        pipe.hgetall(keys.session_hash(base))
        pipe.hgetall(keys.kv_values(base, ns))
        d, raw = self._guard(pipe.execute)
        if not d:
            return None, {}
        return codec.session_info(d), {k: json.loads(v) for k, v in raw.items()}

    def get_session_docs(self, sid: str, ns: str, doc_ns: str, keys: list[str], *,
                         prefix: str | None = None
                         ) -> tuple[tuple[str | None, int, int] | None, dict[str, Any],
                                    dict[str, Any]]:
        info, values = self.get_session_values(sid, ns)
        if info is None:
            return None, {}, {}
        return ((info.head, info.epoch, info.messages), values,
                self.doc_get(sid, doc_ns, keys, prefix=prefix))

    def live_messages(self, sid: str, *, since: int = 0,
                      until: int | None = None) -> list[dict[str, Any]]:
        base = keys.session_base(sid, self.prefix)
        if until is not None and until <= max(since, 0):
            return []
        # the live list holds one entry per live-line position, so a position is its index
        rows = self._guard(self._r.lrange, keys.live_messages(base), max(since, 0),
                           -1 if until is None else until - 1)
        return [json.loads(r)[3] for r in rows]

    def live_tail(self, sid: str, ns: str, last: int
                  ) -> tuple[int, int, dict[str, Any], list[dict[str, Any]]] | None:
        found = self._read("tail", sid, [ns, max(last, 0)])
        if not found:
            return None
        epoch, count, flat, tail = found
        values = {flat[i]: json.loads(flat[i + 1]) for i in range(0, len(flat), 2)}
        return int(epoch), int(count), values, [json.loads(r)[3] for r in tail]

    def all_messages(self, sid: str) -> list[MessageRecord]:
        live, abandoned = self._read("messages", sid)
        out = [codec.message(r, None) for r in live]
        for r in abandoned:
            branch, _, rec = r.partition(" ")
            out.append(codec.message(rec, branch))
        out.sort(key=lambda m: m.seq)
        return out

    # -- snapshots --------------------------------------------------------------------------
    @staticmethod
    def _retention_args(retention: Retention) -> list[int]:
        return [retention.keep_snapshots, retention.keep_step_snapshots]

    def take_snapshot(
        self, sid: str, label: str | None, kind: SnapshotKind, now: float, retention: Retention
    ) -> SnapshotNode:
        if not kind.isidentifier():
            raise ValueError(f"a snapshot kind must be an identifier, not {kind!r}")
        label_json = "null" if label is None else dumps(label)
        result, _ = self._write(
            "snapshot", sid, now, [label_json, kind, *self._retention_args(retention)]
        )
        snap_id, parent, messages, next_step = json.loads(result)
        return SnapshotNode(
            id=snap_id,
            parent=parent,
            label=label,
            created_at=now,
            on_live_line=True,
            abandoned_reason=None,
            kind=kind,
            restorable=True,
            next_step=next_step,
            messages=messages,
            is_head=True,
        )

    def snapshots(self, sid: str) -> list[SnapshotNode]:
        head, flat, branch_flat, restorable_ids = self._read("snapshots", sid)
        branches = codec.branch_infos(branch_flat)
        restorable = set(restorable_ids)
        records: dict[str, str] = {}
        abandoned: dict[str, str] = {}
        for i in range(0, len(flat), 2):
            field, value = flat[i], flat[i + 1]
            if field.endswith("b"):
                abandoned[field[:-1]] = value
            else:
                records[field] = value
        return [
            _snapshot_node(seq, records[seq], abandoned.get(seq), branches, seq in restorable,
                           head)
            for seq in sorted(records, key=int)
        ]

    def snapshot(self, sid: str, snapshot_id: str) -> SnapshotNode | None:
        seq = snapshot_seq(snapshot_id)
        found = self._read("snapshot", sid, [str(seq)]) if seq is not None else None
        if not found:
            return None
        head, record, branch_id, branch_record, restorable = found
        branches = codec.branch_infos([branch_id, branch_record]) if branch_record else {}
        return _snapshot_node(str(seq), record, branch_id or None, branches, restorable == "1",
                              head)

    def newest_snapshots(self, sid: str, kind: SnapshotKind, label_prefix: str, limit: int
                         ) -> list[tuple[str, str]]:
        if limit <= 0:
            return []
        found = self._read("newest", sid, [kind, label_prefix, limit])
        return [(found[i], found[i + 1]) for i in range(0, len(found), 2)]

    def restorable_snapshot(self, sid: str, before_step: int | None) -> str | None:
        result = self._read("restorable", sid, ["+inf" if before_step is None else before_step])
        return result or None

    def branches(self, sid: str) -> list[BranchInfo]:
        base = keys.session_base(sid, self.prefix)
        flat = self._guard(self._r.hgetall, keys.branches(base))
        infos = codec.branch_infos([x for kv in flat.items() for x in kv])
        return sorted(infos.values(), key=lambda b: int(b.id.rpartition("-")[2]))

    # -- steps ------------------------------------------------------------------------------
    def begin_step(
        self,
        sid: str,
        step: StepStart,
        snapshot_label: str | None,
        now: float,
        retention: Retention,
    ) -> StepTicket:
        record, comp_field = _step_record(step, now)
        label = "" if snapshot_label is None else dumps(snapshot_label)
        result, _ = self._write(
            "begin_step",
            sid,
            now,
            [
                "0" if snapshot_label is None else "1",
                label,
                *self._retention_args(retention),
                record,
                comp_field,
            ],
        )
        n, epoch, snap, seq = json.loads(result)
        return StepTicket(n=n, epoch=epoch, snapshot=snap, seq=seq)

    def end_step(self, sid: str, ticket: StepTicket, outcome: StepOutcome, now: float) -> bool:
        verdict = outcome.get("verdict")
        record = dumps({**outcome, "ended_at": now})
        result, _ = self._write(
            "end_step",
            sid,
            now,
            [
                ticket.n,
                ticket.epoch,
                outcome["status"],
                record,
                "" if verdict is None else dumps(verdict),
            ],
        )
        return result == "1"

    def record_steps(
        self,
        sid: str,
        steps: list[tuple[StepStart, StepOutcome]],
        expect: tuple[int, int],
        now: float,
        documents: tuple[str, dict[str, Any]] | None = None,
    ) -> int | None:
        """Record steps that already ended, in order, and `documents`, in one script (see the
        protocol)."""
        args: list[Any] = [int(expect[0]), int(expect[1])]
        if documents is None:
            args += ["", 0]
        else:
            ns, items = documents
            if not ns.isidentifier():
                raise ValueError(f"a document namespace must be an identifier, not {ns!r}")
            args += [ns, len(items)]
            for key, value in items.items():
                args += [key, "" if value is None else dumps(value)]
        for step, outcome in steps:
            record, comp_field = _step_record(step, now)
            if comp_field:  # as end_step leaves it: "k" for a side effect that happened
                ok_effect = comp_field[0] == "r" and outcome["status"] == "ok"
                comp_field = ("k" if ok_effect else "x") + comp_field[1:]
            verdict = outcome.get("verdict")
            args += [record, comp_field, dumps({**outcome, "ended_at": now}), outcome["status"],
                     "" if verdict is None else dumps(verdict)]
        result, _ = self._write("record_steps", sid, now, args)
        return None if result == "null" else int(result)

    def steps(
        self, sid: str, *, live_only: bool = False, last: int | None = None
    ) -> list[StepRecord]:
        flat = self._read(
            "steps", sid, ["1" if live_only else "0", "" if last is None else max(int(last), 0)]
        )
        return codec.steps({flat[i]: flat[i + 1] for i in range(0, len(flat), 2)})

    def replay_histories(self, sids: Sequence[str]) -> dict[str, ReplayHistory]:
        """Session by session, through `steps` and `all_messages`."""
        out: dict[str, ReplayHistory] = {}
        for sid in dict.fromkeys(sids):
            spoke = [(m.created_at, m.seq) for m in self.all_messages(sid)
                     if m.message.get("role") == "user"]
            out[sid] = replay_history([ReplayStep.of(s) for s in self.steps(sid)], spoke)
        return out

    # -- rollback ---------------------------------------------------------------------------
    def rollback(self, sid: str, request: RollbackRequest) -> RollbackResult:
        target, actor, reason, now = request.target, request.actor, request.reason, request.now
        notice, expect_epoch, kind, batch = (
            request.notice, request.expect_epoch, request.kind, request.batch
        )
        notice_text = None if notice is None else notice.get("content")
        result, extra = self._write(
            "rollback",
            sid,
            now,
            [
                target,
                dumps(actor),
                dumps(reason),
                "" if notice is None else dumps(notice),
                dumps(notice_text),
                "" if expect_epoch is None else str(int(expect_epoch)),
                "fork" if kind == "fork" else "rollback",
                batch or "",
            ],
            sync=True,
        )
        r = json.loads(result)
        ids = [int(x) for x in extra.split(",") if x]
        if len(ids) != len(r["compensations"]):  # a replayed reply: find them by their keys
            found = self._guard(
                self._r.hmget,
                keys.comp_keys(self._fb),
                [f"{sid}#{n}@{r['incarnation']}" for n, _, _ in r["compensations"]],
            )
            ids = [int(x) for x in found if x is not None]
            r["compensations"] = [
                c for c, x in zip(r["compensations"], found, strict=True) if x is not None
            ]
        queued = tuple(
            Compensation(
                id=cid,
                session=sid,
                step=n,
                name=name,
                args=args,
                idempotency_key=f"{sid}#{n}@{r['incarnation']}",
                status=CompensationStatus.PENDING,
                attempts=0,
                error=None,
                created_at=now,
                updated_at=now,
                branch=r["branch"],
            )
            for cid, (n, name, args) in zip(ids, r["compensations"], strict=True)
        )
        return RollbackResult(
            session=sid,
            target=target,
            branch=r["branch"],
            epoch=r["epoch"],
            actor=actor,
            reason=reason,
            at=now,
            abandoned_messages=r["messages"],
            abandoned_steps=r["steps"],
            abandoned_snapshots=r["snapshots"],
            abandoned_memories=r["memories"],
            compensations=queued,
            notice=notice_text,
        )

    def add_notice(self, sid: str, message: dict[str, Any], actor: str, now: float) -> None:
        self._write(
            "notice",
            sid,
            now,
            [dumps(message), dumps(actor), dumps(message.get("content"))],
            sync=True,
        )

    def decide(self, sid: str, request: DecisionRequest) -> StoredVerdict:
        record = request.record()
        detail = {"note": record["note"]}
        result, _ = self._write("decide", sid, request.now, [
            request.kind, dumps(request.actor), dumps(request.reason), dumps(record),
            "" if request.note is None else dumps(request.note), request.action,
            dumps(detail), dumps({"actor": request.actor, **detail}),
            dumps([request.note["role"]] if request.note is not None else []),
        ], sync=True)
        return json.loads(result)

    # -- audit and feed ---------------------------------------------------------------------
    # -- fleet views (engine.store.redis.fleet) ---------------------------------------------
    def audit(
        self,
        *,
        session: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        since: float | None = None,
        limit: int = 1000,
    ) -> list[AuditEvent]:
        return self._views.audit(
            session=session, actor=actor, action=action, since=since, limit=limit
        )

    def count_audit(self, action: str, since: float) -> int:
        return self._views.count_audit(action, since)

    def add_audit(
        self,
        actor: str,
        action: str,
        session: str | None,
        snapshot: str | None,
        reason: str | None,
        detail: dict[str, Any],
        now: float,
    ) -> None:
        if session is not None:  # through the session: it becomes evidence in the same script
            event = dumps({"actor": actor, **detail})
            args = [action, dumps(actor), dumps(snapshot), dumps(reason), dumps(detail), event]
            written, _ = self._write("audit", session, now, args, sync=True)
            if written == "1":
                return
        self._views.add_audit(actor, action, session, snapshot, reason, detail, now)

    def events(self, since: int = 0, limit: int = 1000, session: str | None = None) -> list[Event]:
        return self._views.events(since, limit, session)

    def last_event_id(self) -> int:
        return self._views.last_event_id()

    def loops(self, since: float, after: int = 0, limit: int = 1000) -> list[Event] | None:
        if self._loops_from is None:
            self._loops_from = self._views.loops_from()
        return self._views.loops(since, after, limit, self._loops_from)

    def compensations(
        self,
        *,
        session: str | None = None,
        status: CompensationStatus | None = None,
        limit: int = 1000,
    ) -> list[Compensation]:
        return self._views.compensations(session=session, status=status, limit=limit)

    def count_compensations(self, status: CompensationStatus) -> int:
        return self._views.count_compensations(status)

    def claim_compensation(
        self, names: list[str], owner: str, lease_s: float, now: float
    ) -> Compensation | None:
        return self._views.claim_compensation(names, owner, lease_s, now)

    def finish_compensation(
        self, cid: int, owner: str, ok: bool, error: str | None, now: float, final: bool,
        retry_at: float | None = None,
    ) -> None:
        self._views.finish_compensation(cid, owner, ok, error, now, final, retry_at)

    def retry_compensation(self, cid: int, actor: str, reason: str, now: float) -> Compensation:
        return self._views.operate_compensation(cid, "retry", actor, reason, now)

    def resolve_compensation(self, cid: int, actor: str, reason: str, now: float) -> Compensation:
        return self._views.operate_compensation(cid, "resolve", actor, reason, now)

    def heartbeat_worker(
        self, worker: str, handlers: list[str], now: float, expire_before: float
    ) -> None:
        self._views.heartbeat_worker(worker, handlers, now, expire_before)

    def compensation_workers(self, since: float) -> list[CompensationWorker]:
        return self._views.compensation_workers(since)

    # -- documents --------------------------------------------------------------------------
    def doc_put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> None:
        if not ns.isidentifier():
            raise ValueError(f"a document namespace must be an identifier, not {ns!r}")
        args: list[str] = [ns]
        for key, value in items.items():
            args += [key, _doc_text(value)]
        self._write("doc_put", sid, now, args)

    def _docs(self, sid: str, args: list[str]) -> dict[str, Any]:
        flat = self._read("docs", sid, args)
        return {flat[i]: _doc_value(flat[i + 1]) for i in range(0, len(flat), 2)}

    def doc_get(self, sid: str, ns: str, keys: list[str], *,
                prefix: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if prefix is not None:  # the prefix's documents and the first keys: one script
            out.update(self._docs(sid, [ns, "both", prefix, *keys[:500]]))
        for i in range(0 if prefix is None else 500, len(keys), 500):
            out.update(self._docs(sid, [ns, "keys", *keys[i : i + 500]]))
        return out

    def doc_scan(self, sid: str, ns: str, prefix: str = "", *, below: str | None = None,
                 last: int | None = None) -> dict[str, Any]:
        found = self._docs(sid, [ns, "scan", prefix])
        if below is None and last is None:
            return found
        keys = [k for k in found if below is None or k < below]
        if last is not None:
            keys = keys[max(0, len(keys) - last):]
        return {k: found[k] for k in keys}

    # -- atomic multi-part writes ------------------------------------------------------------
    def write_session(
        self, sid: str, write: SessionWrite, now: float, retention: Retention
    ) -> tuple[int, SnapshotNode | None]:
        """Messages, versioned values, a snapshot and documents in one script (see write.lua);
        a session to create (`write["create"]`) is created before it."""
        label = write.get("snapshot")
        documents = write.get("documents") or {}
        stamp = write.get("stamp")
        if stamp is not None and (label is None
                                  or not isinstance(documents.get(stamp[0], {}).get(stamp[1]),
                                                    dict)):
            raise ValueError(f"the stamp {stamp!r} needs a snapshot and a document that is a dict")
        expect = write.get("expect")
        if "create" in write:
            if expect is not None:  # refused before the session is created or its meta merged
                info = self.get_session(sid)
                at = (None, 0) if info is None else (info.head, info.epoch)
                if at[1] != expect[1] or (at[0] != expect[0] and next(
                        (i for i, _l in self.newest_snapshots(sid, "manual", "", 1)),
                        None) != expect[0]):
                    raise RollbackConflict(moved_message(sid, at))
            self.ensure_session(sid, write["create"] or None, now)
        messages = write.get("messages") or []
        args: list[Any] = ["1" if write.get("messages_if_empty") else "0",
                           dumps([m["role"] for m in messages]), len(messages),
                           *(dumps(m) for m in messages)]
        values = write.get("values") or {}
        args.append(len(values))
        for ns, items in values.items():
            if not ns.isidentifier():
                raise ValueError(f"a key-value namespace must be an identifier, not {ns!r}")
            args += [ns, dumps({"keys": sorted(items)[:20], "count": len(items)}), 2 * len(items)]
            for key, value in items.items():
                args += [key, "" if value is None else dumps(value)]
        args += ["" if label is None else dumps(label), *self._retention_args(retention)]
        args.append(len(documents))
        for ns, docs in documents.items():
            if not ns.isidentifier():
                raise ValueError(f"a document namespace must be an identifier, not {ns!r}")
            args += [ns, 2 * len(docs)]
            for key, value in docs.items():
                if stamp == (ns, key):  # write.lua adds these three from the snapshot it takes
                    value = {k: v for k, v in value.items() if k not in ("snap", "msgs", "epoch")}
                args += [key, _doc_text(value)]
        args += list(stamp) if stamp is not None else ["", ""]
        args += ["", ""] if expect is None else [expect[0] or "", int(expect[1])]
        result, _ = self._write("write", sid, now, args)
        epoch, snap = json.loads(result)
        if snap is None:
            return int(epoch), None
        snap_id, parent, count, next_step = snap
        return int(epoch), SnapshotNode(
            id=snap_id, parent=parent, label=label, created_at=now, on_live_line=True,
            abandoned_reason=None, kind="manual", restorable=True, next_step=next_step,
            messages=count, is_head=True,
        )

    def delete_session(self, sid: str, now: float, audit: AuditEntry | None = None) -> bool:
        if audit is not None:
            if self.get_session(sid) is None:
                return False
            # The audit log is fleet-wide (another slot on a cluster): the row goes first, so
            # no crash can leave a deleted session without it.
            self._views.add_audit(audit.actor, audit.action, sid, None, audit.reason,
                                  audit.detail, now)
        self.flush()  # this process's pending fleet changes first, then the forgetting
        result, _ = self._write("delete", sid, now, [], sync=True)
        return result == "1"

    # -- maintenance ------------------------------------------------------------------------
    def running_steps(self, started_before: float) -> list[tuple[str, StepRecord]]:
        """Every running step started at or before `started_before`, oldest first: each
        session's steps are read in turn (no fleet-wide index of running steps exists, as one
        could not be kept atomically with a session's steps on Redis Cluster), page by page of
        sessions, so memory holds one page and the running steps found."""
        found: list[tuple[str, StepRecord]] = []
        after: SessionCursor | None = None
        while True:
            page = self.list_sessions(limit=500, after=after)
            for info in page:
                found.extend((info.id, step) for step in self.steps(info.id)
                             if step.status == "running" and step.started_at <= started_before)
            if len(page) < 500:
                break
            after = SessionCursor.after(page[-1])
        return sorted(found, key=lambda pair: (pair[1].started_at, pair[0], pair[1].n))

    def rebuild_indexes(self) -> dict[str, int]:
        """Rebuild the fleet indexes from the sessions themselves (``rewind doctor``); see
        `engine.store.redis.doctor.rebuild_indexes`. Safe to run while agents write.

        Returns:
            Counts: sessions, outbox_entries, branches, stale_removed.
        """
        self.flush()
        views = self._views
        counts = doctor.rebuild_indexes(
            self._client, self.prefix, views.run, views.apply_outbox, views.fetch_sessions
        )
        views.sweep_soon()
        return counts

    def verify_session(self, sid: str) -> list[str]:
        """Check the invariants of one session's keys; returns the problems found (none: [])."""
        return doctor.session_problems(sid, self._read("check", sid))

    # -- retention --------------------------------------------------------------------------
    def purge_branches(self, before: float, now: float, *, dry_run: bool = False) -> dict[str, int]:
        """Delete abandoned branches created before `before` (one script per session, each
        atomic); returns counts of what went (with `dry_run`, of what would go, removing and
        auditing nothing). The audit detail lists every removed branch (``branch_ids``)."""
        self.flush()
        removed = dict.fromkeys(("branches", "messages", "steps", "snapshots", "kv_writes"), 0)
        members: list[str] = self._guard(
            self._r.zrangebyscore, keys.branch_index(self._fb), "-inf", "(" + num(before)
        )
        by_session: dict[str, list[str]] = {}
        for member in members:
            enc, _, branch = member.partition("/")
            by_session.setdefault(enc, []).append(branch)
        gone: set[str] = set()
        for enc, branch_ids in by_session.items():
            sid = keys.decode(enc)
            base = keys.session_base(sid, self.prefix)
            argv = ["", num(now), 0, sid, enc, "i", 0, 0, "1" if dry_run else "0", *branch_ids]
            counts = json.loads(self._script("purge", [base], argv))
            gone.update(f"{enc}/{b}" for b in counts.pop("gone") or [])
            for name in removed:
                removed[name] += counts[name]
        if not dry_run and members:
            # oldest first; index members of branches that were already gone are dropped too
            names = [f"{keys.decode(m.partition('/')[0])}/{m.partition('/')[2]}" for m in members]
            ids = [name for name, m in zip(names, members, strict=True) if m in gone]
            reason = "abandoned branches past their time limit"
            self._views.record_purge(now, reason, removed, ("branch_ids", ids), members)
        return removed

    def purge_sessions(self, before: float, now: float, *, dry_run: bool = False) -> dict[str, int]:
        """Delete the sessions last changed before `before` that are not evidence (no ``keep``
        mark), each in one script that checks both again; returns how many went
        (``sessions``) and how many as old were kept as evidence (``evidence``)."""
        self.flush()
        idle: list[str] = self._guard(
            self._r.zrangebyscore, keys.session_index(self._fb), "-inf", "(" + num(before)
        )
        candidates: list[str] = []
        evidence = 0
        for i in range(0, len(idle), 500):
            chunk = idle[i : i + 500]
            for sid, d in zip(chunk, self._views.fetch_sessions(chunk), strict=True):
                if not d or float(d["updated"]) >= before:
                    continue  # expired meanwhile, or changed since (the index lags behind)
                if d.get("keep") == "1":
                    evidence += 1
                else:
                    candidates.append(sid)
        if dry_run:
            return {"sessions": len(candidates), "evidence": evidence}
        doomed: list[str] = []
        for sid in candidates:
            result, _ = self._write("delete", sid, now, [num(before)], sync=True)
            if result == "1":
                doomed.append(sid)
            elif result == "k":  # became evidence since it was read
                evidence += 1
        counts = {"sessions": len(doomed), "evidence": evidence}
        if doomed:
            reason = "idle sessions past their time limit (evidence kept)"
            self._views.record_purge(now, reason, counts, ("session_ids", doomed))
        return counts

    # -- fleet documents: FleetDocs (fleetdocs.py), handed on -----------------------------------
    def fleet_docs(self, ns: str) -> dict[str, Any]:
        return self._fleet_docs.fleet_docs(ns)

    def fleet_doc_get(self, ns: str, keys: list[str]) -> dict[str, Any]:
        return self._fleet_docs.fleet_doc_get(ns, keys)

    def fleet_doc_swap(self, ns: str, expect: dict[str, Any | None],
                       values: dict[str, Any | None], now: float,
                       audit: AuditEntry | None = None, feed_only: bool = False) -> bool:
        return self._fleet_docs.fleet_doc_swap(ns, expect, values, now, audit, feed_only)

    def fleet_doc_put(self, ns: str, values: dict[str, Any | None], now: float,
                      audit: AuditEntry | None = None) -> None:
        self._fleet_docs.fleet_doc_put(ns, values, now, audit)


RAW_MARK = "b64:"
"""Prefix of a document stored as bytes (`DocumentStore`): the client reads replies as text, so
bytes are kept as base64 text behind a mark no JSON text starts with."""



def _doc_text(value: Any) -> str:
    """The hash value of a document ("" deletes it): JSON text, or marked base64 for bytes."""
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return RAW_MARK + base64.b64encode(value).decode("ascii")
    return dumps(value)


def _doc_value(text: str) -> Any:
    """A document as `_doc_text` stored it."""
    if text.startswith(RAW_MARK):
        return base64.b64decode(text[len(RAW_MARK):])
    return json.loads(text)


def _snapshot_node(seq: str, record: str, branch_id: str | None,
                   branches: dict[str, BranchInfo], restorable: bool,
                   head: str) -> SnapshotNode:
    """Snapshot ``snap-<seq>`` from its stored record (a JSON list), its branch id (None: on the
    live line), the session's branches, whether it is in a restorable set, and the head."""
    messages, next_step, kind, parent, label, created = json.loads(record)
    snap_id = f"snap-{seq}"
    branch = branches.get(branch_id) if branch_id else None
    reason = branch.why if branch is not None else None
    return SnapshotNode(
        id=snap_id,
        parent=parent,
        label=label,
        created_at=created,
        on_live_line=branch_id is None,
        abandoned_reason=reason,
        kind=kind,
        restorable=branch_id is None and restorable,
        next_step=next_step,
        messages=messages,
        branch=branch_id,
        is_head=snap_id == head,
    )
