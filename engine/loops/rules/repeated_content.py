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
_TABLE_ROW = re.compile(r"^\s*\|.*$", re.MULTILINE)


class RepeatedContent(Rule):
    """Fires on an agent message in which one passage of `content_chunk_size` characters comes
    back `content_repeats` times, on average at most five passages apart. Code blocks and
    table rows are left out: they repeat by nature."""

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
        chunk, repeats = self.chunk, self.repeats
        if not text or len(text) < chunk * repeats:
            return None
        if "```" in text or "|" in text:
            text = _TABLE_ROW.sub("", _CODE_FENCE.sub("", text))
        text = " ".join(text.split())
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
                if not self.allowed(()):
                    return None
                count = len(seen)
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
