"""The LangGraph example end to end, on every store backend: the agent loops on image_crop, the
loop is caught at the third identical failing call, the thread is rolled back, and the next
invocation runs on a clean state that holds the recovery notice."""

from __future__ import annotations

import importlib.util
import os
import uuid

import pytest
from support.paths import ROOT

pytest.importorskip("langgraph.prebuilt", reason="needs the langgraph extra")

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage  # noqa: E402

from engine.integrations.langgraph import RewindSaver, layout  # noqa: E402
from engine.recovery.notices import NOTICE_FLAG, TEMPLATES  # noqa: E402

EXAMPLE = os.path.join(str(ROOT),
                       "examples", "langgraph_loop.py")


def load_example():
    spec = importlib.util.spec_from_file_location("langgraph_loop_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example():
    return load_example()


def test_example_loop_is_rolled_back(example, engine):
    thread = f"receipt-{uuid.uuid4().hex[:8]}"
    lines: list[str] = []
    summary = example.run(engine, thread, out=lines.append)

    # caught at the third identical failing call
    verdict = summary["verdict"]
    assert verdict is not None and verdict.looping
    assert verdict.rule == "exact_repeat"
    session = engine.get_session(thread)
    steps = session.steps()
    assert [(s.tool, s.status) for s in steps] == [("image_crop", "error")] * 3
    assert len({s.fingerprint for s in steps}) == 1
    assert steps[-1].verdict and steps[-1].verdict["rule"] == "exact_repeat"
    assert steps[-1].verdict["evidence_steps"] == [1, 2, 3]
    assert all(not s.on_live_line for s in steps)

    # rolled back to the checkpoint before the model's first crop call, by the guard
    rollback = summary["rollback"]
    assert rollback is not None and rollback.actor == "rewind"
    assert rollback.notice == TEMPLATES["en"]
    node = next(n for n in session.tree() if n.id == rollback.target)
    assert node.label.startswith("checkpoint ")
    target_checkpoint = node.label.split()[1]
    key = layout.checkpoint_key("", target_checkpoint)
    record = engine.store.doc_get(thread, layout.DOCS, [key])[key]
    assert record["snap"] == rollback.target
    healthy = RewindSaver(engine).get_tuple(
        {"configurable": {"thread_id": thread, "checkpoint_id": target_checkpoint}})
    assert [type(m) for m in healthy.checkpoint["channel_values"]["messages"]] == [HumanMessage]
    abandoned = [n for n in session.tree() if not n.on_live_line]
    assert abandoned and all("loop detected" in n.abandoned_reason for n in abandoned)
    info = session.info()
    assert info.loops == 1 and info.rollbacks == 1
    assert [a.actor for a in engine.audit(session=thread, action="rollback")] == ["rewind"]

    # the next invocation: no message from the loop, the notice present
    messages = summary["messages"]
    assert not any(isinstance(m, ToolMessage) for m in messages)
    assert not any(isinstance(m, AIMessage) and m.tool_calls for m in messages)
    assert [type(m) for m in messages] == [HumanMessage, AIMessage, HumanMessage, AIMessage]
    notice = messages[1]
    assert notice.additional_kwargs.get(NOTICE_FLAG) is True
    assert notice.content == TEMPLATES["en"]
    assert messages[-1].content == example.ANSWER

    # the session's history mirrors the thread: the loop only on the abandoned branch
    live = session.state().messages
    assert [m["role"] for m in live] == ["user", "assistant", "user", "assistant"]
    assert live[1].get(NOTICE_FLAG) is True
    off_line = [r.message for r in session.messages() if r.branch is not None]
    assert off_line and all(m["role"] in ("assistant", "tool") for m in off_line)
    assert any(m.get("tool_calls") for m in off_line)
    assert any("LoopDetected (exact_repeat)" in line for line in lines)


def test_example_main_runs(example, tmp_path, capsys):
    assert example.main([f"sqlite:///{tmp_path}/example.db", "--thread", "t-main"]) == 0
    out = capsys.readouterr().out
    assert "LoopDetected" in out and "sessions" in out


def test_example_async_invocation(example, tmp_path, open_engine):
    """The same graph through ainvoke: the async hooks of the saver and the guard."""
    import asyncio

    from engine import LoopDetected

    engine = open_engine(f"sqlite:///{tmp_path}/async.db")
    saver = RewindSaver(engine)
    graph = example.build_graph(saver)
    config = {"configurable": {"thread_id": "async-thread"}}

    async def scenario():
        with pytest.raises(LoopDetected):
            await graph.ainvoke({"messages": [HumanMessage("total please, crop first")]},
                                config)
        return await graph.ainvoke({"messages": [HumanMessage("just the total")]}, config)

    result = asyncio.run(scenario())
    kinds = [type(m).__name__ for m in result["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "HumanMessage", "AIMessage"]
    assert result["messages"][1].additional_kwargs.get(NOTICE_FLAG)
    assert len(engine.get_session("async-thread").steps()) == 3


@pytest.mark.parametrize("durability", ["sync", "async", "exit"])
def test_every_durability_mode_recovers(example, tmp_path, open_engine, durability):
    """LangGraph stores checkpoints before the next step (sync), in the background (async, the
    default: the guard waits for the checkpoint its call runs under) or only when the run ends
    (exit: the failed run's checkpoint arrives after the rollback and must stay late)."""
    from engine import LoopDetected

    engine = open_engine(f"sqlite:///{tmp_path}/durability.db")
    graph = example.build_graph(RewindSaver(engine))
    config = {"configurable": {"thread_id": f"d-{durability}"}}
    with pytest.raises(LoopDetected):
        graph.invoke({"messages": [HumanMessage("crop the total")]}, config,
                     durability=durability)
    result = graph.invoke({"messages": [HumanMessage("just the total")]}, config,
                          durability=durability)
    messages = result["messages"]
    assert not any(isinstance(m, ToolMessage) or getattr(m, "tool_calls", None)
                   for m in messages)
    notices = [m for m in messages if m.additional_kwargs.get(NOTICE_FLAG)]
    assert len(notices) == 1
    assert messages[-1].content == example.ANSWER
    # with durability="exit" the failed run stored nothing before the loop: its input is gone too
    expected = 3 if durability == "exit" else 4
    assert len(messages) == expected
    steps = engine.get_session(f"d-{durability}").steps()
    assert len(steps) == 3 and not any(s.on_live_line for s in steps)
