"""Operator actions. Each goes through the engine API with the user's `Actor`, so the engine checks
the role and writes the audit event with the operator's name; the console never decides alone.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dashboard.signin.access import User
from engine import (
    BulkRollbackItem,
    Decision,
    Engine,
    PermissionDenied,
    Quarantine,
    RewindError,
    RollbackResult,
)

BULK_CAP = 200
"""Most sessions one bulk rollback takes from the console at once. Each is its own store
transaction (and its own preview before it), so 200 stay within seconds on Redis and fit a
preview an operator can read; for more, narrow the filter or run `rewind rollback --where`."""
FILTER_KEYS = ("status", "tenant", "scenario", "prompt_version")
"""`where` keys the fleet table's filters map to (see `Engine.rollback_many`)."""


class ActionRefused(ValueError):
    """The action was asked for without what it needs (e.g. a reason)."""


def _required_reason(reason: str | None, refusal: str) -> str:
    """`reason` stripped; blank is refused with `refusal` before the engine is asked."""
    reason = (reason or "").strip()
    if not reason:
        raise ActionRefused(refusal)
    return reason


def roll_back(engine: Engine, user: User, sid: str, target: str, reason: str,
              notice: bool | str = True, expect_epoch: int | None = None) -> RollbackResult:
    """Roll session `sid` back to snapshot `target` on behalf of `user`.

    Args:
        notice: True for the template of the session's locale, a string for that exact text,
            False for none.
        expect_epoch: the epoch the operator's preview showed; the engine refuses atomically
            when someone else rolled the session back since.

    Raises:
        ActionRefused: no reason given. PermissionDenied: the user is a viewer (raised by the
        engine). UnknownSnapshot, SnapshotNotRestorable, NothingToRollBack, RollbackConflict.
    """
    reason = _required_reason(
        reason, "say why you roll this session back; the reason goes to the audit log")
    return engine.rollback(sid, to=target, actor=user.actor(), reason=reason, notice=notice,
                           expect_epoch=expect_epoch)


def decide(engine: Engine, user: User, sid: str, kind: str, reason: str,
           note: str | None = None) -> Decision:
    """Release (``kind="release"``) or stop session `sid`, waiting for on-call, on behalf of
    `user`; a release's `note` is appended to the session's messages for its agent.

    Raises:
        ActionRefused: no reason given. PermissionDenied: the user is a viewer (now).
        DecisionRefused: the session does not wait, or someone decided already.
    """
    reason = _required_reason(
        reason, f"say why you {kind} this session; the reason goes to the audit log")
    if kind == "release":
        return engine.fleet.release(sid, actor=user.actor(), reason=reason,
                              note=(note or "").strip() or None)
    if kind == "stop":
        return engine.fleet.stop(sid, actor=user.actor(), reason=reason)
    raise ValueError(f"a decision is release or stop, not {kind!r}")


def send_notice(engine: Engine, user: User, sid: str, text: str | None) -> str:
    """Append a recovery notice to session `sid` on behalf of `user`; returns the text sent.

    Raises:
        ActionRefused: empty text. PermissionDenied: the user is a viewer (raised by the engine).
    """
    if text is not None and not text.strip():
        raise ActionRefused("the notice is empty; pick a template or write the text")
    return engine.get_session(sid).inject_notice(text, actor=user.actor())


def describe_rollback(result: Any) -> str:
    """One line for the operator after a rollback."""
    parts = [f"Rolled back to {result.target}: {result.abandoned_steps} steps and "
             f"{result.abandoned_messages} messages taken out of the conversation "
             f"(kept on {result.branch})"]
    if result.compensations:
        names = ", ".join(f"{c.name} (step {c.step})" for c in result.compensations)
        parts.append(f"compensations queued: {names}")
    if result.notice:
        parts.append("notice sent")
    return "; ".join(parts) + "."


@dataclass(frozen=True)
class CompensationOutcome:
    """What a retry or resolve did to one compensation."""

    id: int
    name: str
    """Handler name ("" when the engine refused before reading it)."""
    ok: bool
    error: str = ""
    """Why it was refused (done already, a worker holds its lease, unknown id)."""


def _on_compensations(engine: Engine, user: User, comps: Sequence[Any], reason: str,
                      action: str) -> list[CompensationOutcome]:
    reason = _required_reason(
        reason, f"say why you {action} these compensations; the reason goes to the audit log")
    if not comps:
        raise ActionRefused("select the compensations first (tick their rows in the table)")
    act = engine.compensations.retry if action == "retry" else engine.compensations.resolve
    out = []
    for c in comps:
        try:
            after = act(int(c.id), actor=user.actor(), reason=reason)
        except PermissionDenied:
            raise
        except RewindError as exc:  # done already, leased, gone: say so, go on with the rest
            out.append(CompensationOutcome(int(c.id), str(c.name), False, str(exc)))
        else:
            out.append(CompensationOutcome(after.id, after.name, True))
    return out


def retry_compensations(engine: Engine, user: User, comps: Sequence[Any],
                        reason: str) -> list[CompensationOutcome]:
    """Put each of `comps` (records with .id and .name) back to pending with its attempts reset,
    on behalf of `user`; one refusal never stops the rest.

    Raises:
        ActionRefused: no reason or nothing selected. PermissionDenied: the user is a viewer
        (raised by the engine).
    """
    return _on_compensations(engine, user, comps, reason, "retry")


def resolve_compensations(engine: Engine, user: User, comps: Sequence[Any],
                          reason: str) -> list[CompensationOutcome]:
    """Mark each of `comps` resolved by hand on behalf of `user`; one refusal never stops the
    rest.

    Raises:
        ActionRefused: no reason or nothing selected. PermissionDenied: the user is a viewer
        (raised by the engine).
    """
    return _on_compensations(engine, user, comps, reason, "resolve")



# -- fleet controls ---------------------------------------------------------------------------
def bulk_size(engine: Engine, where: Mapping[str, Any]) -> int:
    """How many sessions `where` can take, counted up to BULK_CAP + 1 (cheap: no preview).

    An explicit ``session`` list counts its distinct ids; otherwise the fleet filters are
    counted through `Engine.sessions` (a ``tool`` filter only narrows that further).
    """
    ids = where.get("session")
    if ids is not None:
        return len({ids} if isinstance(ids, str) else set(ids))
    filters = {k: where[k] for k in FILTER_KEYS if k in where}
    return len(engine.sessions(**filters, limit=BULK_CAP + 1))


def _within_cap(engine: Engine, where: Mapping[str, Any]) -> None:
    if not where:
        raise ActionRefused("pick a filter or select rows first: a bulk rollback never takes "
                            "the whole fleet")
    count = bulk_size(engine, where)
    if count > BULK_CAP:
        many = f"{count}" if "session" in where else f"more than {BULK_CAP}"
        raise ActionRefused(f"{many} sessions match; the console rolls back at most {BULK_CAP} "
                            "at once. Narrow the filter, or use `rewind rollback --where` for "
                            "more.")


def preview_many(engine: Engine, user: User, where: Mapping[str, Any]) -> list[BulkRollbackItem]:
    """What a bulk rollback of `where` would do (a dry run: nothing is written), per session.

    Raises:
        ActionRefused: no filter, or more than BULK_CAP sessions match. PermissionDenied: the
        user is a viewer (raised by the engine). ValueError: a malformed filter.
    """
    _within_cap(engine, where)
    return engine.rollback_many(dict(where), actor=user.actor(), reason="", dry_run=True)


def roll_back_many(engine: Engine, user: User, where: Mapping[str, Any], reason: str,
                   notice: bool = True) -> list[BulkRollbackItem]:
    """Roll back every session matching `where` on behalf of `user`, each to its last healthy
    snapshot, under one batch id; a failure never stops the rest.

    The console passes the previewed sessions as ``session`` together with the filters, so
    only sessions the operator saw are taken, and only while they still match.

    Args:
        notice: True for the template of each session's locale, False for none.

    Returns:
        One item per session taken (`.ok`, `.error`, `.rollback`, `.batch`).

    Raises:
        ActionRefused: no reason, no filter, or more than BULK_CAP sessions. PermissionDenied:
        the user is a viewer (raised by the engine). ValueError: a malformed filter.
    """
    reason = _required_reason(
        reason, "say why you roll these sessions back; the reason labels every abandoned "
        "branch and goes to the audit log")
    _within_cap(engine, where)
    return engine.rollback_many(dict(where), actor=user.actor(), reason=reason, notice=notice)


def describe_bulk(items: Sequence[BulkRollbackItem]) -> str:
    """One line for the operator after a bulk rollback."""
    if not items:
        return "No session matched any more; nothing was rolled back."
    done = [i for i in items if i.ok]
    text = f"Rolled back {len(done)} of {len(items)} sessions (batch {items[0].batch})"
    comps: Counter[str] = Counter(c.name for i in done if i.rollback
                                  for c in i.rollback.compensations)
    if comps:
        text += "; compensations queued: " + ", ".join(
            f"{name} ×{n}" if n > 1 else name for name, n in sorted(comps.items()))
    failed = [i for i in items if not i.ok]
    if failed:
        text += f"; {len(failed)} failed: " + ", ".join(i.session for i in failed[:5])
        text += "…" if len(failed) > 5 else ""
    return text + "."


def quarantine_tool(engine: Engine, user: User, tool: str, reason: str,
                    scope: Mapping[str, str | None] | None = None,
                    until: dt.datetime | dt.timedelta | None = None) -> Quarantine:
    """Quarantine `tool` (taken exactly as given) on behalf of `user`.

    Args:
        scope: tenant / scenario / prompt_version values; empty or None values mean any.
        until: when it ends by itself (a datetime, or a timedelta from now); None: until lifted.

    Raises:
        ActionRefused: no tool name or no reason. PermissionDenied: the user is a viewer
        (raised by the engine). ValueError: `until` in the past, a bad scope.
    """
    if not tool or not tool.strip():
        raise ActionRefused("name the tool to quarantine, exactly as agents call it")
    reason = _required_reason(
        reason, "give a reason for the quarantine; agents and the audit log read it")
    picked = {k: v for k, v in (scope or {}).items() if v}
    return engine.quarantine(tool, actor=user.actor(), reason=reason, scope=picked or None,
                             until=until)


def lift_quarantine(engine: Engine, user: User, qid: str, reason: str) -> Quarantine:
    """Lift quarantine `qid` on behalf of `user`; returns it.

    Raises:
        ActionRefused: no reason. PermissionDenied: the user is a viewer (raised by the
        engine). UnknownQuarantine: lifted already, or no such id.
    """
    reason = _required_reason(
        reason, "say why you lift this quarantine; the reason goes to the audit log")
    return engine.lift_quarantine(qid, actor=user.actor(), reason=reason)


# -- the fleet's detector settings --------------------------------------------------------------
def declare_detector(engine: Engine, user: User, settings: Mapping[str, Any],
                     reason: str) -> dict[str, Any]:
    """Declare the loop-detector settings every process on the store follows (`DetectorConfig`
    field -> value) on behalf of `user`; ``{}`` goes back to each process's own configuration.
    The declaration replaces the one in the store: pass the settings already declared that
    should stay. Returns the settings as stored.

    Raises:
        ActionRefused: no reason. PermissionDenied: the user is not an operator now (raised by
        the engine). ConfigError: an unknown field or a value the detector refuses.
    """
    reason = _required_reason(
        reason, "say why the fleet's detector settings change; the reason goes to the audit log")
    return engine.fleet.declare_detector(dict(settings), actor=user.actor(), reason=reason)
def incident_remedy(engine: Engine, user: User, iid: str, action: str, reason: str, *,
                    dry_run: bool = False, seen: int | None = None) -> Any:
    """Preview (`dry_run`) or take remedy `action` on incident `iid` on behalf of `user`;
    `seen` is the incident's revision the page showed, so a remedy another operator took
    meanwhile is told, not repeated (`Engine.fleet.incident_action`).

    Raises:
        ActionRefused: no reason (to act). PermissionDenied: the user is a viewer (raised by
        the engine). UnknownIncident, IncidentConflict, ValueError.
    """
    if not dry_run:
        reason = _required_reason(
            reason, "say why you take this remedy; the reason goes to the audit log")
    return engine.fleet.incident_action(iid, action, actor=user.actor(), reason=reason,
                                        dry_run=dry_run, seen=seen)
