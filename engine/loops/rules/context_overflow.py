"""``context_overflow``: the context overflowing or being condensed again and again while the
agent redoes the same work."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

from engine.loops.rules.base import Finding, Rule
from engine.loops.window import CALL, CONDENSATION, TURN, Observation, Window

__all__ = ["CONTEXT_OVERFLOW", "ContextOverflow"]

CONTEXT_OVERFLOW: Final = "context_overflow"


@dataclass(slots=True)
class _Episode:
    """A run of back-to-back overflow / condensation steps."""

    indexes: list[int]
    progress: int
    start: int
    """Where this episode's trouble began: the event, or the call whose output overflowed."""


class ContextOverflow(Rule):
    """Fires at `overflow_threshold` overflow / condensation episodes with fewer than
    `overflow_min_progress` progress steps between consecutive ones. Back-to-back events make
    one episode."""

    id = CONTEXT_OVERFLOW
    kinds = frozenset({CALL, TURN, CONDENSATION})

    def __init__(self, overflow_threshold: int, overflow_min_progress: int) -> None:
        if overflow_threshold < 2:
            raise ValueError(f"overflow_threshold must be at least 2, got {overflow_threshold}")
        self.threshold = overflow_threshold
        self.min_progress = overflow_min_progress
        super().__init__()

    def reset(self) -> None:
        self._episodes: deque[_Episode] = deque(maxlen=self.threshold)
        self._previous_was_event = False

    def after_flag(self) -> None:
        self._episodes.clear()

    def check(self, obs: Observation, window: Window) -> Finding | None:
        event = obs.overflow
        if obs.kind == TURN and not event:
            return None  # only a model turn that overflowed counts; others leave no trace
        previous_was_event = self._previous_was_event
        self._previous_was_event = event
        if not event:
            return None
        index, episodes, fence = obs.index, self._episodes, window.fence
        if previous_was_event and episodes and episodes[-1].indexes[-1] > fence:
            episodes[-1].indexes.append(index)
            episodes[-1].progress = window.progress
            return None
        if episodes:
            last = episodes[-1]
            if (
                window.progress - last.progress >= self.min_progress
                or last.indexes[0] <= fence
                or index - last.indexes[0] >= window.size
            ):
                episodes.clear()
        cause = obs.cause
        start = cause if cause is not None and cause > fence else index
        episodes.append(_Episode([index], window.progress, start))
        tool = obs.tool
        if len(episodes) < self.threshold or not self.allowed((tool,)):
            return None
        evidence = [i for e in episodes for i in e.indexes]
        return Finding(
            "context",
            tool,
            evidence,
            episodes[0].start,
            f"The context overflowed or was condensed {len(episodes)} times with almost no new "
            f"work in between (fewer than {self.min_progress} new steps each time), so "
            "the agent keeps refilling its context with the same material.",
            "Your context keeps overflowing while redoing the same work; read less at once and "
            "keep only what you need.",
            {"episodes": len(episodes), "min_progress": self.min_progress},
        )
