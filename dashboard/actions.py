"""Operator actions. Each goes through the engine API with the user's `Actor`, so the engine checks
the role and writes the audit event with the operator's name; the console never decides alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dashboard.access import User
from engine import Engine, PermissionDenied, RewindError
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
    reason = (reason or "").strip()
    if not reason:
        raise ActionRefused(f"say why you {action} these compensations; the reason goes to the "
                            "audit log")
    if not comps:
        raise ActionRefused("select the compensations first (tick their rows in the table)")
    act = engine.retry_compensation if action == "retry" else engine.resolve_compensation
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

