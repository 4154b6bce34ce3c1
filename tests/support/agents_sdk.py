"""A scripted model and small tools for tests of the OpenAI Agents SDK integration: the SDK's
real `Runner` runs them with no network and no API key."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from agents import Model, ModelResponse, Usage, function_tool
from agents.run_config import RunConfig
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

CONFIG = RunConfig(tracing_disabled=True)


def call(name: str, args: dict, n: int) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call",
        id=f"fc_{n}",
        call_id=f"call_{n}",
        name=name,
        arguments=json.dumps(args),
    )


def say(text: str, n: int) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        type="message",
        id=f"msg_{n}",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )


class Scripted(Model):
    """Answers each model call with the next scripted output; records the inputs."""

    def __init__(self, script: list[Any]):
        self.script = list(script)
        self.inputs: list[list[dict]] = []

    async def get_response(
        self,
        system_instructions,
        input,
        model_settings,
        tools,
        output_schema,
        handoffs,
        tracing,
        **kwargs,
    ) -> ModelResponse:
        self.inputs.append(
            [{"role": "user", "content": input}]
            if isinstance(input, str)
            else [dict(i) for i in input]
        )
        n = len(self.inputs)
        step = self.script.pop(0)
        output = step(n) if callable(step) else step
        return ModelResponse(output=[output], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError


@function_tool
def fetch_invoice(invoice: str) -> str:
    """Fetch an invoice."""
    raise ConnectionError(f"upstream 503 for {invoice}")


@function_tool
def lookup(order: str) -> str:
    """Look an order up."""
    return f"order {order}: shipped"


CHARGES: list[str] = []


@function_tool
def charge(order: str) -> str:
    """Charge the customer for an order."""
    CHARGES.append(order)
    return f"charged {order}"


def run(coro):
    return asyncio.run(coro)


def fresh_id() -> str:
    return f"oa-{uuid.uuid4().hex[:8]}"
