"""The OpenAI Agents SDK tool guard under a real fleet quarantine (not the seam's stand-in)."""

from __future__ import annotations

from agents import Agent, Runner  # noqa: E402
from support.agents_sdk import (  # noqa: E402
    CHARGES,
    CONFIG,
    Scripted,
    call,
    charge,
    fresh_id,
    run,
    say,
)

from engine.integrations.openai_agents import RewindSession, ToolGuard  # noqa: E402


def test_a_quarantined_tool_is_refused_to_the_model(engine):
    q = engine.quarantine("charge", actor="alice", reason="the payment provider is down")
    session = RewindSession(engine, fresh_id())
    model = Scripted(
        [lambda n: call("charge", {"order": "Q-1"}, n), lambda n: say("I could not charge.", n)]
    )
    agent = ToolGuard(session).agent(Agent(name="shop", model=model, tools=[charge]))
    CHARGES.clear()
    result = run(Runner.run(agent, "charge Q-1", session=session, run_config=CONFIG))
    assert result.final_output == "I could not charge." and CHARGES == []
    output = model.inputs[1][-1]["output"]
    assert output.startswith("Rewind: the tool charge is quarantined")
    assert "the payment provider is down" in output and q.id in output
