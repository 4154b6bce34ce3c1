"""The integrations say which model response issued each call (`StepRecord.turn`): LangGraph's
ToolNode the AIMessage holding the tool calls, the Agents SDK guard the model request of the
run; a batch of guesses is then one attempt, and the same failed batch sent again a repeat."""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph.prebuilt", reason="needs the langgraph extra")
pytest.importorskip("agents", reason="needs the openai-agents extra")

from agents import Agent, Model, ModelResponse, Runner, Usage, function_tool  # noqa: E402
from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from support.agents_sdk import CONFIG, call, fresh_id, run, say  # noqa: E402

from engine.integrations.langgraph import RewindToolNode  # noqa: E402
from engine.integrations.openai_agents import ToolGuard, ToolLoopDetected  # noqa: E402


@tool
def get_symbol(name: str) -> str:
    """Look a symbol up in the code base."""
    raise LookupError(f"Symbol '{name}' not found")


def test_langgraph_tool_node_keeps_the_ai_message_id_as_the_turn(engine):
    node = RewindToolNode([get_symbol], engine, handle_tool_errors=True)
    builder = StateGraph(MessagesState)
    builder.add_node("tools", node)
    builder.add_edge(START, "tools")
    graph = builder.compile()
    guesses = [{"name": "get_symbol", "args": {"name": n}, "id": f"call-{n}"}
               for n in ("parse_config", "load_config", "read_settings")]
    message = AIMessage("", id="run-7f3a-0", tool_calls=guesses)
    graph.invoke({"messages": [message]}, {"configurable": {"thread_id": "lg-batch"}})
    steps = engine.get_session("lg-batch").steps()
    assert [s.turn for s in steps] == ["run-7f3a-0"] * 3
    assert [s.status for s in steps] == ["error"] * 3
    assert engine.get_session("lg-batch").info().last_verdict is None  # one failed attempt


@function_tool
def find_symbol(name: str) -> str:
    """Look a symbol up in the code base."""
    raise LookupError(f"Symbol '{name}' not found")


class Batches(Model):
    """A model that answers each request with several tool calls at once (parallel calls),
    counting its requests as a real provider does."""

    def __init__(self, script: list[list]):
        self.script = list(script)

    async def get_response(self, *args, **kwargs) -> ModelResponse:
        n = len(self.script)
        outputs = [make(n * 10 + k) for k, make in enumerate(self.script.pop(0))]
        return ModelResponse(output=outputs, usage=Usage(requests=1), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


def test_agents_sdk_guard_judges_one_response_as_one_attempt_and_a_repeated_batch_as_a_loop(
        engine):
    sid = fresh_id()
    session = engine.session(sid)
    guess = lambda name: lambda n: call("find_symbol", {"name": name}, n)  # noqa: E731
    batch = [guess("Settings._setup"), guess("LazySettings.configure")]
    model = Batches([batch, batch, [lambda n: say("I could not find it.", n)]])
    agent = ToolGuard(session).agent(Agent(name="search", model=model, tools=[find_symbol]))

    async def scenario():
        with pytest.raises(ToolLoopDetected) as caught:
            await Runner.run(agent, "where is the settings loader?", run_config=CONFIG)
        return caught.value

    loop = run(scenario())
    assert loop.verdict.rule == "exact_repeat" and loop.verdict.details["batch"] == 2
    turns = [s.turn for s in session.steps()]
    assert len(turns) == 4 and None not in turns
    assert turns[0] == turns[1] != turns[2] == turns[3]


def test_otlp_tool_spans_carry_the_response_id_as_the_turn():
    from engine.integrations.otlp.conventions import classify
    from engine.integrations.otlp.decode import SpanData

    def tool_span(n: int, **extra: str) -> SpanData:
        attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_symbol",
                 "gen_ai.tool.call.arguments": '{"name": "Config"}',
                 "gen_ai.conversation.id": "conv-1", **extra}
        return SpanData("ab" * 16, f"{n:016x}", "execute_tool get_symbol", n, n + 1, attrs)

    action = classify(tool_span(1, **{"gen_ai.response.id": "chatcmpl-42"}))
    assert action is not None and action.turn == "chatcmpl-42"
    unknown = classify(tool_span(2))
    assert unknown is not None and unknown.turn is None
    odd = classify(tool_span(3, **{"gen_ai.response.id": "r" * 500}))
    assert odd is not None and odd.turn is not None and odd.turn.startswith("otlp-")
    assert len(odd.turn) <= 200
