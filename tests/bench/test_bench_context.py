"""bench/context.py writes its tables into the results file, each row beside the simple
alternative: a cached token count per message, a BM25Okapi built once or rebuilt after an add."""

from __future__ import annotations

from support.bench import run_bench


def test_the_context_bench_records_every_row_beside_its_simple_alternative(tmp_path):
    args = ("--quick", "--memories", "200", "--queries", "4", "--sizes", "30",
            "--embedder", "hashing")
    section = run_bench("context.py", *args, results=tmp_path / "RESULTS.md")
    assert section.count("base mean") == 3  # the three tables
    for row in ("build, warm (cl100k_base)", "build, cold (o200k_base)",
                "BM25 query (base: BM25Okapi, built once)",
                "add 1 memory, then hybrid query (rebuilt)", "s.memory.add at 30 memories"):
        line = next(line for line in section.splitlines() if line.startswith(row))
        assert line.rstrip().endswith("x"), line  # the base's columns and the ratio are there
    assert "a cached token count per message" in section
