"""bench/otlp.py writes its table into the results file, the receiver beside s.record_steps."""

from __future__ import annotations

from support.bench import run_bench


def test_the_otlp_bench_records_the_receiver_beside_record_steps(tmp_path):
    section = run_bench("otlp.py", "--spans", "300", "--sessions", "3", "--no-redis",
                        results=tmp_path / "RESULTS.md")
    assert "wall ×base" in section and "CPU ×base" in section
    assert "sqlite   record_steps" in section and "sqlite   otlp" in section
    assert "the agent made and exported its spans" in section
