"""bench/tally.py writes its table into the results file: the index beside the feed scan, on the
same stores, the same episodes found both ways."""

from __future__ import annotations

from support.bench import printed, run_bench


def test_the_tally_bench_records_the_index_beside_the_scan(tmp_path):
    args = ("--sessions", "20", "--steps", "400", "--runs", "1", "--workers", "1",
            "--out", str(tmp_path / "stores"))
    section = run_bench("tally.py", *args, results=tmp_path / "RESULTS.md")
    assert "scan/index" in section and "events read" in section
    assert str(tmp_path) not in printed(section)
