"""The OpenAI Agents SDK integration with the SDK's real `Runner` and a scripted model of our own
(no network, no API key): the session protocol on Rewind, a failing tool caught as a loop, the
next run clean with the notice, the session visible like any other; and the example end to end
on every store backend."""

from __future__ import annotations

import asyncio
import importlib.util
import os

import pytest
from agents import (  # noqa: E402
    Agent,
    AgentsException,
    Runner,
    SessionABC,
    function_tool,
)
from agents.memory import Session as SDKSession  # noqa: E402
from support.agents_sdk import (
    CHARGES,
    CONFIG,
    Scripted,
    call,
    charge,
    fetch_invoice,
    fresh_id,
    lookup,
    run,
    say,
)
from support.paths import ROOT

from engine import Engine, LoopDetected  # noqa: E402
from engine.integrations.openai_agents import (  # noqa: E402
    RewindSession,
    ToolGuard,
    ToolLoopDetected,
)
from engine.recovery.notices import NOTICE_FLAG, TEMPLATES  # noqa: E402

EXAMPLE = os.path.join(
    str(ROOT), "examples", "openai_agents_loop.py"
)
# -- the session protocol -----------------------------------------------------------------------
def test_session_satisfies_the_sdk_protocol(engine):
    session = RewindSession(engine, fresh_id())
    assert isinstance(session, SDKSession)
    for name in ("get_items", "add_items", "pop_item", "clear_session"):
        assert asyncio.iscoroutinefunction(getattr(session, name))
        assert asyncio.iscoroutinefunction(getattr(SessionABC, name))


def test_items_round_trip_pop_and_clear(engine):
    sid = fresh_id()
    session = RewindSession(engine, sid)
    items = [
        {"role": "user", "content": "hello"},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "lookup",
            "arguments": '{"order": "A-1"}',
        },
        {"type": "function_call_output", "call_id": "c1", "output": "shipped"},
        {
            "type": "message",
            "role": "assistant",
            "id": "m1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "It shipped.", "annotations": []}],
        },
    ]

    async def scenario():
        await session.add_items(items)
        assert await session.get_items() == items
        assert await session.get_items(limit=2) == items[-2:]
        assert await session.pop_item() == items[-1]
        assert await session.get_items() == items[:-1]
        await session.clear_session()
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.add_items([{"role": "user", "content": "again"}])
        return await session.get_items()

    assert run(scenario()) == [{"role": "user", "content": "again"}]
    # Rewind's history keeps everything (append-only); the console reads it like any session
    live = engine.get_session(sid).state().messages
    assert [m["role"] for m in live] == ["user", "assistant", "tool", "assistant", "user"]
    assert live[1]["content"] == 'lookup({"order": "A-1"})'
    assert live[3]["content"] == "It shipped."
    assert sid in [s.id for s in engine.sessions()]


def test_a_rollback_restores_popped_items(engine):
    sid = fresh_id()
    session = RewindSession(engine, sid)

    async def scenario():
        await session.add_items([{"role": "user", "content": "one"}])
        snap = session.rewind.snapshot("before pop")
        await session.add_items([{"role": "user", "content": "two"}])
        await session.pop_item()
        await session.pop_item()
        assert await session.get_items() == []
        engine.rollback(sid, to=snap, actor="alice", reason="undo", notice=False)
        return await session.get_items()

    assert run(scenario()) == [{"role": "user", "content": "one"}]


# -- the guard with the real Runner -------------------------------------------------------------
def test_a_failing_tool_is_caught_and_the_next_run_starts_clean(engine):
    sid = fresh_id()
    session = RewindSession(engine, sid, meta={"tenant": "acme", "scenario": "billing"})
    retry = lambda n: call("fetch_invoice", {"invoice": "INV-7"}, n)  # noqa: E731
    model = Scripted([retry] * 3 + [lambda n: say("Sorry, billing is down.", n)])
    agent = ToolGuard(session).agent(
        Agent(name="billing", model=model, tools=[fetch_invoice, lookup])
    )

    async def scenario():
        with pytest.raises(ToolLoopDetected) as caught:
            await Runner.run(agent, "show invoice INV-7", session=session, run_config=CONFIG)
        result = await Runner.run(agent, "ok, anything else?", session=session, run_config=CONFIG)
        return caught.value, result

    loop, result = run(scenario())
    # a clear exception: Rewind's LoopDetected and the SDK's own exception family
    assert isinstance(loop, LoopDetected) and isinstance(loop, AgentsException)
    assert loop.tool == "fetch_invoice"
    assert loop.verdict.rule == "exact_repeat"
    assert "ConnectionError: upstream 503 for INV-7" in loop.verdict.explanation
    assert loop.rollback is not None and loop.rollback.actor == "rewind"
    assert result.final_output == "Sorry, billing is down."

    # the next run saw the user's first message, the notice and the new message: no loop items
    next_input = model.inputs[3]
    assert next_input == [
        {"role": "user", "content": "show invoice INV-7"},
        {"role": "assistant", "content": TEMPLATES["en"]},
        {"role": "user", "content": "ok, anything else?"},
    ]

    # the steps: three failed calls with the tool's own error, on the abandoned branch
    rewind = engine.get_session(sid)
    steps = rewind.steps()
    assert [(s.tool, s.status, s.on_live_line) for s in steps] == [
        ("fetch_invoice", "error", False)
    ] * 3
    assert {s.error for s in steps} == {"ConnectionError: upstream 503 for INV-7"}
    assert steps[0].args == {"invoice": "INV-7"}
    assert steps[-1].verdict["evidence_steps"] == [1, 2, 3]

    # the session shows like any other: listed, counted, audited
    info = next(s for s in engine.sessions() if s.id == sid)
    assert info.tenant == "acme" and info.loops == 1 and info.rollbacks == 1
    assert [a.actor for a in engine.audit(session=sid, action="rollback")] == ["rewind"]
    labels = [n.label for n in rewind.tree()]
    assert labels.count("run start") == 2 and "run end" in labels


def test_the_notice_is_the_last_item_after_a_loop(engine):
    sid = fresh_id()
    session = RewindSession(engine, sid)
    model = Scripted([lambda n: call("fetch_invoice", {"invoice": "X"}, n)] * 3)
    agent = session.guard(Agent(name="billing", model=model, tools=[fetch_invoice]))

    async def scenario():
        with pytest.raises(LoopDetected):
            await Runner.run(agent, "invoice X please", session=session, run_config=CONFIG)
        return await session.get_items()

    items = run(scenario())
    assert items == [
        {"role": "user", "content": "invoice X please"},
        {"role": "assistant", "content": TEMPLATES["en"]},
    ]
    live = engine.get_session(sid).state().messages
    assert live[-1].get(NOTICE_FLAG) is True


def test_side_effects_and_compensations_are_declared_per_tool(engine):
    sid = fresh_id()
    session = RewindSession(engine, sid)
    refunds: list[dict] = []
    engine.compensations.register("refund", lambda args, key: refunds.append(args))
    guard = ToolGuard(session, side_effects={"charge": lambda a: ("refund", a)})
    model = Scripted([lambda n: call("charge", {"order": "A-9"}, n), lambda n: say("Charged.", n)])
    agent = guard.agent(Agent(name="shop", model=model, tools=[charge, lookup]))
    CHARGES.clear()
    result = run(Runner.run(agent, "charge A-9", session=session, run_config=CONFIG))
    assert result.final_output == "Charged." and CHARGES == ["A-9"]
    step = engine.get_session(sid).steps()[-1]
    assert step.tool == "charge" and step.side_effect and step.status == "ok"
    assert step.compensation == ["refund", {"order": "A-9"}] or step.compensation == (
        "refund",
        {"order": "A-9"},
    )

    # an operator rolls the whole run back: the charge is refunded once
    first = next(n for n in engine.get_session(sid).tree() if n.label == "run start")
    engine.rollback(sid, to=first.id, actor="alice", reason="wrong customer")
    engine.compensations.run()
    assert refunds == [{"order": "A-9"}]


def test_a_rollback_during_a_run_drops_the_runs_late_items(engine):
    """An operator rolls the session back while a run is in flight: what the run stores after
    that is built on the abandoned context and does not reach the next run."""
    sid = fresh_id()
    session = RewindSession(engine, sid)

    @function_tool
    def slow_lookup(order: str) -> str:
        """Look up, while an operator rolls the session back."""
        engine.rollback(
            sid,
            to=engine.get_session(sid).tree()[0].id,
            actor="bob",
            reason="bad answers",
            notice="Sorry, we reset this chat.",
        )
        return "found"

    model = Scripted(
        [lambda n: call("slow_lookup", {"order": "B-2"}, n), lambda n: say("B-2 found.", n)]
    )
    agent = ToolGuard(session).agent(Agent(name="shop", model=model, tools=[slow_lookup]))

    async def scenario():
        await session.add_items([{"role": "user", "content": "earlier"}])
        await Runner.run(agent, "find B-2", session=session, run_config=CONFIG)
        return await session.get_items()

    items = run(scenario())
    assert items[-1] == {"role": "assistant", "content": "Sorry, we reset this chat."}
    assert not any(i.get("type") == "function_call" for i in items)


def test_a_healthy_run_passes_through_unchanged(engine):
    sid = fresh_id()
    session = RewindSession(engine, sid)
    model = Scripted(
        [lambda n: call("lookup", {"order": "C-3"}, n), lambda n: say("C-3 shipped.", n)]
    )
    agent = ToolGuard(session).agent(Agent(name="shop", model=model, tools=[lookup]))
    result = run(Runner.run(agent, "where is C-3?", session=session, run_config=CONFIG))
    assert result.final_output == "C-3 shipped."
    # the tool's output reached the model unchanged
    assert {
        "type": "function_call_output",
        "call_id": "call_1",
        "output": "order C-3: shipped",
    }.items() <= model.inputs[1][-1].items()
    steps = engine.get_session(sid).steps()
    assert [(s.tool, s.status, s.args) for s in steps] == [("lookup", "ok", {"order": "C-3"})]


# -- the example ----------------------------------------------------------------------------------
def load_example():
    spec = importlib.util.spec_from_file_location("openai_agents_loop_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_runs_on_every_store(engine):
    example = load_example()
    sid = fresh_id()
    lines: list[str] = []
    summary = example.run(engine, sid, out=lines.append)
    assert summary["loop"] is not None and summary["loop"].verdict.rule == "exact_repeat"
    assert summary["answer"] == example.ANSWER
    assert summary["next_input"][:2] == [
        {"role": "user", "content": "crop the total out of my receipt"},
        {"role": "assistant", "content": TEMPLATES["en"]},
    ]
    assert not any(i.get("name") == "image_crop" for i in summary["items"])
    assert any("LoopDetected (exact_repeat)" in line for line in lines)


def test_example_main(tmp_path, capsys):
    example = load_example()
    assert example.main([f"sqlite:///{tmp_path}/ex.db", "--session", "ex-main"]) == 0
    out = capsys.readouterr().out
    assert "LoopDetected" in out and "ex-main" in out
    with Engine.open(f"sqlite:///{tmp_path}/ex.db") as engine:
        assert len(engine.get_session("ex-main").steps()) == 4


def test_a_quarantined_tool_is_not_called(engine, monkeypatch):
    """The seam for fleet quarantines: when the engine raises ToolQuarantined as a step
    begins, the model gets a plain refusal as the tool's output and the tool does not run."""
    from engine import errors
    from engine.sessions.session import StepCall

    class ToolQuarantined(errors.RewindError):
        pass

    monkeypatch.setattr(errors, "ToolQuarantined", ToolQuarantined, raising=False)
    original_enter = StepCall.__enter__

    def enter(self):
        if self.tool == "charge":
            raise ToolQuarantined("charge is quarantined fleet-wide")
        return original_enter(self)

    monkeypatch.setattr(StepCall, "__enter__", enter)
    session = RewindSession(engine, fresh_id())
    model = Scripted(
        [lambda n: call("charge", {"order": "Q-1"}, n), lambda n: say("I could not charge.", n)]
    )
    agent = ToolGuard(session).agent(Agent(name="shop", model=model, tools=[charge]))
    CHARGES.clear()
    result = run(Runner.run(agent, "charge Q-1", session=session, run_config=CONFIG))
    assert result.final_output == "I could not charge." and CHARGES == []
    output = model.inputs[1][-1]
    assert output["type"] == "function_call_output"
    assert output["output"].startswith("Rewind: the tool charge is quarantined")


def test_a_call_cut_by_the_tools_timeout_is_recorded(engine):
    """The SDK cancels a call that outlives its tool's timeout_seconds: the step still ends."""

    @function_tool(timeout=0.05)
    async def slow(order: str) -> str:
        """Take too long."""
        await asyncio.sleep(5)
        return "late"

    sid = fresh_id()
    session = RewindSession(engine, sid)
    model = Scripted([lambda n: call("slow", {"order": "T-1"}, n), lambda n: say("Timed out.", n)])
    agent = ToolGuard(session).agent(Agent(name="shop", model=model, tools=[slow]))
    result = run(Runner.run(agent, "slow please", session=session, run_config=CONFIG))
    assert result.final_output == "Timed out."
    steps = engine.get_session(sid).steps()
    assert [(s.tool, s.status) for s in steps] == [("slow", "error")]
    assert "did not finish" in steps[0].error
