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
    failed: bool
    """A model call or a tool failed on the overflow (not only a planned condensation)."""


class ContextOverflow(Rule):
    """Fires at `overflow_threshold` overflow / condensation episodes with too little work
    between consecutive ones, or at `overflow_run_threshold` events back to back.

    Back-to-back events make one episode. Between episodes, an overflow that failed a call
    needs `overflow_min_progress` progress steps to count as separate trouble (the agent keeps
    refilling its context); a planned condensation needs only one (condensing now and then
    while doing real work is ordinary memory management)."""

    id = CONTEXT_OVERFLOW
    kinds = frozenset({CALL, TURN, CONDENSATION})

    def __init__(
        self, overflow_threshold: int, overflow_min_progress: int, overflow_run_threshold: int
    ) -> None:
        for name, value in (
            ("overflow_threshold", overflow_threshold),
            ("overflow_run_threshold", overflow_run_threshold),
        ):
            if value < 2:
                raise ValueError(f"{name} must be at least 2, got {value}")
        self.threshold = overflow_threshold
        self.min_progress = overflow_min_progress
        self.run_threshold = overflow_run_threshold
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
        failed = obs.kind != CONDENSATION
        tool = obs.tool
        if previous_was_event and episodes and episodes[-1].indexes[-1] > fence:
            episode = episodes[-1]
            episode.indexes.append(index)
            episode.progress = window.progress
            episode.failed = episode.failed or failed
            run = len(episode.indexes)
            if run < self.run_threshold or not self.allowed((tool,)):
                return None
            return Finding(
                "context-run",
                tool,
                episode.indexes,
                episode.start,
                f"The context overflowed or was condensed {run} times in a row with nothing "
                "else in between, so the agent is stuck condensing instead of working.",
                "Your context keeps being condensed without any work in between; do one small "
                "concrete step next.",
                {"run": run},
            )
        if episodes:
            last = episodes[-1]
            needed = self.min_progress if last.failed or failed else 1
            if (
                window.progress - last.progress >= needed
                or last.indexes[0] <= fence
                or index - last.indexes[0] >= window.size
            ):
                episodes.clear()
        cause = obs.cause
        start = cause if cause is not None and cause > fence else index
        episodes.append(_Episode([index], window.progress, start, failed))
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
