"""Keyed facts: what an agent knows it stores (a rate, an address, a preference) is written by key,
and a newer value with the same key replaces the older one exactly, with the reason recorded on the
old memory and in the correction log, and no judge asked."""

from __future__ import annotations

from engine import Engine
from engine.memory.config import MemoryConfig
from engine.memory.embeddings import HashingEmbedder
from engine.memory.judges import FunctionJudge


def test_a_keyed_put_replaces_the_older_one_and_records_why():
    asked: list = []
    judge = FunctionJudge(lambda pairs: asked.extend(pairs) or [False] * len(pairs))
    clock = iter(range(1_800_000_000, 1_800_000_100))
    config = MemoryConfig(embedder=HashingEmbedder(), judge=judge)
    with Engine.open("sqlite:///:memory:", memory=config, clock=lambda: float(next(clock))) as e:
        s = e.session("fx")
        note = s.memory.add("The EUR/USD rate the treasury quoted is 1.08")  # free text
        old = s.memory.add("EUR/USD rate: 1.08", key="fx.EUR/USD")
        new = s.memory.add("EUR/USD rate: 1.12 (treasury update)", key="fx.EUR/USD")
        by_id = {m.id: m for m in s.memory.items(include_invalid=True)}
        fixes = s.memory.corrections()

    gone = by_id[old]
    assert not gone.valid and gone.superseded_by == new
    assert (gone.invalid_by, gone.invalid_confidence) == ("key", 1.0)
    assert gone.invalid_reason == "replaced by a newer 'fx.EUR/USD'"
    assert by_id[new].valid and by_id[note].valid  # free text is never judged against a key
    [fix] = fixes
    assert fix["judge"] == "key" and fix["kind"] == "key" and fix["key"] == "fx.EUR/USD"
    assert (fix["kept"], fix["invalidated"]) == (new, old)
    assert (fix["old_text"], fix["new_text"]) == ("EUR/USD rate: 1.08",
                                                  "EUR/USD rate: 1.12 (treasury update)")
    assert all("rate: 1.12" not in new_text for _, new_text in asked)  # no judge for a key


def test_the_current_fact_is_the_newest_of_its_key_and_recall_skips_the_old_one():
    with Engine.open("sqlite:///:memory:",
                     memory=MemoryConfig(embedder=HashingEmbedder())) as engine:
        s = engine.session("addr")
        s.memory.add("Ava's delivery address: 14 Elm Street", key="customer.c1.address")
        newer = s.memory.add("Ava's delivery address: 9 Harbour Road (moved)",
                             key="customer.c1.address")
        assert s.memory.fact("customer.c1.address").id == newer
        hits = s.memory.recall("Ava delivery address", k=5)
        assert [h.id for h in hits] == [newer]
