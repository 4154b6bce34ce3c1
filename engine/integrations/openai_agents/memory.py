"""Memory tools for the OpenAI Agents SDK: an agent's long-term facts as keyed Rewind memories.

    from agents import Agent
    from engine import Engine
    from engine.integrations.openai_agents import RewindSession, ToolGuard
    from engine.integrations.openai_agents.memory import memory_tools

    session = RewindSession(Engine.open(), "chat-42")
    agent = Agent(name="clerk", tools=[*memory_tools(session), lookup])
    # or guarded like any other tool: ToolGuard(session).tools([*memory_tools(session), lookup])

``remember(key, text)`` writes ``s.memory.add(text, key=prefix + key)``: a fact the agent names, so
a newer one with the same key replaces the older one exactly (no judge guesses; the older memory
is kept, marked invalid by ``key``, and listed in the session's corrections).
``recall(query)`` returns the session's most relevant valid memories (hybrid BM25 + dense), one
per line, each keyed fact with its key. The memories are session state: a rollback (console, CLI
or loop detector) undoes what a run remembered after the target snapshot, including an overwrite,
and the next ``recall`` sees the value from before.

The tools take a `RewindSession` or a Rewind `Session`; their arguments are the model's text and
are bounded by the engine's `Limits` (``memory_text``) and by `MAX_KEY` for keys.
Needs ``pip install 'agent-rewind[openai-agents]'``.
"""

from __future__ import annotations

from typing import Any

try:
    from agents import FunctionTool, function_tool
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the OpenAI Agents integration needs the SDK: pip install 'agent-rewind[openai-agents]'"
    ) from exc

from engine.limits import cut_text
from engine.sessions.session import Session

__all__ = ["MAX_KEY", "memory_tools"]

MAX_KEY = 200
"""Longest fact key (characters) a tool call may name."""
SHOWN = 500
"""Characters of each recalled memory handed back to the model."""


def _session(session: Any) -> Session:
    inner = getattr(session, "rewind", session)
    if not isinstance(inner, Session):
        raise TypeError(
            f"memory_tools needs a RewindSession or a Rewind Session, got {type(session).__name__}"
        )
    return inner


def memory_tools(
    session: Any, *, prefix: str = "", k: int = 5, importance: float = 0.8
) -> list[FunctionTool]:
    """The ``remember`` and ``recall`` function tools bound to a session's memory.

    Args:
        session: a `RewindSession` or a Rewind `Session`.
        prefix: put before every key the model names (``"user."``): keeps the agent's facts apart
            from other keyed memories of the session.
        k: memories ``recall`` returns at most.
        importance: importance of remembered facts (0..1).

    Returns:
        ``[remember, recall]``.

    Raises:
        TypeError: ``session`` is neither. ValueError: ``k`` under 1.
    """
    s = _session(session)
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")

    @function_tool(name_override="remember")
    def remember(key: str, text: str) -> str:
        """Remember a fact under a short stable key; a later fact with the same key replaces it.

        Args:
            key: a short stable name for the fact, such as "home_city" or "preferred_airline".
            text: the fact, in one or two sentences.
        """
        key = key.strip()
        if not key:
            return "Not remembered: the key is empty."
        if len(key) > MAX_KEY:
            return f"Not remembered: keys are at most {MAX_KEY} characters."
        if not text.strip():
            return "Not remembered: the text is empty."
        name = prefix + key
        old = s.memory.fact(name)
        s.memory.add(text, importance=importance, key=name)
        if old is not None and old.text != text:
            return f"Remembered {key!r}; it replaces: {cut_text(old.text, SHOWN)}"
        return f"Remembered {key!r}."

    @function_tool(name_override="recall")
    def recall(query: str) -> str:
        """Recall the remembered facts most relevant to a question, best first.

        Args:
            query: what you want to know, in words.
        """
        hits = s.memory.recall(query, k=k)
        if not hits:
            return "Nothing remembered matches."
        lines = []
        for hit in hits:
            key = hit.key
            if key is not None and key.startswith(prefix):
                key = key[len(prefix) :]
            shown = cut_text(hit.text, SHOWN)
            lines.append(f"- [{key}] {shown}" if key is not None else f"- {shown}")
        return "\n".join(lines)

    return [remember, recall]
