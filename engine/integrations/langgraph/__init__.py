"""Rewind for LangGraph: a checkpointer on Rewind's stores and a loop guard for tool nodes.

    from engine import Engine
    from engine.integrations.langgraph import RewindSaver, RewindToolNode

    saver = RewindSaver(Engine.open("sqlite:///.rewind/rewind.db"))
    builder.add_node("tools", RewindToolNode(tools, saver, handle_tool_errors=True))
    graph = builder.compile(checkpointer=saver)

Each thread is a Rewind session: its checkpoints are snapshots, forks are branches of the
snapshot tree, tool calls are guarded steps; a loop rolls the thread back to its last healthy
checkpoint and the next invocation continues from there with a recovery notice. `RewindStore`
(``compile(store=RewindStore(engine, depth=2))``) keeps the graph's long-term facts as keyed
memories of one session per namespace, which a rollback of that session undoes. See `saver`,
`guard` and `store` for the details. Needs ``pip install 'agent-rewind[langgraph]'``.
"""

from __future__ import annotations

try:
    import langgraph.checkpoint.base  # noqa: F401
    import langgraph.prebuilt  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the LangGraph integration needs LangGraph: pip install 'agent-rewind[langgraph]'"
    ) from exc

from typing import TYPE_CHECKING, Any

from engine.integrations.langgraph.guard import LoopGuard, RewindToolNode, let_loops_through
from engine.integrations.langgraph.saver import RewindSaver, healthy_checkpoint, session_id

if TYPE_CHECKING:
    from engine.integrations.langgraph.store import RewindStore

__all__ = ["LoopGuard", "RewindSaver", "RewindStore", "RewindToolNode", "healthy_checkpoint",
           "let_loops_through", "session_id"]


def __getattr__(name: str) -> Any:
    # RewindStore is loaded on first use: it brings session memory (BM25, numpy), which a
    # service that only checkpoints threads never needs (a tenth of a second at every start)
    if name == "RewindStore":
        from engine.integrations.langgraph.store import RewindStore

        return RewindStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
