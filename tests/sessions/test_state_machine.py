"""Property test: random append / set_var / remember / snapshot / step / rollback sequences
against a plain in-memory model. After every operation the engine's live state (messages,
variables, memories, live steps, restorable snapshots) equals the model's, on every backend."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
    run_state_machine_as_test,
)

from engine import Engine, NothingToRollBack, SnapshotNotRestorable
from engine.memory.decay import Decay, MemoryPolicy
from engine.memory.embeddings import HashingEmbedder
from engine.memory.session import MemoryConfig
from engine.recovery.notices import TEMPLATES
from engine.store import Retention

KEEP_NAMED, KEEP_STEPS = 3, 4

texts = st.text(alphabet="ab中文 {}:\n", max_size=8)
keys = st.sampled_from(["k1", "k2", "k3"])
values = st.one_of(st.none(), st.integers(-5, 5), texts, st.lists(st.integers(0, 3), max_size=3))


class Model:
    """What a correct engine must show."""

    def __init__(self):
        self.messages: list[dict] = []
        self.variables: dict = {}
        self.head: str | None = None
        self.snapshots: dict[str, dict] = {}  # id -> saved state and flags
        self.order: list[str] = []  # snapshot ids in creation order
        self.steps: list[tuple[int, str]] = []  # live (n, tool)
        self.step_count = 0
        self.memories: dict[str, str] = {}  # id -> text
        self.writes = 0  # live-line writes: a rollback with none after its target is refused
        self.rolled_back = False  # status rolled_back: set by a rollback, cleared by an ok step
        # (tool, failed) of the last step, None after a message, variable or rollback: a step
        # repeating a failed call with nothing written in between takes no snapshot of its own
        self.last_call: tuple[str, bool] | None = None

    def write(self) -> None:
        self.writes += 1

    def save(self, sid: str, kind: str) -> None:
        self.write()
        self.snapshots[sid] = {"writes": self.writes,
            "messages": list(self.messages), "variables": dict(self.variables),
            "steps": list(self.steps), "kind": kind, "live": True, "retired": False,
            "memories": dict(self.memories),
            "next_step": self.step_count + 1,
        }
        self.order.append(sid)
        self.head = sid
        live = [s for s in self.order if self.snapshots[s]["live"]
                and not self.snapshots[s]["retired"] and self.snapshots[s]["kind"] == kind]
        if kind == "manual":
            for old in live[:-KEEP_NAMED]:
                self.snapshots[old]["retired"] = True
        else:
            for old in live:
                if self.snapshots[old]["next_step"] <= self.step_count + 1 - KEEP_STEPS:
                    self.snapshots[old]["retired"] = True

    def restorable(self) -> set[str]:
        return {s for s, v in self.snapshots.items() if v["live"] and not v["retired"]}

    def rollback(self, target: str) -> None:
        saved = self.snapshots[target]
        after = self.order[self.order.index(target) + 1:]
        for sid in after:
            self.snapshots[sid]["live"] = False
        self.messages = list(saved["messages"])
        self.variables = dict(saved["variables"])
        self.steps = list(saved["steps"])
        self.memories = dict(saved["memories"])
        self.head = target
        self.writes = saved["writes"]
        self.rolled_back = True
        self.last_call = None

    def nothing_after(self, target: str) -> bool:
        return self.writes == self.snapshots[target]["writes"]

    def refused(self, target: str) -> bool:
        """A rollback to a restorable `target` is refused when nothing was written after it, or
        when the session stands rolled back and only recovery notices would leave the live line
        (going back again would only take the user's notice away)."""
        saved = self.snapshots[target]
        only_notices = (self.steps == saved["steps"] and all(
            m.get("rewind_notice") for m in self.messages[len(saved["messages"]):]))
        return self.nothing_after(target) or (self.rolled_back and only_notices)


def make_machine(engine: Engine):
    class SessionMachine(RuleBasedStateMachine):
        snaps = Bundle("snaps")

        def __init__(self):
            super().__init__()
            self.s = engine.session(f"sm-{uuid.uuid4().hex}", on_loop="off")
            self.m = Model()

        @rule(role=st.sampled_from(["user", "assistant", "tool"]), content=texts)
        def append(self, role, content):
            self.s.append_message(role, content)
            self.m.messages.append({"role": role, "content": content})
            self.m.write()
            self.m.last_call = None

        @rule(key=keys, value=values)
        def set_var(self, key, value):
            self.s.set_var(key, value)
            self.m.write()
            self.m.last_call = None
            if value is None:
                self.m.variables.pop(key, None)
            else:
                self.m.variables[key] = value

        @rule(target=snaps, label=st.one_of(st.none(), texts))
        def snapshot(self, label):
            sid = self.s.snapshot(label)
            assert sid not in self.m.snapshots
            self.m.save(sid, "manual")
            return sid

        @rule(tool=st.sampled_from(["search", "fetch"]), ok=st.booleans())
        def step(self, tool, ok):
            with self.s.step(tool, {"q": tool}) as call:
                call.ok("r") if ok else call.fail("boom")
            repeat = self.m.last_call == (tool, True)
            assert (call.snapshot_id is None) == repeat
            if not repeat:
                self.m.save(call.snapshot_id, "step")
            self.m.last_call = (tool, not ok)
            self.m.write()
            self.m.step_count += 1
            if ok:
                self.m.rolled_back = False
            assert call.n == self.m.step_count
            self.m.steps.append((call.n, tool))

        @rule(target=snaps, snap=consumes(snaps), notice=st.booleans())
        def rollback(self, snap, notice):
            if snap in self.m.restorable() and not self.m.refused(snap):
                self.s.rollback(to=snap, actor="prop", reason="test", notice=notice)
                self.m.rollback(snap)
                if notice:
                    self.m.messages.append({"role": "assistant", "content": TEMPLATES["en"],
                                            "rewind_notice": True})
                    self.m.write()
            else:
                before = self.s.state()
                refusal = (SnapshotNotRestorable if snap not in self.m.restorable()
                           else NothingToRollBack)
                with pytest.raises(refusal):
                    self.s.rollback(to=snap, actor="prop", reason="test", notice=notice)
                assert self.s.state() == before
            return snap

        @rule()
        def rollback_to_a_step_snapshot(self):
            candidates = [s for s in self.m.restorable() if self.m.snapshots[s]["kind"] == "step"]
            if candidates:
                target = sorted(candidates)[0]
                if self.m.refused(target):
                    with pytest.raises(NothingToRollBack):
                        self.s.rollback(to=target, actor="prop", reason="step", notice=False)
                    return
                self.s.rollback(to=target, actor="prop", reason="step", notice=False)
                self.m.rollback(target)

        @rule(text=st.sampled_from(["rate is 1.08", "user likes tea", "ticket T-1 open"]),
              importance=st.floats(0.2, 1.0))
        def remember(self, text, importance):
            mid = self.s.memory.add(text, importance=importance)
            self.m.memories[mid] = text
            self.m.write()

        @invariant()
        def same_state(self):
            state = self.s.state()
            assert state.messages == self.m.messages
            assert state.variables == self.m.variables
            assert state.head == self.m.head
            live = [(x.n, x.tool) for x in self.s.steps(live_only=True)]
            assert live == self.m.steps
            tree = self.s.tree()
            assert {n.id for n in tree if n.restorable} == self.m.restorable()
            store = self.s._rt.store  # one snapshot by id reads as the whole tree lists it
            assert all(store.snapshot(self.s.id, n.id) == n for n in tree)
            assert {m.id: m.text for m in self.s.memory.items()} == self.m.memories

    return SessionMachine


def test_engine_matches_the_model(engine, request):
    machine = make_machine(engine)
    run_state_machine_as_test(
        machine,
        settings=settings(max_examples=40, stateful_step_count=30, deadline=None,
                          suppress_health_check=list(HealthCheck)),
    )


# Retention and memory rules the model knows; set on the engine after construction.
@pytest.fixture(autouse=True)
def _model_rules(engine):
    engine.config.retention = Retention(keep_snapshots=KEEP_NAMED, keep_step_snapshots=KEEP_STEPS)
    engine.config.memory_config = MemoryConfig(
        embedder=HashingEmbedder(), judge=None,
        policy=MemoryPolicy(capacity=10_000), decay=Decay(half_life_days=3650, min_weight=0.0),
    )
