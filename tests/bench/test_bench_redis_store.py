"""bench/redis_store.py writes its tables into the results file, each figure beside its
baseline (SQLite's rate, the two-round-trip floor, the history's bytes, the full copy)."""

from __future__ import annotations

import pytest
from support.bench import run_bench
from support.redis_servers import have_redis

pytestmark = pytest.mark.redis


def test_the_redis_bench_records_each_figure_beside_its_base(tmp_path):
    if not have_redis():
        pytest.skip("redis-server and redis-cli are not installed")
    args = ("--quick", "--seconds", "0.5", "--processes", "1", "--lengths", "10,50",
            "--memory-steps", "60", "--round-trips", "10")
    section = run_bench("redis_store.py", *args, results=tmp_path / "RESULTS.md")
    assert section.count("×sqlite") == 3  # the note and the two stores' columns
    assert "×floor" in section and "x history" in section
    assert section.count("full-copy rollback") == 2
    assert "--worker" not in (tmp_path / "RESULTS.md").read_text()  # workers record nothing
