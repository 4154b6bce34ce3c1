"""The engine: the entry point agent runtimes and operators hold.

`Engine.open(url)` wires a `Runtime` (store, clock, retention, detector factory, memory config,
compensation handlers) and hands it to the session handles it creates. Everything an operator does
goes through `engine.fleet.actions`, the saga lives in `engine.recovery.saga`, fleet queries in
`engine.fleet.queries`;
`Engine` is the facade over them that the console and the CLI call, so neither touches a store.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from engine import documents as _documents
from engine import metrics
from engine.fleet import actions, quarantine
from engine.fleet import queries as fleet
from engine.freeze import (
    FreezeWindow,
    PolicyChoice,
    declared_window,
    from_environment,
)
from engine.identity import Actor, checked_actor, checked_reason, require_operator
from engine.ids import validate_session_id
from engine.limits import Limits, canonical_within
from engine.loops.detector import DetectorConfig, LoopDetector
from engine.records import (
    AuditEvent,
    BulkRollbackItem,
    Compensation,
    Decision,
    Event,
    Quarantine,
    RollbackPreview,
    RollbackResult,
    SessionInfo,
    SnapshotNode,
    StepRecord,
)
from engine.recovery import bulk, oncall, saga, verbs
from engine.runtime import CompensationHandler, Runtime, configured_detector
from engine.sessions.session import Session
from engine.store import Retention, SessionCursor, SessionFilter, Store, open_store
from engine.types import FACETS, LoopPolicy, RollbackKind

if TYPE_CHECKING:
    from engine.loops.replay import Replay, WhyFlagged

__all__ = ["Actor", "CompensationHandler", "Engine"]


class Engine:
    """Entry point: `Engine.open(url)` then `engine.session(id)`."""

    def __init__(
        self,
        store: Store,
        *,
        detector_factory: Callable[[], LoopDetector] = LoopDetector,
        retention: Retention | None = None,
        on_loop: LoopPolicy = "rollback",
        clock: Callable[[], float] = time.time,
        compensation_attempts: int = 5,
        compensation_backoff: tuple[float, float, float] = (2.0, 4.0, 300.0),
        memory: Any = None,
        limits: Limits | None = None,
        freeze: FreezeWindow | None = None,
        detector_settings: Mapping[str, Any] | None = None,
    ):
        """Wire an engine on `store`. The constructor reads no environment or file: `freeze`
        is the change freeze whose loop policy applies while `clock` lies inside it (None:
        none); `detector_settings` (`DetectorConfig` field -> value) apply over
        `detector_factory`'s config, and settings declared in the store over them;
        `Engine.open` fills both from the environment and the configuration file.

        Raises:
            ConfigError: a detector setting is unknown or refused.
        """
        self.runtime = Runtime(
            store=store, clock=clock, retention=retention or Retention(),
            detector_factory=detector_factory, on_loop=on_loop,
            compensation_attempts=compensation_attempts,
            compensation_backoff=compensation_backoff, memory_config=memory,
            limits=limits or Limits(), freeze=freeze,
            detector_settings=dict(detector_settings or {}),
        )

    @classmethod
    def open(cls, url: str | None = None, **options: Any) -> Engine:
        """Open the store at `url` (None: $REWIND_STORE, else sqlite:///.rewind/rewind.db).

        Options are passed to `Engine` (detector_factory, retention, on_loop, clock, memory,
        limits, freeze, detector_settings); store options go in `store_options`;
        ``create=False`` (for readers) refuses a SQLite store that does not exist
        (StoreNotFound) instead of creating it. Without a `freeze` option the change freeze
        comes from $REWIND_FREEZE_START / _END / _NAME / _ON_LOOP (none when they are unset),
        as the store comes from $REWIND_STORE; pass ``freeze=None`` for no freeze. Without a
        `detector_settings` option they come from ``[rewind.detector]`` of the file
        $REWIND_CONFIG names, else of ``./rewind.toml`` (`engine.runtime.configured_detector`);
        pass ``detector_settings={}`` to ignore the file.

        Raises:
            ValueError: unknown URL scheme. ConfigError: the freeze variables or the
            configuration file are malformed (the message names the file, field and value).
            StoreUnavailable: store cannot be reached.
        """
        store_options = options.pop("store_options", {})
        create = options.pop("create", True)
        # Read before the store opens: a malformed setting fails without touching it.
        if "freeze" not in options:
            options["freeze"] = from_environment()
        if "detector_settings" not in options:
            options["detector_settings"] = configured_detector()
        return cls(open_store(url, create=create, **store_options), **options)

    # -- wiring (read through to the runtime) -------------------------------------------------
    @property
    def store(self) -> Store:
        """Internal: the store under this engine, for the engine's own modules, the console's
        sidebar and tests. Integrations use the engine's methods instead (`put_documents`,
        `write_session`, `url`, …), which check size limits and write atomically;
        tests/test_one_door.py keeps them from reaching here."""
        return self.runtime.store

    @property
    def clock(self) -> Callable[[], float]:
        return self.runtime.clock

    @property
    def on_loop(self) -> LoopPolicy:
        """The default loop policy (outside a freeze) of session handles given none."""
        return self.runtime.on_loop

    @property
    def freeze(self) -> FreezeWindow | None:
        """The change freeze this engine follows (whether or not it is in force now): the one
        declared in the store, else this process's configuration; see `freeze_in_force`."""
        return self.runtime.freeze_in_force()[0]

    def freeze_in_force(self) -> tuple[FreezeWindow | None, str]:
        """(the freeze this engine follows, where it comes from): ``"store"`` when declared
        in the store (`declare_freeze`; every process on the store follows it), ``"config"``
        when only this process's environment or configuration sets it (other processes may
        not follow it), ``""`` for none."""
        return self.runtime.freeze_in_force()

    def declare_freeze(self, start: Any, end: Any, *, name: str | None = None,
                       on_loop: LoopPolicy | None = None, actor: str | Actor,
                       reason: str) -> FreezeWindow:
        """Declare the fleet's change freeze from `start` to `end` (ISO 8601 text, datetimes
        or unix times), with the loop policy sessions follow while it lasts; stored and
        audited in one write, followed by every process on the store within a second.

        Raises:
            PermissionDenied: not an operator (now). ConfigError: a bad time, policy, or an end
            not after the start. ValueError: empty reason.
        """
        window = declared_window(start, end, name=name, on_loop=on_loop)
        return actions.declare_freeze(self.runtime, window, actor=actor, reason=reason)

    def declare_detector(self, settings: Mapping[str, Any], *, actor: str | Actor,
                         reason: str) -> dict[str, Any]:
        """Declare the loop-detector settings (`DetectorConfig` field -> value) every process
        on the store follows, over its own configuration: agents, the demo, the MCP proxy and
        the integrations build new session handles with them within a second, and each verdict
        records them (`StoredVerdict["detector"]`). Audited, one atomic write; ``{}`` goes back
        to each process's own configuration. Try a change first with `replay`.

        Raises:
            PermissionDenied: not an operator (now). ConfigError: an unknown field or a value
            the detector refuses. ValueError: empty reason.
        """
        return actions.declare_detector(self.runtime, settings, actor=actor, reason=reason)

    def detector_settings(self) -> dict[str, Any]:
        """The detector settings declared in the store (``{}``: none)."""
        return dict(self.runtime.declared_detector())

    def detector_in_force(self) -> tuple[dict[str, Any], str]:
        """(the settings new session handles follow over the detector factory's config, where
        they come from): ``"store"`` when declared in the store (`declare_detector`; fields
        not declared come from this process's ``[rewind.detector]``), ``"config"`` when only
        this process's configuration file sets some (other processes may not follow them),
        ``""`` for neither."""
        return self.runtime.detector_in_force()

    def end_freeze(self, *, actor: str | Actor, reason: str) -> FreezeWindow | None:
        """End the declared freeze (audited); returns it, or None when none was declared.

        Raises:
            PermissionDenied: not an operator (now). ValueError: empty reason.
        """
        return actions.end_freeze(self.runtime, actor=actor, reason=reason)

    def loop_policy(self, now: float | None = None, *, on_loop: LoopPolicy | None = None,
                    freeze_exempt: bool = False) -> PolicyChoice:
        """The loop policy a session handle given `on_loop` (None: none of its own) and
        `freeze_exempt` follows at unix time `now` (None: the engine's clock), and why
        (`.policy`, `.source`, `.reason`, `.freeze`): the freeze's policy while a freeze that
        sets one is in force (unless exempt), else `on_loop`, else the engine default.
        """
        return self.runtime.loop_policy(on_loop, now, freeze_exempt)

    @property
    def detector_factory(self) -> Callable[[], LoopDetector]:
        return self.runtime.detector_factory

    @property
    def retention(self) -> Retention:
        return self.runtime.retention

    @retention.setter
    def retention(self, value: Retention) -> None:
        self.runtime.retention = value

    @property
    def worker_id(self) -> str:
        return self.runtime.worker_id

    @property
    def memory_config(self) -> Any:
        """`MemoryConfig` shared by the sessions of this engine (created on first use)."""
        return self.runtime.memory()

    @memory_config.setter
    def memory_config(self, value: Any) -> None:
        self.runtime.memory_config = value

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- sessions ---------------------------------------------------------------------------
    def session(self, sid: str, meta: dict | None = None, *,
                on_loop: LoopPolicy | None = None, freeze_exempt: bool = False) -> Session:
        """Get or create the session `sid`; `meta` keys are merged into its metadata.

        `on_loop` sets this handle's loop policy; None follows the engine's default. While a
        freeze that sets a loop policy is in force, the freeze's policy applies instead,
        unless the handle is `freeze_exempt` (`engine.freeze.resolve`).

        Raises:
            InvalidSessionId: bad id. TypeError: meta not representable as JSON, or a facet
            (tenant, scenario, prompt_version, locale) that is not a string.
        """
        validate_session_id(sid)
        if meta is not None and not isinstance(meta, dict):
            raise TypeError("meta must be a dict")
        for key in (*FACETS, "locale"):
            # The fleet is filtered, indexed and quarantined by these: one rule on every store.
            value = (meta or {}).get(key)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"meta {key} must be a string (or left out), not "
                                f"{type(value).__name__} {value!r:.80}")
        if meta:
            meta, _ = canonical_within(meta, self.runtime.limits.meta_bytes, "meta", "meta_bytes")
        info = self.store.ensure_session(sid, meta or None, self.clock())
        return Session(self.runtime, info, on_loop, freeze_exempt)

    def get_session(self, sid: str) -> Session:
        """The handle of an existing session.

        Raises:
            UnknownSession: no such session.
        """
        return Session(self.runtime, self.runtime.require_session(sid))

    def sessions(self, **filters: Any) -> list[SessionInfo]:
        """Fleet summaries, most recently active first (ties: greater id first). Filters:
        status, tenant, scenario, prompt_version, updated_since; paging: limit, offset, and
        ``after``: the last `SessionInfo` of the previous page (or a `SessionCursor`, or its
        text), so each page costs what it reads, however deep it is.

        Raises:
            ValueError: `after` is no cursor.
        """
        paging: dict[str, Any] = {k: filters.pop(k) for k in ("limit", "offset") if k in filters}
        after = filters.pop("after", None)
        if after is not None:
            if isinstance(after, str):
                after = SessionCursor.decode(after)
            elif not isinstance(after, SessionCursor):
                after = SessionCursor.after(after)
            paging["after"] = after
        return self.store.list_sessions(SessionFilter(**filters), **paging)

    def replay(self, config: DetectorConfig | Mapping[str, Any] | None,
               where: Mapping[str, Any] | None = None) -> Replay:
        """Re-run the stored step stream of every session matching `where` (the filters of
        `rollback_many`; None: the whole fleet), as it happened (abandoned branches included,
        user messages as user input, in time order), through the detector this engine runs now
        and through one built from `config` (a `DetectorConfig` or a mapping of its field
        names). Writes nothing.

        Returns:
            A `Replay`: per session the first flag now and under `config` (step, rule) and the
            operator's label, and a summary (newly flagged, no longer flagged, earlier, later,
            precision and recall against the labels).

        Raises:
            ConfigError: an unknown setting or a value the detector refuses. ValueError: a bad
            filter.
        """
        from engine.loops.replay import Replay, detector_config

        detector_config(config)  # refuse a bad setting before reading the fleet
        if where:
            infos = bulk.matching_sessions(self.runtime, where)
        else:
            infos, page = [], 500
            while True:
                batch = self.sessions(limit=page, offset=len(infos))
                infos += batch
                if len(batch) < page:
                    break
        results, summary = fleet.replay(self.runtime, config, infos)
        return Replay(results, summary)

    def why_flagged(self, sid: str, *, step: int | None = None) -> WhyFlagged | None:
        """Why session `sid` was flagged, from its stored steps (every branch) replayed under
        the detector settings that flagged it: those its last verdict records (over the
        detector factory's config), or, without a verdict, the settings in force now. Writes
        nothing; replays the session a few dozen times (a caller showing it for a long session
        should compute it on request).

        Args:
            step: the flagged step to explain (None: the session's first flag).

        Returns:
            A `WhyFlagged`: the flagged step and rule, per rule (in the detector's order) what
            it looks for, its settings in force and its first flag when run alone, and the
            smallest change of one setting that would not have flagged the step. None when
            those settings flag nothing (or not `step`).

        Raises:
            UnknownSession: no such session. InvalidSessionId: a bad id. ConfigError: the
            recorded settings are ones this detector refuses.
        """
        from engine.loops.replay import detector_config, why_flagged

        info = self.runtime.require_session(sid)
        verdict = info.last_verdict
        if verdict is None:
            detector, recorded = self.runtime.new_detector()
            base = detector.config
        else:
            recorded = dict(verdict.get("detector") or {})
            base = detector_config(recorded, self.runtime.detector_factory().config)
        return why_flagged(info.id, fleet.session_history(self.runtime, info.id), base,
                           step=step, detector=recorded)

    def label(self, sid: str, label: str, *, actor: str | Actor,
              reason: str | None = None) -> None:
        """Record an operator's answer to "was this a loop?" for session `sid`: ``loop`` or
        ``not_loop``. The label is an audit row (action ``label``; one atomic write); the newest
        one counts, and replay's precision and recall are measured against them.

        Raises:
            PermissionDenied: not an operator (now). ValueError: another label.
            UnknownSession: no such session.
        """
        who = checked_actor(self.runtime.limits, actor)
        require_operator(who, "label sessions")
        if label not in ("loop", "not_loop"):
            raise ValueError(f"a label is loop or not_loop, not {label!r}")
        reason = checked_reason(self.runtime.limits, reason)
        self.runtime.require_session(sid)
        self.store.add_audit(who.name, fleet.LABEL_ACTION, sid, None, reason, {"label": label},
                             self.clock())

    def labels(self) -> dict[str, str]:
        """Session id -> its operator label (``loop`` / ``not_loop``), newest per session."""
        return dict(fleet.labels(self.runtime))

    def fleet_stats(self, window_s: float = 3600.0, active_s: float = 300.0) -> dict:
        """KPIs for the fleet view: active sessions, looping now, rollbacks and compensations."""
        return fleet.stats(self.runtime, window_s, active_s)

    def suggested_target(self, sid: str) -> str | None:
        """The snapshot a rollback of `sid` goes to by default (see `Session.suggested_target`)."""
        from engine.recovery.targets import suggested_target

        return suggested_target(self.runtime, sid)

    def preview_rollback(self, sid: str, to: str | None = None) -> RollbackPreview:
        """What `rollback(sid, to)` would take off the live line and which compensations run."""
        from engine.recovery.targets import preview_rollback

        return preview_rollback(self.runtime, sid, to)

    # -- operator actions (engine.fleet.actions) -------------------------------------------------
    def rollback(self, sid: str, to: str | None = None, *, actor: str | Actor = "system",
                 reason: str = "", notice: bool | str = True,
                 automatic: bool = False, rule: str | None = None,
                 expect_epoch: int | None = None,
                 kind: RollbackKind = "rollback", force: bool = False) -> RollbackResult:
        """Roll session `sid` back to snapshot `to` (None: its last healthy snapshot); a
        session rolled back already is refused unless `force`. See
        `engine.recovery.verbs.rollback`.

        Raises:
            PermissionDenied: the actor is a viewer. ValueError: a person (an `Actor`) gave no
            reason. UnknownSession, UnknownSnapshot, SnapshotNotRestorable, NothingToRollBack,
            RollbackConflict.
        """
        return verbs.rollback(self.runtime, sid, to, actor=actor, reason=reason,
                              notice=notice, automatic=automatic, rule=rule,
                              expect_epoch=expect_epoch, kind=kind, force=force)

    def rollback_many(self, where: Mapping[str, Any], *, actor: str | Actor, reason: str,
                      dry_run: bool = False, notice: bool | str = True
                      ) -> list[BulkRollbackItem]:
        """Roll back every session matching `where` (status, tenant, scenario, prompt_version,
        tool, session: one id or a list), each with its own expected epoch, under one batch id;
        see `engine.recovery.bulk.rollback_many`. A failure never stops the rest.

        Returns:
            Per session: `.session`, `.ok`, `.error`, `.rollback` (dry run: `.preview`).

        Raises:
            PermissionDenied: the actor is a viewer. ValueError: no or unknown filter.
        """
        return bulk.rollback_many(self.runtime, where, actor=actor, reason=reason,
                                     dry_run=dry_run, notice=notice)

    def quarantine(self, tool: str, *, actor: str | Actor, reason: str,
                   scope: dict[str, Any] | None = None,
                   until: float | dt.datetime | dt.timedelta | None = None) -> Quarantine:
        """Refuse `tool` to every session (or those whose meta matches `scope`: tenant,
        scenario, prompt_version) until `until` (unix seconds, datetime, timedelta from now;
        None: until lifted). Every process on the store honours it within a second; see
        `engine.fleet.quarantine`.

        Raises:
            PermissionDenied: the actor is a viewer. ValueError: bad scope, `until` past.
        """
        return quarantine.quarantine(self.runtime, tool, actor=actor, reason=reason,
                                     scope=scope, until=until)

    def quarantines(self, *, include_expired: bool = False) -> list[Quarantine]:
        """Quarantines in force (with `include_expired`, also the expired ones), oldest first."""
        return quarantine.quarantines(self.runtime, include_expired=include_expired)

    def lift_quarantine(self, qid: str, *, actor: str | Actor, reason: str = "") -> Quarantine:
        """Lift quarantine `qid`; returns it.

        Raises:
            PermissionDenied: the actor is a viewer. UnknownQuarantine: no such id.
        """
        return quarantine.lift(self.runtime, qid, actor=actor, reason=reason)

    def release(self, sid: str, *, actor: str | Actor, reason: str,
                note: str | None = None) -> Decision:
        """Release session `sid`, waiting for on-call: its agent may continue; `note` is
        appended to its messages. Audited, one atomic write (`engine.recovery.oncall`).

        Raises:
            PermissionDenied: not an operator (now). DecisionRefused: blank reason, the session
            does not wait, or was decided already. UnknownSession. Nothing is written then.
        """
        return oncall.release(self.runtime, sid, actor=actor, reason=reason, note=note)

    def stop(self, sid: str, *, actor: str | Actor, reason: str) -> Decision:
        """Stop session `sid`, waiting for on-call: status stopped, its steps raise
        `SessionStopped`. Audited, one atomic write (`engine.recovery.oncall`).

        Raises:
            PermissionDenied, DecisionRefused, UnknownSession: as `release`.
        """
        return oncall.stop(self.runtime, sid, actor=actor, reason=reason)

    def wait_for_decision(self, sid: str, timeout: float | None = None) -> Decision:
        """Block until an operator decides about session `sid`'s wait for on-call (see
        `Session.wait_for_decision`).

        Raises:
            WaitTimeout: none within `timeout` seconds. StepError: the session does not wait.
        """
        return oncall.wait_for_decision(self.runtime, sid, timeout)

    def notice(self, sid: str, text: str | None = None, *, actor: str | Actor = "system") -> str:
        """Append a recovery notice to session `sid` (None: default template for its locale).

        Returns:
            The text that was appended.
        """
        return verbs.notice(self.runtime, sid, text, actor=actor)

    def delete_session(self, sid: str, *, actor: str | Actor = "system", reason: str = "") -> bool:
        """Delete a session and all it owns; the audit log keeps a record. True if it existed."""
        return actions.delete_session(self.runtime, sid, actor=actor, reason=reason)

    def purge_abandoned(self, older_than_s: float = 7 * 86400.0, *, dry_run: bool = False,
                        actor: str | Actor = "system") -> dict[str, int]:
        """Delete abandoned branches older than `older_than_s` (see `actions.purge_abandoned`).

        Raises:
            PermissionDenied: the actor is not an operator (now)."""
        return actions.purge_abandoned(self.runtime, older_than_s, dry_run=dry_run, actor=actor)

    def purge_idle_sessions(self, older_than_s: float, *, dry_run: bool = False,
                            actor: str | Actor = "system") -> dict[str, int]:
        """Delete idle sessions that are not evidence (see `actions.purge_idle_sessions`).

        Raises:
            PermissionDenied: the actor is not an operator (now)."""
        return actions.purge_idle_sessions(self.runtime, older_than_s, dry_run=dry_run,
                                           actor=actor)

    def audit(self, **filters: Any) -> list[AuditEvent]:
        """Audit events, newest first. Filters: session, actor, action, since, limit."""
        return self.store.audit(**filters)

    def events(self, since: int = 0, limit: int = 1000, session: str | None = None) -> list[Event]:
        """Feed events after cursor `since`, oldest first; pass the last id back as `since`."""
        return self.store.events(since=since, limit=limit, session=session)

    # -- saga (engine.recovery.saga) ------------------------------------------------------------
    def register_compensation(self, name: str, handler: CompensationHandler) -> None:
        """Register the handler for compensation `name` in this process."""
        saga.register(self.runtime, name, handler)

    def compensations(self, **filters: Any) -> list[Compensation]:
        """Compensations in the outbox, newest first. Filters: session, status, limit."""
        return saga.list_compensations(self.runtime, **filters)

    def run_compensations(self, limit: int = 100, lease_s: float = 60.0) -> list[Compensation]:
        """Run pending compensations this process has handlers for, each once (see
        `engine.recovery.saga`). Returns the compensations processed, with their final status."""
        return saga.run_pending(self.runtime, limit, lease_s)

    def retry_compensation(self, cid: int, *, actor: str | Actor, reason: str) -> Compensation:
        """Put compensation `cid` back to pending with its attempts reset, so a process with
        its handler runs it again; audited (see `engine.fleet.actions.retry_compensation`).

        Raises:
            PermissionDenied: the actor is a viewer. ValueError: no reason.
            UnknownCompensation: no such id. CompensationConflict: done or resolved already, or
            a worker holds its lease right now.
        """
        return actions.retry_compensation(self.runtime, cid, actor=actor, reason=reason)

    def resolve_compensation(self, cid: int, *, actor: str | Actor, reason: str) -> Compensation:
        """Mark compensation `cid` resolved by hand (status resolved, who and why kept);
        audited (see `engine.fleet.actions.resolve_compensation`).

        Raises:
            PermissionDenied: the actor is a viewer. ValueError: no reason.
            UnknownCompensation: no such id. CompensationConflict: done or resolved already, or
            a worker holds its lease right now.
        """
        return actions.resolve_compensation(self.runtime, cid, actor=actor, reason=reason)

    def compensation_handlers(self, within_s: float = saga.LIVE_S) -> dict[str, float]:
        """Compensation handlers some live process has registered: name -> time of the newest
        heartbeat of such a process within the last `within_s` seconds. A handler missing here
        has no process to run it: retrying its compensations will not help until one starts."""
        return saga.live_handlers(self.runtime, within_s)

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

    @staticmethod
    def serve_metrics(port: int = 9464, addr: str = "127.0.0.1") -> Any:
        """Expose this process's Prometheus counters (agent_loop_detected_total,
        agent_rollbacks_total) at http://addr:port/metrics. Returns (server, thread)."""
        return metrics.serve_metrics(port, addr)

    # -- integrations: the one door to the store (engine.documents) ---------------------------
    # Integrations (LangGraph, the MCP proxy, the alert worker, the demo) keep state of their own
    # in the store; they reach it here, never through `store`, so every write is size-checked
    # and the parts of one change are written atomically.
    @property
    def url(self) -> str:
        """The store's URL with any password replaced by ***, safe to print or log."""
        return self.store.url

    @property
    def limits(self) -> Limits:
        """The size limits this engine checks every write against (`engine.limits`)."""
        return self.runtime.limits

    @staticmethod
    def resolve_url(url: str | None = None) -> str:
        """The store URL `Engine.open(url)` opens: `url`, else $REWIND_STORE, else the embedded
        default (``sqlite:///.rewind/rewind.db``). Not redacted: it is the one to open."""
        from engine.store import DEFAULT_URL

        return url or os.environ.get("REWIND_STORE") or DEFAULT_URL

    @staticmethod
    def redact_url(url: str) -> str:
        """`url` (a store URL, a webhook, …) with every password replaced by ***."""
        from engine.store.urls import redact

        return redact(url)

    def live_messages(self, sid: str, *, since: int = 0,
                      until: int | None = None) -> list[dict[str, Any]]:
        """The messages on the live line of session `sid` from position `since` on (0: all;
        `SessionInfo.messages` counts them), before position `until` (None: to the end), oldest
        first, [] for an unknown session. Reading a span costs what it returns, however long
        the history.

        Raises:
            InvalidSessionId: bad id.
        """
        return self.store.live_messages(validate_session_id(sid), since=since, until=until)

    def session_info(self, sid: str) -> SessionInfo | None:
        """The stored summary of session `sid`, or None when there is none (unlike
        `get_session`, which raises).

        Raises:
            InvalidSessionId: bad id.
        """
        return _documents.session_info(self.runtime, sid)

    def get_documents(self, sid: str, ns: str, keys: Sequence[str]) -> dict[str, Any]:
        """The documents among `keys` that exist in namespace `ns` of session `sid`. Documents
        are unversioned (rollbacks leave them alone): integrations keep their own history there.
        A document is JSON data, or `bytes` when it was stored as bytes.

        Raises:
            InvalidSessionId: bad id. ValueError: `ns` is not an identifier.
        """
        return _documents.get_documents(self.runtime, sid, ns, keys)

    def scan_documents(self, sid: str, ns: str, prefix: str = "") -> dict[str, Any]:
        """Every document of namespace `ns` of session `sid` whose key starts with `prefix`, in
        key order ({} for an unknown session).

        Raises:
            InvalidSessionId: bad id. ValueError: `ns` is not an identifier.
        """
        return _documents.scan_documents(self.runtime, sid, ns, prefix)

    def put_documents(self, sid: str, ns: str, items: Mapping[str, Any]) -> None:
        """Set documents of namespace `ns` of session `sid` (a value of None deletes one), in
        one atomic write; each document is checked against ``Limits.document_bytes`` first. A
        document is JSON data, or `bytes` kept as they are (serialized data an integration would
        otherwise have to encode as text); `get_documents` gives bytes back.

        Raises:
            UnknownSession: no such session. ValueError: bad namespace or key.
            SizeLimitExceeded: a document over its limit (nothing written). TypeError: a
            document with no JSON form.
        """
        _documents.put_documents(self.runtime, sid, ns, items)

    def fleet_documents(self, ns: str) -> dict[str, Any]:
        """Every fleet document of namespace `ns` (small fleet-wide state no session owns, such
        as the alert worker's cursor), in key order.

        Raises:
            ValueError: `ns` is not an identifier.
        """
        return _documents.fleet_documents(self.runtime, ns)

    def put_fleet_documents(self, ns: str, values: Mapping[str, Any]) -> None:
        """Set fleet documents of namespace `ns` (None deletes one) in one atomic write, each
        checked against ``Limits.document_bytes`` first.

        Raises:
            ValueError: bad namespace or key. SizeLimitExceeded: a document over its limit
            (nothing written). TypeError: a document with no JSON form.
        """
        _documents.put_fleet_documents(self.runtime, ns, values)

    def get_values(self, sid: str, ns: str) -> dict[str, Any]:
        """Current values of versioned namespace `ns` on the live line of session `sid` ({} for
        an unknown session); a rollback restores them as they were at its snapshot.

        Raises:
            InvalidSessionId: bad id. ValueError: `ns` is not an identifier.
        """
        return _documents.get_values(self.runtime, sid, ns)

    def put_values(self, sid: str, ns: str, items: Mapping[str, Any]) -> int:
        """Set keys of versioned namespace `ns` of session `sid` (None deletes one) in one
        write, checked like `Session.set_vars`. ``var`` and ``mem`` are refused: they hold the
        session's variables and memory.

        Returns:
            The session's epoch.

        Raises:
            UnknownSession: no such session. ValueError: bad or reserved namespace, bad key.
            SizeLimitExceeded: over ``Limits.variables_bytes`` (nothing written).
        """
        return _documents.put_values(self.runtime, sid, ns, items)

    def write_session(
        self,
        sid: str,
        *,
        messages: Sequence[Mapping[str, Any]] = (),
        messages_if_empty: bool = False,
        values: Mapping[str, Mapping[str, Any]] | None = None,
        snapshot: str | None = None,
        documents: Mapping[str, Mapping[str, Any]] | None = None,
        stamp: tuple[str, str] | None = None,
        retention: Retention | None = None,
    ) -> tuple[int, SnapshotNode | None]:
        """Several writes to session `sid` as one atomic write: all happen, or none.

        In this order: `messages` appended to the live line (only when it holds none yet, with
        `messages_if_empty`), `values` set (namespace -> items, as `put_values`), a manual
        snapshot labelled `snapshot` taken (older ones retired by `retention`, None: the
        engine's), `documents` set (namespace -> items, as `put_documents`). The document that
        `stamp` (namespace, key) names records the snapshot: its ``snap`` (id), ``msgs`` (live
        message count) and ``epoch``. Every part is size-checked before the store is touched.

        Returns:
            (the session's epoch, the snapshot taken or None).

        Raises:
            UnknownSession: no such session. ValueError: a bad part, or a stamp without a
            snapshot or naming no dict among `documents`. SizeLimitExceeded: a part over its
            limit. Nothing is written when any of these is raised.
        """
        return _documents.write_session(
            self.runtime, sid, messages=messages, messages_if_empty=messages_if_empty,
            values=values, snapshot=snapshot, documents=documents, stamp=stamp,
            retention=retention)

    def record_refusal(self, sid: str, tool: str, args: Any, reason: str) -> int:
        """Record on session `sid`'s timeline a call to `tool` that an integration's own guard
        refused before it ran (the MCP proxy's loop block): a step that ended in error, its
        text ``refused by Rewind: <reason>``, no snapshot. The loop detector never counts it, so
        a refused call is never evidence of a loop. Returns its step number.

        Raises:
            UnknownSession: no such session. SizeLimitExceeded: `args` over its limit.
        """
        return quarantine.refuse_call(self.runtime, sid, tool, args, reason)

    def recent_tools(self, *, sessions: int = 200, last: int = 100) -> dict[str, int]:
        """How often each tool was called in the `last` steps of the `sessions` most recently
        active sessions (refused calls not counted): a bounded look, not a scan of the fleet,
        that lets a quarantine warn about a tool name no agent has called lately (a typo
        quarantines nothing).

        Returns:
            Tool name -> calls seen, most called first.
        """
        from engine.fleet.quarantine import is_refusal

        seen: dict[str, int] = {}
        for info in self.sessions(limit=sessions):
            for step in self.store.steps(info.id, last=last):
                if step.tool is not None and not is_refusal(step):
                    seen[step.tool] = seen.get(step.tool, 0) + 1
        return dict(sorted(seen.items(), key=lambda kv: (-kv[1], kv[0])))

    def running_steps(self, older_than_s: float = 300.0, *, sessions: int = 200,
                      last: int = 50) -> list[tuple[str, StepRecord]]:
        """Steps begun more than `older_than_s` seconds ago that never ended (their process died,
        or lost the call), among the `last` steps of the `sessions` most recently active
        sessions: a bounded look for `rewind doctor`, not a scan of the whole fleet.

        Returns:
            (session id, `StepRecord`) pairs, oldest step first.
        """
        cutoff = self.clock() - older_than_s
        found: list[tuple[str, StepRecord]] = []
        for info in self.sessions(limit=sessions):
            for step in self.store.steps(info.id, last=last):
                if step.status == "running" and step.started_at <= cutoff:
                    found.append((info.id, step))
        return sorted(found, key=lambda pair: pair[1].started_at)
