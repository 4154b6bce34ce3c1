"""Who acts: the operator identity (`Actor`) and the checks every action runs on it.

A room of its own below everything that acts on someone's behalf (recovery, quarantine, the
saga's operator verbs, labels), so each of those checks the actor the same way and none of them
imports another to do it. The checks take the engine's `Limits`, not the runtime, so this module
depends on nothing but the vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import PermissionDenied
from engine.limits import Limits, check_text
from engine.types import Role


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


def checked_actor(limits: Limits, actor: str | Actor) -> Actor:
    """`actor` as an `Actor` whose name fits `limits.actor_chars`.

    Raises:
        ValueError: empty name. SizeLimitExceeded: the name is too long.
    """
    who = as_actor(actor)
    check_text(who.name, limits.actor_chars, "an actor's name", "actor_chars")
    return who


def checked_reason(limits: Limits, reason: str | None, required: str | None = None) -> str:
    """`reason` ("" for None) when it fits `limits.reason_chars`; with `required` (the
    message), a blank reason is refused.

    Raises:
        TypeError: not a string. SizeLimitExceeded: too long. ValueError: blank but required.
    """
    reason = reason or ""
    if not isinstance(reason, str):
        raise TypeError(f"a reason must be a string, not {type(reason).__name__}")
    if required is not None and not reason.strip():
        raise ValueError(required)
    return check_text(reason, limits.reason_chars, "the reason", "reason_chars")


def require_operator(actor: Actor, action: str) -> None:
    """Raises PermissionDenied unless `actor` is an operator; `action` completes "may …"."""
    if actor.role != Role.OPERATOR:
        raise PermissionDenied(f"{actor.name} is a {actor.role}; only operators may {action}")
