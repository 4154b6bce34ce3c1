"""Decay, pruning, curve data and the short/long-term policy match the stated formulas."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.memory.decay import DAY, Decay, MemoryItem, MemoryPolicy, decay_weight

NOW = 1_800_000_000.0


@given(
    importance=st.floats(0, 1),
    age_days=st.floats(0, 365),
    accesses=st.integers(0, 50),
    half_life=st.floats(0.1, 60),
)
def test_weight_is_the_formula(importance, age_days, accesses, half_life):
    expected = importance * math.exp(-math.log(2) * age_days / half_life) * (1 + 0.1 * accesses)
    got = decay_weight(importance, age_days * DAY, accesses, half_life * DAY)
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-300)


def test_half_life_and_access_bonus():
    d = Decay()  # 7 days, threshold 0.1
    item = MemoryItem("m", importance=0.8, created_at=NOW)
    assert d.weight(item, NOW) == pytest.approx(0.8)
    assert d.weight(item, NOW + 7 * DAY) == pytest.approx(0.4)
    assert d.weight(item, NOW + 14 * DAY) == pytest.approx(0.2)
    recalled = MemoryItem("r", 0.8, NOW, access_times=(NOW + DAY, NOW + 2 * DAY))
    assert d.weight(recalled, NOW + 7 * DAY) == pytest.approx(0.4 * 1.2)
    assert d.weight(recalled, NOW + 1.5 * DAY) == pytest.approx(
        0.8 * 2 ** (-1.5 / 7) * 1.1
    )  # only the recalls made so far count
    counted = MemoryItem("c", 0.8, NOW, access_count=5)
    assert d.weight(counted, NOW + 7 * DAY) == pytest.approx(0.4 * 1.5)
    assert d.weight(item, NOW - DAY) == pytest.approx(0.8)  # no negative ages


def test_prune_matches_threshold():
    d = Decay(half_life_days=7, min_weight=0.1)
    items = [
        MemoryItem("fresh", 0.5, NOW),
        MemoryItem("old", 0.5, NOW - 21 * DAY),  # 0.5 / 8 = 0.0625 < 0.1
        MemoryItem("old-but-recalled", 0.5, NOW - 21 * DAY, access_count=7),  # 0.0625*1.7=0.106
        MemoryItem("unimportant", 0.05, NOW),
    ]
    kept, pruned = d.prune(items, NOW)
    assert [i.id for i in kept] == ["fresh", "old-but-recalled"]
    assert [p.id for p in pruned] == ["old", "unimportant"]
    assert pruned[0].weight == pytest.approx(0.0625)
    assert "0.063 < 0.1" in pruned[0].reason and "21.0 days" in pruned[0].reason


@given(st.floats(0.11, 1), st.floats(0.5, 30))
def test_time_to_prune_lands_on_the_threshold(importance, half_life):
    d = Decay(half_life_days=half_life, min_weight=0.1)
    item = MemoryItem("m", importance, NOW)
    dt = d.time_to_prune(item, NOW)
    assert d.weight(item, NOW + dt) == pytest.approx(0.1)


def test_curve_data():
    d = Decay()
    a = MemoryItem("a", 1.0, NOW, access_times=(NOW + 3 * DAY,))
    b = MemoryItem("b", 0.5, NOW + 7 * DAY)
    curve = d.curve([a, b], start=NOW, end=NOW + 14 * DAY, points=15)
    assert curve.threshold == 0.1
    assert len(curve.times) == 15 and curve.times[0] == NOW and curve.times[-1] == NOW + 14 * DAY
    assert curve.weights["b"][:7] == [None] * 7 and curve.weights["b"][7] == pytest.approx(0.5)
    series = curve.weights["a"]
    assert series[3] == pytest.approx(2 ** (-3 / 7) * 1.1)  # the recall at day 3 lifts it
    assert series[2] == pytest.approx(2 ** (-2 / 7))
    assert all(x > y for x, y in zip(series[3:], series[4:], strict=False))
    assert curve.accesses["a"] == [(NOW + 3 * DAY, pytest.approx(2 ** (-3 / 7) * 1.1))]
    rows = curve.rows()
    assert len(rows) == 15 + 8 and set(rows[0]) == {"memory_id", "time", "weight"}
    default = d.curve([a])
    assert default.times[0] == NOW and default.times[-1] == pytest.approx(NOW + 28 * DAY)


def test_bad_decay_arguments():
    with pytest.raises(ValueError):
        Decay(half_life_days=0)
    with pytest.raises(ValueError):
        Decay(min_weight=-1)
    with pytest.raises(ValueError):
        decay_weight(-0.1, 0, 0)
    with pytest.raises(ValueError):
        Decay().curve([], points=1)


def test_policy_promotes_important_and_often_recalled():
    policy = MemoryPolicy()
    items = [
        MemoryItem("important", 0.7, NOW),
        MemoryItem("recalled", 0.2, NOW, access_count=3),
        MemoryItem("plain", 0.5, NOW),
        MemoryItem("already-long", 0.9, NOW, tier="long"),
    ]
    plan = policy.plan(items)
    assert plan.promote == ["important", "recalled"]
    assert plan.evict == []
    assert "importance 0.7" in plan.reasons["important"]
    assert "recalled 3 times" in plan.reasons["recalled"]


def test_policy_evicts_least_important_then_oldest_beyond_capacity():
    policy = MemoryPolicy(capacity=3)
    items = [
        MemoryItem("old-low", 0.1, NOW - 10),
        MemoryItem("new-low", 0.1, NOW),
        MemoryItem("mid", 0.4, NOW - 100),
        MemoryItem("high-ish", 0.6, NOW - 1000),
        MemoryItem("promoted", 0.95, NOW - 5000),
        MemoryItem("lowest", 0.05, NOW + 10),
    ]
    plan = policy.plan(items)
    assert plan.promote == ["promoted"]
    assert plan.evict == ["lowest", "old-low"]  # 5 stay-candidates, capacity 3


@given(
    st.lists(st.tuples(st.floats(0, 1), st.integers(0, 5), st.floats(0, 1e6)), max_size=30),
    st.integers(0, 12),
)
def test_policy_leaves_at_most_capacity_short_term_items(specs, capacity):
    items = [MemoryItem(f"m{i}", imp, t, access_count=n) for i, (imp, n, t) in enumerate(specs)]
    plan = MemoryPolicy(capacity=capacity).plan(items)
    remaining = [i for i in items if i.id not in plan.promote and i.id not in plan.evict]
    assert len(remaining) == min(len(items) - len(plan.promote), capacity)
    assert not set(plan.promote) & set(plan.evict)
    if plan.evict and remaining:
        worst_kept = min(i.importance for i in remaining)
        assert all(i.importance <= worst_kept for i in items if i.id in plan.evict)
