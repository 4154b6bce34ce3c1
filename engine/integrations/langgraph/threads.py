"""Threads as Rewind sessions: a thread's session id, and the checkpoint a guarded step's
rollback goes back to."""

from __future__ import annotations

import re
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


CHECKPOINT_LABEL = "checkpoint "
"""How the label of a root checkpoint's snapshot starts: ``checkpoint <id> (<source>, step
<n>)``."""


def checkpoint_label(checkpoint_id: str, detail: str) -> str:
    """The label of checkpoint `checkpoint_id`'s snapshot (`live_checkpoint` reads it back)."""
    return f"{CHECKPOINT_LABEL}{checkpoint_id} ({detail})"


def live_checkpoint(engine: Engine, sid: str) -> dict | None:
    """The record of the thread's live root checkpoint, None when it has none.

    It is the checkpoint whose snapshot is the newest checkpoint snapshot on the session's live
    line: a put takes it, and a rollback to any snapshot (a checkpoint's, a guarded step's)
    leaves the checkpoint at or before it live, as the line now ends there. The snapshot's label
    names the checkpoint, and the record, stamped with its snapshot, confirms it (a snapshot an
    operator labelled alike is passed over).
    """
    for snap, label in engine.documents.newest_snapshots(sid, CHECKPOINT_LABEL,
                                                         limit=CANDIDATES):
        checkpoint_id = labelled_checkpoint(label)
        if checkpoint_id is None:
            continue
        key = layout.checkpoint_key("", checkpoint_id)
        rec = engine.documents.get(sid, layout.DOCS, [key]).get(key)
        if rec is not None and rec.get("snap") == snap:
            return rec
    return None


CANDIDATES = 4
"""Snapshots labelled like a checkpoint's that `live_checkpoint` looks at, newest first."""

_LABELLED = re.compile(r"checkpoint ([^\s…]+)(?: \(|…|$)")
"""A checkpoint's label, its id whole (a small ``Limits.name_chars`` may cut what follows)."""


def labelled_checkpoint(label: str) -> str | None:
    """The checkpoint id a `checkpoint_label` names, None for another label."""
    found = _LABELLED.match(label)
    return found.group(1) if found else None


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
