"""Threads as Rewind sessions: a thread's session id, and the checkpoint a guarded step's
rollback goes back to."""

from __future__ import annotations

from typing import Any

from engine.engine import Engine
from engine.ids import validate_session_id
from engine.integrations.langgraph import layout


def session_id(thread_id: Any) -> str:
    """The Rewind session of a LangGraph thread.

    Raises:
        InvalidSessionId: the thread id is empty, longer than 200 characters or holds control
            characters.
    """
    return validate_session_id(str(thread_id))


def healthy_checkpoint(engine: Engine | Any, sid: str, step: int | None) -> dict | None:
    """The record of the last checkpoint before the model turn that led to guarded step `step`.

    A tool call runs under a root checkpoint that already holds the model's message asking for
    it; the checkpoint before that one is the last state without any of it. None when unknown
    (the step was not recorded by the guard, or the thread is not checkpointed by `RewindSaver`).
    `engine` is the `Engine` (a `Store`, as this function took before, still works).
    """
    if step is None:
        return None
    get = (engine.documents.get if isinstance(engine, Engine)
           else engine.doc_get)  # the old signature took the store

    def doc(key: str) -> Any:
        return get(sid, layout.DOCS, [key]).get(key)

    ran = doc(layout.step_key(step))
    if not ran or not ran.get("checkpoint"):
        return None
    rec = doc(layout.checkpoint_key("", ran["checkpoint"]))
    if not rec or not rec.get("parent"):
        return None
    return doc(layout.checkpoint_key("", rec["parent"]))
