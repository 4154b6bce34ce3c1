"""Rewind for the OpenAI Agents SDK: `RewindSession` (the SDK's session protocol, kept in a Rewind
session), `ToolGuard` (function tools as guarded steps) and `memory_tools` (the session's memory as
tools the model may call). `session` says how items, runs and rollbacks map; `memory` the tools.
Needs ``pip install 'agent-rewind[openai-agents]'``."""

from engine.integrations.openai_agents.memory import MAX_KEY, memory_tools
from engine.integrations.openai_agents.session import (
    ITEM_KEY,
    RewindSession,
    ToolGuard,
    ToolLoopDetected,
    ToolLoopWaiting,
    ToolSessionStopped,
    item_message,
)

__all__ = ["ITEM_KEY", "MAX_KEY", "RewindSession", "ToolGuard", "ToolLoopDetected",
           "ToolLoopWaiting", "ToolSessionStopped", "item_message", "memory_tools"]
