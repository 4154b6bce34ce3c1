"""Memory lifecycle as pure functions: decay, pruning, curve data, short/long-term policy.

Decay weight of a memory at time ``t`` (seconds since the epoch)::

    weight(t) = importance * exp(-ln 2 * age / half_life) * (1 + 0.1 * access_count)

with ``age = t - created_at`` and ``access_count`` the recalls up to ``t``. A memory whose weight
falls under ``min_weight`` is pruned; the caller records the returned `Pruned` items as events.

`MemoryPolicy.plan` decides which short-term items move to long-term memory (important enough, or
recalled often enough) and which are evicted (least important, then oldest, beyond capacity). The
engine applies the plan; nothing here does I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "DAY",
    "Curve",
    "Decay",
    "MemoryItem",
    "MemoryPolicy",
    "PolicyPlan",
    "Pruned",
    "decay_weight",
]

DAY = 86_400.0
"""Seconds in a day."""
ACCESS_BONUS = 0.1
"""Weight bonus per recall, as in the formula."""


@dataclass(frozen=True)
class MemoryItem:
    """What decay and the tier policy need to know about one memory."""

    id: str
    """Memory id."""
    importance: float
    """Importance in [0, 1] given when the memory was written."""
    created_at: float
    """When it was written, seconds since the epoch."""
    access_times: tuple[float, ...] = ()
    """When it was recalled (seconds since the epoch), oldest first."""
    access_count: int | None = None
    """Recall count when `access_times` are not kept; defaults to ``len(access_times)``."""
    tier: str = "short"
    """``short`` or ``long``."""

    @property
    def accesses(self) -> int:
        """Total recall count."""
        return self.access_count if self.access_count is not None else len(self.access_times)

    def accesses_until(self, t: float) -> int:
        """Recalls that happened at or before ``t`` (all of them when times are not kept)."""
        if not self.access_times:
            return self.accesses if t >= self.created_at else 0
        return sum(1 for a in self.access_times if a <= t)


def decay_weight(
    importance: float, age_seconds: float, access_count: int, half_life_seconds: float = 7 * DAY
) -> float:
    """The decay formula.

    Args:
        importance: importance at write time (>= 0).
        age_seconds: time since the memory was written; negative ages count as 0.
        access_count: recalls so far (>= 0).
        half_life_seconds: time for the weight to halve without recalls (> 0).

    Returns:
        ``importance * exp(-ln2 * age / half_life) * (1 + 0.1 * access_count)``.

    Raises:
        ValueError: a negative importance or access count, or a non-positive half-life.
    """
    if importance < 0:
        raise ValueError(f"importance must be >= 0, got {importance}")
    if access_count < 0:
        raise ValueError(f"access_count must be >= 0, got {access_count}")
    if not half_life_seconds > 0:
        raise ValueError(f"half-life must be positive, got {half_life_seconds}")
    age = max(0.0, age_seconds)
    return (
        importance
        * math.exp(-math.log(2) * age / half_life_seconds)
        * (1 + ACCESS_BONUS * access_count)
    )


@dataclass(frozen=True)
class Pruned:
    """A memory whose weight fell under the minimum: the caller removes it and logs an event."""

    id: str
    """Memory id."""
    weight: float
    """Its weight at pruning time."""
    reason: str
    """One sentence for the event log."""


@dataclass(frozen=True)
class Curve:
    """Weight-over-time data for the console: one series per memory on shared time points."""

    times: list[float]
    """Time points, seconds since the epoch, ascending."""
    weights: dict[str, list[float | None]]
    """Memory id -> weight at each time point (None before the memory existed)."""
    accesses: dict[str, list[tuple[float, float]]]
    """Memory id -> ``(time, weight just after)`` for each recall within the window."""
    threshold: float
    """The pruning threshold (draw it as a horizontal line)."""

    def rows(self) -> list[dict]:
        """Long-form rows ``{memory_id, time, weight}`` for a data frame (None weights skipped).

        Returns:
            One dict per memory and time point.
        """
        return [
            {"memory_id": mid, "time": t, "weight": w}
            for mid, series in self.weights.items()
            for t, w in zip(self.times, series, strict=True)
            if w is not None
        ]


class Decay:
    """Decay weights, pruning and curves with one half-life and threshold."""

    def __init__(self, half_life_days: float = 7.0, min_weight: float = 0.1) -> None:
        """Configure decay.

        Args:
            half_life_days: days for a weight to halve without recalls (> 0).
            min_weight: memories under this weight are pruned (>= 0).

        Raises:
            ValueError: out-of-range arguments.
        """
        if not half_life_days > 0:
            raise ValueError(f"half_life_days must be positive, got {half_life_days}")
        if min_weight < 0:
            raise ValueError(f"min_weight must be >= 0, got {min_weight}")
        self.half_life_days = float(half_life_days)
        self.half_life_seconds = self.half_life_days * DAY
        self.min_weight = float(min_weight)

    def weight(self, item: MemoryItem, now: float) -> float:
        """Weight of a memory at ``now``, counting the recalls made up to then.

        Args:
            item: the memory.
            now: seconds since the epoch.

        Returns:
            The decay weight.
        """
        return decay_weight(
            item.importance, now - item.created_at, item.accesses_until(now), self.half_life_seconds
        )

    def prune(
        self, items: Iterable[MemoryItem], now: float
    ) -> tuple[list[MemoryItem], list[Pruned]]:
        """Split memories into those kept and those whose weight fell under ``min_weight``.

        Args:
            items: memories to examine.
            now: seconds since the epoch.

        Returns:
            ``(kept, pruned)``; pruned in input order, each with its weight and a reason.
        """
        kept: list[MemoryItem] = []
        pruned: list[Pruned] = []
        for item in items:
            w = self.weight(item, now)
            if w < self.min_weight:
                age_days = max(0.0, now - item.created_at) / DAY
                pruned.append(
                    Pruned(
                        item.id,
                        w,
                        f"weight {w:.3f} < {self.min_weight:g} after {age_days:.1f} days "
                        f"(importance {item.importance:g}, {item.accesses_until(now)} recalls, "
                        f"half-life {self.half_life_days:g} days)",
                    )
                )
            else:
                kept.append(item)
        return kept, pruned

    def time_to_prune(self, item: MemoryItem, now: float) -> float | None:
        """Seconds from ``now`` until the memory falls under the threshold without new recalls.

        Args:
            item: the memory.
            now: seconds since the epoch.

        Returns:
            0 if it is already under, None if it never will be (threshold 0).
        """
        w = self.weight(item, now)
        if w < self.min_weight:
            return 0.0
        if self.min_weight == 0:
            return None
        return self.half_life_seconds * math.log2(w / self.min_weight)

    def curve(
        self,
        items: Sequence[MemoryItem],
        start: float | None = None,
        end: float | None = None,
        points: int = 100,
    ) -> Curve:
        """Weight-over-time series for a set of memories, with recall markers.

        Args:
            items: the memories.
            start: first time point; default: the earliest creation time.
            end: last time point; default: ``start`` plus four half-lives.
            points: number of time points (>= 2).

        Returns:
            A `Curve`.

        Raises:
            ValueError: fewer than 2 points or end before start.
        """
        if points < 2:
            raise ValueError(f"points must be at least 2, got {points}")
        if start is None:
            start = min((i.created_at for i in items), default=0.0)
        if end is None:
            end = start + 4 * self.half_life_seconds
        if end < start:
            raise ValueError(f"end ({end}) is before start ({start})")
        step = (end - start) / (points - 1)
        times = [start + i * step for i in range(points)]
        weights: dict[str, list[float | None]] = {}
        accesses: dict[str, list[tuple[float, float]]] = {}
        for item in items:
            weights[item.id] = [
                self.weight(item, t) if t >= item.created_at else None for t in times
            ]
            accesses[item.id] = [
                (a, self.weight(item, a)) for a in item.access_times if start <= a <= end
            ]
        return Curve(times=times, weights=weights, accesses=accesses, threshold=self.min_weight)


@dataclass(frozen=True)
class PolicyPlan:
    """What to do with the short-term buffer."""

    promote: list[str] = field(default_factory=list)
    """Ids to move from short-term to long-term memory."""
    evict: list[str] = field(default_factory=list)
    """Ids to drop from short-term memory (beyond capacity)."""
    reasons: dict[str, str] = field(default_factory=dict)
    """Id -> one sentence, for the event log."""


@dataclass(frozen=True)
class MemoryPolicy:
    """Short-term buffer rules: consolidate what matters, evict the rest beyond capacity."""

    capacity: int = 10
    """Short-term items kept after consolidation."""
    consolidate_importance: float = 0.7
    """Importance at or above which an item moves to long-term memory."""
    consolidate_recalls: int = 3
    """Recalls at or above which an item moves to long-term memory."""

    def __post_init__(self) -> None:
        if self.capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {self.capacity}")
        if self.consolidate_recalls < 1:
            raise ValueError(f"consolidate_recalls must be >= 1, got {self.consolidate_recalls}")

    def plan(self, items: Iterable[MemoryItem]) -> PolicyPlan:
        """Decide promotions and evictions for the short-term items among ``items``.

        Items with importance >= `consolidate_importance` or at least `consolidate_recalls`
        recalls are promoted. If more than `capacity` short-term items remain, the least important
        are evicted first, the oldest first among equals.

        Args:
            items: memories of one session (long-term items are ignored).

        Returns:
            A `PolicyPlan`; promotions in input order, evictions in eviction order.
        """
        promote: list[str] = []
        stay: list[MemoryItem] = []
        reasons: dict[str, str] = {}
        for item in items:
            if item.tier != "short":
                continue
            if item.importance >= self.consolidate_importance:
                promote.append(item.id)
                reasons[item.id] = (
                    f"importance {item.importance:g} >= {self.consolidate_importance:g}"
                )
            elif item.accesses >= self.consolidate_recalls:
                promote.append(item.id)
                reasons[item.id] = f"recalled {item.accesses} times"
            else:
                stay.append(item)
        evict: list[str] = []
        excess = len(stay) - self.capacity
        if excess > 0:
            order = sorted(stay, key=lambda i: (i.importance, i.created_at, i.id))
            for item in order[:excess]:
                evict.append(item.id)
                reasons[item.id] = (
                    f"short-term buffer over capacity {self.capacity}; least important "
                    f"({item.importance:g}) and oldest"
                )
        return PolicyPlan(promote=promote, evict=evict, reasons=reasons)
