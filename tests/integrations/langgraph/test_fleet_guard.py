"""The LangGraph tool guard under a tool quarantine: the model reads the refusal."""

from __future__ import annotations

import pytest

pytest.importorskip("langgraph.prebuilt", reason="needs the langgraph extra")

from langchain_core.messages import AIMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402

from engine.integrations.langgraph import RewindToolNode  # noqa: E402

CALLS: list[str] = []


@tool
def refund_api(order: str) -> str:
    """Refunds an order."""
    CALLS.append(order)
    return f"refunded {order}"


def _run(node, sid: str, order: str) -> list:
    builder = StateGraph(MessagesState)
    builder.add_node("tools", node)
    builder.add_edge(START, "tools")
    message = AIMessage("", tool_calls=[{"name": "refund_api", "args": {"order": order},
                                         "id": "call-1"}])
    out = builder.compile().invoke({"messages": [message]}, {"configurable": {"thread_id": sid}})
    return out["messages"][1:]


@pytest.mark.parametrize("handle_tool_errors", [True, False])
def test_a_quarantined_tool_becomes_a_tool_message_the_model_reads(engine, handle_tool_errors):
    CALLS.clear()
    node = RewindToolNode([refund_api], engine, handle_tool_errors=handle_tool_errors)
    assert _run(node, "t", "A-1")[0].content == "refunded A-1"
    q = engine.quarantine("refund_api", actor="alice", reason="payments are down")
    (reply,) = _run(node, "t", "A-2")
    assert reply.status == "error" and reply.tool_call_id == "call-1"
    assert "payments are down" in reply.content and q.id in reply.content
    assert CALLS == ["A-1"]  # the tool never ran
    steps = engine.get_session("t").steps()
    assert [s.status for s in steps] == ["ok", "refused"] and q.id in steps[-1].error
    engine.lift_quarantine(q.id, actor="alice", reason="back")
    assert _run(node, "t", "A-3")[0].content == "refunded A-3"
