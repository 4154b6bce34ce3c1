"""`Step`: one observed tool call or agent turn, the detector's input."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Step"]


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
    side_effect: bool = False
    """The call changes the world (creates a ticket, sends mail…): repeating it is never progress,
    whatever it returns."""
    turn: str | None = None
    """Id of the model response that issued the call (an LLM response id, the AIMessage that
    holds the tool calls, a parent span); None when unknown. Calls of one turn are judged as one
    attempt: a batch of different guesses that all fail is one failed try, not several failures
    in a row; the same batch sent again is a repeat."""
