"""``repeated_content``: one long agent message that repeats the same passage over and over
(the model "chanting")."""

from __future__ import annotations

import re
from typing import Final

from engine.loops.rules.base import Finding, Rule, clip
from engine.loops.window import TURN, Observation, Window

__all__ = ["REPEATED_CONTENT", "RepeatedContent"]

REPEATED_CONTENT: Final = "repeated_content"

_CODE_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
# Markdown structure repeats by nature (table rows, list items, headings, quotes, rules): a
# passage is counted only within one stretch of prose between two such marks. A table is two
# cells' pipes anywhere; a ``*``/``+`` bullet anywhere after white space; a ``-`` or numbered
# bullet, heading, quote or rule at the start of a line.
_STRUCTURE = re.compile(
    r"\|[^|\n]+\||(?:^|(?<=\s))[*+]\s"
    r"|^[ \t]*(?:-|\d+[.)]|#+|>)[ \t]|^[ \t]*[-=_*]{3,}[ \t]*$",
    re.MULTILINE,
)
_FENCE = "`" * 3
_SPACES = re.compile(r"\s+")


class RepeatedContent(Rule):
    """Fires on an agent message in which one passage of `content_chunk_size` characters comes
    back `content_repeats` times, on average at most five passages apart, with the same text
    between its returns. Code blocks are left out, and markdown structure (table rows, list
    items, headings…) splits the message: they repeat by nature.

    A message the runtime or harness rejected (a turn with an error) is left to the count of
    rejected answers (``idle_turns``): the harness already refused it, and one refused message,
    however repetitive, is not the agent going round (a model that pastes one image link ten
    times into an answer the harness refuses may well answer properly on its next turn)."""

    id = REPEATED_CONTENT
    kinds = frozenset({TURN})

    def __init__(self, content_chunk_size: int, content_repeats: int) -> None:
        if content_chunk_size < 8:
            raise ValueError(f"content_chunk_size must be at least 8, got {content_chunk_size}")
        if content_repeats < 3:
            raise ValueError(f"content_repeats must be at least 3, got {content_repeats}")
        self.chunk = content_chunk_size
        self.repeats = content_repeats
        super().__init__()

    def check(self, obs: Observation, window: Window) -> Finding | None:
        text = obs.step.text
        if not text or len(text) < self.chunk * self.repeats or obs.step.error:
            return None
        if _FENCE in text:
            text = _CODE_FENCE.sub("\n", text)
        for stretch in _STRUCTURE.split(text):
            found = self._chant(_SPACES.sub(" ", stretch))
            if found is not None:
                if not self.allowed(()):
                    return None
                passage, count = found
                return Finding(
                    passage,
                    None,
                    [obs.index],
                    obs.index,
                    f'The agent\'s message repeats the same passage ("{clip(passage, 40)}") '
                    f"{count} times, so the model is stuck generating the same text.",
                    "Your last message repeated itself; stop, and write one short, new answer.",
                    {"passage": passage, "repeats": count, "chars": len(text)},
                )
        return None

    def _chant(self, text: str) -> tuple[str, int] | None:
        """The passage `text` chants and how often, or None.

        A passage chants when it comes back `repeats` times, on average at most five passages
        apart, and what lies between its returns is mostly the same text (at most half of the
        gaps differ): the whole stretch repeats, not only a shared prefix (a list of names that
        all start with the same long path is no chant).
        """
        chunk, repeats = self.chunk, self.repeats
        if len(text) < chunk * repeats:
            return None
        positions: dict[str, list[int]] = {}
        reach = 5 * chunk * (repeats - 1)
        for start in range(len(text) - chunk + 1):
            passage = text[start : start + chunk]
            seen = positions.get(passage)
            if seen is None:
                positions[passage] = [start]
                continue
            seen.append(start)
            if len(seen) >= repeats and start - seen[-repeats] <= reach:
                recent = seen[-repeats:]
                gaps = {text[a:b] for a, b in zip(recent, recent[1:], strict=False)}
                if len(gaps) <= repeats // 2:
                    return passage, len(seen)
        return None
