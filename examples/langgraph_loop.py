"""A LangGraph agent that falls into a tool loop, caught and rolled back by Rewind.

The agent is asked for the total on a receipt. Its (fake, deterministic) chat model calls
``image_crop`` with a crop box of negative height; the tool fails with "invalid slice" and the model
sends the very same call again, and again. Rewind flags the loop at the third identical failure,
rolls the thread back to the checkpoint before the first crop call and appends the recovery notice.
The next invocation starts from that clean state: the model sees the notice and answers without
the crop tool.

Under the ``flag`` policy (``rewind freeze --on-loop flag``, or $REWIND_FREEZE_ON_LOOP=flag with a
freeze window) the loop is not rolled back: the session waits for on-call and the thread is
interrupted (a LangGraph interrupt). The example waits for an operator's decision, e.g.

    rewind --store sqlite:///.rewind/rewind.db release receipt-42 --actor alice --reason ok \
        --note "read the total from the full image"

then resumes the thread with ``Command(resume=...)`` and finishes.

    python examples/langgraph_loop.py sqlite:///.rewind/rewind.db
    rewind --store sqlite:///.rewind/rewind.db sessions      # the thread, rolled back
    rewind --store sqlite:///.rewind/rewind.db show receipt-42
    rewind --store sqlite:///.rewind/rewind.db dashboard     # the console

Any Rewind store URL works (``redis://…``, ``redis+cluster://…``); default: $REWIND_STORE, else
``sqlite:///.rewind/rewind.db``. Needs ``pip install 'agent-rewind[langgraph]'``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import tools_condition
from langgraph.types import Command

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from engine import Engine, LoopDetected, SessionStopped  # noqa: E402
from engine.integrations.langgraph import RewindSaver, RewindToolNode  # noqa: E402
from engine.recovery.notices import NOTICE_FLAG  # noqa: E402

CROP_BOX = {"image": "receipt-42.png", "x": 10, "y": 420, "width": 300, "height": -20}
"""The model's crop box: a negative height, so every crop is an invalid slice."""
ANSWER = ("I could not crop the receipt image, so I read the total from the full image "
          "instead: 42.50 EUR.")


@tool
def image_crop(image: str, x: int, y: int, width: int, height: int) -> str:
    """Crop a region of an image and return a reference to the cropped image."""
    if width <= 0 or height <= 0:
        raise ValueError(f"invalid slice: crop box {x},{y} {width}x{height} of {image}")
    return f"{image}#crop={x},{y},{width},{height}"


class ReceiptModel(BaseChatModel):
    """A scripted chat model: crops the receipt, repeats the same call after every failure, and
    answers without tools once a Rewind notice says the context was reset, or Rewind says an
    operator released the conversation."""

    @property
    def _llm_type(self) -> str:
        return "receipt-loop"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        last = messages[-1]
        reset = any(m.additional_kwargs.get(NOTICE_FLAG) for m in messages
                    if isinstance(m, AIMessage)) or any(
            str(m.content).startswith("Rewind:") for m in messages if isinstance(m, ToolMessage))
        if reset:
            reply = AIMessage(content=ANSWER)
        elif isinstance(last, ToolMessage) and last.status != "error":
            reply = AIMessage(content="Here is the cropped total line.")
        else:  # a new question, or the crop failed: crop again, same box
            calls = sum(1 for m in messages if isinstance(m, AIMessage) and m.tool_calls)
            reply = AIMessage(content="", tool_calls=[
                {"name": "image_crop", "args": dict(CROP_BOX), "id": f"call_{calls + 1}"}])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def build_graph(saver: RewindSaver):
    """agent -> tools -> agent … with Rewind's checkpointer and guarded tool node."""
    model = ReceiptModel()

    def agent(state: MessagesState) -> dict:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", RewindToolNode([image_crop], saver, handle_tool_errors=True))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def run(store: str | Engine | None, thread_id: str = "receipt-42", out=print,
        wait: float | None = None) -> dict:
    """Run the two invocations on a fresh thread and report what happened.

    Args:
        store: a store URL (None: the default store) or an open `Engine`.
        thread_id: the LangGraph thread (and Rewind session) to use; reset first.
        out: where the report lines go.
        wait: seconds to wait for an operator's decision when the thread waits for on-call
            (None: as long as it takes).

    Returns:
        ``verdict`` (the loop verdict), ``rollback`` (its RollbackResult), ``messages`` (the
        thread's messages after the second invocation), ``session`` (its SessionInfo) and
        ``decision`` (the operator's `Decision` when the thread waited for on-call, else None).
    """
    engine = store if isinstance(store, Engine) else Engine.open(store)
    saver = RewindSaver(engine)
    saver.delete_thread(thread_id)  # a fresh thread on every run of the example
    engine.session(thread_id, meta={"tenant": "acme", "scenario": "receipt_total",
                                    "prompt_version": "v7", "channel": "langgraph"})
    graph = build_graph(saver)
    config = {"configurable": {"thread_id": thread_id}}
    out(f"thread {thread_id} on {engine.url}")
    verdict = rollback = decision = None
    try:
        first = graph.invoke({"messages": [HumanMessage("What is the total on receipt-42.png? "
                                                        "Crop the total line first.")]}, config)
        if first.get("__interrupt__"):  # policy flag: the thread waits for on-call
            held = first["__interrupt__"][0].value
            out(f"1st invocation: interrupted, {held['rewind']} ({held['rule']}): "
                f"{held['explanation']}")
            out(f"  decide: {held['decide']}")
            decision = engine.get_session(thread_id).wait_for_decision(timeout=wait)
            out(f"  decision: {decision.kind} by {decision.actor}: {decision.reason}")
            graph.invoke(Command(resume={"kind": decision.kind}), config)
    except SessionStopped as exc:
        out(f"the operator stopped the thread: {exc}")
        info = engine.get_session(thread_id).info()
        if engine is not store:
            engine.close()
        return {"verdict": verdict, "rollback": rollback, "messages": [], "session": info,
                "decision": decision}
    except LoopDetected as exc:
        verdict, rollback = exc.verdict, exc.rollback
        out(f"1st invocation: LoopDetected ({verdict.rule}): {verdict.explanation}")
        if rollback is not None:
            out(f"  rolled back to {rollback.target}: {rollback.abandoned_messages} messages, "
                f"{rollback.abandoned_steps} steps moved to branch {rollback.branch}")
            out(f"  notice: {rollback.notice}")
    result = graph.invoke({"messages": [HumanMessage("OK, just tell me the total.")]}, config)
    out("2nd invocation, thread state:")
    for m in result["messages"]:
        calls = f" calls {[c['name'] for c in m.tool_calls]}" if getattr(m, "tool_calls",
                                                                         None) else ""
        out(f"  {m.type:>6}: {str(m.content)[:90]}{calls}")
    info = engine.get_session(thread_id).info()
    out(f"session {info.id}: status={info.status} steps={info.steps} loops={info.loops} "
        f"rollbacks={info.rollbacks}")
    out(f"see it in the console: rewind --store {engine.url} sessions")
    summary = {"verdict": verdict, "rollback": rollback, "messages": result["messages"],
               "session": info, "decision": decision}
    if engine is not store:
        engine.close()
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", nargs="?", default=None,
                        help="Rewind store URL (default: $REWIND_STORE or the SQLite default)")
    parser.add_argument("--thread", default="receipt-42", help="thread id (default receipt-42)")
    args = parser.parse_args(argv)
    summary = run(args.store, args.thread)
    return 0 if summary["verdict"] is not None or summary["decision"] is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
