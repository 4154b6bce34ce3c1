"""The OpenAI Agents SDK with Rewind: a receipt agent whose image_crop tool keeps failing.

The model is scripted (no network, no API key): it asks for the same crop again and again, the
way a real model does when a tool keeps answering "invalid slice". Rewind records every call as a
step of the session, flags the loop at the third identical failure, rolls the session back to the
snapshot before the first crop and appends the recovery notice; `Runner.run` raises
`ToolLoopDetected`. The next run starts from the rolled-back history: the user's question, the
notice, the new question; nothing from the loop.

Under the ``flag`` policy (``rewind freeze --on-loop flag``, or $REWIND_FREEZE_ON_LOOP=flag with a
freeze window) the loop is not rolled back: the run stops with `ToolLoopWaiting` and the session
waits for on-call. The example waits for an operator's decision, e.g.

    rewind --store STORE_URL release receipts-openai-agents --actor alice --reason ok

and then runs again on the same session (a stopped session ends the example).

    python examples/openai_agents_loop.py [STORE_URL] [--session ID]
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from agents import Agent, Model, ModelResponse, Runner, Usage, function_tool
from agents.run_config import RunConfig
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from engine import Engine, LoopDetected, LoopWaiting, SessionStopped
from engine.integrations.openai_agents import RewindSession, ToolGuard

ANSWER = "The total on the receipt is 42.00 EUR."


@function_tool
def image_crop(x: int, y: int, width: int, height: int) -> str:
    """Crop the receipt image to a box and return the text found in it."""
    raise ValueError(f"invalid slice [{x}:{x + width}, {y}:{y + height}] on a 100x80 image")


@function_tool
def read_total() -> str:
    """Read the total printed at the bottom of the receipt."""
    return "42.00 EUR"


class ScriptedModel(Model):
    """A model that answers from a script: crop calls until the input holds the recovery notice
    or a tool result, then an answer. Records every input it was given."""

    def __init__(self) -> None:
        self.inputs: list[list[dict]] = []
        self._calls = 0

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
        **_: Any,
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.inputs.append(items)
        self._calls += 1
        last_user = next((i for i in reversed(items) if i.get("role") == "user"), {})
        if "crop" in str(last_user.get("content", "")):
            output: Any = ResponseFunctionToolCall(
                type="function_call",
                id=f"fc_{self._calls}",
                call_id=f"call_{self._calls}",
                name="image_crop",
                arguments=json.dumps({"x": 10, "y": 70, "width": 120, "height": 20}),
            )
        elif not any(i.get("type") == "function_call_output" for i in items[-2:]):
            output = ResponseFunctionToolCall(
                type="function_call",
                id=f"fc_{self._calls}",
                call_id=f"call_{self._calls}",
                name="read_total",
                arguments="{}",
            )
        else:
            output = ResponseOutputMessage(
                type="message",
                id=f"msg_{self._calls}",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(type="output_text", text=ANSWER, annotations=[])],
            )
        return ModelResponse(output=[output], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


def build_agent(session: RewindSession, model: Model) -> Agent[Any]:
    agent = Agent(
        name="receipts",
        instructions="Read receipts for the user.",
        model=model,
        tools=[image_crop, read_total],
    )
    return ToolGuard(session).agent(agent)


async def run_async(
    engine: Engine, session_id: str, out: Callable[[str], Any] = print,
    wait: float | None = None,
) -> dict[str, Any]:
    session = RewindSession(
        engine, session_id, meta={"scenario": "receipts", "channel": "openai-agents"}
    )
    model = ScriptedModel()
    agent = build_agent(session, model)
    config = RunConfig(tracing_disabled=True)
    loop: LoopDetected | None = None
    decision = None
    try:
        await Runner.run(
            agent,
            "crop the total out of my receipt",
            session=session,
            run_config=config,
            max_turns=20,
        )
    except LoopWaiting as caught:  # policy flag: the run stopped, the session waits
        loop = caught
        out(f"waiting for on-call ({caught.verdict.rule}): {caught.verdict.explanation}")
        out(f"  decide: rewind release|stop|rollback {session_id} --actor A --reason R")
        if ":memory:" in engine.url:  # no operator can reach this process's own store
            out("  (an in-memory store: run the example with a store URL to decide from the "
                "console or the CLI)")
            return {"loop": loop, "answer": None, "items": await session.get_items(),
                    "next_input": None, "decision": None}
        decision = await session.rewind.await_decision(timeout=wait)
        out(f"  decision: {decision.kind} by {decision.actor}: {decision.reason}")
        if decision.kind == "stopped":  # the session runs no more: nothing to run again
            return {"loop": loop, "answer": None, "items": await session.get_items(),
                    "next_input": None, "decision": decision}
    except LoopDetected as caught:
        loop = caught
        out(f"LoopDetected ({caught.verdict.rule}): {caught.verdict.explanation}")
    seen = len(model.inputs)
    try:
        result = await Runner.run(agent, "just tell me the total", session=session,
                                  run_config=config)
    except SessionStopped as stopped:  # the operator stopped the session
        out(f"stopped: {stopped}")
        return {"loop": loop, "answer": None, "items": await session.get_items(),
                "next_input": None, "decision": decision}
    out(f"answer: {result.final_output}")
    items = await session.get_items()
    out(
        f"session {session_id}: {len(session.rewind.steps())} steps, "
        f"{len(items)} items, status {session.rewind.info().status}"
    )
    return {
        "loop": loop,
        "answer": result.final_output,
        "items": items,
        "next_input": model.inputs[seen],
        "decision": decision,
    }


def run(engine: Engine, session_id: str, out: Callable[[str], Any] = print,
        wait: float | None = None) -> dict[str, Any]:
    return asyncio.run(run_async(engine, session_id, out, wait))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", nargs="?", default="sqlite:///:memory:")
    parser.add_argument("--session", default="receipts-openai-agents")
    args = parser.parse_args(argv)
    with Engine.open(args.store) as engine:
        run(engine, args.session)
        print(f"{len(engine.sessions(limit=100_000))} session(s) in {engine.url}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
