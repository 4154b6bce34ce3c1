"""The fleet views of the Redis store: every key under the fleet hash tag.

Session indexes (by activity, status, tenant, scenario, prompt version; expired sessions leave
them at the next read), the audit trail, the event feed and the compensation outbox of the saga.
On a single Redis the session scripts change them in the same script as the session; on Redis
Cluster they catch up from the sessions' outboxes (`engine.store.redis.outbox`), and every read
here flushes this process's pending entries first, so a process always sees its own writes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from redis.exceptions import ResponseError

from engine.errors import CompensationConflict, UnknownCompensation
from engine.records import AuditEvent, Compensation, CompensationWorker, Event, SessionInfo
from engine.store.base import SessionCursor, SessionFilter, compensation_refusal
from engine.store.redis import codec, keys
from engine.store.redis.client import RedisClient
from engine.store.redis.codec import dumps, num
from engine.store.redis.outbox import FleetOutbox, OutboxFlusher, OutboxRow
from engine.store.redis.scripts import SOURCES
from engine.types import CompensationStatus

R = TypeVar("R")


class FleetViews:
    """Reads and writes of the fleet keys, for `RedisStore`."""

    def __init__(self, client: RedisClient) -> None:
        settings = client.settings
        self._client = client
        self._r = client.r
        self.prefix = settings.prefix
        self.fb = keys.fleet_base(self.prefix)
        self._ttl = settings.ttl
        self._maxlens = [settings.events_maxlen, settings.session_events_maxlen]
        self._last_sweep = 0.0
        self._outbox = FleetOutbox(*self._maxlens)
        self.flusher = OutboxFlusher(self) if client.cluster else None
        """Redis Cluster: applies outbox entries off the callers' path."""

    def run(self, name: str, args: list[Any]) -> Any:
        """Run fleet script ``fleet_<name>``."""
        source = SOURCES["fleet_" + name]
        return self._client.script("fleet_" + name, [self.fb], args, source)

    # -- Redis Cluster: fleet outbox --------------------------------------------------------
    def outbox_mode(self, enc: str) -> str:
        """The mode a session script runs in on Redis Cluster (see `FleetOutbox.mode`)."""
        return self._outbox.mode(enc)

    def apply_outbox(self, entries: Iterable[str]) -> list[OutboxRow]:
        """Apply outbox entries to the fleet keys (idempotent); returns (sid, mark, comp ids)."""
        return self._outbox.apply(entries, lambda args: self.run("apply", args))

    def flush(self, timeout: float = 30.0) -> None:
        """Bring the fleet views up to date with this process's writes (Redis Cluster)."""
        if self.flusher is not None:
            self.flusher.flush(timeout)

    def close(self) -> None:
        if self.flusher is not None:
            self.flusher.close()

    def _read_views(self) -> None:
        self.flush()
        if time.monotonic() - self._last_sweep > 1.0:
            self.sweep()

    def sweep_soon(self) -> None:
        """Look for expired sessions at the next read."""
        self._last_sweep = 0.0

    # -- sessions ---------------------------------------------------------------------------
    def fetch_sessions(self, sids: list[str]) -> list[dict[str, str]]:
        pipe = self._r.pipeline(transaction=False)
        for sid in sids:
            pipe.hgetall(keys.session_hash(keys.session_base(sid, self.prefix)))
        rows: list[dict[str, str]] = self._client.call(pipe.execute)
        return rows

    def sweep(self) -> None:
        """Drop sessions whose keys expired from the fleet indexes."""
        self._last_sweep = time.monotonic()
        while True:
            sids = self.run("expired", [500])
            if not sids:
                return
            pipe = self._r.pipeline(transaction=False)
            for sid in sids:
                pipe.pttl(keys.session_hash(keys.session_base(sid, self.prefix)))
            ttls = self._client.call(pipe.execute)
            gone: list[Any] = []
            alive: list[Any] = []
            for sid, pttl in zip(sids, ttls, strict=True):
                if pttl == -2:
                    gone += [sid, keys.encode(sid), ""]
                else:  # alive: its deadline moved (or it no longer expires)
                    alive += [sid, pttl if pttl >= 0 else 10 * 365 * 86400 * 1000]
            if gone:
                self.run("forget", ["expired", *gone])
            if alive:
                self.run("extend", alive)
            if len(sids) < 500:
                return

    def _index(self, where: SessionFilter) -> str:
        """The narrowest session index `where` allows: a facet's, else its status's, else all
        (every index is scored by `updated_at`)."""
        for name, value in where.facets().items():
            return keys.meta_index(self.fb, keys.meta_index_suffix(name, dumps(value)))
        if where.status is not None:
            return keys.status_index(self.fb, where.status)
        return keys.session_index(self.fb)

    def _matching(
        self, where: SessionFilter, want: int | None, after: SessionCursor | None = None
    ) -> list[SessionInfo]:
        """The first `want` sessions (None: all) matching `where`, newest first (after the
        cursor `after`: from its score down, skipping the ties it already passed); index
        entries whose session is gone are forgotten on the way."""
        self._read_views()
        index = self._index(where)
        facets = where.facets()
        low = "-inf" if where.updated_since is None else num(where.updated_since)
        high = "+inf" if after is None else num(after.updated_at)
        out: list[SessionInfo] = []
        missing: list[str] = []
        start, page = 0, 500 if want is None else max(100, want)
        while want is None or len(out) < want:
            members = self._client.call(
                self._r.zrevrangebyscore, index, high, low, start=start, num=page, withscores=True
            )
            if not members:
                break
            start += len(members)
            if after is not None:  # ties sort by member, greatest first, as SQLite's id DESC
                members = [(m, s) for m, s in members
                           if s < after.updated_at or m.encode() < after.id.encode()]
            for (sid, score), d in zip(
                members, self.fetch_sessions([m[0] for m in members]), strict=True
            ):
                if not d:
                    missing += [sid, keys.encode(sid), num(score)]
                    continue
                info = codec.session_info(d)
                if where.status is not None and info.status != where.status:
                    continue
                if any(info.meta.get(f) != v for f, v in facets.items()):
                    continue
                if where.updated_since is not None and info.updated_at < where.updated_since:
                    continue
                out.append(info)
            if len(members) < page:
                break
        if missing:
            self.run("forget", ["missing", *missing])
        return out

    def list_sessions(
        self, where: SessionFilter, *, limit: int, offset: int, after: SessionCursor | None = None
    ) -> list[SessionInfo]:
        return self._matching(where, offset + limit, after)[offset : offset + limit]

    def count_sessions(self, where: SessionFilter) -> int:
        if len(where.facets()) + (where.status is not None) > 1:
            # No index holds both: walk the narrowest one (its sessions are loaded).
            return len(self._matching(where, None))
        self._read_views()
        low = "-inf" if where.updated_since is None else num(where.updated_since)
        return int(self._client.call(self._r.zcount, self._index(where), low, "+inf"))

    def _ids_newest_first(
        self,
        index: str,
        keep: Callable[[R], bool],
        wanted: int,
        fetch: Callable[[list[str]], list[R | None]],
    ) -> list[R]:
        out: list[R] = []
        start, page = 0, max(100, wanted)
        while len(out) < wanted:
            ids = self._client.call(self._r.zrevrange, index, start, start + page - 1)
            if not ids:
                break
            start += len(ids)
            out += [x for x in fetch(ids) if x is not None and keep(x)]
            if len(ids) < page:
                break
        return out[:wanted]

    def _audit_records(self, ids: list[str]) -> list[AuditEvent | None]:
        raw = self._client.call(self._r.hmget, keys.audit_records(self.fb), ids) if ids else []
        return [None if text is None else codec.audit_event(text) for text in raw]

    def audit(
        self,
        *,
        session: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        since: float | None = None,
        limit: int = 1000,
    ) -> list[AuditEvent]:
        self.flush()

        def keep(e: AuditEvent) -> bool:
            return (
                (session is None or e.session == session)
                and (actor is None or e.actor == actor)
                and (action is None or e.action == action)
                and (since is None or e.at >= since)
            )

        if since is not None:
            ids = self._client.call(
                self._r.zrangebyscore, keys.audit_by_time(self.fb), num(since), "+inf"
            )
            ids.sort(key=int, reverse=True)
            out: list[AuditEvent] = []
            for start in range(0, len(ids), 500):
                out += [
                    e
                    for e in self._audit_records(ids[start : start + 500])
                    if e is not None and keep(e)
                ]
                if len(out) >= limit:
                    break
            return out[:limit]
        if session is not None:
            index = keys.audit_by_session(self.fb, keys.encode(session))
        elif action is not None:
            index = keys.audit_by_action(self.fb, action)
        else:
            index = keys.audit_all(self.fb)
        return self._ids_newest_first(index, keep, limit, self._audit_records)

    def count_audit(self, action: str, since: float) -> int:
        self.flush()
        # audit ids grow with time: find the first id at or after `since`, count from there
        first = self._client.call(
            self._r.zrangebyscore, keys.audit_by_time(self.fb), num(since), "+inf", start=0, num=1
        )
        if not first:
            return 0
        return int(
            self._client.call(
                self._r.zcount, keys.audit_by_action(self.fb, action), int(first[0]), "+inf"
            )
        )

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
        """An audit event without a session write (`RedisStore.add_audit` writes those about an
        existing session through the session, which makes it evidence)."""
        self.run(
            "audit",
            [
                *self._maxlens,
                num(now),
                session or "",
                keys.encode(session) if session else "",
                action,
                dumps(actor),
                dumps(snapshot),
                dumps(reason),
                dumps(detail),
                dumps({"actor": actor, **detail}),
                self._ttl,
            ],
        )

    def events(self, since: int = 0, limit: int = 1000, session: str | None = None) -> list[Event]:
        self.flush()
        key = (
            keys.events(self.fb)
            if session is None
            else keys.session_events(self.fb, keys.encode(session))
        )
        rows = self._client.call(
            self._r.xrange, key, f"{max(int(since), 0) + 1}-0", "+", count=limit
        )
        return [codec.event(xid, f) for xid, f in rows]

    def last_event_id(self) -> int:
        self.flush()
        return int(self._client.call(self._r.get, keys.event_counter(self.fb)) or 0)

    def loops_from(self) -> float:
        """The time after which the ``loop`` events are complete (see fleet_loops_from.lua);
        set by the first call on a store."""
        return float(self.run("loops_from", []))

    def loops(self, since: float, after: int, limit: int, complete_after: float
              ) -> list[Event] | None:
        self.flush()
        if since <= complete_after:
            return None
        key = keys.loops(self.fb)
        found: list[tuple[str, float]] = []
        low = num(since)
        if after:  # the rest of the events at `since` (members sort by cursor), then later ones
            ties = self._client.call(self._r.zrangebyscore, key, low, low, withscores=True)
            found = [(m, at) for m, at in ties if int(m[:16]) > after][:limit]
            low = "(" + low
        if len(found) < limit:
            found += self._client.call(self._r.zrangebyscore, key, low, "+inf",
                                       start=0, num=limit - len(found), withscores=True)
        out = []
        for member, at in found:
            data, _, sid = member[17:].partition("\n")
            out.append(Event(int(member[:16]), at, sid, "loop", json.loads(data)))
        return out

    def _comp_records(self, ids: list[str]) -> list[Compensation | None]:
        pipe = self._r.pipeline(transaction=False)
        for cid in ids:
            pipe.hgetall(keys.compensation(self.fb, cid))
        return [codec.compensation(d) if d else None for d in self._client.call(pipe.execute)]

    def compensations(
        self, *, session: str | None = None, status: str | None = None, limit: int = 1000
    ) -> list[Compensation]:
        self.flush()
        if session is not None:
            index = keys.comp_by_session(self.fb, keys.encode(session))
        elif status is not None:
            index = keys.comp_by_status(self.fb, status)
        else:
            index = keys.comp_all(self.fb)

        def keep(c: Compensation) -> bool:
            return (session is None or c.session == session) and (
                status is None or c.status == status
            )

        return self._ids_newest_first(index, keep, limit, self._comp_records)

    def count_compensations(self, status: str) -> int:
        self.flush()
        return int(self._client.call(self._r.zcard, keys.comp_by_status(self.fb, status)))

    def claim_compensation(
        self, names: list[str], owner: str, lease_s: float, now: float
    ) -> Compensation | None:
        if not names:
            return None
        self.flush()
        flat = self.run("claim", [owner, num(now + lease_s), num(now), *names])
        if not flat:
            return None
        return codec.compensation(dict(zip(flat[::2], flat[1::2], strict=True)))

    def finish_compensation(
        self, cid: int, owner: str, ok: bool, error: str | None, now: float, final: bool,
        retry_at: float | None = None,
    ) -> None:
        status = (
            CompensationStatus.DONE
            if ok
            else (CompensationStatus.FAILED if final else CompensationStatus.PENDING)
        )
        self.run(
            "finish",
            [
                *self._maxlens,
                str(int(cid)),
                owner,
                status,
                "null" if error is None else dumps(error),
                error or "",
                num(now),
                0,  # a session with a compensation is evidence: its feed does not expire
                "" if retry_at is None or status != CompensationStatus.PENDING else num(retry_at),
            ],
        )

    def operate_compensation(
        self, cid: int, action: str, actor: str, reason: str, now: float
    ) -> Compensation:
        """Retry or resolve compensation `cid` in one fleet script (see
        `Store.retry_compensation`)."""
        self.flush()  # on Redis Cluster, a compensation queued by this process lands first
        try:
            flat = self.run(
                "operate",
                [*self._maxlens, str(int(cid)), action, actor, dumps(actor), reason,
                 dumps(reason), num(now)],
            )
        except ResponseError as exc:
            if str(exc).startswith("REWIND UNKNOWN_COMPENSATION"):
                raise UnknownCompensation(
                    f"no compensation {cid} in this store; list them with "
                    "`rewind compensations`"
                ) from None
            raise self._client.error(exc) from None
        ok, fields = int(flat[0]), dict(zip(flat[1::2], flat[2::2], strict=True))
        comp = codec.compensation(fields)
        if not ok:
            lease = fields.get("lease")
            why = compensation_refusal(comp, float(lease) if lease else None, now, action)
            raise CompensationConflict(why or f"compensation {cid} cannot be {action}d now")
        return comp

    def heartbeat_worker(
        self, worker: str, handlers: list[str], now: float, expire_before: float
    ) -> None:
        self.run("heartbeat", [worker, num(now), num(expire_before),
                               dumps(sorted(handlers)) if handlers else ""])

    def compensation_workers(self, since: float) -> list[CompensationWorker]:
        rows = self._client.call(
            self._r.zrevrangebyscore, keys.workers_seen(self.fb), "+inf", num(since),
            withscores=True,
        )
        if not rows:
            return []
        ids = [w for w, _ in rows]
        found = self._client.call(self._r.hmget, keys.workers(self.fb), ids)
        return [
            CompensationWorker(w, tuple(json.loads(h)), float(at))
            for (w, at), h in zip(rows, found, strict=True)
            if h is not None  # forgotten between the two reads
        ]

    def record_purge(
        self,
        now: float,
        reason: str,
        counts: dict[str, int],
        removed: tuple[str, list[str]],
        members: Sequence[str] = (),
    ) -> None:
        """Audit (actor and action ``retention``) and announce what a purge removed, and drop
        purged branches from the branch index.

        Args:
            counts: how many of each kind went (audit detail and feed event).
            removed: (detail key, ids): every id removed, listed in the audit detail.
            members: branch index members (``<enc>/<branch>``) of the removed branches.
        """
        self.run(
            "purged",
            [
                *self._maxlens,
                num(now),
                dumps(counts),
                dumps({**counts, removed[0]: removed[1]}),
                dumps(reason),
                *members,
            ],
        )
