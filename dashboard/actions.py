"""Operator actions. Each goes through the engine API with the user's `Actor`, so the engine checks
the role and writes the audit event with the operator's name; the console never decides alone.
"""

from __future__ import annotations

from typing import Any

from dashboard.access import User
from engine import Engine
from engine.records import RollbackResult


class ActionRefused(ValueError):
    """The action was asked for without what it needs (e.g. a reason)."""


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
    reason = (reason or "").strip()
    if not reason:
        raise ActionRefused("say why you roll this session back; the reason goes to the audit log")
    return engine.rollback(sid, to=target, actor=user.actor(), reason=reason, notice=notice,
                           expect_epoch=expect_epoch)


def send_notice(engine: Engine, user: User, sid: str, text: str | None) -> str:
    """Append a recovery notice to session `sid` on behalf of `user`; returns the text sent.

    Raises:
        ActionRefused: empty text. PermissionDenied: the user is a viewer (raised by the engine).
    """
    if text is not None and not text.strip():
        raise ActionRefused("the notice is empty; pick a template or write the text")
    return engine.notice(sid, text, actor=user.actor())


def describe_rollback(result: Any) -> str:
    """One line for the operator after a rollback."""
    parts = [f"Rolled back to {result.target}: {result.abandoned_steps} steps and "
             f"{result.abandoned_messages} messages left the live line (kept on {result.branch})"]
    if result.compensations:
        names = ", ".join(f"{c.name} (step {c.step})" for c in result.compensations)
        parts.append(f"compensations queued: {names}")
    if result.notice:
        parts.append("notice sent")
    return "; ".join(parts) + "."
