"""LangChain messages as Rewind chat messages and back (no I/O).

The saver mirrors the thread's message channel into the session's live history, so the console
shows the conversation and a rollback restores it. Recovery notices travel the other way: the
engine appends them to the session; the saver hands them to the graph as `AIMessage`s.
"""

from __future__ import annotations

import uuid
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from engine.loops.fingerprint import canonicalize
from engine.recovery.notices import NOTICE_FLAG

ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool",
         "function": "function", "developer": "developer"}
"""LangChain message type -> chat role."""


def is_notice(message: Any) -> bool:
    """Whether `message` (LangChain or chat dict) is a Rewind recovery notice."""
    if isinstance(message, BaseMessage):
        return bool(message.additional_kwargs.get(NOTICE_FLAG))
    return isinstance(message, dict) and bool(message.get(NOTICE_FLAG))


def to_chat(message: Any) -> dict | None:
    """The chat-format dict for a LangChain message (None for what is not a message).

    Keeps role, content, the LangChain id (``id``), tool calls of an AI message and the call id,
    name and error status of a tool message. Content that is not JSON is kept as text.
    """
    if isinstance(message, dict):
        if not isinstance(message.get("role"), str) or not message["role"]:
            return None
        chat = dict(message)
    elif isinstance(message, BaseMessage):
        # a message's fields are in its __dict__ (pydantic); asking a message without a role
        # for one raises and catches an AttributeError inside pydantic, at every checkpoint
        role = (message.__dict__.get("role") if "role" in type(message).model_fields
                else getattr(message, "role", None) if hasattr(type(message), "role")
                else None) or ROLES.get(message.type, message.type)
        chat = {"role": role, "content": message.content}
        if message.id:
            chat["id"] = message.id
        if isinstance(message, AIMessage) and message.tool_calls:
            chat["tool_calls"] = [{"id": c.get("id"), "name": c["name"], "args": c["args"]}
                                  for c in message.tool_calls]
        if isinstance(message, ToolMessage):
            chat["tool_call_id"] = message.tool_call_id
            if message.name:
                chat["name"] = message.name
            if message.status == "error":
                chat["status"] = "error"
    else:
        return None
    try:
        return canonicalize(chat, "message")
    except TypeError:
        return canonicalize({**{k: v for k, v in chat.items() if k != "content"},
                             "content": str(chat.get("content"))}, "message")


def notice_message(chat: dict) -> AIMessage:
    """The `AIMessage` that carries a Rewind notice into the graph's state."""
    return AIMessage(content=chat.get("content") or "", id=f"rewind-notice-{uuid.uuid4().hex}",
                     additional_kwargs={NOTICE_FLAG: True})
