"""bench/snapshots.py writes its tables into the results file, each figure beside its baseline:
the two-transaction floor, the full copy."""

from __future__ import annotations

from support.bench import run_bench


def test_the_snapshots_bench_records_the_floor_and_the_full_copy(tmp_path):
    args = ("--quick", "--no-redis", "--lengths", "10,50", "--messages", "10,50",
            "--samples", "20", "--space-steps", "60")
    section = run_bench("snapshots.py", *args, results=tmp_path / "RESULTS.md")
    assert "floor med" in section and "med/floor" in section
    assert "full-copy snap" in section and "full-copy rollback" in section
    assert "floor (two bare transactions, same store, in turn)" in section
    assert "full-copy snapshots would be" in section
