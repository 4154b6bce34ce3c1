"""Operator actions: the one implementation of everything that changes a session on someone's
behalf (rollback, notice, delete, retention, retrying or resolving a compensation). `Engine`,
`Session`, the console and the CLI all come here, and the actor's role is checked here, so hiding
a button is never the only guard.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from engine import metrics, saga
from engine.errors import NothingToRollBack
from engine.identity import Actor, as_actor, checked_actor, checked_reason, require_operator
from engine.limits import check_text, cut_text
from engine.records import BulkRollbackItem, Compensation, RollbackResult, SessionInfo
from engine.runtime import Runtime
from engine.ids import validate_session_id
from engine.sessions.notices import NOTICE_FLAG, notice_message, template_for
from engine.sessions.snapshots import preview_rollback, suggested_target
from engine.store import RollbackRequest, SessionFilter
from engine.types import RollbackKind, SessionStatus


def checked_notice(rt: Runtime, text: str) -> dict:
    """The notice message for `text` when it fits `rt.limits.notice_chars`.

    Raises:
        ValueError: empty text. SizeLimitExceeded: too long.
    """
    message = notice_message(text)
    check_text(message["content"], rt.limits.notice_chars, "the notice", "notice_chars")
    return message


def rollback(
    rt: Runtime,
    sid: str,
    to: str | None = None,
    *,
    actor: str | Actor = "system",
    reason: str = "",
    notice: bool | str = True,
    automatic: bool = False,
    rule: str | None = None,
    expect_epoch: int | None = None,
    kind: RollbackKind = "rollback",
    batch: str | None = None,
) -> RollbackResult:
    """Roll session `sid` back to snapshot `to` (None: its last healthy snapshot).

    What leaves the live line is kept as an abandoned branch labelled with actor, reason and
    time; compensations of side-effecting steps on it are queued (and run at once when this
    process has their handlers); `notice` (True: the default template for the session's locale,
    a string: that text, False: none) is appended. `expect_epoch` (the epoch the operator saw in
    the preview) makes the rollback refuse with RollbackConflict if someone else rolled the
    session back in the meantime. `kind="fork"` is an integration's time travel: same
    mechanics, no recovery status, not counted as a rollback. `batch` (from `rollback_many`)
    is kept in the audit event's detail.

    Raises:
        PermissionDenied: the actor is a viewer. UnknownSession, UnknownSnapshot,
        SnapshotNotRestorable, NothingToRollBack, RollbackConflict.
    """
    who = checked_actor(rt.limits, actor)
    require_operator(who, "roll sessions back")
    if kind not in ("rollback", "fork"):
        raise ValueError(f"kind must be rollback or fork, not {kind!r}")
    if automatic:  # the engine's own reason quotes the verdict: cut it, never refuse a rescue
        reason = cut_text(reason or "", rt.limits.reason_chars)
    reason = checked_reason(rt.limits, reason)
    info = rt.require_session(sid)
    target = to if to is not None else suggested_target(rt, sid, info)
    if target is None:
        raise NothingToRollBack(
            f"session {sid!r} has no restorable snapshot to roll back to; take snapshots "
            "with Session.snapshot() or guard tool calls with Session.step()"
        )
    message = None
    if notice:
        message = checked_notice(
            rt, notice if isinstance(notice, str) else template_for(info.locale)
        )
    result = rt.store.rollback(sid, RollbackRequest(
        target=target,
        actor=who.name,
        reason=reason,
        notice=message,
        now=rt.clock(),
        expect_epoch=expect_epoch,
        kind=kind,
        batch=batch,
    ))
    if kind == "rollback":
        metrics.record_rollback(info.meta, automatic, rule)
    if result.compensations and rt.handlers:
        saga.run_pending(rt)
    return result


def notice(rt: Runtime, sid: str, text: str | None = None, *, actor: str | Actor = "system") -> str:
    """Append a recovery notice to session `sid` (None: default template for its locale).

    Returns:
        The text that was appended.

    Raises:
        PermissionDenied: the actor is a viewer. UnknownSession. ValueError: empty text.
    """
    who = checked_actor(rt.limits, actor)
    require_operator(who, "send notices")
    info = rt.require_session(sid)
    message = checked_notice(rt, text if text is not None else template_for(info.locale))
    rt.store.add_notice(sid, message, who.name, rt.clock())
    return message["content"]


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
    found = rt.store.delete_session(validate_session_id(sid), rt.clock())
    if found:
        rt.store.add_audit(who.name, "delete", sid, None, reason, {}, rt.clock())
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
    again on its next pass (`Engine.run_compensations`). Audited as ``compensation.retry``, with
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


def purge_abandoned(rt: Runtime, older_than_s: float = 7 * 86400.0, *,
                    dry_run: bool = False) -> dict[str, int]:
    """Delete abandoned branches older than `older_than_s`; the store audits every branch id it
    removed. `dry_run` counts what would go and removes nothing.

    Raises:
        ValueError: a negative age.
    """
    if older_than_s < 0:
        raise ValueError("older_than_s must not be negative")
    now = rt.clock()
    return rt.store.purge_branches(now - older_than_s, now, dry_run=dry_run)


def purge_idle_sessions(rt: Runtime, older_than_s: float, *,
                        dry_run: bool = False) -> dict[str, int]:
    """Delete sessions idle for longer than `older_than_s` that are not evidence (no loop
    verdict, rollback, notice, compensation or audit row); evidence stays however old. The
    store audits the removed ids as ``retention``. `dry_run` counts and removes nothing.

    Returns:
        ``sessions``: how many went (or would go); ``evidence``: how many as old were kept.

    Raises:
        ValueError: a negative age.
    """
    if older_than_s < 0:
        raise ValueError("older_than_s must not be negative")
    now = rt.clock()
    return rt.store.purge_sessions(now - older_than_s, now, dry_run=dry_run)


WHERE_KEYS = ("status", "tenant", "scenario", "prompt_version", "tool", "session")
"""Filters `rollback_many` takes, as the fleet table's: the first four as in
`Engine.sessions`; ``tool``: the tool appears among the session's recent live steps (the loop
detector's horizon); ``session``: one id, or a list of ids, taken exactly (rows an operator
selected, or the sessions a preview showed); unknown ids match nothing."""


def _session_ids(value: Any) -> list[str]:
    """The ``session`` filter as a list of distinct ids, in the order given.

    Raises:
        ValueError: an empty list. InvalidSessionId: an id that is not one.
    """
    ids = [value] if isinstance(value, str) else list(value)
    if not ids:
        raise ValueError("filter session needs at least one session id")
    return list(dict.fromkeys(validate_session_id(sid) for sid in ids))


def matching_sessions(rt: Runtime, where: Mapping[str, Any]) -> list[SessionInfo]:
    """Every session matching all of `where` (see `WHERE_KEYS`), most recently active first.

    Raises:
        ValueError: no filter, an unknown key, an unknown status or an empty value.
    """
    if not where:
        raise ValueError(
            "a bulk rollback needs at least one filter (status, tenant, scenario, "
            "prompt_version, tool, session); it never rolls back the whole fleet by default"
        )
    for key, value in where.items():
        if key not in WHERE_KEYS:
            raise ValueError(f"unknown filter {key!r}; use {', '.join(WHERE_KEYS)}")
        if key == "session" and isinstance(value, (list, tuple)):
            continue  # checked by _session_ids
        if not isinstance(value, str) or not value:
            raise ValueError(f"filter {key} needs a non-empty string, not {value!r}")
    if "status" in where and where["status"] not in tuple(SessionStatus):
        raise ValueError(
            f"status must be one of {', '.join(SessionStatus)}, not {where['status']!r}"
        )
    filters = {k: v for k, v in where.items() if k not in ("tool", "session")}
    tool = where.get("tool")
    found: list[SessionInfo] = []
    if "session" in where:
        for sid in _session_ids(where["session"]):
            info = rt.store.get_session(sid)
            if info is None:
                continue
            meta = info.meta or {}
            if all((info.status if k == "status" else meta.get(k)) == v
                   for k, v in filters.items()):
                found.append(info)
        found.sort(key=lambda i: i.updated_at, reverse=True)
    else:
        offset, page = 0, 500
        while True:  # collect first: rolling back reorders and refilters the listing
            infos = rt.store.list_sessions(SessionFilter(**filters), limit=page, offset=offset)
            found += infos
            if len(infos) < page:
                break
            offset += page
    if tool is not None:
        found = [
            i
            for i in found
            if any(
                s.tool == tool
                for s in rt.store.steps(i.id, live_only=True, last=rt.detector_horizon)
            )
        ]
    return found


def rollback_many(
    rt: Runtime,
    where: Mapping[str, Any],
    *,
    actor: str | Actor,
    reason: str,
    dry_run: bool = False,
    notice: bool | str = True,
) -> list[BulkRollbackItem]:
    """Roll back every session matching `where` to its last healthy snapshot.

    Each session is rolled back on its own, with the epoch read just before its rollback as the
    expected epoch (someone who rolled it back meanwhile wins; this one is then refused with
    RollbackConflict), and audited as a rollback whose detail holds the shared ``batch`` id. A
    session that fails (nothing to roll back, a conflict, a store error) is reported in its item
    and the rest go on. After the batch, one ``rollback_many`` audit event (no session) sums it
    up: batch id, filters, counts and each failure.

    With `dry_run`, nothing is written: each item's `preview` says what would leave the live
    line and which compensations would be queued.

    A session where nothing but recovery notices would leave the live line (it was rolled back
    already, e.g. by a first bulk run) is not rolled back again: its item says NothingToRollBack.

    Returns:
        One item per matching session, most recently active first.

    Raises:
        PermissionDenied: the actor is a viewer (even for a dry run). ValueError: bad `where`,
        empty reason. SizeLimitExceeded: reason too long.
    """
    who = checked_actor(rt.limits, actor)
    require_operator(who, "roll sessions back")
    reason = checked_reason(rt.limits, reason, None if dry_run else
                            "a bulk rollback needs a reason: it labels every abandoned branch")
    batch = f"batch-{uuid.uuid4().hex[:12]}"
    items: list[BulkRollbackItem] = []
    for info in matching_sessions(rt, where):
        sid = info.id
        try:
            preview = preview_rollback(rt, sid)
            if not preview.steps and all(m.get(NOTICE_FLAG) for m in preview.messages):
                # Rolled back already (a second bulk run, a loop's own rollback): going back
                # again would only take the user's notice away.
                raise NothingToRollBack(
                    f"session {sid!r}: no step and no message but recovery notices would leave "
                    "the live line; it was rolled back already"
                )
            if dry_run:
                items.append(BulkRollbackItem(sid, True, preview=preview, batch=batch))
                continue
            fresh = rt.require_session(sid)
            result = rollback(
                rt,
                sid,
                actor=who,
                reason=reason,
                notice=notice,
                expect_epoch=fresh.epoch,
                batch=batch,
            )
            items.append(BulkRollbackItem(sid, True, rollback=result, batch=batch))
        except Exception as exc:  # noqa: BLE001 - one session's failure never stops the rest
            items.append(BulkRollbackItem(sid, False, f"{type(exc).__name__}: {exc}", batch=batch))
    if not dry_run:
        failed = {i.session: i.error for i in items if not i.ok}
        rt.store.add_audit(
            who.name,
            "rollback_many",
            None,
            None,
            reason,
            {
                "batch": batch,
                "where": dict(where),
                "sessions": len(items),
                "rolled_back": len(items) - len(failed),
                "failed": failed,
            },
            rt.clock(),
        )
    return items
