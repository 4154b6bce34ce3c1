"""Bulk rollback: every session matching a filter, each on its own, one batch in the audit log.

What an operator reaches for when a bad prompt version or a broken tool sends many sessions into
loops at once (`Engine.rollback_many`, the console's "Roll back all N matching", `rewind rollback
--where`).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from engine.identity import Actor, checked_actor, checked_reason, require_operator
from engine.ids import validate_session_id
from engine.records import BulkRollbackItem, SessionInfo
from engine.recovery.targets import preview_rollback, refuse_if_rolled_back
from engine.recovery.verbs import refuse_watch_only, rollback
from engine.runtime import Runtime
from engine.store import SessionFilter
from engine.types import FACETS, SessionStatus

PLANNED_SHOWN = 200
"""Session ids a bulk rollback's start row lists (the console takes at most 200 at once)."""

WHERE_KEYS = ("status", *FACETS, "tool", "session")
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
    if not isinstance(where, Mapping):
        raise TypeError(f"where must be a dict of filters such as {{'status': 'looping'}}, not "
                        f"{type(where).__name__} {where!r}")
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
    up: batch id, filters, counts and each failure; a ``rollback_many.start`` row, written before
    the first rollback, says what was planned, so a run killed midway is on record.

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
    matching = matching_sessions(rt, where)
    if not dry_run and matching:
        # The batch is on record before its first rollback: a run killed midway leaves this
        # row (what was planned) and each session's own rollback row, never silence.
        rt.store.add_audit(who.name, "rollback_many.start", None, None, reason,
                           {"batch": batch, "where": dict(where), "sessions": len(matching),
                            "planned": [i.id for i in matching[:PLANNED_SHOWN]]}, rt.clock())
    for info in matching:
        sid = info.id
        try:
            refuse_watch_only(info, "rolled back")
            preview = preview_rollback(rt, sid)
            refuse_if_rolled_back(sid, preview)
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
                force=True,  # checked above, on the preview the operator saw
            )
            items.append(BulkRollbackItem(sid, True, rollback=result, batch=batch))
        except Exception as exc:  # noqa: BLE001 - one session's failure never stops the rest
            items.append(BulkRollbackItem(sid, False, f"{type(exc).__name__}: {exc}", batch=batch,
                                          exception=exc))
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
