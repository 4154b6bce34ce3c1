"""Operator actions: the one implementation of everything that changes a session on someone's
behalf (rollback, notice, delete, retention). `Engine`, `Session`, the console and the CLI all
come here, and the actor's role is checked here, so hiding a button is never the only guard.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine import metrics, saga
from engine.errors import NothingToRollBack, PermissionDenied
from engine.limits import check_text, cut_text
from engine.records import RollbackResult
from engine.runtime import Runtime
from engine.sessions.ids import validate_session_id
from engine.sessions.notices import notice_message, template_for
from engine.sessions.snapshots import suggested_target
from engine.types import Role, RollbackKind


@dataclass(frozen=True)
class Actor:
    """Who performs an action: a name for the audit log and a role (viewer or operator)."""

    name: str
    role: Role = Role.OPERATOR

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("an actor needs a non-empty name")
        if self.role not in tuple(Role):
            raise ValueError(f"role must be one of {', '.join(Role)}, not {self.role!r}")
        object.__setattr__(self, "role", Role(self.role))


def as_actor(actor: str | Actor) -> Actor:
    """An `Actor` as given, or an operator of that name."""
    return actor if isinstance(actor, Actor) else Actor(str(actor), Role.OPERATOR)


def checked_actor(rt: Runtime, actor: str | Actor) -> Actor:
    """`actor` as an `Actor` whose name fits `rt.limits.actor_chars`.

    Raises:
        ValueError: empty name. SizeLimitExceeded: the name is too long.
    """
    who = as_actor(actor)
    check_text(who.name, rt.limits.actor_chars, "an actor's name", "actor_chars")
    return who


def checked_reason(rt: Runtime, reason: str | None) -> str:
    """`reason` ("" for None) when it fits `rt.limits.reason_chars`.

    Raises:
        TypeError: not a string. SizeLimitExceeded: too long.
    """
    reason = reason or ""
    if not isinstance(reason, str):
        raise TypeError(f"a reason must be a string, not {type(reason).__name__}")
    return check_text(reason, rt.limits.reason_chars, "the reason", "reason_chars")


def checked_notice(rt: Runtime, text: str) -> dict:
    """The notice message for `text` when it fits `rt.limits.notice_chars`.

    Raises:
        ValueError: empty text. SizeLimitExceeded: too long.
    """
    message = notice_message(text)
    check_text(message["content"], rt.limits.notice_chars, "the notice", "notice_chars")
    return message


def require_operator(actor: Actor, action: str) -> None:
    """Raises PermissionDenied unless `actor` is an operator; `action` completes "may …"."""
    if actor.role != Role.OPERATOR:
        raise PermissionDenied(f"{actor.name} is a {actor.role}; only operators may {action}")


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
) -> RollbackResult:
    """Roll session `sid` back to snapshot `to` (None: its last healthy snapshot).

    What leaves the live line is kept as an abandoned branch labelled with actor, reason and
    time; compensations of side-effecting steps on it are queued (and run at once when this
    process has their handlers); `notice` (True: the default template for the session's locale,
    a string: that text, False: none) is appended. `expect_epoch` (the epoch the operator saw in
    the preview) makes the rollback refuse with RollbackConflict if someone else rolled the
    session back in the meantime. `kind="fork"` is an integration's time travel: same
    mechanics, no recovery status, not counted as a rollback.

    Raises:
        PermissionDenied: the actor is a viewer. UnknownSession, UnknownSnapshot,
        SnapshotNotRestorable, NothingToRollBack, RollbackConflict.
    """
    who = checked_actor(rt, actor)
    require_operator(who, "roll sessions back")
    if kind not in ("rollback", "fork"):
        raise ValueError(f"kind must be rollback or fork, not {kind!r}")
    if automatic:  # the engine's own reason quotes the verdict: cut it, never refuse a rescue
        reason = cut_text(reason or "", rt.limits.reason_chars)
    reason = checked_reason(rt, reason)
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
    result = rt.store.rollback(
        sid,
        target,
        actor=who.name,
        reason=reason,
        notice=message,
        now=rt.clock(),
        expect_epoch=expect_epoch,
        kind=kind,
    )
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
    who = checked_actor(rt, actor)
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
    who = checked_actor(rt, actor)
    require_operator(who, "delete sessions")
    reason = checked_reason(rt, reason)
    found = rt.store.delete_session(validate_session_id(sid), rt.clock())
    if found:
        rt.store.add_audit(who.name, "delete", sid, None, reason, {}, rt.clock())
    return found


def purge_abandoned(rt: Runtime, older_than_s: float = 7 * 86400.0) -> dict:
    """Delete abandoned branches older than `older_than_s`; the store records what it removed.

    Raises:
        ValueError: a negative age.
    """
    if older_than_s < 0:
        raise ValueError("older_than_s must not be negative")
    now = rt.clock()
    return rt.store.purge_branches(now - older_than_s, now)
