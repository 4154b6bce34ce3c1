"""bench/retrieval.py writes its tables into the results file: the cost of each system beside
rank-bm25's BM25Okapi rebuilt, and every held-out figure marked as scored again."""

from __future__ import annotations

import json

from support.bench import run_bench

SCORED_AGAIN = "[held-out half, scored again after later tuning: read it as tuned]"


def _locomo(path, conversations: int = 10) -> None:
    """A tiny file in LoCoMo's format: each conversation a few turns and questions."""
    pets = ("cat", "dog", "parrot", "turtle")
    samples = []
    for c in range(conversations):
        turns = [{"speaker": "Ana" if t % 2 else "Ben", "dia_id": f"D1:{t + 1}",
                  "text": f"My {pets[(c + t) % 4]} number {t} likes the {t}th park in town {c}."}
                 for t in range(8)]
        questions = [{"question": f"Which park does the {pets[(c + t) % 4]} number {t} like?",
                      "evidence": [f"D1:{t + 1}"], "category": 4} for t in range(0, 8, 2)]
        samples.append({"conversation": {"speaker_a": "Ana", "speaker_b": "Ben",
                                         "session_1": turns}, "qa": questions})
    path.write_text(json.dumps(samples), encoding="utf-8")


def test_the_retrieval_bench_records_costs_beside_a_rebuilt_bm25_and_marks_held_out(tmp_path):
    data = tmp_path / "locomo.json"
    _locomo(data)
    args = ("--data", str(data), "--embedders", "hashing", "--memory-embedder", "hashing",
            "--second", str(tmp_path / "absent.json"))
    section = run_bench("retrieval.py", *args, results=tmp_path / "RESULTS.md")
    lines = section.splitlines()
    base = "base: BM25Okapi (rank-bm25), rebuilt"
    assert sum(line.startswith(base) for line in lines) == 2  # LoCoMo, and the chat
    assert any(line.startswith("s.memory (embedder hashing)") and line.endswith("x")
               for line in lines)
    held_out = [line for line in lines if "held-out" in line]
    assert len(held_out) >= 4  # LoCoMo's table, the dense gain, s.memory's row and its target
    assert all(SCORED_AGAIN in line for line in held_out), held_out
