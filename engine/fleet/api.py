"""`engine.fleet` and `engine.compensations`: the operator's doors that are not single-session
verbs, each a thin handle over the modules of this room and of `engine.recovery`.

`Engine` keeps the verbs agent platforms and operators use every day (open a session, roll it
back, quarantine a tool, replay, label); what an operator does to or reads about the whole fleet
lives on `engine.fleet`, and the compensation outbox on `engine.compensations`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from engine.fleet import actions, exemptions, incidents, queries
from engine.fleet.incidents import IncidentAction
from engine.fleet.quarantine import is_refusal
from engine.freeze import FreezeWindow, PolicyChoice, declared_window
from engine.identity import Actor
from engine.records import Compensation, Decision, LoopCost, RollbackPreview, StepRecord
from engine.recovery import oncall, saga
from engine.runtime import CompensationHandler, Runtime
from engine.store import SessionFilter
from engine.types import LoopPolicy

if TYPE_CHECKING:
    from engine.loops.replay import WhyFlagged

__all__ = ["Compensations", "Fleet"]


class Fleet:
    """`engine.fleet`: the freeze and the declared detector every process follows, the fleet's
    figures and labels, rollback previews and "why flagged" for the console, housekeeping."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt

    # -- the freeze ---------------------------------------------------------------------------
    @property
    def freeze(self) -> FreezeWindow | None:
        """The change freeze this engine follows (whether or not it is in force now): the one
        declared in the store, else this process's configuration; see `freeze_in_force`."""
        return self._rt.freeze_in_force()[0]

    def freeze_in_force(self) -> tuple[FreezeWindow | None, str]:
        """(the freeze this engine follows, where it comes from): ``"store"`` when declared
        in the store (`declare_freeze`; every process on the store follows it), ``"config"``
        when only this process's environment or configuration sets it (other processes may
        not follow it), ``""`` for none."""
        return self._rt.freeze_in_force()

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
        return actions.declare_freeze(self._rt, window, actor=actor, reason=reason)

    def end_freeze(self, *, actor: str | Actor, reason: str) -> FreezeWindow | None:
        """End the declared freeze (audited); returns it, or None when none was declared.

        Raises:
            PermissionDenied: not an operator (now). ValueError: empty reason.
        """
        return actions.end_freeze(self._rt, actor=actor, reason=reason)

    def exempt_sessions(self, active_since: float | None = None) -> list[str]:
        """Sessions opened with ``freeze_exempt=True`` (a declared freeze's loop policy does not
        apply to them) that still exist; with `active_since` (unix time), only those changed at
        or after it. See `engine.fleet.exemptions`."""
        return exemptions.exempt_sessions(self._rt, active_since)

    def loop_policy(self, now: float | None = None, *, on_loop: LoopPolicy | None = None,
                    freeze_exempt: bool = False) -> PolicyChoice:
        """The loop policy a session handle given `on_loop` (None: none of its own) and
        `freeze_exempt` follows at unix time `now` (None: the engine's clock), and why
        (`.policy`, `.source`, `.reason`, `.freeze`): the freeze's policy while a freeze that
        sets one is in force (unless exempt), else `on_loop`, else the engine default.
        """
        return self._rt.loop_policy(on_loop, now, freeze_exempt)

    # -- the declared detector ----------------------------------------------------------------
    def declare_detector(self, settings: Mapping[str, Any], *, actor: str | Actor,
                         reason: str) -> dict[str, Any]:
        """Declare the loop-detector settings (`DetectorConfig` field -> value) every process
        on the store follows, over its own configuration: agents, the demo, the MCP proxy and
        the integrations build new session handles with them within a second, and each verdict
        records them (`StoredVerdict["detector"]`). Audited, one atomic write; ``{}`` goes back
        to each process's own configuration. Try a change first with `Engine.replay`.

        Raises:
            PermissionDenied: not an operator (now). ConfigError: an unknown field or a value
            the detector refuses. ValueError: empty reason.
        """
        return actions.declare_detector(self._rt, settings, actor=actor, reason=reason)

    def detector_settings(self) -> dict[str, Any]:
        """The detector settings declared in the store (``{}``: none)."""
        return dict(self._rt.declared_detector())

    def detector_in_force(self) -> tuple[dict[str, Any], str]:
        """(the settings new session handles follow over the detector factory's config, where
        they come from): ``"store"`` when declared in the store (`declare_detector`; fields
        not declared come from this process's ``[rewind.detector]``), ``"config"`` when only
        this process's configuration file sets some (other processes may not follow them),
        ``""`` for neither."""
        return self._rt.detector_in_force()

    # -- figures, labels, explanations --------------------------------------------------------
    def stats(self, window_s: float = 3600.0, active_s: float = 300.0) -> dict:
        """KPIs for the fleet view: active sessions, looping now, rollbacks and compensations."""
        return queries.stats(self._rt, window_s, active_s)

    def labels(self) -> dict[str, str]:
        """Session id -> its operator label (``loop`` / ``not_loop``), newest per session."""
        return dict(queries.labels(self._rt))

    def why_flagged(self, sid: str, *, step: int | None = None) -> WhyFlagged | None:
        """Why session `sid` was flagged, from its stored steps (every branch) replayed under
        the detector settings that flagged it: those its last verdict records (over the
        detector factory's config), or, without a verdict, the settings in force now. Writes
        nothing; replays the flagged task a few dozen times (from its start through the flagged
        step), and remembers the answer per flagged step and settings.

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
        return queries.why_flagged(self._rt, sid, step)

    def loop_cost(self, sid: str) -> LoopCost | None:
        """What session `sid`'s latest loop cost from its first step: steps, time, tokens and
        write-ahead snapshots, and how often it was flagged (`SessionInfo.loop_cost`, read
        from the session's summary alone); None without a loop verdict.

        Raises:
            UnknownSession.
        """
        return self._rt.require_session(sid).loop_cost(self._rt.clock())

    def suggested_target(self, sid: str) -> str | None:
        """The snapshot a rollback of `sid` goes to by default (see `Session.suggested_target`)."""
        from engine.recovery.targets import suggested_target

        return suggested_target(self._rt, sid)

    def preview_rollback(self, sid: str, to: str | None = None) -> RollbackPreview:
        """What `Engine.rollback(sid, to)` would take off the live line and which compensations
        run."""
        from engine.recovery.targets import preview_rollback

        return preview_rollback(self._rt, sid, to)

    def recent_tools(self, *, sessions: int = 200, last: int = 100) -> dict[str, int]:
        """How often each tool was called in the `last` steps of the `sessions` most recently
        active sessions (refused calls not counted): a bounded look, not a scan of the fleet,
        that lets a quarantine warn about a tool name no agent has called lately (a typo
        quarantines nothing).

        Returns:
            Tool name -> calls seen, most called first.
        """
        seen: dict[str, int] = {}
        for info in self._rt.store.list_sessions(SessionFilter(), limit=sessions):
            for step in self._rt.store.steps(info.id, last=last):
                if step.tool is not None and not is_refusal(step):
                    seen[step.tool] = seen.get(step.tool, 0) + 1
        return dict(sorted(seen.items(), key=lambda kv: (-kv[1], kv[0])))

    # -- decisions on sessions waiting for on-call (engine.recovery.oncall) --------------------
    def release(self, sid: str, *, actor: str | Actor, reason: str,
                note: str | None = None) -> Decision:
        """Release session `sid`, waiting for on-call: its agent may continue; `note` is
        appended to its messages. Audited, one atomic write (`engine.recovery.oncall`).

        Raises:
            PermissionDenied: not an operator (now). DecisionRefused: blank reason, the session
            does not wait, or was decided already. UnknownSession. Nothing is written then.
        """
        return oncall.release(self._rt, sid, actor=actor, reason=reason, note=note)

    def stop(self, sid: str, *, actor: str | Actor, reason: str) -> Decision:
        """Stop session `sid`, waiting for on-call: status stopped, its steps raise
        `SessionStopped`. Audited, one atomic write (`engine.recovery.oncall`).

        Raises:
            PermissionDenied, DecisionRefused, UnknownSession: as `release`.
        """
        return oncall.stop(self._rt, sid, actor=actor, reason=reason)

    def wait_for_decision(self, sid: str, timeout: float | None = None) -> Decision:
        """Block until an operator decides about session `sid`'s wait for on-call (see
        `Session.wait_for_decision`).

        Raises:
            WaitTimeout: none within `timeout` seconds. StepError: the session does not wait.
        """
        return oncall.wait_for_decision(self._rt, sid, timeout)

    # -- incidents: remedies for a whole cause -------------------------------------------------
    def incident_action(self, incident_id: str, action: str, *, actor: str | Actor, reason: str,
                        dry_run: bool = False, seen: int | None = None,
                        note: str | None = None) -> IncidentAction:
        """Take remedy `action` (rollback, quarantine, release, stop, notice, close) on every
        session of incident `incident_id`; with `dry_run`, say what it would do and write
        nothing. ``release`` and ``stop`` act on the sessions waiting for on-call. `seen`: the
        number of remedies the operator's page showed (`Incident.revision`), so a remedy another
        operator took meanwhile is told, not repeated. See `engine.fleet.incidents`.

        Raises:
            ValueError: unknown action, empty reason, a remedy this incident cannot take.
            PermissionDenied: not an operator (now). UnknownIncident: no such incident.
            IncidentConflict: it is closed, or another operator acted on it first.
        """
        from engine.recovery.verbs import notice

        def notify(sid: str, text: str | None, *, actor: Any) -> str:
            return notice(self._rt, sid, text, actor=actor)

        return incidents.act(
            self._rt, incident_id, action, actor=actor, reason=reason, dry_run=dry_run,
            seen=seen, release=self.release, stop=self.stop, notice=notify, note=note)

    def close_incident(self, incident_id: str, *, actor: str | Actor,
                       reason: str) -> IncidentAction:
        """Close incident `incident_id` (audited); a new loop of its cause opens a new one.

        Raises:
            as `incident_action`.
        """
        return self.incident_action(incident_id, "close", actor=actor, reason=reason)

    def open_incident_of(self, cause: str) -> str | None:
        """The id of the open incident of `cause` (a key from `incidents.cause_key`: tool,
        normalised error, rule), or None; one small read (the alert worker's)."""
        return incidents.open_incident_of(self._rt.store, cause, self._rt.clock())

    def close_quiet_incidents(self) -> list[str]:
        """Write the close of every incident quiet for longer than the quiet period; their ids."""
        return incidents.close_quiet(self._rt)

    def set_incident_quiet(self, seconds: float, *, actor: str | Actor, reason: str) -> float:
        """Set how long (seconds) an incident stays open with no new loop of its cause, for
        every process on the store (audited).

        Raises:
            PermissionDenied: not an operator (now). ValueError: not a positive number, or no
            reason.
        """
        return incidents.set_quiet(self._rt, seconds, actor=actor, reason=reason)

    # -- housekeeping -------------------------------------------------------------------------
    def running_steps(self, older_than_s: float = 300.0) -> list[tuple[str, StepRecord]]:
        """Steps begun more than `older_than_s` seconds ago that never ended (their process died,
        or lost the call), in every session of the store, on every line: for `rewind doctor`,
        which must not miss one that a look at the busiest sessions would.

        Returns:
            (session id, `StepRecord`) pairs, oldest step first.
        """
        return self._rt.store.running_steps(self._rt.clock() - older_than_s)

    def doctor(self) -> dict:
        """Rebuild the store's fleet-wide indexes from the sessions (after a crash or drift)."""
        return self._rt.store.rebuild_indexes()

    def delete_session(self, sid: str, *, actor: str | Actor = "system",
                       reason: str = "") -> bool:
        """Delete a session and all it owns; the audit log keeps a record. True if it existed."""
        return actions.delete_session(self._rt, sid, actor=actor, reason=reason)

    def purge_abandoned(self, older_than_s: float = 7 * 86400.0, *, dry_run: bool = False,
                        actor: str | Actor = "system") -> dict[str, int]:
        """Delete abandoned branches older than `older_than_s` (see `actions.purge_abandoned`).

        Raises:
            PermissionDenied: the actor is not an operator (now)."""
        return actions.purge_abandoned(self._rt, older_than_s, dry_run=dry_run, actor=actor)

    def purge_idle_sessions(self, older_than_s: float, *, dry_run: bool = False,
                            actor: str | Actor = "system") -> dict[str, int]:
        """Delete idle sessions that are not evidence (see `actions.purge_idle_sessions`).

        Raises:
            PermissionDenied: the actor is not an operator (now)."""
        return actions.purge_idle_sessions(self._rt, older_than_s, dry_run=dry_run,
                                           actor=actor)

    @staticmethod
    def serve_metrics(port: int = 9464, addr: str = "127.0.0.1") -> Any:
        """Expose this process's Prometheus counters at http://addr:port/metrics (see
        `engine.metrics`). Returns (server, thread)."""
        from engine import metrics

        return metrics.serve_metrics(port, addr)


class Compensations:
    """`engine.compensations`: the saga's outbox. Calling it lists compensations
    (``engine.compensations(status="failed")``); the methods register handlers, run what is
    pending, and let an operator retry or resolve one."""

    def __init__(self, rt: Runtime) -> None:
        self._rt = rt

    def __call__(self, **filters: Any) -> list[Compensation]:
        """Compensations in the outbox, newest first. Filters: session, status, limit."""
        return saga.list_compensations(self._rt, **filters)

    def register(self, name: str, handler: CompensationHandler) -> None:
        """Register the handler for compensation `name` in this process."""
        saga.register(self._rt, name, handler)

    def run(self, limit: int = 100, lease_s: float = 60.0) -> list[Compensation]:
        """Run pending compensations this process has handlers for, each once (see
        `engine.recovery.saga`). Returns the compensations processed, with their final status."""
        return saga.run_pending(self._rt, limit, lease_s)

    def retry(self, cid: int, *, actor: str | Actor, reason: str) -> Compensation:
        """Put compensation `cid` back to pending with its attempts reset, so a process with
        its handler runs it again; audited (see `engine.fleet.actions.retry_compensation`).

        Raises:
            PermissionDenied: the actor is a viewer. ValueError: no reason.
            UnknownCompensation: no such id. CompensationConflict: done or resolved already, or
            a worker holds its lease right now.
        """
        return actions.retry_compensation(self._rt, cid, actor=actor, reason=reason)

    def resolve(self, cid: int, *, actor: str | Actor, reason: str) -> Compensation:
        """Mark compensation `cid` resolved by hand (status resolved, who and why kept);
        audited (see `engine.fleet.actions.resolve_compensation`).

        Raises:
            PermissionDenied: the actor is a viewer. ValueError: no reason.
            UnknownCompensation: no such id. CompensationConflict: done or resolved already, or
            a worker holds its lease right now.
        """
        return actions.resolve_compensation(self._rt, cid, actor=actor, reason=reason)

    def handlers(self, within_s: float = saga.LIVE_S) -> dict[str, float]:
        """Compensation handlers some live process has registered: name -> time of the newest
        heartbeat of such a process within the last `within_s` seconds. A handler missing here
        has no process to run it: retrying its compensations will not help until one starts."""
        return saga.live_handlers(self._rt, within_s)
