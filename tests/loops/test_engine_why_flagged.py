"""`Engine.fleet.why_flagged`: why a session was flagged, from its stored steps replayed under the
settings that flagged it: the flagged step and rule, what each rule (in the detector's order)
looks for, its settings in force and its first flag alone, and the smallest change of one setting
(the same as `engine.loops.replay.smallest_change`). The console's "Why flagged" words this
answer."""

from __future__ import annotations

import pytest
from support.fleet import LOOPING, seed_looping

from engine import Engine, UnknownSession, WhyFlagged
from engine.fleet.queries import session_history
from engine.loops.detector import DetectorConfig
from engine.loops.replay import LOOKS_FOR, first_flag, smallest_change
from engine.loops.rules import REGISTRY


@pytest.fixture()
def engine(tmp_path):
    with Engine.open(f"sqlite:///{tmp_path}/rewind.db") as engine:
        seed_looping(engine)
        healthy = engine.session("healthy")
        for n in range(3):
            with healthy.step("lookup_order", {"order": f"A-{n}"}) as call:
                call.ok({"order": f"A-{n}"})
        yield engine


def test_a_looping_session_says_which_rule_what_each_saw_and_the_smallest_change(engine):
    found = engine.fleet.why_flagged(LOOPING)
    assert isinstance(found, WhyFlagged) and found.session == LOOPING
    records = session_history(engine._runtime, LOOPING)
    assert found.flag == first_flag(records, None)
    assert found.flag.rule == engine.session_info(LOOPING).last_verdict["rule"]
    assert [r.rule for r in found.readings] == [r.id for r in REGISTRY]  # the detector's order
    defaults = DetectorConfig()
    for reading, rule in zip(found.readings, REGISTRY, strict=True):
        assert reading.looks_for == LOOKS_FOR[rule.id]
        assert reading.settings == {n: getattr(defaults, n) for n in rule.settings}
    fired = next(r for r in found.readings if r.rule == found.flag.rule)
    assert fired.alone is not None and fired.alone.step <= found.flag.step
    budget = next(r for r in found.readings if r.rule == "step_budget")
    assert budget.alone is None  # a short session stays under its step budget
    expected = smallest_change(records, None, found.flag.step)
    assert found.change == expected and found.change is not None
    assert (found.change.field, found.change.before) == ("repeat_threshold", 3)


def test_it_replays_under_the_settings_the_verdict_recorded(engine):
    engine.fleet.declare_detector({"repeat_threshold": 4}, actor="olivia",
                                  reason="fewer false alarms")
    seed_looping(engine, "after-declare")
    found = engine.fleet.why_flagged("after-declare")
    assert found is not None and found.detector == {"repeat_threshold": 4}
    exact = next(r for r in found.readings if r.rule == "exact_repeat")
    assert exact.settings == {
        "repeat_threshold": 4, "user_repeat_threshold": 2, "user_repeat_failures": False
    }
    assert found.change is not None and found.change.before == 4


def test_an_earlier_step_that_was_not_flagged_and_a_healthy_session_give_none(engine):
    assert engine.fleet.why_flagged("healthy") is None
    assert engine.fleet.why_flagged(LOOPING, step=1) is None


def test_an_unknown_session_is_refused(engine):
    with pytest.raises(UnknownSession):
        engine.fleet.why_flagged("nobody")
