"""Tool quarantine: an operator stops every agent of the fleet from calling one tool.

During a freeze nobody may deploy a fix for a broken downstream tool, so the lever lives in
Rewind: `quarantine(rt, "refund_api", …)` stores a `Quarantine` in the store's fleet documents
(namespace ``quarantine``), and from then on `Session.step("refund_api", …)` raises
`ToolQuarantined` before the step's body runs, in every process on that store.

Rules, in the order they are checked:

1. Only operators set or lift quarantines (`PermissionDenied` for viewers); every change is
   audited (``quarantine`` and ``quarantine_lift``, with the quarantine in the detail).
2. A quarantine applies to a step when the tool name is equal, it has not expired (``until`` is
   None or later than the engine's clock) and every key of its ``scope`` (tenant, scenario,
   prompt_version) equals the session's meta value. Expired ones stop applying by themselves;
   they stay listed (``quarantines(include_expired=True)``) until lifted or until the next
   `quarantine` call prunes them.
3. Each process caches the stored list for at most `CACHE_S` seconds (monotonic clock), so a
   guarded step costs no store read for a tool nobody quarantined, and every process honours a
   new quarantine within about a second. Setting or lifting in a process refreshes its cache at
   once.
4. A refused step is recorded on the session's timeline as a step that ended in error, its text
   starting with `REFUSAL_PREFIX`, without a write-ahead snapshot. The tool never ran, so the
   loop detector does not count refusals (neither the live window nor one rebuilt after a
   rollback): an agent that keeps calling a quarantined tool sees `ToolQuarantined` each time,
   not a rollback.
"""

from __future__ import annotations

import datetime as dt
import difflib
import math
import uuid
from collections.abc import Mapping
from typing import Any

from engine.errors import ToolQuarantined, UnknownQuarantine
from engine.identity import Actor, checked_actor, checked_reason, require_operator
from engine.limits import check_text, cut_text
from engine.records import Quarantine, StepRecord
from engine.runtime import FLEET_CACHE_S, Runtime
from engine.store.base import AuditEntry, StepOutcome
from engine.types import (
    FACETS,
    GUARD_REFUSAL_PREFIX,
    QUARANTINE_REFUSAL_PREFIX,
    StepStatus,
    is_refused,
)

NAMESPACE = "quarantine"
"""Fleet document namespace of the quarantines (key: quarantine id)."""
CACHE_S = FLEET_CACHE_S
"""Seconds a process reuses the stored list before reading it again (`engine.runtime`'s
`FleetDocCache`, shared with the declared freeze and detector settings)."""
SCOPE_KEYS = FACETS
LAST_MOMENT = dt.datetime(9999, 12, 31, tzinfo=dt.UTC).timestamp()
"""Quarantines end before this (the last day a datetime can show), or are open-ended (None)."""
"""Session meta keys a quarantine may be scoped to."""
REFUSAL_PREFIX = QUARANTINE_REFUSAL_PREFIX
"""Start of the error text of a step refused by a quarantine (defined in `engine.types`, where
`is_refused` reads it; `GUARD_REFUSAL_PREFIX` too)."""


def _record(key: str, doc: dict[str, Any]) -> Quarantine:
    return Quarantine(
        id=key,
        tool=str(doc["tool"]),
        actor=str(doc.get("actor") or ""),
        reason=str(doc.get("reason") or ""),
        created_at=float(doc.get("created_at") or 0.0),
        until=None if doc.get("until") is None else float(doc["until"]),
        scope={str(k): str(v) for k, v in (doc.get("scope") or {}).items()},
    )


def _document(q: Quarantine) -> dict[str, Any]:
    return {
        "tool": q.tool,
        "actor": q.actor,
        "reason": q.reason,
        "created_at": q.created_at,
        "until": q.until,
        "scope": dict(q.scope),
    }


def _parsed(docs: dict[str, Any]) -> list[Quarantine]:
    return sorted((_record(k, v) for k, v in docs.items()), key=lambda q: (q.created_at, q.id))


def _stored(rt: Runtime) -> list[Quarantine]:
    """The quarantines in the store now (no cache)."""
    return _parsed(rt.store.fleet_docs(NAMESPACE))


def _refresh(rt: Runtime) -> list[Quarantine]:
    return rt.fleet_cache(NAMESPACE, _parsed).refresh()


def cached(rt: Runtime) -> list[Quarantine]:
    """The stored quarantines as this process saw them at most `CACHE_S` seconds ago."""
    return rt.fleet_cache(NAMESPACE, _parsed).get()


def until_time(until: float | dt.datetime | dt.timedelta | None, now: float) -> float | None:
    """`until` as unix seconds: a number as is, a datetime (naive: UTC), a timedelta from `now`.

    Raises:
        TypeError: another type. ValueError: not later than `now`, not a finite number, or
        past the last moment a calendar shows (9999-12-31): "until lifted" is None.
    """
    if until is None:
        return None
    if isinstance(until, dt.timedelta):
        value = now + until.total_seconds()
    elif isinstance(until, dt.datetime):
        stamp = until if until.tzinfo else until.replace(tzinfo=dt.UTC)
        value = stamp.timestamp()
    elif isinstance(until, (int, float)) and not isinstance(until, bool):
        value = float(until)
    else:
        raise TypeError(f"until must be unix seconds, a datetime or a timedelta, not {until!r}")
    if not math.isfinite(value) or value >= LAST_MOMENT:
        raise ValueError(
            f"until must be a time before 9999-12-31, not {until!r}; for a quarantine that "
            "lasts until someone lifts it, leave until out")
    if not value > now:
        raise ValueError("until lies in the past: a quarantine must end later than now")
    return value


def checked_scope(scope: dict[str, Any] | None) -> dict[str, str]:
    """`scope` with only tenant / scenario / prompt_version keys and non-empty string values.

    Raises:
        ValueError: another key or an empty value. TypeError: not a dict or a non-string value.
    """
    if scope is None:
        return {}
    if not isinstance(scope, dict):
        raise TypeError("scope must be a dict of tenant / scenario / prompt_version values")
    out: dict[str, str] = {}
    for key, value in scope.items():
        if key not in SCOPE_KEYS:
            raise ValueError(
                f"a quarantine scope key must be one of {', '.join(SCOPE_KEYS)}, not {key!r}"
            )
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            raise ValueError(f"scope {key} must be a non-empty string, not {value!r}")
        out[key] = value
    return out


def quarantine(
    rt: Runtime,
    tool: str,
    *,
    actor: str | Actor,
    reason: str,
    scope: dict[str, Any] | None = None,
    until: float | dt.datetime | dt.timedelta | None = None,
) -> Quarantine:
    """Quarantine `tool` for every session (or those matching `scope`) until `until` (None:
    until lifted). Expired quarantines are pruned from the store in the same write.

    Returns:
        The stored quarantine.

    Raises:
        PermissionDenied: the actor is a viewer. ValueError: empty tool or reason, bad scope,
        `until` in the past. SizeLimitExceeded: tool name or reason too long.
    """
    who = checked_actor(rt.limits, actor)
    require_operator(who, "quarantine tools")
    if not isinstance(tool, str) or not tool.strip():
        raise ValueError("quarantine needs a tool name")
    check_text(tool, rt.limits.name_chars, "a tool name", "name_chars")
    reason = checked_reason(rt.limits, reason,
                            "a quarantine needs a reason: agents and operators read it")
    now = rt.clock()
    q = Quarantine(
        id=f"q-{uuid.uuid4().hex[:12]}",
        tool=tool,
        actor=who.name,
        reason=reason,
        created_at=now,
        until=until_time(until, now),
        scope=checked_scope(scope),
    )
    expired: dict[str, Any] = {old.id: None for old in _stored(rt) if not old.active(now)}
    rt.store.fleet_doc_put(NAMESPACE, {**expired, q.id: _document(q)}, now, AuditEntry(
        who.name, "quarantine", reason, {"id": q.id, **_document(q)}))
    _refresh(rt)
    return q


def quarantines(rt: Runtime, *, include_expired: bool = False) -> list[Quarantine]:
    """Quarantines in the store, oldest first (read now, not from the cache); expired ones
    only with `include_expired`."""
    now = rt.clock()
    found = _refresh(rt)
    return [q for q in found if include_expired or q.active(now)]


def lift(rt: Runtime, qid: str, *, actor: str | Actor, reason: str = "") -> Quarantine:
    """Lift quarantine `qid` (expired or not): it is removed from the store and audited.

    Returns:
        The quarantine that was lifted.

    Raises:
        PermissionDenied: the actor is a viewer. UnknownQuarantine: no such id.
    """
    who = checked_actor(rt.limits, actor)
    require_operator(who, "lift quarantines")
    reason = checked_reason(rt.limits, reason)
    found = next((q for q in _stored(rt) if q.id == qid), None)
    if found is None:
        lifted = next((e for e in rt.store.audit(action="quarantine_lift", limit=1000)
                       if e.detail.get("id") == qid), None)
        if lifted is not None:
            raise UnknownQuarantine(
                f"quarantine {qid} ({lifted.detail.get('tool')}) was lifted already, by "
                f"{lifted.actor} at {_when(lifted.at)}; list those in force with "
                "`rewind quarantine --list`")
        raise UnknownQuarantine(
            f"no quarantine {qid!r} in {rt.store.url}; list them with `rewind quarantine --list`"
        )
    now = rt.clock()
    rt.store.fleet_doc_put(NAMESPACE, {qid: None}, now, AuditEntry(
        who.name, "quarantine_lift", reason, {"id": qid, **_document(found)}))
    _refresh(rt)
    return found


def applying(rt: Runtime, sid: str, tool: str) -> Quarantine | None:
    """The quarantine that refuses `tool` for session `sid` now, or None (always None for a
    session Rewind only watches). Reads the session's meta only when some quarantine names the
    tool."""
    now = rt.clock()
    held = cached(rt)
    if not held:  # the common case: nothing quarantined anywhere
        return None
    named = [q for q in held if q.tool == tool and q.active(now)]
    if not named:
        return None
    info = rt.store.get_session(sid)
    meta: dict[str, Any] = dict(info.meta) if info is not None else {}
    if meta.get("watch_only"):
        # Rewind does not run a watched agent: a "refusal" would only hide its calls from the
        # detector, while the agent calls the tool anyway.
        return None
    for q in named:
        if q.applies(tool, meta, now):
            return q
    return None


def refuse(
    rt: Runtime, sid: str, tool: str, args_json: str, fingerprint: str, q: Quarantine
) -> int:
    """Record the refused call on the session's timeline (a step that ended in error, no
    snapshot). Returns its step number."""
    error = ToolQuarantined(tool, q)
    now = rt.clock()
    ticket = rt.store.begin_step(
        sid,
        {"tool": tool, "args": args_json, "fingerprint": fingerprint},
        None,
        now,
        rt.retention,
    )
    rt.store.end_step(
        sid,
        ticket,
        StepOutcome(
            status=StepStatus.REFUSED,
            error=cut_text(f"{REFUSAL_PREFIX}{error}", rt.limits.error_chars),
        ),
        rt.clock(),
    )
    return ticket.n


def refuse_call(rt: Runtime, sid: str, tool: str, args: Any, reason: str) -> int:
    """Record on session `sid`'s timeline a call to `tool` that an integration refused before
    it ran (a step with status refused, its text `GUARD_REFUSAL_PREFIX` and `reason`, no snapshot).
    The tool never ran, so the loop detector never counts it: refusals are no loop evidence.
    Returns its step number.

    Raises:
        UnknownSession: no such session. SizeLimitExceeded: `args` or `tool` over its limit.
    """
    from engine.limits import canonical_within
    from engine.loops.fingerprint import fingerprint

    rt.require_session(sid)
    check_text(tool, rt.limits.name_chars, "a tool name", "name_chars")
    clean, args_json = canonical_within(
        args if args is not None else {}, rt.limits.args_bytes, "args", "args_bytes")
    ticket = rt.store.begin_step(
        sid, {"tool": tool, "args": args_json, "fingerprint": fingerprint(tool, clean)},
        None, rt.clock(), rt.retention)
    rt.store.end_step(
        sid, ticket,
        StepOutcome(status=StepStatus.REFUSED,
                    error=cut_text(f"{GUARD_REFUSAL_PREFIX}{reason}", rt.limits.error_chars)),
        rt.clock())
    return ticket.n


def is_refusal(step: StepRecord) -> bool:
    """True for a step refused before it ran (a quarantine, an integration's guard); see
    `engine.types.is_refused`."""
    return is_refused(step.status, step.error)


def _when(at: float) -> str:
    """A unix time as people read it in a message (UTC, to the second)."""
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def unused_tool_hint(tool: str, recent: Mapping[str, int]) -> str | None:
    """A warning when `tool` is not among the tools agents called lately
    (`Engine.fleet.recent_tools`): the name may be a typo that quarantines nothing. Names it may
    have meant are suggested.

    Returns:
        None when `tool` was called lately, or when no tool was (an empty store: no hint).
    """
    if not recent or tool in recent:
        return None
    near = difflib.get_close_matches(tool, list(recent), n=3, cutoff=0.6)
    if not near:
        folded = [name for name in recent if name.casefold() == tool.casefold()]
        near = folded[:3]
    text = (f"note: no agent called {tool!r} in the recently active sessions; a quarantine "
            "matches tool names exactly")
    if near:
        text += " (did you mean " + " or ".join(repr(n) for n in near) + "?)"
    return text
