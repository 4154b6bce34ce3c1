"""Building blocks of the labeled trace corpus.

A trace is written as a list of steps with two markers placed by a careful human reader:

- ``START`` goes right before the step where the loop began (the engine rolls back to the snapshot
  before it; for a repeat this is the first of the repeated calls).
- ``FLAG`` goes right before the step at which the reader, seeing the steps one by one, would
  first say "this agent is stuck" and page someone.

Healthy traces have neither marker. Labeling conventions (the same for every trace):

- identical call with identical outcome (failure, result, or side effect): flag at the 3rd one;
- the same failure on the same target while the arguments are only nudged: flag at the 3rd try;
- a repeated sequence of 2 to 5 calls with identical outcomes: flag at the first call of the
  third round (ABAB, then A: the "third head"; two rounds alone can be ordinary work);
- empty or repeated agent turns without tool calls: flag at the 3rd in a row;
- context overflow / condensation coming back with no new work in between: flag at the 3rd;
- one tool failing on every call whatever the arguments: flag at the 5th failure in a row;
- a call polled with changing results but never finishing: flag past the poll budget (40).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.loops.detector import Step

START = object()
"""Marker: the next step is where the loop began."""
FLAG = object()
"""Marker: the next step is where a careful human flags the loop."""


@dataclass(frozen=True)
class Trace:
    """One labeled session."""

    name: str
    """Short unique id."""
    story: str
    """What happens, in a sentence."""
    steps: tuple[Step, ...]
    """The steps in order."""
    flag_at: int | None
    """Index of the step where a careful human flags the loop; None for a healthy trace."""
    loop_start: int | None
    """Index of the step where the loop began; None for a healthy trace."""
    expected_rule: str | None = None
    """The rule id one would expect to fire (informational; the scorer does not require it)."""
    known_limitation: str | None = None
    """Why the detector is known to get this trace wrong (it still counts in the scores)."""

    @property
    def looping(self) -> bool:
        return self.flag_at is not None


def trace(
    name: str, story: str, *items: Any, rule: str | None = None, limitation: str | None = None
) -> Trace:
    """Build a trace from steps, nested lists of steps and the START / FLAG markers."""
    steps: list[Step] = []
    marks: dict[str, int] = {}

    def add(item: Any) -> None:
        if item is START:
            marks["start"] = len(steps)
        elif item is FLAG:
            marks["flag"] = len(steps)
        elif isinstance(item, Step):
            steps.append(item)
        else:
            for sub in item:
                add(sub)

    for item in items:
        add(item)
    flag, start = marks.get("flag"), marks.get("start")
    if (flag is None) != (start is None):
        raise ValueError(f"trace {name}: START and FLAG go together")
    if flag is not None and not (start <= flag < len(steps)):
        raise ValueError(f"trace {name}: FLAG must follow START and precede a step")
    return Trace(name, story, tuple(steps), flag, start, rule, limitation)


def ok(tool: str, args: Any = None, result: Any = None, *, side_effect: bool = False) -> Step:
    """A successful tool call."""
    return Step(
        tool=tool,
        args=args if args is not None else {},
        ok=True,
        result=result,
        side_effect=side_effect,
    )


def err(tool: str, args: Any = None, error: str = "error") -> Step:
    """A failed tool call."""
    return Step(tool=tool, args=args if args is not None else {}, ok=False, error=error)


def say(text: str | None) -> Step:
    """An agent turn without a tool call."""
    return Step(tool=None, text=text)


def overflowed(error: str) -> Step:
    """An agent turn whose model call failed because the context was too long."""
    return Step(tool=None, ok=False, error=error)


def rid(n: int) -> str:
    """A deterministic request id that looks random."""
    return f"{(n * 2654435761 + 97) % 2**32:08x}-{(n * 40503 + 11) % 2**16:04x}"


def ts(n: int, base_minute: int = 0) -> str:
    """A deterministic ISO timestamp n seconds into a session."""
    total = base_minute * 60 + n * 7
    return f"2025-10-01T{9 + total // 3600:02d}:{total // 60 % 60:02d}:{total % 60:02d}Z"
