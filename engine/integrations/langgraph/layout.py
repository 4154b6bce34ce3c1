"""Where the LangGraph integration keeps its data inside a Rewind session (pure functions).

A LangGraph thread is one Rewind session (session id = thread id). Everything LangGraph hands the
checkpointer lives in the session's unversioned documents, namespace `DOCS`, so rollbacks never
touch LangGraph's own history:

=====================================  ========================================================
document key                           holds
=====================================  ========================================================
``c/<ns>/<checkpoint id>``             checkpoint record: the checkpoint without its channel
                                       values, metadata, parent id, Rewind snapshot, epoch,
                                       and the skip-delta chain of each list channel
                                       (``lists``, see `codec`)
``b/<ns>/<channel>/<version>``         one channel value at one version: ``{"value": enc}``,
                                       a list delta ``{"base", "keep", "pack"}`` or
                                       ``{"empty": true}`` (see `codec`)
``w/<ns>/<checkpoint id>/<task>/<i>``  one pending write of a task
``s/<step number>``                    root checkpoint a guarded tool call ran under
=====================================  ========================================================

The live checkpoint of the root namespace is the one whose snapshot is the newest checkpoint
snapshot on the session's live line (`threads.live_checkpoint`): a rollback to the snapshot of
checkpoint C makes C the thread's latest checkpoint again. Key `FENCE` of the versioned
key-value namespace `HEAD` bounds the checkpoints of a run the guard rolled back. Key `ROOT`
there may hold a pointer to the live checkpoint in older threads; nothing reads it, as the
snapshots name the live checkpoint.

``<ns>``, ``<channel>``, ``<version>`` and ``<task>`` are percent-encoded without safe
characters, so ``/`` only ever separates fields and every prefix scan is exact. Checkpoint ids
(uuid6) sort by time, so a scan of ``c/<ns>/`` returns a namespace's checkpoints oldest first.
"""

from __future__ import annotations

from functools import lru_cache
from urllib.parse import quote, unquote

DOCS = "langgraph"
"""Document namespace of everything LangGraph stores."""
HEAD = "langgraph_head"
"""Versioned key-value namespace of the guard's fence (`FENCE`)."""
ROOT = "root"
"""Key of the live root checkpoint in the saver's memory of a thread's `HEAD` values."""
FENCE = "fence"
"""Key in `HEAD`, written after the guard rolled a run back: ``{"base": live checkpoint after the
rollback, "until": newest checkpoint id of the aborted run}``. A ``loop`` checkpoint that builds
on ``base`` with an id up to ``until`` is a step of the aborted run that LangGraph stored late
(it stores checkpoints in the background); it never becomes the latest."""
META_KEY = "integration"
"""Session meta key marking the sessions this integration created."""
META_VALUE = "langgraph"


def part(text: object) -> str:
    """One percent-encoded key field."""
    return _quoted(str(text))


@lru_cache(maxsize=4096)
def _quoted(text: str) -> str:
    # Checkpoint ids, channel names and versions come back at every put and read: quoting each
    # anew was most of the cost of naming a checkpoint's documents.
    return quote(text, safe="")


def checkpoint_prefix(ns: str | None = None) -> str:
    """Prefix of the checkpoint records of namespace `ns` (every namespace when None)."""
    return "c/" if ns is None else f"c/{part(ns)}/"


def checkpoint_key(ns: str, checkpoint_id: str) -> str:
    return f"{checkpoint_prefix(ns)}{part(checkpoint_id)}"


def blob_prefix(ns: str, channel: str) -> str:
    """Prefix of every stored version of one channel."""
    return f"b/{part(ns)}/{part(channel)}/"


def blob_key(ns: str, channel: str, version: object) -> str:
    return f"{blob_prefix(ns, channel)}{part(version)}"


def version_of(key: str, prefix: str) -> str:
    """The channel version a blob key under `prefix` names."""
    return unquote(key[len(prefix):])


def write_prefix(ns: str, checkpoint_id: str) -> str:
    """Prefix of the pending writes stored against one checkpoint."""
    return f"w/{part(ns)}/{part(checkpoint_id)}/"


def write_key(ns: str, checkpoint_id: str, task_id: str, idx: int) -> str:
    return f"{write_prefix(ns, checkpoint_id)}{part(task_id)}/{idx}"


def step_key(n: int) -> str:
    return f"s/{n:012d}"
