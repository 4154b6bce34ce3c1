"""The engine: opens a store, hands out session handles, and holds every operator action.

The console and the CLI call these methods; neither touches a store. An operator action checks the
actor's role here, so hiding a button is never the only guard.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine import metrics
from engine.detector import LoopDetector
from engine.errors import (
    NothingToRollBack,
    PermissionDenied,
    UnknownCompensation,
    UnknownSession,
)
from engine.notices import notice_message, template_for
from engine.records import (
    AuditEvent,
    Compensation,
    Event,
    RollbackResult,
    SessionInfo,
)
from engine.session import LOOP_POLICIES, Session, validate_session_id
from engine.store import Retention, Store, open_store

log = logging.getLogger("rewind")

ROLES = ("viewer", "operator")


@dataclass(frozen=True)
class Actor:
    """Who performs an action: a name for the audit log and a role (viewer or operator)."""

    name: str
    role: str = "operator"

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("an actor needs a non-empty name")
        if self.role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}, not {self.role!r}")


def _actor(actor: str | Actor) -> Actor:
    return actor if isinstance(actor, Actor) else Actor(str(actor), "operator")


def _require_operator(actor: Actor, action: str) -> None:
    if actor.role != "operator":
        raise PermissionDenied(f"{actor.name} is a {actor.role}; only operators may {action}")


CompensationHandler = Callable[[Any, str], Any]
"""A compensation handler: called with (args, idempotency_key); raising means it failed."""


class Engine:
    """Entry point: `Engine.open(url)` then `engine.session(id)`."""

    def __init__(
        self,
        store: Store,
        *,
        detector_factory: Callable[[], LoopDetector] = LoopDetector,
        retention: Retention | None = None,
        on_loop: str = "rollback",
        clock: Callable[[], float] = time.time,
        compensation_attempts: int = 3,
        memory: Any = None,
    ):
        if on_loop not in LOOP_POLICIES:
            raise ValueError(f"on_loop must be one of {', '.join(LOOP_POLICIES)}")
        self.store = store
        self.detector_factory = detector_factory
        self.retention = retention or Retention()
        self.on_loop = on_loop
        self.clock = clock
        self.compensation_attempts = compensation_attempts
        self._memory_config = memory
        self._handlers: dict[str, CompensationHandler] = {}
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"

    @classmethod
    def open(cls, url: str | None = None, **options: Any) -> Engine:
        """Open the store at `url` (None: $REWIND_STORE, else sqlite:///.rewind/rewind.db).

        Options are passed to `Engine` (detector_factory, retention, on_loop, clock, memory);
        store options go in `store_options`.

        Raises:
            ValueError: unknown URL scheme. StoreUnavailable: store cannot be reached.
        """
        store_options = options.pop("store_options", {})
        return cls(open_store(url, **store_options), **options)

    @property
    def memory_config(self):
        """`MemoryConfig` shared by the sessions of this engine (created on first use)."""
        if self._memory_config is None:
            from engine.memory import MemoryConfig

            self._memory_config = MemoryConfig()
        return self._memory_config

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- sessions ---------------------------------------------------------------------------
    def session(self, sid: str, meta: dict | None = None, *, on_loop: str | None = None) -> Session:
        """Get or create the session `sid`; `meta` keys are merged into its metadata.

        Raises:
            InvalidSessionId: bad id. TypeError: meta not representable as JSON.
        """
        from engine.fingerprint import canonicalize

        validate_session_id(sid)
        if meta is not None and not isinstance(meta, dict):
            raise TypeError("meta must be a dict")
        info = self.store.ensure_session(sid, canonicalize(meta, "meta") if meta else None,
                                         self.clock())
        return Session(self, info, on_loop or self.on_loop)

    def get_session(self, sid: str) -> Session:
        """The handle of an existing session.

        Raises:
            UnknownSession: no such session.
        """
        return Session(self, self._require(validate_session_id(sid)), self.on_loop)

    def _require(self, sid: str) -> SessionInfo:
        info = self.store.get_session(sid)
        if info is None:
            raise UnknownSession(f"no session {sid!r} in {self.store.url}")
        return info

    def sessions(self, **filters: Any) -> list[SessionInfo]:
        """Fleet summaries, most recently active first. Filters: status, tenant, scenario,
        prompt_version, updated_since, limit, offset."""
        return self.store.list_sessions(**filters)

    def fleet_stats(self, window_s: float = 3600.0, active_s: float = 300.0) -> dict:
        """KPIs for the fleet view: active sessions, looping now, rollbacks and compensations."""
        now = self.clock()
        return {
            "sessions": self.store.count_sessions(),
            "active": self.store.count_sessions(updated_since=now - active_s),
            "looping": self.store.count_sessions(status="looping"),
            "rollbacks_window": self.store.count_audit("rollback", now - window_s),
            "compensations_pending": self.store.count_compensations("pending"),
            "compensations_failed": self.store.count_compensations("failed"),
        }

    # -- operator actions -------------------------------------------------------------------
    def rollback(self, sid: str, to: str | None = None, *, actor: str | Actor = "system",
                 reason: str = "", notice: bool | str = True,
                 automatic: bool = False, rule: str | None = None,
                 expect_epoch: int | None = None, kind: str = "rollback") -> RollbackResult:
        """Roll session `sid` back to snapshot `to` (None: its last healthy snapshot).

        `expect_epoch` (the epoch the operator saw in the preview) makes the rollback refuse
        with RollbackConflict if someone else rolled the session back in the meantime.
        `kind="fork"` is an integration's time travel: same mechanics, no recovery status, not
        counted as a rollback.

        Raises:
            PermissionDenied: the actor is a viewer. UnknownSession, UnknownSnapshot,
            SnapshotNotRestorable, NothingToRollBack, RollbackConflict.
        """
        who = _actor(actor)
        _require_operator(who, "roll sessions back")
        session = self.get_session(sid)
        info = session.info()
        target = to if to is not None else session.suggested_target()
        if target is None:
            raise NothingToRollBack(
                f"session {sid!r} has no restorable snapshot to roll back to; take snapshots "
                "with Session.snapshot() or guard tool calls with Session.step()"
            )
        message = None
        if notice:
            text = notice if isinstance(notice, str) else template_for(info.locale)
            message = notice_message(text)
        if kind not in ("rollback", "fork"):
            raise ValueError(f"kind must be rollback or fork, not {kind!r}")
        result = self.store.rollback(sid, target, actor=who.name, reason=reason or "",
                                     notice=message, now=self.clock(),
                                     expect_epoch=expect_epoch, kind=kind)
        if kind == "rollback":
            metrics.record_rollback(info.meta, automatic, rule)
        if result.compensations and self._handlers:
            self.run_compensations()
        return result

    def notice(self, sid: str, text: str | None = None, *, actor: str | Actor = "system") -> str:
        """Append a recovery notice to session `sid` (None: default template for its locale).

        Returns:
            The text that was appended.
        """
        who = _actor(actor)
        _require_operator(who, "send notices")
        info = self._require(validate_session_id(sid))
        message = notice_message(text if text is not None else template_for(info.locale))
        self.store.add_notice(sid, message, who.name, self.clock())
        return message["content"]

    def delete_session(self, sid: str, *, actor: str | Actor = "system", reason: str = "") -> bool:
        """Delete a session and all it owns; the audit log keeps a record. True if it existed."""
        who = _actor(actor)
        _require_operator(who, "delete sessions")
        found = self.store.delete_session(validate_session_id(sid), self.clock())
        if found:
            self.store.add_audit(who.name, "delete", sid, None, reason, {}, self.clock())
        return found

    def audit(self, **filters: Any) -> list[AuditEvent]:
        """Audit events, newest first. Filters: session, actor, action, since, limit."""
        return self.store.audit(**filters)

    def events(self, since: int = 0, limit: int = 1000, session: str | None = None) -> list[Event]:
        """Feed events after cursor `since`, oldest first; pass the last id back as `since`."""
        return self.store.events(since=since, limit=limit, session=session)

    # -- saga -------------------------------------------------------------------------------
    def register_compensation(self, name: str, handler: CompensationHandler) -> None:
        """Register the handler for compensation `name` in this process."""
        if not isinstance(name, str) or not name:
            raise ValueError("a compensation name must be a non-empty string")
        if not callable(handler):
            raise TypeError(f"the handler for {name!r} is not callable")
        self._handlers[name] = handler

    def compensations(self, **filters: Any) -> list[Compensation]:
        """Compensations in the outbox, newest first. Filters: session, status, limit."""
        return self.store.compensations(**filters)

    def run_compensations(self, limit: int = 100, lease_s: float = 60.0) -> list[Compensation]:
        """Run pending compensations this process has handlers for, each once.

        A handler gets (args, idempotency_key); the key is stable across retries and crashes, so
        a handler that stores it can refuse to act twice. A handler that raises is retried up to
        `compensation_attempts` times, then stays failed, visible as needing manual action.

        Returns:
            The compensations processed, with their final status.
        """
        done = []
        names = sorted(self._handlers)
        for _ in range(limit):
            comp = self.store.claim_compensation(names, self.worker_id, lease_s, self.clock())
            if comp is None:
                break
            handler = self._handlers.get(comp.name)
            if handler is None:  # pragma: no cover - claim filters by name
                raise UnknownCompensation(f"no handler registered for {comp.name!r}")
            try:
                handler(comp.args, comp.idempotency_key)
            except Exception as exc:  # noqa: BLE001 - a handler's failure is data here
                final = comp.attempts >= self.compensation_attempts
                error = f"{type(exc).__name__}: {exc}"
                log.warning("compensation %s for %s failed: %s", comp.name, comp.session, error)
                self.store.finish_compensation(comp.id, self.worker_id, False, error,
                                               self.clock(), final)
                status = "failed" if final else "pending"
                done.append(Compensation(**{**comp.__dict__, "status": status, "error": error}))
            else:
                self.store.finish_compensation(comp.id, self.worker_id, True, None,
                                               self.clock(), True)
                done.append(Compensation(**{**comp.__dict__, "status": "done"}))
        return done

    # -- maintenance ------------------------------------------------------------------------
    def doctor(self) -> dict:
        """Rebuild the store's fleet-wide indexes from the sessions (after a crash or drift)."""
        return self.store.rebuild_indexes()

    @property
    def degraded(self) -> str | None:
        """Why the engine runs on its fallback store, or None when it runs on the one asked for."""
        if getattr(self.store, "degraded", False):
            return getattr(self.store, "degraded_reason", None) or "running on the fallback store"
        return None

    # -- retention --------------------------------------------------------------------------
    def purge_abandoned(self, older_than_s: float = 7 * 86400.0) -> dict:
        """Delete abandoned branches older than `older_than_s`; records what it removed."""
        if older_than_s < 0:
            raise ValueError("older_than_s must not be negative")
        now = self.clock()
        return self.store.purge_branches(now - older_than_s, now)

    @staticmethod
    def serve_metrics(port: int = 9464, addr: str = "127.0.0.1"):
        """Expose this process's Prometheus counters (agent_loop_detected_total,
        agent_rollbacks_total) at http://addr:port/metrics. Returns (server, thread)."""
        return metrics.serve_metrics(port, addr)

    # -- hooks ----------------------------------------------------------------------------
    def _loop_flagged(self, session: Session, verdict, tool: str | None) -> None:
        """Called when a guarded step flags a loop."""
        metrics.record_loop(verdict, tool, session.info().meta)
