"""Session memory through the engine: rolled back with the session, on every store backend."""

from __future__ import annotations

import json
import re

import pytest
from support.paths import ROOT

from engine import Engine
from engine.memory.decay import DAY, Decay, MemoryPolicy
from engine.memory.embeddings import HashingEmbedder
from engine.memory.session import MemoryConfig


@pytest.fixture
def clock():
    return [1_800_000_000.0]


@pytest.fixture
def mem_engine(store_url, clock):
    config = MemoryConfig(embedder=HashingEmbedder(), policy=MemoryPolicy(capacity=3))
    eng = Engine.open(store_url, memory=config, clock=lambda: clock[0])
    yield eng
    eng.close()


def test_rollback_removes_memories_written_after_the_target(mem_engine):
    s = mem_engine.session("s")
    kept = s.memory.add(
        "FX rate EUR/USD fixed at 1.08 for this task", importance=0.9, meta={"turn": "D1:3"}
    )
    snap = s.snapshot("after the rate")
    s.memory.add("loop garbage: image_crop failed again", importance=0.8)
    s.memory.add("loop garbage: image_crop failed once more", importance=0.8)
    assert len(s.memory.items()) == 3
    s.rollback(to=snap, actor="op", reason="loop", notice=False)
    assert [m.id for m in s.memory.items()] == [kept]
    assert [h.id for h in s.memory.recall("image_crop failed", k=5)] in ([], [kept])
    [hit] = s.memory.recall("which exchange rate?", k=5)
    assert hit.id == kept and hit.meta == {"turn": "D1:3"} and hit.score > 0


def test_newer_fact_invalidates_the_older_and_logs_a_correction(mem_engine):
    s = mem_engine.session("s")
    old = s.memory.add("Caroline: I live in Boston these days.", importance=0.9)
    new = s.memory.add("Caroline: Big news, I moved to Denver last month!", importance=0.9)
    valid = {m.id for m in s.memory.items()}
    assert valid == {new}
    [older] = [m for m in s.memory.items(include_invalid=True) if m.id == old]
    assert older.invalid_at is not None and older.superseded_by == new
    assert "boston" in older.invalid_reason.lower() and older.invalid_by == "rules"
    assert older.invalid_confidence is not None and older.invalid_confidence >= 0.7
    [fix] = s.memory.corrections()
    assert (fix["kept"], fix["invalidated"], fix["judge"]) == (new, old, "rules")
    assert [h.id for h in s.memory.recall("where does Caroline live? Denver Boston", k=5)] == [new]


def test_a_keyed_fact_replaces_the_older_one_exactly(mem_engine):
    s = mem_engine.session("s")
    old = s.memory.add("FX rate EUR/USD fixed at 1.08 for this task", key="fx.eur_usd")
    other = s.memory.add("FX rate EUR/GBP fixed at 0.85 for this task", key="fx.eur_gbp")
    new = s.memory.add("FX rate EUR/USD fixed at 1.12 for this task", key="fx.eur_usd")
    assert {m.id for m in s.memory.items()} == {other, new}
    [older] = [m for m in s.memory.items(include_invalid=True) if m.id == old]
    assert (older.invalid_by, older.invalid_confidence, older.superseded_by) == ("key", 1.0, new)
    [fix] = s.memory.corrections()
    assert (fix["judge"], fix["key"], fix["invalidated"]) == ("key", "fx.eur_usd", old)
    assert old not in [h.id for h in s.memory.recall("EUR/USD rate", k=5)]


def test_rollback_undoes_an_invalidation(mem_engine):
    s = mem_engine.session("s")
    old = s.memory.add("FX rate EUR/USD fixed at 1.08 for this task", key="fx")
    snap = s.snapshot()
    s.memory.add("FX rate EUR/USD fixed at 9.99 for this task", key="fx")
    s.rollback(to=snap, actor="op", reason="the loop made it up", notice=False)
    [m] = s.memory.items(include_invalid=True)
    assert m.id == old and m.valid
    assert [h.id for h in s.memory.recall("EUR/USD rate", k=5)] == [old]


def test_recalls_count_and_consolidate_after_three(mem_engine):
    s = mem_engine.session("s")
    mid = s.memory.add("the user's order id is A-17", importance=0.3)
    for _ in range(3):
        assert s.memory.recall("order id", k=1)[0].id == mid
    [m] = s.memory.items()
    assert m.access_count == 3 and len(m.access_times) == 3 and m.tier == "long"
    assert any(e["event"] == "promote" and e["id"] == mid for e in s.memory.log())


def test_short_term_buffer_evicts_least_important_oldest(mem_engine, clock):
    s = mem_engine.session("s")
    ids = []
    notes = [
        "the user likes tea",
        "weather was cloudy",
        "invoice sent by mail",
        "printer jammed twice",
        "meeting moved to Monday",
    ]
    for text, importance in zip(notes, [0.5, 0.2, 0.4, 0.2, 0.6], strict=True):
        clock[0] += 1
        ids.append(s.memory.add(text, importance=importance))
    remaining = [m.id for m in s.memory.items()]
    assert remaining == [ids[0], ids[2], ids[4]]  # the two 0.2 items went, oldest first
    evicted = [e["id"] for e in s.memory.log() if e["event"] == "evict"]
    assert evicted == [ids[1], ids[3]]


def test_decay_prunes_under_the_threshold_and_records_it(mem_engine, clock):
    s = mem_engine.session("s")
    weak = s.memory.add("a passing remark", importance=0.3)
    strong = s.memory.add("the contract number is 4411", importance=0.9)
    clock[0] += 14 * DAY  # two half-lives: 0.3 -> 0.075 (< 0.1), 0.9 -> 0.225
    assert s.memory.prune() == [weak]
    assert [m.id for m in s.memory.items()] == [strong]
    [event] = [e for e in s.memory.log() if e["event"] == "prune"]
    assert event["id"] == weak and "0.075" in event["reason"]


def test_curves_follow_the_formula(mem_engine, clock):
    s = mem_engine.session("s")
    s.memory.add("remember the milk", importance=0.8)
    curve = s.memory.curves(points=3)
    [series] = curve.weights.values()
    decay = Decay()
    assert series[0] == pytest.approx(0.8)
    span = curve.times[-1] - curve.times[0]
    assert series[-1] == pytest.approx(0.8 * 0.5 ** (span / decay.half_life_seconds))
    assert curve.threshold == 0.1


def test_bad_memory_input_is_rejected(mem_engine):
    s = mem_engine.session("s")
    with pytest.raises(ValueError):
        s.memory.add("   ")
    with pytest.raises(ValueError):
        s.memory.add("x", importance=1.5)
    with pytest.raises(TypeError):
        s.memory.add("x", meta={"bad": object()})
    assert s.memory.items() == []


def test_a_second_handle_sees_memories_written_elsewhere(mem_engine):
    writer = mem_engine.session("s")
    reader = Engine(mem_engine.store, memory=mem_engine.config.memory_config).session("s")
    assert reader.memory.recall("deadline", k=3) == []
    mid = writer.memory.add("the deadline is Friday", importance=0.5)
    assert [h.id for h in reader.memory.recall("deadline", k=3)] == [mid]


LOCOMO = ROOT.parent / "shared" / "data" / "locomo10.json"


@pytest.mark.skipif(not LOCOMO.is_file(), reason="LoCoMo not present (../shared/data)")
def test_replaying_real_chat_invalidates_almost_nothing():
    """Ordinary conversation (LoCoMo's first conversation, its first 300 turns, "Speaker: text")
    goes through `s.memory.add` with the default judge; at most 0.5% may be invalidated."""
    conv = json.loads(LOCOMO.read_text(encoding="utf-8"))[0]["conversation"]
    sessions = sorted(
        (k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k[8:])
    )
    turns = [f"{t['speaker']}: {t['text']}" for k in sessions for t in conv[k]][:300]
    clock = [1_800_000_000.0]
    eng = Engine.open(
        "sqlite:///:memory:",
        memory=MemoryConfig(embedder=HashingEmbedder()),
        clock=lambda: clock[0],
    )
    try:
        s = eng.session("locomo")
        for text in turns:
            clock[0] += 1
            s.memory.add(text, importance=0.8)
        everything = s.memory.items(include_invalid=True)
        invalid = [m for m in everything if not m.valid]
        assert len(everything) == len(turns)
        assert len(invalid) <= 0.005 * len(turns), [m.invalid_reason for m in invalid]
    finally:
        eng.close()


def test_a_handle_reads_the_namespace_once_then_follows_the_event_feed(mem_engine, monkeypatch):
    reads = []
    get_all = mem_engine.store.get_all
    monkeypatch.setattr(
        mem_engine.store, "get_all", lambda sid, ns: reads.append(ns) or get_all(sid, ns)
    )
    s = mem_engine.session("s")
    first = s.memory.add("the deadline is Friday", importance=0.9)
    for i in range(5):
        s.append_message("user", f"message {i}")
        s.set_var("n", i)
        s.memory.add(
            [
                "the crop tool failed",
                "Melanie likes pottery",
                "the user is in Oslo",
                "invoice sent by mail",
                "printer jammed twice",
            ][i],
            importance=0.9,
        )
        s.memory.recall("deadline", k=3)
    assert reads.count("mem") == 1
    other = Engine(mem_engine.store, memory=mem_engine.config.memory_config).session("s")
    theirs = other.memory.add("the deadline moved to Monday", importance=0.9)
    ids = {m.id for m in s.memory.items(include_invalid=True)}
    assert theirs in ids and first in ids
    assert {m.id for m in s.memory.items()} == ids - {first}  # their correction is seen here
    snap = s.snapshot()
    mine = s.memory.add("the budget is 500", importance=0.9)
    s.rollback(to=snap, actor="op", reason="test", notice=False)
    assert mine not in {m.id for m in s.memory.items(include_invalid=True)}


def test_a_keyed_fact_is_no_neighbour_of_the_turns_written_around_it(mem_engine):
    """BM25 context (a share of a strong neighbour's score) is for chat turns written one after
    the other; a keyed fact between two turns gets none and gives none."""
    s = mem_engine.session("s")
    first = s.memory.add("Melanie: we went camping at the lake with the kids", importance=0.9)
    fact = s.memory.add("preferred seat: aisle", key="user.seat", importance=0.9)
    then = s.memory.add("Melanie: the kids loved roasting marshmallows", importance=0.9)
    hits = s.memory.recall("camping at the lake", k=5)
    assert [h.id for h in hits] == [first, then, fact]  # the next turn is first's neighbour
    [hit] = s.memory.recall("preferred seat", k=1)
    assert hit.id == fact and hit.key == "user.seat"


def test_a_query_written_as_chat_turns_recalls_its_speakers_memories_first(mem_engine):
    """In a pool shared by several people, the memories naming the speaker of a query written as
    chat turns come before another person's memories with the same words; the role speaking
    back (Assistant) and a query with no speaker change nothing."""
    s = mem_engine.session("s")
    lisa = s.memory.add("Lisa won the school swimming race and was very happy", importance=0.9)
    bart = s.memory.add("Bart went swimming with his dad", importance=0.9)
    plain = s.memory.recall("who won the swimming race", k=2)
    assert [h.id for h in plain] == [lisa, bart]
    chat = "<Bart>: I won the swimming race today! <Assistant>: Amazing, who won the race before?"
    assert [h.id for h in s.memory.recall(chat, k=2)] == [bart, lisa]
    as_lines = "Bart: I won the swimming race today!\nassistant: Amazing!"
    assert [h.id for h in s.memory.recall(as_lines, k=2)] == [bart, lisa]
    only_role = "Assistant: who won the swimming race?"
    assert [h.id for h in s.memory.recall(only_role, k=2)] == [lisa, bart]


def test_speaker_boost_off_keeps_the_text_ranking(store_url, clock):
    config = MemoryConfig(embedder=HashingEmbedder(), speaker_boost=0.0)
    eng = Engine.open(store_url, memory=config, clock=lambda: clock[0])
    try:
        s = eng.session("s")
        lisa = s.memory.add("Lisa won the school swimming race and was very happy", importance=0.9)
        bart = s.memory.add("Bart went swimming with his dad", importance=0.9)
        chat = "<Bart>: I won the swimming race today!"
        assert [h.id for h in s.memory.recall(chat, k=2)] == [lisa, bart]
    finally:
        eng.close()
