"""`Session.record_steps`, the batch path of watched steps: whatever the batches, the store holds
the same steps, verdicts, session summary and feed events as ``with s.step(...)`` one after the
other, and the detector gives the same verdicts, on every store."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import Engine, StepError

NOW = 1_700_000_000.0
TOOLS = ("search", "crop", "lookup")
ARGS = ({"q": 1}, {"q": 2}, {"x": [1, 2]}, {}, {"order": "A-1", "n": 1.5})
RESULTS = ("same", {"hits": 3}, None, [1, 2, 3])

Spec = tuple[str, dict, bool, object]


def _fixed_clock() -> float:
    return NOW


def _one_by_one(s, specs: list[Spec]) -> list:
    verdicts = []
    for tool, args, ok, result in specs:
        with s.step(tool, args, snapshot=False) as call:
            call.ok(result) if ok else call.fail(f"HTTP 500 from {tool}")
        verdicts.append((call.n, call.verdict, call.policy))
    return verdicts


def _batched(s, specs: list[Spec], cuts: list[int]) -> list:
    verdicts = []
    bounds = sorted({0, len(specs), *(c for c in cuts if 0 < c < len(specs))})
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        calls = []
        for tool, args, ok, result in specs[lo:hi]:
            call = s.step(tool, args, snapshot=False)
            call.ok(result) if ok else call.fail(f"HTTP 500 from {tool}")
            calls.append(call)
        for call in s.record_steps(calls):
            verdicts.append((call.n, call.verdict, call.policy))
    return verdicts


def _stored(engine: Engine, sid: str) -> tuple:
    info = engine.session_info(sid)
    assert info is not None
    summary = dataclasses.replace(info, id="")
    events = [(e.type, e.data) for e in engine.store.events(session=sid)]
    return engine.store.steps(sid), summary, events


def _compare(engine: Engine, specs: list[Spec], cuts: list[int], key: str,
             policy: str = "flag") -> None:
    one = engine.session(f"one-{key}", on_loop=policy)
    one.holds_on_loops = False  # as the batch path, it only watches: nothing waits for on-call
    batch = engine.session(f"batch-{key}", on_loop=policy)
    assert _one_by_one(one, specs) == _batched(batch, specs, cuts)
    assert _stored(engine, one.id) == _stored(engine, batch.id)


def test_a_loop_is_flagged_the_same_in_one_batch_or_step_by_step(store_url, open_engine):
    engine = open_engine(store_url, clock=_fixed_clock)
    specs: list[Spec] = [("search", {"q": 1}, True, "same")] * 6
    specs += [("crop", {"x": i % 2}, False, None) for i in range(8)]
    specs += [("lookup", {"order": f"A-{i}"}, True, f"order {i}") for i in range(5)]
    _compare(engine, specs, [], "one-batch")
    _compare(engine, specs, [3, 7, 8, 15], "several")
    flagged = [r for r in engine.store.steps("batch-one-batch") if r.verdict]
    assert flagged and all(r.verdict["policy"] == "flag" for r in flagged)
    info = engine.session_info("batch-one-batch")
    assert info is not None and info.loops == len(flagged) and info.status == "healthy"


def test_policy_off_stores_no_verdict_like_the_one_by_one_path(store_url, open_engine):
    engine = open_engine(store_url, clock=_fixed_clock)
    specs: list[Spec] = [("search", {"q": 1}, True, "same")] * 8
    _compare(engine, specs, [4], "off", policy="off")
    assert not any(r.verdict for r in engine.store.steps("batch-off"))


def test_side_effects_and_compensations_are_stored_as_step_by_step(store_url, open_engine):
    engine = open_engine(store_url, clock=_fixed_clock)
    results = []
    for mode in ("one", "batch"):
        s = engine.session(f"{mode}-effects", on_loop="flag")
        calls = []
        for i, ok in enumerate((True, False)):
            call = s.step("refund", {"order": i}, side_effect=True,
                          compensation=("refund.undo", {"order": i}), snapshot=False)
            if mode == "one":
                with call:
                    call.ok("done") if ok else call.fail("no")
            else:
                call.ok("done") if ok else call.fail("no")
                calls.append(call)
        if calls:
            s.record_steps(calls)
        results.append(_stored(engine, s.id))
    assert results[0] == results[1]
    # a rollback over them queues the compensation of the one that happened, on both
    for mode in ("one", "batch"):
        s = engine.session(f"{mode}-effects")
        with s.step("search", {"q": "after"}) as call:
            call.ok()
    assert [r.compensation for r in engine.store.steps("batch-effects")][:2] == [
        ("refund.undo", {"order": 0}), ("refund.undo", {"order": 1})]


def test_a_quarantined_tool_is_recorded_as_refused_without_raising(store_url, open_engine):
    engine = open_engine(store_url, clock=_fixed_clock)
    engine.quarantine("crop", actor="alice", reason="broken")
    one = engine.session("one-q", on_loop="flag")
    refused_one = []
    for tool in ("search", "crop", "search"):
        try:
            with one.step(tool, {"q": 1}, snapshot=False) as call:
                call.ok("r")
        except Exception as exc:  # noqa: BLE001 - ToolQuarantined, as the with block raises it
            refused_one.append(type(exc).__name__)
    batch = engine.session("batch-q", on_loop="flag")
    calls = []
    for tool in ("search", "crop", "search"):
        call = batch.step(tool, {"q": 1}, snapshot=False)
        call.ok("r")
        calls.append(call)
    batch.record_steps(calls)
    assert refused_one == ["ToolQuarantined"]
    assert [c.refused is not None for c in calls] == [False, True, False]
    assert calls[1].verdict is None
    assert _stored(engine, "one-q") == _stored(engine, "batch-q")


def test_a_batch_after_a_rollback_is_judged_from_the_rolled_back_line(store_url, open_engine):
    engine = open_engine(store_url, clock=_fixed_clock)
    s = engine.session("rolled", on_loop="flag")
    target = s.snapshot("start")
    watcher = engine.session("rolled", on_loop="flag")
    calls = [s.step("search", {"q": 1}, snapshot=False) for _ in range(3)]
    for call in calls:
        call.ok("same")
    watcher.record_steps(calls[:0])  # nothing to record: no write
    s.record_steps(calls)
    s.rollback(to=target, actor="alice", reason="test", notice=False)
    more = [watcher.step("search", {"q": 1}, snapshot=False) for _ in range(2)]
    for call in more:
        call.ok("same")
    watcher.record_steps(more)
    assert [c.n for c in more] == [4, 5]
    assert all(c.verdict is not None and not c.verdict.looping for c in more)


def test_documents_go_with_the_steps_in_one_write_and_never_without_them(store_url,
                                                                          open_engine):
    engine = open_engine(store_url, clock=_fixed_clock)
    s = engine.session("with-docs", on_loop="flag")
    engine.documents.put("with-docs", "watch", {"old": 1, "gone": 2})
    calls = [s.step("search", {"q": i}, snapshot=False) for i in range(3)]
    for call in calls:
        call.ok("r")
    s.record_steps(calls, documents=("watch", {"ids": "AAAA", "gone": None}))
    assert [c.n for c in calls] == [1, 2, 3]
    assert engine.documents.get("with-docs", "watch", ["old", "ids", "gone"]) == {
        "old": 1, "ids": "AAAA"}
    # The store writes neither the steps nor the documents when the session moved meanwhile.
    store = engine.store
    info = engine.session_info("with-docs")
    assert info is not None
    start = {"tool": "search", "args": "{}", "fingerprint": "f"}
    stale = (info.steps - 1, info.epoch)
    assert store.record_steps("with-docs", [(start, {"status": "ok"})], stale, NOW,
                              ("watch", {"ids": "BBBB"})) is None
    assert engine.documents.get("with-docs", "watch", ["ids"]) == {"ids": "AAAA"}
    assert len(s.steps()) == 3
    # No calls: the documents alone, still checked as put_documents checks them.
    s.record_steps([], documents=("watch", {"ids": "CCCC"}))
    assert engine.documents.get("with-docs", "watch", ["ids"]) == {"ids": "CCCC"}
    with pytest.raises(ValueError):
        s.record_steps([], documents=("not a namespace", {"ids": 1}))


def test_record_steps_refuses_what_it_cannot_do(engine):
    acting = engine.session("acting")  # the default policy rolls back
    call = acting.step("search", {"q": 1}, snapshot=False)
    call.ok()
    with pytest.raises(StepError):
        acting.record_steps([call])
    s = engine.session("watched", on_loop="flag")
    unfinished = s.step("search", {"q": 1}, snapshot=False)
    with pytest.raises(StepError):
        s.record_steps([unfinished])
    snapshotting = s.step("search", {"q": 1})
    snapshotting.ok()
    with pytest.raises(StepError):
        s.record_steps([snapshotting])
    with pytest.raises(StepError):
        s.record_steps([call])  # another handle's call
    assert s.steps() == []


SPECS = st.lists(
    st.tuples(st.sampled_from(TOOLS), st.sampled_from(ARGS), st.booleans(),
              st.sampled_from(RESULTS)),
    max_size=40,
)


@pytest.mark.parametrize("store", ["sqlite-memory", pytest.param("redis", marks=pytest.mark.redis)])
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=SPECS, cuts=st.lists(st.integers(0, 40), max_size=5),
       policy=st.sampled_from(["flag", "off"]))
def test_any_batching_gives_the_one_by_one_verdicts_and_steps(store, specs, cuts, policy,
                                                              batch_engines):
    engine = batch_engines(store)
    key = f"{len(batch_engines.keys)}"
    batch_engines.keys.append(key)
    _compare(engine, specs, cuts, key, policy)


@pytest.fixture(scope="module")
def batch_engines(tmp_path_factory):
    """One engine per store for the property test (each example uses sessions of its own)."""
    engines: dict[str, Engine] = {}

    def get(name: str) -> Engine:
        if name not in engines:
            if name == "redis":
                from support.redis_servers import fresh_prefix, single_server

                url = single_server().url(prefix=fresh_prefix())
            else:
                url = "sqlite:///:memory:"
            engines[name] = Engine.open(url, clock=_fixed_clock)
        return engines[name]

    get.keys = []  # type: ignore[attr-defined]
    yield get
    for engine in engines.values():
        engine.close()
