"""Memory tools for the OpenAI Agents SDK, run by the SDK's real `Runner` with a scripted model:
``remember(key, text)`` writes a keyed fact (an exact overwrite), ``recall(query)`` reads the
session's memory, and a rollback undoes what a run remembered."""

from __future__ import annotations

import json

import pytest
from agents import Agent, FunctionTool, Runner
from support.agents_sdk import CONFIG, Scripted, call, fresh_id, run, say

from engine import Engine
from engine.integrations.openai_agents import RewindSession, ToolGuard
from engine.integrations.openai_agents.memory import MAX_KEY, memory_tools
from engine.memory.embeddings import HashingEmbedder
from engine.memory.session import MemoryConfig


@pytest.fixture
def mem_engine(store_url):
    return Engine.open(store_url, memory=MemoryConfig(embedder=HashingEmbedder()))


def _outputs(result) -> list[str]:
    return [str(i.output) for i in result.new_items if i.type == "tool_call_output_item"]


def test_the_tools_are_function_tools_named_remember_and_recall(mem_engine):
    tools = memory_tools(mem_engine.session(fresh_id()))
    assert [t.name for t in tools] == ["remember", "recall"]
    assert all(isinstance(t, FunctionTool) for t in tools)
    assert set(tools[0].params_json_schema["properties"]) == {"key", "text"}
    assert set(tools[1].params_json_schema["properties"]) == {"query"}
    with pytest.raises(TypeError):
        memory_tools("not a session")
    with pytest.raises(ValueError):
        memory_tools(mem_engine.session(fresh_id()), k=0)


def test_a_run_remembers_overwrites_by_key_and_recalls(mem_engine):
    session = RewindSession(mem_engine, fresh_id())
    model = Scripted(
        [
            call("remember", {"key": "home_city", "text": "The user lives in Boston."}, 1),
            call("remember", {"key": "home_city", "text": "The user moved to Denver."}, 2),
            call("recall", {"query": "where does the user live?"}, 3),
            say("You live in Denver.", 4),
        ]
    )
    agent = Agent(name="clerk", model=model, tools=memory_tools(session, prefix="user."))
    result = run(Runner.run(agent, "I moved to Denver", session=session, run_config=CONFIG))
    first, second, recalled = _outputs(result)
    assert first == "Remembered 'home_city'."
    assert second == "Remembered 'home_city'; it replaces: The user lives in Boston."
    assert recalled == "- [home_city] The user moved to Denver."
    memory = session.rewind.memory
    assert memory.fact("user.home_city").text == "The user moved to Denver."
    [old] = [m for m in memory.items(include_invalid=True) if not m.valid]
    assert (old.text, old.invalid_by) == ("The user lives in Boston.", "key")


def test_a_rollback_undoes_a_keyed_overwrite(mem_engine):
    session = RewindSession(mem_engine, fresh_id())
    tools = {t.name: t for t in memory_tools(session)}
    model = Scripted(
        [call("remember", {"key": "budget", "text": "The budget is 500 EUR."}, 1), say("ok", 2)]
    )
    agent = Agent(name="clerk", model=model, tools=list(tools.values()))
    run(Runner.run(agent, "budget 500", session=session, run_config=CONFIG))
    snap = session.rewind.snapshot("budget known")
    model.script = [
        call("remember", {"key": "budget", "text": "The budget is 9,999,999 EUR."}, 3),
        say("ok", 4),
    ]
    run(Runner.run(agent, "loop garbage", session=session, run_config=CONFIG))
    assert session.rewind.memory.fact("budget").text == "The budget is 9,999,999 EUR."
    session.rewind.rollback(to=snap, actor="op", reason="the loop made it up", notice=False)
    assert session.rewind.memory.fact("budget").text == "The budget is 500 EUR."
    assert [m.text for m in session.rewind.memory.items()] == ["The budget is 500 EUR."]
    model.script = [call("recall", {"query": "what is the budget"}, 5), say("500", 6)]
    result = run(Runner.run(agent, "budget?", session=session, run_config=CONFIG))
    assert _outputs(result) == ["- [budget] The budget is 500 EUR."]


def test_guarded_memory_tools_are_steps_of_the_session(mem_engine):
    session = RewindSession(mem_engine, fresh_id())
    guard = ToolGuard(session)
    model = Scripted([call("remember", {"key": "k", "text": "a fact"}, 1), say("ok", 2)])
    agent = Agent(name="clerk", model=model, tools=guard.tools(memory_tools(session)))
    run(Runner.run(agent, "remember", session=session, run_config=CONFIG))
    [step] = session.rewind.steps()
    assert step.tool == "remember" and json.loads(json.dumps(step.args)) == {
        "key": "k", "text": "a fact"}
    assert session.rewind.memory.fact("k").text == "a fact"


def test_bad_arguments_get_a_plain_answer_and_write_nothing(mem_engine):
    session = RewindSession(mem_engine, fresh_id())
    model = Scripted(
        [
            call("remember", {"key": "  ", "text": "x"}, 1),
            call("remember", {"key": "k" * (MAX_KEY + 1), "text": "x"}, 2),
            call("remember", {"key": "k", "text": " "}, 3),
            call("recall", {"query": "anything"}, 4),
            say("ok", 5),
        ]
    )
    agent = Agent(name="clerk", model=model, tools=memory_tools(session))
    result = run(Runner.run(agent, "go", session=session, run_config=CONFIG))
    assert _outputs(result) == [
        "Not remembered: the key is empty.",
        f"Not remembered: keys are at most {MAX_KEY} characters.",
        "Not remembered: the text is empty.",
        "Nothing remembered matches.",
    ]
    assert session.rewind.memory.items() == []
