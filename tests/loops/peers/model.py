"""Peer test cases as data: steps in our `Step` vocabulary plus the peer's expectation.

Each case is ported from another agent project's own test suite (the inputs and the expected
verdict, not their code). `flag_at` is the 0-based index of the step at which the peer first says
"loop" (None: the peer never flags). Where we deliberately disagree, `disagree` says why and
`ours` is the index we expect instead (None: we expect no flag).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.loops.detector import Step


@dataclass(frozen=True)
class PeerCase:
    """One scenario from a peer's test suite."""

    name: str
    """Unique id within the suite."""
    ref: str
    """Where it comes from: ``repo path :: test name``."""
    steps: tuple[Step, ...]
    """The scenario, one Step per tool call (with its observation) or agent turn."""
    flag_at: int | None
    """Index of the step at which the peer flags; None when the peer never flags."""
    disagree: str | None = None
    """Why we deliberately expect something else (None: we follow the peer)."""
    ours: int | None = None
    """Our expected flag index when `disagree` is set (None: no flag)."""

    @property
    def expected(self) -> int | None:
        """The flag index the test holds us to."""
        return self.ours if self.disagree else self.flag_at


def case(name: str, ref: str, steps: list[Step], flag_at: int | None, **kw: Any) -> PeerCase:
    if flag_at is not None and not 0 <= flag_at < len(steps):
        raise ValueError(f"{name}: flag_at {flag_at} outside the {len(steps)} steps")
    return PeerCase(name, ref, tuple(steps), flag_at, **kw)


def call(tool: str, args: Any = None, result: Any = None) -> Step:
    return Step(tool=tool, args=args if args is not None else {}, ok=True, result=result)


def fail(tool: str, args: Any = None, error: str = "error") -> Step:
    return Step(tool=tool, args=args if args is not None else {}, ok=False, error=error)


def say(text: str | None) -> Step:
    return Step(tool=None, text=text)


def condensed(text: str) -> Step:
    """A context condensation / overflow episode (no tool call, the model call failed)."""
    return Step(tool=None, ok=False, error=text)
