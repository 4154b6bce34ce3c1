"""bench/updates.py skips cleanly without its snapshot, and its split is fixed by question."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from support.paths import ROOT


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_the_updates_bench_skips_cleanly_when_the_snapshot_is_absent(tmp_path):
    bench = _load("bench_updates", ROOT / "bench" / "updates.py")
    lines: list[str] = []
    assert bench.main(["--git", str(tmp_path / "absent"), "--check"], out=lines.append) == 0
    assert len(lines) == 1 and "skipped" in lines[0]


def test_the_split_is_by_question_and_keeps_abstention_variants_with_their_base():
    corpus = _load("lme_updates", ROOT / "bench" / "corpora" / "lme_updates.py")
    ids = [f"{i:08x}" for i in range(400)]
    splits = [corpus.split_of(q) for q in ids]
    assert set(splits) == {"tuned", "held-out"}
    assert 120 < splits.count("tuned") < 280
    assert all(corpus.split_of(q + "_abs") == corpus.split_of(q) for q in ids)
    # Pinned: a split that moved between releases would hand tuned questions to the held-out half.
    assert [corpus.split_of(q) for q in ("852ce960", "0a1b2c3d", "00000000", "00000001")] == [
        "tuned", "tuned", "held-out", "held-out"]


def test_hidden_streams_keep_the_halves_apart_and_the_update_in_order():
    bench = _load("bench_updates", ROOT / "bench" / "updates.py")
    corpus = sys.modules["lme_updates"]
    questions = []
    for n, split in enumerate(["tuned", "held-out"] * 3):
        q = corpus.Question(f"q{n}", "multi-session", split)
        q.turns = [f"{split} filler {n}.{i}" for i in range(200)]
        questions.append(q)
    for split in ("tuned", "held-out"):
        q = corpus.Question(f"u-{split}", "knowledge-update", split)
        q.turns = [f"{split} own {i}" for i in range(5)]
        q.evidence, q.sessions = [1, 3], [0, 0, 0, 1, 1]
        questions.append(q)
    for split in ("tuned", "held-out"):
        [(qid, turns, old, new)] = bench.hidden_streams(questions, split)
        assert qid == f"u-{split}" and len(turns) == bench.HIDDEN_TURNS
        assert all(t.startswith(split) for t in turns)  # the other half never lends a turn
        assert (turns[old], turns[new]) == (f"{split} own 1", f"{split} own 3") and old < new
        assert bench.hidden_streams(questions, split)[0][1] == turns  # seeded: the same stream
