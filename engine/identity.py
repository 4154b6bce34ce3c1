"""Who acts: the operator identity (`Actor`) and the checks every action runs on it.

A room of its own below everything that acts on someone's behalf (recovery, quarantine, the
saga's operator verbs, labels), so each of those checks the actor the same way and none of them
imports another to do it. The checks take the engine's `Limits`, not the runtime, so this module
depends on nothing but the vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from engine.errors import PermissionDenied
from engine.limits import Limits, check_text
from engine.types import Role

Authority = Callable[[str], "Role | str | None"]
"""Says what role an account holds right now (None: the account no longer exists)."""


@dataclass(frozen=True)
class Actor:
    """Who performs an action: a name for the audit log and a role (viewer or operator).

    An actor from a long-lived front end (the console, where a dialog stays open while an
    administrator demotes or deletes the account) carries its `authority`: every action asks it
    for the account's role at the moment it acts, so rights are never those the page had when
    it was drawn."""

    name: str
    role: Role = Role.OPERATOR
    authority: Authority | None = field(default=None, compare=False, repr=False)
    """Asked for the account's current role each time the actor acts (None: `role` as given,
    for the CLI and programs, whose caller is trusted as it is)."""

    def current_role(self) -> Role:
        """The role this actor holds now: `authority`'s answer, else `role`.

        Raises:
            PermissionDenied: the authority no longer knows the account, or names no role.
        """
        if self.authority is None:
            return self.role
        now = self.authority(self.name)
        if now is None:
            raise PermissionDenied(
                f"{self.name} is no longer an account of this console; sign in again")
        try:
            return Role(now)
        except ValueError:
            raise PermissionDenied(
                f"{self.name} has no valid role now ({now!r}); ask an administrator") from None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("an actor needs a non-empty name")
        if self.role not in tuple(Role):
            raise ValueError(f"role must be one of {', '.join(Role)}, not {self.role!r}")
        object.__setattr__(self, "role", Role(self.role))


def as_actor(actor: str | Actor) -> Actor:
    """An `Actor` as given, or an operator of that name.

    Raises:
        TypeError: neither a string nor an `Actor`. `actor=None` (a variable never set) would
        otherwise be audited as an operator named "None", and `actor=5` as one named "5".
    """
    if isinstance(actor, Actor):
        return actor
    if not isinstance(actor, str):
        raise TypeError(f"an actor must be a name (a string) or an Actor, not "
                        f"{type(actor).__name__} {actor!r}")
    return Actor(actor, Role.OPERATOR)


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
    """Raises PermissionDenied unless `actor` is an operator now (its authority is asked at
    this moment, see `Actor`); `action` completes "may …"."""
    role = actor.current_role()
    if role != Role.OPERATOR:
        raise PermissionDenied(f"{actor.name} is a {role}; only operators may {action}")
