"""The recovery verbs: roll a session back, and tell its user.

The one implementation behind `Session.rollback`, `Engine.rollback`, the console and the CLI. The
actor's role and the reason are checked here, so hiding a button is never the only guard.

The reason rule: a rollback takes a branch off the user's live line, and the abandoned branch is
labelled with its reason for whoever reads it later. A person acting as an operator (an `Actor`,
as the console and the CLI pass) must say why; a program naming itself with a plain string (an
agent runtime, an integration's time travel) may leave it blank; the engine's own automatic
rollback always gives one (the verdict), cut to the limit rather than refused, since refusing
would stop a rescue.
"""

from __future__ import annotations

from engine import metrics
from engine.errors import NothingToRollBack, SnapshotNotRestorable, WatchOnly
from engine.identity import Actor, checked_actor, checked_reason, require_operator
from engine.limits import Limits, cut_text
from engine.records import RollbackResult, SessionInfo
from engine.recovery import saga
from engine.recovery.notices import checked_notice, template_for
from engine.recovery.targets import (
    checked_target,
    refuse_if_rolled_back,
    rolled_back_already,
    suggested_target,
)
from engine.runtime import Runtime
from engine.store import RollbackRequest
from engine.types import RollbackKind, SessionStatus

TARGET_ATTEMPTS = 3
"""How often a rollback without an explicit target picks its target again when agents still
stepping retire the one it picked (the retention window moves on with every step)."""

REASON_REQUIRED = (
    "a rollback needs a reason: it labels the abandoned branch and goes to the audit log"
)
"""Why a person's blank reason is refused (see the module docstring)."""


WATCH_ONLY_SENTENCE = (
    "session {sid} is of an agent Rewind watches through OpenTelemetry (rewind otlp) but does "
    "not run, so it cannot be {verb}: its loops are flagged, paged and labelled here; stop or "
    "fix the agent where it runs"
)


def refuse_watch_only(info: SessionInfo, verb: str) -> None:
    """Raises WatchOnly for a session Rewind only watches (meta ``watch_only``), saying what it
    can and cannot do there."""
    if (info.meta or {}).get("watch_only"):
        raise WatchOnly(WATCH_ONLY_SENTENCE.format(sid=info.id, verb=verb))


def rollback_reason(limits: Limits, actor: str | Actor, reason: str | None, *,
                    automatic: bool = False) -> str:
    """The reason a rollback by `actor` records (see the reason rule in the module docstring).

    Raises:
        ValueError: a person (an `Actor`) gave a blank reason. TypeError: not a string.
        SizeLimitExceeded: too long (never for an automatic rollback, whose reason is cut).
    """
    if automatic:
        return checked_reason(limits, cut_text(reason or "", limits.reason_chars))
    required = REASON_REQUIRED if isinstance(actor, Actor) else None
    return checked_reason(limits, reason, required)


def _check_switches(notice: object, force: object, expect_epoch: object) -> None:
    """Raises TypeError for a rollback switch of the wrong type, before anything is written:
    `force="no"` would force the rollback, `notice=5` send the template, and
    `expect_epoch="1"` (never equal to the epoch 1) report someone else's rollback."""
    if notice is not None and not isinstance(notice, (bool, str)):
        raise TypeError(f"notice is True (the locale's template), a text, or False (none), "
                        f"not {type(notice).__name__} {notice!r:.80}")
    if not isinstance(force, bool):
        raise TypeError(f"force is True or False, not {type(force).__name__} {force!r:.80}")
    if expect_epoch is not None and (isinstance(expect_epoch, bool)
                                     or not isinstance(expect_epoch, int)):
        raise TypeError(f"expect_epoch is the epoch read before (an int, `rewind show`), not "
                        f"{type(expect_epoch).__name__} {expect_epoch!r:.80}")


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
    force: bool = False,
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

    A session that was rolled back already (nothing but recovery notices would leave the live
    line, `targets.only_notices_would_leave`) is refused with NothingToRollBack unless `force`:
    going back again would only take the user's notice away and send another. The check and
    the rollback are fenced by the session's epoch, so of two operators racing, the second is
    refused (RollbackConflict) instead of undoing the first one's notice.

    Raises:
        PermissionDenied: the actor is a viewer. ValueError: a person gave no reason.
        TypeError: `to` is not a snapshot id, `actor` neither a name nor an `Actor`, `notice`,
        `force` or `expect_epoch` of another type.
        UnknownSession, UnknownSnapshot, SnapshotNotRestorable, NothingToRollBack,
        RollbackConflict.
    """
    who = checked_actor(rt.limits, actor)
    require_operator(who, "roll sessions back")
    to = checked_target(to)
    _check_switches(notice, force, expect_epoch)
    if kind not in ("rollback", "fork"):
        raise ValueError(f"kind must be rollback or fork, not {kind!r}")
    reason = rollback_reason(rt.limits, actor, reason, automatic=automatic)
    info = rt.require_session(sid)
    refuse_watch_only(info, "rolled back")
    target = to if to is not None else suggested_target(rt, sid, info)
    if target is None:
        raise NothingToRollBack(
            f"session {sid!r} has no restorable snapshot to roll back to; take snapshots "
            "with Session.snapshot() or guard tool calls with Session.step()"
        )
    if not force and not automatic and kind == "rollback":
        if expect_epoch is None:
            expect_epoch = info.epoch
        # A stale epoch is the store's RollbackConflict to say, a bad target its own error.
        if expect_epoch == info.epoch and rolled_back_already(rt, sid, target, info):
            refuse_if_rolled_back(sid)
    message = None
    if notice:
        message = checked_notice(
            rt.limits, notice if isinstance(notice, str) else template_for(info.locale)
        )
    for attempt in range(TARGET_ATTEMPTS):
        try:
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
            break
        except SnapshotNotRestorable:
            # A target we picked ourselves, retired meanwhile by the steps of an agent still
            # running (the retention window moved on): pick the newest healthy one again.
            if to is not None or attempt == TARGET_ATTEMPTS - 1:
                raise
            info = rt.require_session(sid)
            target = suggested_target(rt, sid, info)
            if target is None:
                raise
    if kind == "rollback":
        metrics.record_rollback(info.meta, automatic, rule)
    if result.compensations and rt.handlers:
        saga.run_pending(rt)
    return result


def notice(rt: Runtime, sid: str, text: str | None = None, *, actor: str | Actor = "system") -> str:
    """Append a recovery notice to session `sid` (None: the default template for its locale
    and for what happened: the rollback notice when the session stands rolled back, else the
    notice that the agent was stopped and someone is looking, which claims no reset).

    Returns:
        The text that was appended.

    Raises:
        PermissionDenied: the actor is a viewer. UnknownSession. ValueError: empty text.
    """
    who = checked_actor(rt.limits, actor)
    require_operator(who, "send notices")
    info = rt.require_session(sid)
    refuse_watch_only(info, "sent a notice")
    if text is None:
        text = template_for(info.locale, rolled_back=info.status == SessionStatus.ROLLED_BACK)
    message = checked_notice(rt.limits, text)
    rt.store.add_notice(sid, message, who.name, rt.clock())
    return message["content"]
