"""`FleetDocCache`: the one cache of the store's fleet documents (declared freeze, detector
settings, quarantines) each process keeps for about a second."""

from __future__ import annotations

from typing import Any

from engine.runtime import FleetDocCache


class Reads:
    def __init__(self) -> None:
        self.count = 0
        self.docs: dict[str, Any] = {"current": 1}

    def __call__(self) -> dict[str, Any]:
        self.count += 1
        return dict(self.docs)


def test_reads_once_then_reuses_until_told_to_forget():
    reads = Reads()
    cache = FleetDocCache(reads, lambda docs: docs.get("current"), ttl=3600)
    assert (cache.get(), cache.get()) == (1, 1)
    assert reads.count == 1
    reads.docs["current"] = 2
    assert cache.get() == 1  # within the ttl: what this process read last
    cache.forget()
    assert cache.get() == 2 and reads.count == 2
    reads.docs["current"] = 3
    assert cache.refresh() == 3 and cache.get() == 3 and reads.count == 3


def test_a_zero_ttl_reads_every_time():
    reads = Reads()
    cache = FleetDocCache(reads, dict, ttl=0)
    cache.get()
    cache.get()
    assert reads.count == 2


def test_one_cache_per_namespace_and_parse_in_a_runtime(open_engine, tmp_path):
    engine = open_engine(f"sqlite:///{tmp_path}/c.db")
    rt = engine._runtime
    assert rt.fleet_cache("quarantine", dict) is rt.fleet_cache("quarantine", dict)
    assert rt.fleet_cache("quarantine", dict) is not rt.fleet_cache("freeze", dict)
    assert rt.fleet_cache("quarantine", dict).get() == {}
    engine.quarantine("refund_api", actor="alice", reason="broken")
    # the quarantine's own cache (its parse) is refreshed by the change at once
    assert [q.tool for q in engine.quarantines()] == ["refund_api"]
