"""Operator actions besides recovery: deleting a session, retention, and retrying or resolving a
compensation. The actor's role is checked here, so hiding a button is never the only guard.

Rollback, bulk rollback and notices live in `engine.recovery`; their names are re-exported here
for code that imported them from this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.fleet import exemptions
from engine.freeze import STORE_KEY as FREEZE_KEY
from engine.freeze import STORE_NAMESPACE as FREEZE_NAMESPACE
from engine.freeze import FreezeWindow, from_document, to_document
from engine.identity import Actor, as_actor, checked_actor, checked_reason, require_operator
from engine.ids import validate_session_id
from engine.limits import canonical_within
from engine.records import Compensation
from engine.recovery.bulk import WHERE_KEYS, matching_sessions, rollback_many
from engine.recovery.notices import checked_notice
from engine.recovery.verbs import notice, rollback
from engine.runtime import DETECTOR_KEY, DETECTOR_NAMESPACE, Runtime
from engine.store.base import AuditEntry

__all__ = [
    "WHERE_KEYS", "Actor", "as_actor", "checked_actor", "checked_notice", "checked_reason",
    "declare_detector", "declare_freeze", "delete_session", "end_freeze", "matching_sessions",
    "notice", "purge_abandoned", "purge_idle_sessions",
    "require_operator", "resolve_compensation", "retry_compensation", "rollback",
    "rollback_many",
]


def delete_session(
    rt: Runtime, sid: str, *, actor: str | Actor = "system", reason: str = ""
) -> bool:
    """Delete a session and all it owns; the audit log keeps a record. True if it existed.

    Raises:
        PermissionDenied: the actor is a viewer. InvalidSessionId.
    """
    who = checked_actor(rt.limits, actor)
    require_operator(who, "delete sessions")
    reason = checked_reason(rt.limits, reason)
    sid = validate_session_id(sid)
    found = rt.store.delete_session(sid, rt.clock(), AuditEntry(who.name, "delete", reason))
    if found:
        exemptions.forget_gone(rt, [sid])
    return found


def _compensation_action(
    rt: Runtime, cid: int, actor: str | Actor, reason: str, action: str
) -> tuple[int, Actor, str]:
    who = checked_actor(rt.limits, actor)
    require_operator(who, f"{action} compensations")
    if isinstance(cid, bool) or not isinstance(cid, int):
        raise TypeError(f"a compensation id is an int, not {cid!r}")
    reason = checked_reason(
        rt.limits, reason, f"to {action} a compensation needs a reason: it goes to the audit log")
    return cid, who, reason


def retry_compensation(
    rt: Runtime, cid: int, *, actor: str | Actor, reason: str
) -> Compensation:
    """Put compensation `cid` (failed, pending, or running under a lease that ended) back to
    pending with its attempts reset, so the next process that registered its handler runs it
    again on its next pass (`Engine.compensations.run`). Audited as ``compensation.retry``, with
    a feed event; one atomic write.

    Returns:
        The compensation after the change.

    Raises:
        PermissionDenied: the actor is a viewer. ValueError: empty reason. TypeError: the id is
        not an int. UnknownCompensation: no such id. CompensationConflict: it is done or
        resolved, or a worker holds its lease right now.
    """
    cid, who, reason = _compensation_action(rt, cid, actor, reason, "retry")
    return rt.store.retry_compensation(cid, who.name, reason, rt.clock())


def resolve_compensation(
    rt: Runtime, cid: int, *, actor: str | Actor, reason: str
) -> Compensation:
    """Mark compensation `cid` (failed, pending, or running under a lease that ended) resolved
    by hand: the side effect was undone outside Rewind, or there is nothing to undo. The record
    keeps who and why; no worker runs it afterwards. Audited as ``compensation.resolve``, with a
    feed event; one atomic write.

    Returns:
        The compensation after the change (status resolved).

    Raises:
        PermissionDenied: the actor is a viewer. ValueError: empty reason. TypeError: the id is
        not an int. UnknownCompensation: no such id. CompensationConflict: it is done or
        resolved already, or a worker holds its lease right now.
    """
    cid, who, reason = _compensation_action(rt, cid, actor, reason, "resolve")
    return rt.store.resolve_compensation(cid, who.name, reason, rt.clock())


def _check_age(older_than_s: object) -> None:
    """Raises TypeError unless the age is a number of seconds (`"7d"` is the CLI's form)."""
    if isinstance(older_than_s, bool) or not isinstance(older_than_s, (int, float)):
        raise TypeError(f"older_than_s is a number of seconds (7 days: 7 * 86400), not "
                        f"{type(older_than_s).__name__} {older_than_s!r}")


def purge_abandoned(rt: Runtime, older_than_s: float = 7 * 86400.0, *,
                    dry_run: bool = False, actor: str | Actor = "system") -> dict[str, int]:
    """Delete abandoned branches older than `older_than_s`; the store audits every branch id it
    removed. `dry_run` counts what would go and removes nothing.

    Raises:
        ValueError: a negative age.
    """
    require_operator(checked_actor(rt.limits, actor), "purge abandoned branches")
    _check_age(older_than_s)
    if older_than_s < 0:
        raise ValueError("older_than_s must not be negative")
    now = rt.clock()
    return rt.store.purge_branches(now - older_than_s, now, dry_run=dry_run)


def purge_idle_sessions(rt: Runtime, older_than_s: float, *,
                        dry_run: bool = False, actor: str | Actor = "system") -> dict[str, int]:
    """Delete sessions idle for longer than `older_than_s` that are not evidence (no loop
    verdict, rollback, notice, compensation or audit row); evidence stays however old. The
    store audits the removed ids as ``retention``. `dry_run` counts and removes nothing.

    Returns:
        ``sessions``: how many went (or would go); ``evidence``: how many as old were kept.

    Raises:
        ValueError: a negative age.
    """
    require_operator(checked_actor(rt.limits, actor), "purge idle sessions")
    _check_age(older_than_s)
    if older_than_s < 0:
        raise ValueError("older_than_s must not be negative")
    now = rt.clock()
    counts = rt.store.purge_sessions(now - older_than_s, now, dry_run=dry_run)
    if counts["sessions"] and not dry_run:
        exemptions.forget_gone(rt)
    return counts


def declare_freeze(rt: Runtime, window: FreezeWindow, *, actor: str | Actor,
                   reason: str) -> FreezeWindow:
    """Declare `window` the fleet's change freeze: stored in the store with its audit row in
    one atomic write, so every process on the store (agents, the MCP proxy, the demo, the
    console) follows the same window and loop policy within a second, whatever its own
    environment says. Replaces a freeze declared before.

    Raises:
        PermissionDenied: the actor is not an operator (now). ValueError: empty reason.
    """
    who = checked_actor(rt.limits, actor)
    require_operator(who, "declare a change freeze")
    reason = checked_reason(rt.limits, reason,
                            "declaring a freeze needs a reason: it goes to the audit log")
    now = rt.clock()
    doc = to_document(window, who.name, reason, now)
    rt.store.fleet_doc_put(FREEZE_NAMESPACE, {FREEZE_KEY: doc}, now,
                           AuditEntry(who.name, "freeze", reason, doc))
    rt.forget_declared_freeze()
    return window


def end_freeze(rt: Runtime, *, actor: str | Actor, reason: str) -> FreezeWindow | None:
    """Take the declared freeze out of the store (audited, one atomic write); processes fall
    back to their own configuration. Returns the freeze that was declared, None if none was.

    Raises:
        PermissionDenied: the actor is not an operator (now). ValueError: empty reason.
    """
    who = checked_actor(rt.limits, actor)
    require_operator(who, "end a change freeze")
    reason = checked_reason(rt.limits, reason,
                            "ending a freeze needs a reason: it goes to the audit log")
    doc = rt.store.fleet_docs(FREEZE_NAMESPACE).get(FREEZE_KEY)
    if doc is None:
        return None
    rt.store.fleet_doc_put(FREEZE_NAMESPACE, {FREEZE_KEY: None}, rt.clock(),
                           AuditEntry(who.name, "freeze_end", reason, dict(doc)))
    rt.forget_declared_freeze()
    return from_document(doc)


def declare_detector(rt: Runtime, settings: Mapping[str, Any], *, actor: str | Actor,
                     reason: str) -> dict[str, Any]:
    """Declare the detector settings every process on the store follows (`DetectorConfig`
    field -> value, over each process's own configuration: its detector factory, then its
    ``[rewind.detector]``, `engine.runtime.configured_detector`; a declared field wins over the
    file's, a field not declared keeps the file's): stored with its audit row in one
    atomic write; new session handles use them within a second, and each verdict records them.
    Empty `settings` go back to each process's own configuration.

    Raises:
        PermissionDenied: not an operator (now). ConfigError: an unknown field or a value the
        detector refuses. ValueError: empty reason. TypeError: a value with no JSON form.
    """
    from engine.loops.replay import detector_config

    who = checked_actor(rt.limits, actor)
    require_operator(who, "change the loop detector")
    if not isinstance(settings, Mapping):
        raise TypeError(f"detector settings are a dict of DetectorConfig fields such as "
                        f"{{'repeat_threshold': 5}}, not {type(settings).__name__} {settings!r}")
    reason = checked_reason(rt.limits, reason,
                            "changing the detector needs a reason: it goes to the audit log")
    clean = dict(canonical_within(dict(settings), rt.limits.meta_bytes, "detector settings",
                                  "meta_bytes")[0])
    detector_config(clean)  # refuse what the detector refuses, before anything is written
    now = rt.clock()
    doc = {"settings": clean, "actor": who.name, "reason": reason, "at": now} if clean else None
    rt.store.fleet_doc_put(DETECTOR_NAMESPACE, {DETECTOR_KEY: doc}, now,
                           AuditEntry(who.name, "detector", reason, {"settings": clean}))
    rt.forget_declared_detector()
    return clean
