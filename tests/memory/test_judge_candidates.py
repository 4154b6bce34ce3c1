"""The candidates a judge sees: the same owner's older free-text memories, closest in words or
sharing a subject key (for a judge without keys of its own too), newest first, at most
`MemoryConfig.judge_pairs` per add."""

from __future__ import annotations

import pytest

from engine import Engine
from engine.memory.config import MemoryConfig
from engine.memory.embeddings import HashingEmbedder
from engine.memory.judges import FunctionJudge


class Recorder:
    """A judge that never replaces anything and remembers each batch it was asked."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[str, str]]] = []
        self.judge = FunctionJudge(self.answer, cache_size=1)

    def answer(self, pairs):
        self.batches.append(list(pairs))
        return [False] * len(pairs)


def _session(judge, **settings):
    clock = iter(float(t) for t in range(1_800_000_000, 1_800_010_000))
    config = MemoryConfig(embedder=HashingEmbedder(), judge=judge, **settings)
    engine = Engine.open("sqlite:///:memory:", memory=config, clock=lambda: next(clock))
    return engine, engine.session("s")


def test_at_most_judge_pairs_are_asked_per_add_newest_first():
    seen = Recorder()
    engine, s = _session(seen.judge, judge_pairs=6)
    try:
        for n in range(30):
            s.memory.add(f"I drink coffee at the cafe number {n}", importance=0.8)
        seen.batches.clear()
        s.memory.add("I drink coffee at the cafe on the corner now")
        [batch] = seen.batches
        assert len(batch) == 6
        numbers = [int(old.rsplit(" ", 1)[1]) for old, _ in batch]
        assert numbers == sorted(numbers, reverse=True)  # newest first
    finally:
        engine.close()


def test_a_judge_without_keys_is_asked_about_the_same_subject_sharing_no_word():
    seen = Recorder()
    engine, s = _session(seen.judge, judge_pairs=4)
    try:
        s.memory.add("I live in Berlin", importance=0.8)
        for n in range(20):  # more words in common with the new memory than Berlin has
            s.memory.add(f"We moved the Paris meeting to room {n}", importance=0.8)
        seen.batches.clear()
        s.memory.add("I moved to Paris")
        [batch] = seen.batches
        assert ("I live in Berlin", "I moved to Paris") in batch and len(batch) <= 4
    finally:
        engine.close()


def test_another_speakers_memories_are_never_candidates():
    seen = Recorder()
    engine, s = _session(seen.judge)
    try:
        s.memory.add("Mel: I live in Berlin", importance=0.8)
        s.memory.add("Caroline: I live in Lisbon", importance=0.8)
        seen.batches.clear()
        s.memory.add("Caroline: I moved to Porto")
        [batch] = seen.batches
        assert [old for old, _ in batch] == ["Caroline: I live in Lisbon"]
    finally:
        engine.close()


@pytest.mark.parametrize(("value", "error"), [(0, ValueError), (-3, ValueError),
                                              (True, TypeError), (2.5, TypeError)])
def test_judge_pairs_is_a_positive_int(value, error):
    with pytest.raises(error, match="judge_pairs"):
        MemoryConfig(judge_pairs=value)
