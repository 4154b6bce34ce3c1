"""The engine: the entry point agent runtimes and operators hold.

`Engine.open(url)` wires a `Runtime` (store, clock, retention, detector factory, memory config,
compensation handlers) and hands it to the session handles it creates. `Engine` keeps the verbs
an agent platform and an operator use every day; the rest hangs off it by noun:

- ``engine.fleet`` (`engine.fleet.api.Fleet`): the freeze and the declared detector, the
  fleet's figures and labels, rollback previews and "why flagged", housekeeping;
- ``engine.compensations`` (`engine.fleet.api.Compensations`): the saga's outbox;
- ``engine.documents`` (`engine.documents.Documents`): the one door integrations use to keep
  state of their own in the store;
- ``engine.config`` (`engine.runtime.EngineConfig`): how the engine was wired.

The console and the CLI call these, so neither touches a store.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from engine import documents as _documents
from engine.documents import Documents
from engine.errors import WatchOnly
from engine.fleet import exemptions, quarantine
from engine.freeze import (
    FreezeWindow,
    from_environment,
)
from engine.identity import Actor, checked_actor, checked_reason, require_operator
from engine.ids import validate_session_id
from engine.limits import Limits
from engine.loops.detector import DetectorConfig, LoopDetector
from engine.records import (
    AuditEvent,
    BulkRollbackItem,
    Event,
    Quarantine,
    RollbackResult,
    SessionInfo,
)
from engine.recovery import verbs
from engine.runtime import CompensationHandler, EngineConfig, Runtime, configured_detector
from engine.sessions.session import Session
from engine.store import Retention, SessionCursor, SessionFilter, Store, open_store
from engine.types import LoopPolicy, RollbackKind

if TYPE_CHECKING:
    from engine.fleet.api import Compensations, Fleet
    from engine.fleet.incidents import Incident
    from engine.loops.replay import Replay

# What an agent's step needs is imported above; the operator's rooms (the fleet's figures and
# replay, incidents, bulk rollback) are imported by the methods that use them, so that
# `from engine import Engine` in a per-request service loads only what a step needs.

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
        self._runtime = Runtime(
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
        sidebar and tests. Integrations use `documents` instead, which checks size limits and
        writes atomically; tests/test_one_door.py keeps them from reaching here."""
        return self._runtime.store

    @property
    def config(self) -> EngineConfig:
        """How this engine was wired: retention, memory config, detector factory, default loop
        policy, worker id, and whether it runs on its fallback store."""
        return EngineConfig(self._runtime)

    @property
    def fleet(self) -> Fleet:
        """The fleet's feed, freeze, declared detector, figures, labels and housekeeping."""
        from engine.fleet.api import Fleet

        return Fleet(self._runtime)

    @property
    def compensations(self) -> Compensations:
        """The saga's outbox: ``engine.compensations(status=...)`` lists; `.register`,
        `.run`, `.retry`, `.resolve`, `.handlers`."""
        from engine.fleet.api import Compensations

        return Compensations(self._runtime)

    @property
    def documents(self) -> Documents:
        """The one door integrations use to keep state of their own in the store."""
        return Documents(self._runtime)

    @property
    def clock(self) -> Callable[[], float]:
        return self._runtime.clock

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
        unless the handle is `freeze_exempt` (`engine.freeze.resolve`); the store keeps that
        the session was opened exempt, for the freeze banner's count (`engine.fleet.exemptions`).

        A session the OTLP receiver (`rewind otlp`) created is *watch-only*: Rewind does not
        run the agent behind it, so it is flagged, never rolled back. A handle never inherits
        that: opening such a session without ``meta={"watch_only": True}`` (what the receiver
        itself passes) is refused with `WatchOnly`, naming the receiver, and nothing is
        written; so spans cannot squat an id an agent embeds Rewind under, and an agent that
        gets a handle always gets its rollbacks and its `LoopDetected`. Open another id (the
        receiver writes only ids under its ``--session-prefix``, ``otel-`` by default).

        Raises:
            InvalidSessionId: bad id. TypeError: meta not representable as JSON, or a facet
            (tenant, scenario, prompt_version, locale) that is not a string. WatchOnly: the
            session is watched by the OTLP receiver (see above).
        """
        validate_session_id(sid)
        watched = isinstance(meta, dict) and bool(meta.get("watch_only"))
        meta = _documents.checked_meta(self._runtime, meta)
        if meta and not watched:  # meta would be merged into the session: look first
            _refuse_watched(self.store.get_session(sid))
        info = self.store.ensure_session(sid, meta or None, self.clock())
        if not watched:
            _refuse_watched(info)
        session = Session(self._runtime, info, on_loop, freeze_exempt)
        if freeze_exempt:  # the freeze banner and `rewind freeze` count these
            exemptions.note(self._runtime, sid)
        return session

    def get_session(self, sid: str) -> Session:
        """The handle of an existing session.

        Raises:
            UnknownSession: no such session.
        """
        return Session(self._runtime, self._runtime.require_session(sid))

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
        from engine.fleet import queries
        from engine.loops.replay import Replay, detector_config
        from engine.recovery import bulk

        detector_config(config)  # refuse a bad setting before reading the fleet
        if where:
            infos = bulk.matching_sessions(self._runtime, where)
        else:
            infos, page = [], 500
            batch = self.sessions(limit=page)
            while batch:  # keyset pages: a deep page costs what it reads, as the first does
                infos += batch
                if len(batch) < page:
                    break
                batch = self.sessions(limit=page, after=batch[-1])
        results, summary = queries.replay(self._runtime, config, infos)
        return Replay(results, summary)

    def label(self, sid: str, label: str, *, actor: str | Actor,
              reason: str | None = None) -> None:
        """Record an operator's answer to "was this a loop?" for session `sid`: ``loop`` or
        ``not_loop``. The label is an audit row (action ``label``; one atomic write); the newest
        one counts, and replay's precision and recall are measured against them.

        Raises:
            PermissionDenied: not an operator (now). ValueError: another label.
            UnknownSession: no such session.
        """
        from engine.fleet.queries import LABEL_ACTION

        who = checked_actor(self._runtime.limits, actor)
        require_operator(who, "label sessions")
        if label not in ("loop", "not_loop"):
            raise ValueError(f"a label is loop or not_loop, not {label!r}")
        reason = checked_reason(self._runtime.limits, reason)
        self._runtime.require_session(sid)
        self.store.add_audit(who.name, LABEL_ACTION, sid, None, reason, {"label": label},
                             self.clock())

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
        return verbs.rollback(self._runtime, sid, to, actor=actor, reason=reason,
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
        from engine.recovery.bulk import rollback_many

        return rollback_many(self._runtime, where, actor=actor, reason=reason,
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
        return quarantine.quarantine(self._runtime, tool, actor=actor, reason=reason,
                                     scope=scope, until=until)

    def quarantines(self, *, include_expired: bool = False) -> list[Quarantine]:
        """Quarantines in force (with `include_expired`, also the expired ones), oldest first."""
        return quarantine.quarantines(self._runtime, include_expired=include_expired)

    def lift_quarantine(self, qid: str, *, actor: str | Actor, reason: str = "") -> Quarantine:
        """Lift quarantine `qid`; returns it.

        Raises:
            PermissionDenied: the actor is a viewer. UnknownQuarantine: no such id.
        """
        return quarantine.lift(self._runtime, qid, actor=actor, reason=reason)

    def audit(self, **filters: Any) -> list[AuditEvent]:
        """Audit events, newest first. Filters: session, actor, action, since, limit."""
        return self.store.audit(**filters)

    def events(self, since: int = 0, limit: int = 1000, session: str | None = None) -> list[Event]:
        """Feed events after cursor `since`, oldest first; pass the last id back as `since`."""
        return self.store.events(since=since, limit=limit, session=session)

    @property
    def url(self) -> str:
        """The store's URL with any password replaced by ***, safe to print or log."""
        return self.store.url

    @property
    def limits(self) -> Limits:
        """The size limits this engine checks every write against (`engine.limits`)."""
        return self._runtime.limits

    def session_info(self, sid: str) -> SessionInfo | None:
        """The stored summary of session `sid`, or None when there is none (unlike
        `get_session`, which raises).

        Raises:
            InvalidSessionId: bad id.
        """
        return _documents.session_info(self._runtime, sid)

    # -- incidents (engine.fleet.incidents) ----------------------------------------------------
    def incidents(self, since: Any = None, status: str | None = None) -> list[Incident]:
        """Loops grouped by cause (tool, normalised error signature, rule): incidents last seen
        at or after `since` (unix seconds or a datetime; None: all), of `status` (``open``,
        ``closed``; None: both), open ones first. Reads only; remedies are
        `engine.fleet.incident_action`. See `engine.fleet.incidents`.

        Raises:
            ValueError: an unknown status. TypeError: `since` is no time.
        """
        from engine.fleet.incidents import incidents

        return incidents(self._runtime, since, status)

    def incident(self, incident_id: str) -> Incident:
        """Incident `incident_id`.

        Raises:
            UnknownIncident: no such incident.
        """
        from engine.fleet.incidents import incident

        return incident(self._runtime, incident_id)

def _refuse_watched(info: SessionInfo | None) -> None:
    """Raises WatchOnly when `info` is a session the OTLP receiver watches (see
    `Engine.session`)."""
    if info is not None and (info.meta or {}).get("watch_only"):
        raise WatchOnly(
            f"session {info.id!r} is watched by the OTLP receiver (rewind otlp created it from "
            "an agent's spans): an embedded engine cannot open it, as Rewind could only flag "
            "its loops, never roll them back. Open the agent's session under another id (the "
            "receiver writes only ids under its --session-prefix, 'otel-' by default)")
