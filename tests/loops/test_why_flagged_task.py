""""Why flagged" replays the flagged task, not the whole session: from where that task began
(a user message, or a step the runtime marked) through the flagged step, earlier tasks added back
only when the flag rests on them; and the answer is remembered per (session, flagged step), so
asking again while steps keep arriving replays nothing."""

from __future__ import annotations

import pytest
from support.keep_stepping import keep_stepping  # noqa: F401 - used by the marker

from engine import Engine
from engine.fleet.queries import session_history
from engine.loops import detector as detector_module
from engine.loops.replay import first_flag, smallest_change

pytestmark = pytest.mark.usefixtures("keep_stepping")

EARLY_STEPS = 600


@pytest.fixture
def observed(monkeypatch):
    """How many steps every detector of this process has been shown."""
    count = [0]
    original = detector_module.LoopDetector.observe

    def counting(self, step):
        count[0] += 1
        return original(self, step)

    monkeypatch.setattr(detector_module.LoopDetector, "observe", counting)
    return count


def long_then_looping(engine: Engine, sid: str, retries_before: int = 0):
    """EARLY_STEPS healthy steps in early tasks, then a task whose tool fails the same way until
    flagged. `retries_before`: failures already sent at the end of the previous task."""
    s = engine.session(sid, on_loop="flag")
    for i in range(EARLY_STEPS):
        if i % 100 == 0 and i:
            s.new_task()
        with s.step("search", {"q": f"item {i}"}) as call:
            call.ok({"hits": i})
    for _ in range(retries_before):
        with s.step("image_crop", {"x": 10}) as call:
            call.fail("invalid slice")
    s.new_task()
    for _ in range(6):
        with s.step("image_crop", {"x": 10}) as call:
            call.fail("invalid slice")
        if s.info().status == "looping":
            break
    return s


def test_only_the_flagged_task_is_replayed_and_the_answer_is_the_same(tmp_path, observed):
    with Engine.open(f"sqlite:///{tmp_path}/r.db") as engine:
        long_then_looping(engine, "long")
        records = session_history(engine._runtime, "long")
        observed[0] = 0
        found = engine.fleet.why_flagged("long")
        replayed = observed[0]
        assert found is not None and found.flag == first_flag(records, None)
        assert found.flag.rule == "exact_repeat"
        whole = smallest_change(records, None, found.flag.step)
        assert (found.change.field, found.change.before, found.change.after) == (
            whole.field, whole.before, whole.after)
        # one pass to find the first flag, then the flagged task: not dozens of whole replays
        assert replayed < 2 * EARLY_STEPS


def test_a_loop_that_began_in_the_task_before_is_replayed_from_that_task(tmp_path):
    with Engine.open(f"sqlite:///{tmp_path}/r.db") as engine:
        long_then_looping(engine, "across", retries_before=2)  # a retry across tasks
        records = session_history(engine._runtime, "across")
        found = engine.fleet.why_flagged("across")
        assert found is not None and found.flag == first_flag(records, None)
        exact = next(r for r in found.readings if r.rule == "exact_repeat")
        assert exact.alone == found.flag  # the evidence before the task start was replayed


def test_asking_again_replays_nothing_even_while_steps_arrive(tmp_path, observed):
    with Engine.open(f"sqlite:///{tmp_path}/r.db") as engine:
        s = long_then_looping(engine, "cached")
        first = engine.fleet.why_flagged("cached")
        s.new_task()
        with s.step("search", {"q": "later"}) as call:  # the session moves on
            call.ok({"hits": 0})
        observed[0] = 0
        assert engine.fleet.why_flagged("cached") == first
        assert engine.fleet.why_flagged("cached", step=first.flag.step) == first
        assert observed[0] == 0
