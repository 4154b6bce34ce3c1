"""Loop detection over a stream of tool calls and agent turns (pure code, no I/O).

Placeholder with the public types and the exact-repeat rule; the full rule set lands with the
loop-detector issue.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from engine.fingerprint import fingerprint

__all__ = ["Step", "Verdict", "LoopDetector"]


@dataclass(frozen=True)
class Step:
    """One observed step: a tool call (`tool` set) or an agent message turn (`tool=None`)."""

    tool: str | None = None
    """Tool name; None for a plain agent message turn."""
    args: Any = None
    """Tool arguments (plain data)."""
    ok: bool = True
    """Whether the tool call succeeded."""
    error: str | None = None
    """Error text when the call failed."""
    result: Any = None
    """Tool result (or a digest of it); used to tell progress from repetition."""
    text: str | None = None
    """The agent's free text for a message turn; never part of the fingerprint."""


@dataclass(frozen=True)
class Verdict:
    """What the detector concluded after observing one step."""

    looping: bool
    """True when the session is in a loop."""
    rule: str | None = None
    """Rule id that fired (e.g. ``exact_repeat``), None when healthy."""
    explanation: str = ""
    """One sentence an on-call engineer understands."""
    evidence: tuple[int, ...] = ()
    """Indexes (0-based, in observation order) of the steps that make the case."""
    loop_start: int | None = None
    """Index of the step where the loop began; roll back to the snapshot before it."""
    details: dict = field(default_factory=dict)
    """Rule-specific extras (argument differences for near-duplicates, counts, …)."""


HEALTHY = Verdict(looping=False)


class LoopDetector:
    """Streaming loop detector: feed each step to `observe`, read the verdict."""

    def __init__(self, repeat_threshold: int = 3, enabled: bool = True):
        self.repeat_threshold = repeat_threshold
        self.enabled = enabled
        self._n = 0
        self._streak: list[int] = []
        self._last_key: tuple | None = None

    @property
    def horizon(self) -> int:
        """How many recent steps a verdict may reach back over."""
        return 50

    def reset(self) -> None:
        self._n = 0
        self._streak = []
        self._last_key = None

    def observe(self, step: Step) -> Verdict:
        index = self._n
        self._n += 1
        if not self.enabled:
            return HEALTHY
        key = (fingerprint(step.tool, step.args), step.ok, step.error)
        if not step.ok and key == self._last_key:
            self._streak.append(index)
        else:
            self._streak = [index] if not step.ok else []
        self._last_key = key
        if len(self._streak) >= self.repeat_threshold:
            return Verdict(
                looping=True,
                rule="exact_repeat",
                explanation=(
                    f"{step.tool} failed {len(self._streak)} times in a row with the same "
                    f"arguments and the same error: {step.error}"
                ),
                evidence=tuple(self._streak),
                loop_start=self._streak[0],
            )
        return HEALTHY
