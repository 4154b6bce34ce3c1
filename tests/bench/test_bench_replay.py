"""bench/replay.py writes its table into the results file, replay in memory and end to end beside
the simple check over the same records."""

from __future__ import annotations

from support.bench import printed, run_bench


def test_the_replay_bench_records_each_mode_beside_its_base(tmp_path):
    section = run_bench("replay.py", "--steps", "2000", "--session", "100", "--out",
                        str(tmp_path / "stores"), "--workers", "1",
                        results=tmp_path / "RESULTS.md")
    assert "×base" in section
    for mode in ("in memory: base, deque+Counter (1 pass)", "in memory: first_flag, defaults",
                 "in memory: base, deque+Counter (2 passes)", "in memory: compare (2 replays)",
                 "end to end: base, deque+Counter (2 passes)", "end to end: Engine.replay"):
        assert mode in section
    assert str(tmp_path) not in printed(section)  # no machine's folders in the results
    assert "--child" not in (tmp_path / "RESULTS.md").read_text()  # its children record nothing
