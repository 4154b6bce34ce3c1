"""Property test: agents stepping while an operator rolls the session back, interleaved.

Two agent handles (their own `Engine` objects on one store, as two processes would be) open and
close guarded steps in any interleaving, side effects included, while an operator rolls the
session back between, during and after them. After every operation:

- every step is either on the live line or on a branch the session lists, never both; a late
  step (begun before a rollback, ended after) is never on the live line, and the agent's handle
  says it was late exactly when the store does;
- the live line's steps are in step order, every step number is used once;
- the rollback count, the epoch and the audit agree with the rollbacks that went through;
- a side effect that happened off the live line (abandoned by a rollback, or late) has exactly
  one compensation queued; none is queued for a side effect still on the live line.
"""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from engine import Engine, NothingToRollBack, SnapshotNotRestorable

AGENTS = (0, 1)


def make_machine(engine: Engine):
    class Interleavings(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.sid = f"interleaved-{uuid.uuid4().hex[:8]}"  # a fresh session per example
            self.operator = engine.session(self.sid, on_loop="flag")
            self.agents = [Engine(engine.store, on_loop="flag").get_session(self.sid)
                           for _ in AGENTS]
            for handle in (self.operator, *self.agents):  # agents that go on after a flag
                handle.holds_on_loops = False
            self.open: dict[int, tuple] = {}  # agent -> (cm, call, rollbacks when it began)
            self.late: dict[int, bool] = {}  # step n -> late, as the agent's handle said
            self.rollbacks = 0
            self.i = 0

        @precondition(lambda self: len(self.open) < len(AGENTS))
        @rule(agent=st.sampled_from(AGENTS), effect=st.booleans())
        def begin(self, agent, effect):
            if agent in self.open:
                return
            self.i += 1
            cm = self.agents[agent].step(
                "charge" if effect else "lookup", {"i": self.i}, side_effect=effect,
                compensation=("refund", {"i": self.i}) if effect else None)
            call = cm.__enter__()
            self.open[agent] = (cm, call, self.rollbacks)

        @rule(agent=st.sampled_from(AGENTS), ok=st.booleans())
        def end(self, agent, ok):
            if agent not in self.open:
                return
            cm, call, rollbacks_at_begin = self.open.pop(agent)
            call.ok({"done": True}) if ok else call.fail("upstream said no")
            cm.__exit__(None, None, None)
            # late exactly when a rollback went through while the step ran
            assert call.late == (self.rollbacks > rollbacks_at_begin)
            self.late[call.n] = call.late
            if call.late:
                event("a step ended late")

        @rule(agent=st.sampled_from(AGENTS))
        def message(self, agent):
            self.agents[agent].append_message("user", f"go on {self.i}")

        @rule()
        def rollback(self):
            try:
                self.operator.rollback(actor="oncall", reason="interleaved", force=True)
            except (NothingToRollBack, SnapshotNotRestorable):
                return
            self.rollbacks += 1

        @invariant()
        def consistent(self):
            s = self.operator
            info = s.info()
            steps = s.steps()
            branches = {b.id for b in s.branches()}
            assert sorted(r.n for r in steps) == list(range(1, len(steps) + 1))
            live = [r.n for r in steps if r.on_live_line]
            assert live == sorted(live)
            for r in steps:
                assert r.on_live_line == (r.branch is None)
                assert r.on_live_line or r.branch in branches
                if r.late:
                    assert not r.on_live_line
                if r.n in self.late:
                    assert self.late[r.n] == r.late
            assert info.rollbacks == self.rollbacks == info.epoch
            assert len(engine.audit(session=self.sid, action="rollback")) == self.rollbacks
            queued = [c.step for c in engine.compensations(session=self.sid)]
            assert len(queued) == len(set(queued))
            off_line = {r.n for r in steps if r.side_effect and r.status == "ok"
                        and r.compensation and not r.on_live_line}
            assert set(queued) == off_line
            if queued:
                event("a compensation was queued")

        def teardown(self):
            for cm, call, _ in self.open.values():  # leave no step running
                call.fail("teardown")
                cm.__exit__(None, None, None)

    return Interleavings


def test_agents_and_an_operator_interleaved(engine):
    machine = make_machine(engine)
    run_state_machine_as_test(
        machine,
        settings=settings(max_examples=60, stateful_step_count=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.function_scoped_fixture]),
    )
