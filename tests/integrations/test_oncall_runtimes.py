"""Each runtime waits for on-call the way its users expect, under a declared flag freeze: the
LangGraph thread is interrupted and resumed with the decision, the Agents SDK run stops
cleanly and runs again on the same session, the MCP proxy answers a waiting session's calls
itself. Each example runs no tool call after the flag, and finishes after a rollback or a
release (real graph, real Runner with a scripted model, real MCP client, proxy and server)."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from engine import Actor, Engine, LoopWaiting

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))


def _declare_flag_freeze(engine: Engine) -> None:
    now = dt.datetime.now(dt.UTC)
    engine.fleet.declare_freeze(now - dt.timedelta(hours=1), now + dt.timedelta(days=1),
                          name="Holiday freeze", on_loop="flag", actor="alice",
                          reason="holiday")


def _operator(engine: Engine, sid: str, kind: str, seen: dict) -> threading.Thread:
    """A person on call: waits until `sid` waits, notes how many steps it had, decides."""

    def act():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            info = engine.session_info(sid)
            if info is not None and info.waiting:
                break
            time.sleep(0.05)
        else:
            return
        time.sleep(0.3)  # the agent may try more calls meanwhile: none may run
        seen["steps_while_waiting"] = engine.session_info(sid).steps
        seen["flagged_at"] = engine.session_info(sid).last_verdict["evidence_steps"][-1]
        if kind == "release":
            engine.fleet.release(sid, actor="olga", reason="false alarm",
                           note="read the total from the full image")
        elif kind == "rollback":
            engine.rollback(sid, actor=Actor("olga"), reason="back to before the crop")
        else:
            engine.fleet.stop(sid, actor="olga", reason="the crop tool is broken")

    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def frozen(tmp_path, open_engine):
    engine = open_engine(f"sqlite:///{tmp_path}/r.db", freeze=None)
    _declare_flag_freeze(engine)
    return engine


# -- LangGraph ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["release", "rollback", "stop"])
def test_langgraph_example_waits_then_finishes(frozen, kind):
    pytest.importorskip("langgraph")
    import langgraph_loop

    seen: dict = {}
    operator = _operator(frozen, "receipt-42", kind, seen)
    lines: list[str] = []
    summary = langgraph_loop.run(frozen, out=lines.append, wait=120)
    operator.join(timeout=10)
    assert seen["steps_while_waiting"] == seen["flagged_at"] == 3  # no call after the flag
    assert any("interrupted, waiting for on-call" in line for line in lines)
    assert summary["decision"].kind == {"release": "released", "rollback": "rolled_back",
                                        "stop": "stopped"}[kind]
    info = summary["session"]
    if kind == "stop":
        assert info.status == "stopped" and info.steps == 3
        return
    assert summary["messages"][-1].content == langgraph_loop.ANSWER  # finished normally
    assert info.steps == 3 and not info.waiting
    if kind == "release":
        held = [m for m in summary["messages"] if getattr(m, "type", "") == "tool"][-1]
        assert "released the conversation" in held.content
        assert "read the total from the full image" in held.content


def test_langgraph_thread_shows_as_interrupted_and_resumes_with_the_decision(frozen):
    pytest.importorskip("langgraph")
    import langgraph_loop
    from langchain_core.messages import HumanMessage
    from langgraph.types import Command

    from engine.integrations.langgraph import RewindSaver

    saver = RewindSaver(frozen)
    graph = langgraph_loop.build_graph(saver)
    config = {"configurable": {"thread_id": "t-1"}}
    first = graph.invoke({"messages": [HumanMessage("crop it")]}, config)
    (held,) = first["__interrupt__"]
    assert held.value["rewind"] == "waiting for on-call" and held.value["session"] == "t-1"
    state = graph.get_state(config)
    assert state.next == ("tools",) and state.interrupts  # LangGraph sees an interrupted thread
    # resumed before anyone decided: still waiting, interrupted again, no tool call runs
    again = graph.invoke(Command(resume="go"), config)
    assert again["__interrupt__"] and frozen.session_info("t-1").steps == 3
    frozen.fleet.release("t-1", actor="olga", reason="fine", note="stop cropping")
    done = graph.invoke(Command(resume="released"), config)
    assert "__interrupt__" not in done and not graph.get_state(config).next
    assert done["messages"][-1].content == langgraph_loop.ANSWER
    assert frozen.session_info("t-1").steps == 3


# -- OpenAI Agents SDK ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["release", "rollback", "stop"])
def test_openai_agents_example_stops_cleanly_waits_and_runs_again(frozen, kind):
    pytest.importorskip("agents")
    import openai_agents_loop

    from engine.integrations.openai_agents import ToolLoopWaiting

    sid = "receipts-openai-agents"
    seen: dict = {}
    operator = _operator(frozen, sid, kind, seen)
    lines: list[str] = []
    result = openai_agents_loop.run(frozen, sid, out=lines.append, wait=120)
    operator.join(timeout=10)
    assert isinstance(result["loop"], ToolLoopWaiting) and isinstance(result["loop"], LoopWaiting)
    assert seen["steps_while_waiting"] == seen["flagged_at"] == 3
    info = frozen.session_info(sid)
    if kind == "stop":
        assert result["answer"] is None and info.status == "stopped" and info.steps == 3
        return
    assert result["answer"] == openai_agents_loop.ANSWER  # the same session, run again
    assert [s.tool for s in frozen.get_session(sid).steps(live_only=True)][-1] == "read_total"
    if kind == "release":
        assert any("read the total from the full image" in str(i.get("content"))
                   for i in result["items"])


def test_openai_agents_a_stopped_session_refuses_the_next_run(frozen):
    pytest.importorskip("agents")
    import openai_agents_loop
    from agents import Runner
    from agents.run_config import RunConfig

    from engine.integrations.openai_agents import RewindSession, ToolSessionStopped

    session = RewindSession(frozen, "stopped-run")
    agent = openai_agents_loop.build_agent(session, openai_agents_loop.ScriptedModel())
    config = RunConfig(tracing_disabled=True)

    async def scenario():
        with pytest.raises(LoopWaiting):
            await Runner.run(agent, "crop the receipt", session=session, run_config=config)
        frozen.fleet.stop("stopped-run", actor="olga", reason="broken tool")
        with pytest.raises(ToolSessionStopped, match="stopped by olga"):
            await Runner.run(agent, "crop it again", session=session, run_config=config)

    asyncio.run(scenario())
    assert frozen.session_info("stopped-run").steps == 3


# -- MCP proxy -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["release", "rollback"])
def test_mcp_example_waits_then_finishes(frozen, kind):
    pytest.importorskip("mcp")
    import mcp_proxy_loop

    url = frozen.url
    seen: dict = {}
    operator = _operator(frozen, "mcp-receipts", kind, seen)
    lines: list[str] = []
    results = asyncio.run(mcp_proxy_loop.run_async(url, "mcp-receipts", out=lines.append,
                                                   wait=120))
    operator.join(timeout=10)
    assert seen["steps_while_waiting"] == seen["flagged_at"] == 3
    assert results[-1].content[0].text == "42.00 EUR" and not results[-1].is_error
    steps = frozen.get_session("mcp-receipts").steps()
    assert [s.tool for s in steps] == ["image_crop"] * 3 + ["read_total"]


def test_mcp_proxy_answers_a_waiting_session_itself(frozen):
    pytest.importorskip("mcp")
    from mcp import Client, StdioServerParameters

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT),
                                                        os.environ.get("PYTHONPATH", "")])}
    proxy = StdioServerParameters(
        command=sys.executable,
        args=["-m", "engine.cli", "mcp-proxy", "--store", frozen.url, "--session", "mcp-w",
              "--", sys.executable, str(ROOT / "examples" / "mcp_proxy_loop.py"), "--serve"],
        env=env, cwd=str(ROOT))
    crop = {"x": 10, "y": 70, "width": 120, "height": 20}

    async def scenario():
        async with Client(proxy) as client:
            for _ in range(3):
                await client.call_tool("image_crop", crop)
            assert frozen.session_info("mcp-w").waiting
            for tool, args in (("image_crop", crop), ("read_total", {})):
                refused = await client.call_tool(tool, args)
                assert refused.is_error
                assert "waiting for on-call since" in refused.content[0].text
            assert frozen.session_info("mcp-w").steps == 3  # the upstream never saw them
            frozen.fleet.release("mcp-w", actor="olga", reason="go on")
            total = await client.call_tool("read_total", {})
            assert not total.is_error and total.content[0].text == "42.00 EUR"
            frozen.get_session("mcp-w")  # still readable
            return total

    asyncio.run(scenario())
    assert [s.tool for s in frozen.get_session("mcp-w").steps()] == (
        ["image_crop"] * 3 + ["read_total"])
