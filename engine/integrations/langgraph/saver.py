"""`RewindSaver`: a LangGraph checkpointer on a Rewind store (SQLite, Redis, Redis Cluster).

Mapping (key layout in `layout`):

- **Thread -> session.** Thread id = session id; the session is created on the first checkpoint
  with meta ``{"integration": "langgraph"}``. Checkpoint namespaces (subgraphs) live inside it.
- **Checkpoint -> snapshot.** Every checkpoint of the root namespace takes a Rewind snapshot
  labelled with the checkpoint id (``checkpoint <id> (…)``), and the thread's latest checkpoint
  is the one whose snapshot is the newest checkpoint snapshot on the session's live line
  (`threads.live_checkpoint`): rolling the session back to that snapshot, or to a guarded step's
  taken after it (the guard, the console, the CLI), makes that checkpoint the thread's latest
  again; what came after stays in LangGraph's history and in the abandoned branch.
- **Fork -> branch.** A checkpoint whose parent is not the live one (time travel,
  ``update_state`` on an old checkpoint) first rolls the session back to the parent's snapshot
  (actor ``langgraph``, reason ``fork from checkpoint …``, no notice), so the snapshot tree shows
  the branch. A ``loop`` checkpoint whose parent can no longer be made live is *late*: the run
  that wrote it was rolled back while it ran. It is stored in LangGraph's history but never
  becomes the latest checkpoint, so the next invocation continues from the rolled-back state.
  The guard also fences the run it aborts (`layout.FENCE`): with ``durability="async"`` or
  ``"exit"`` LangGraph may store that run's checkpoints after the rollback.
- **Notices.** After a rollback with a notice, the next read of the thread's latest checkpoint
  (`get_tuple` without a checkpoint id, what every invocation does first) writes a checkpoint that
  appends the notice to the message channel as an `AIMessage` flagged ``rewind_notice``.
- **Messages.** The message channel of the root namespace is mirrored into the session's live
  history (appends only), so the console shows the conversation.

Storage does not copy the message list at every checkpoint: channel values are stored once per
(channel, version), like LangGraph's Postgres saver, and list values as skip-deltas against
earlier versions on the same line (`codec`). The checkpoint record names every document its
lists are built from, so reading a checkpoint is one read of the record with its pending writes
and one of its values, whatever the thread's length: at most log2(n) + 1 documents per list
channel. The latest checkpoint of the root namespace also needs where the thread is (its head
snapshot, epoch and message count) and the guard's fence: read together with the record and
pending writes of the checkpoint this saver last wrote or read (`Engine.documents
.session_documents`); when that record is stamped with the head snapshot it is the latest, and
the values of the versions this saver last wrote or read are held (serialized, decoded anew at
every read), so a warm read of the latest checkpoint is one read (one statement on SQLite). Else
the newest checkpoint snapshot names it (two reads more).
``list(limit=…)`` reads a page of records at a time, namespace by namespace. Channel values are
stored as bytes (the serializer's output behind a small header), so a read neither parses nor
base64-decodes them; threads stored as JSON before still read.

Every read and write goes through the engine's public API (`Engine.documents.get`,
`Engine.documents.write_session`, …), never the store itself: the engine checks size limits before
the store is touched, and a checkpoint's parts (mirrored messages, snapshot, documents) are
written in one atomic write, as is a copied thread. A checkpoint that continues the one this
saver last wrote or read is written without reading the session first: the write expects the
session at the epoch seen then with that checkpoint's snapshot still its newest manual one (no
rollback, fork, fence or other checkpoint since; a guarded tool call's step snapshot is no
matter), and when it is not, nothing is written and the put reads and decides as usual. Async
methods run the sync ones in the default executor.
"""

from __future__ import annotations

import builtins
import json
import math
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    empty_checkpoint,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.base.id import uuid6

from engine import Retention
from engine.engine import Engine
from engine.errors import (
    RollbackConflict,
    SnapshotNotRestorable,
    StoreError,
    UnknownSession,
    UnknownSnapshot,
)
from engine.integrations.langgraph import codec, layout
from engine.integrations.langgraph.aio import AsyncSaver
from engine.integrations.langgraph.chat import is_notice, notice_message, to_chat
from engine.integrations.langgraph.threads import (
    CANDIDATES,
    CHECKPOINT_LABEL,
    checkpoint_label,
    healthy_checkpoint,
    labelled_checkpoint,
    session_id,
)
from engine.limits import cut_text

ACTOR = "langgraph"
"""Actor name of the saver's own actions (forks, deletions) in the audit log."""

_CACHED_LIST: dict[str, Any] = {"raw": None}
"""Stands for a list document whose version this saver holds (`codec.ListState`): the read
takes the items from the cache and never looks inside it."""

_THREAD_META = {layout.META_KEY: layout.META_VALUE}
"""The meta that marks a session as a LangGraph thread (merged into an existing one)."""

__all__ = ["ACTOR", "RewindSaver", "healthy_checkpoint", "session_id"]

_JSON = json.JSONEncoder()
"""Encodes metadata to see whether it comes back from JSON as it is (built once)."""

def _plain(value: Any, depth: int = 0) -> bool:
    """Whether `value` is JSON data that comes back from JSON as it is: dicts with string keys,
    lists, strings, ints, finite floats, booleans and None, of exactly those types (anything
    else is left to the round trip)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:
        return True
    if kind is float:
        return math.isfinite(value)
    if depth > 16:
        return False
    if kind is dict:
        return all(type(k) is str and _plain(v, depth + 1) for k, v in value.items())
    if kind is list:
        return all(_plain(v, depth + 1) for v in value)
    return False


_PLAIN_FIELDS = ("v", "ts", "channel_versions", "versions_seen", "updated_channels")
"""Checkpoint fields stored as plain JSON; the id is the record's, other fields are serialized."""


class RewindSaver(AsyncSaver, BaseCheckpointSaver[str]):
    """LangGraph checkpointer that keeps threads as Rewind sessions.

    ``RewindSaver(Engine.open(url))``, then ``graph.compile(checkpointer=saver)``.

    Args:
        engine: the Rewind engine whose store holds the threads.
        serde: LangGraph serializer (default: LangGraph's JsonPlusSerializer).
        messages_channel: state channel holding the chat messages: mirrored into the session's
            history, and where recovery notices are delivered. None turns both off.
        keep_checkpoints: how many recent root checkpoints stay restorable as Rewind snapshots
            (older ones stay in LangGraph's history but can no longer be rollback targets). This
            retention window applies to the named snapshots of these sessions.
        cache_size: list-channel versions kept in memory (one per thread and channel) to compute
            the next delta without reading the store.
    """

    def __init__(self, engine: Engine, *, serde: Any = None,
                 messages_channel: str | None = "messages", keep_checkpoints: int = 200,
                 cache_size: int = 256):
        super().__init__(serde=serde)
        if keep_checkpoints < 1:
            raise ValueError("keep_checkpoints must be at least 1")
        self.engine = engine
        self._docs = engine.documents  # the engine hands out a new handle at every access
        self.messages_channel = messages_channel
        self.retention = Retention(keep_snapshots=keep_checkpoints,
                                   keep_step_snapshots=engine.config.retention.keep_step_snapshots)
        self._cache_size = max(1, cache_size)
        self._lock = threading.RLock()
        self._ensured: OrderedDict[str, None] = OrderedDict()
        self._lists: OrderedDict[tuple[str, str, str], codec.ListState] = OrderedDict()
        self._last: OrderedDict[tuple[str, str], dict] = OrderedDict()
        self._seen: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._blobs: OrderedDict[tuple[str, str, str], tuple[str, dict]] = OrderedDict()
        """(session, namespace, channel) -> (version, its document as `codec.load` reads it):
        the last version of a channel that is not a list this saver wrote or read (its value
        serialized, decoded anew at every read; or the mark of a channel emptied). A version's
        value never changes, so a warm read need not fetch it; one entry per channel, like
        `_lists`, so many threads do not push each other's out."""
        self._pointers: OrderedDict[str, tuple[str | None, int, dict]] = OrderedDict()
        """session -> (the live checkpoint's snapshot id, epoch, values of `layout.HEAD` with
        the live checkpoint as `layout.ROOT`) as this saver last wrote or read them: a put that
        continues that checkpoint writes without reading the session again (`_put_as_seen`)."""
        self._seen_changed = threading.Condition(self._lock)

    def wait_for_checkpoint(self, thread_id: Any, checkpoint_id: str, timeout: float) -> bool:
        """Wait until this saver stored (or read) checkpoint `checkpoint_id` of the thread.

        LangGraph stores checkpoints in the background by default (``durability="async"``), so
        a node may start before the checkpoint it runs under is stored. The loop guard waits
        here so that a tool call's step comes after that checkpoint's snapshot in the session.

        Returns:
            True when the checkpoint is stored, False after `timeout` seconds.
        """
        key = (session_id(thread_id), checkpoint_id)
        ckey = layout.checkpoint_key("", checkpoint_id)
        deadline = time.monotonic() + timeout
        while True:
            with self._seen_changed:
                if self._seen_changed.wait_for(lambda: key in self._seen,
                                               max(0.0, min(0.05, deadline - time.monotonic()))):
                    return True
            # stored by another saver, or forgotten by this one's bounded memory
            if self._docs.get(key[0], layout.DOCS, [ckey]):
                return True
            if time.monotonic() >= deadline:
                return False

    # -- reading ----------------------------------------------------------------------------
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Fetch a checkpoint tuple: the one named by ``checkpoint_id``, else the latest.

        The latest checkpoint of the root namespace is the session's live one (a rollback moves
        it back); notices appended since it was written are delivered first (see module doc).

        Args:
            config: ``configurable`` with ``thread_id``, optional ``checkpoint_ns`` and
                ``checkpoint_id``.

        Returns:
            The checkpoint tuple with pending writes in `writes_sort_key` order, or None.
        """
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        sid = session_id(thread_id)
        ns = conf.get("checkpoint_ns") or ""
        checkpoint_id = get_checkpoint_id(config)
        writes: builtins.list[dict] | None = None
        if checkpoint_id:
            rec, writes = self._with_writes(sid, ns, checkpoint_id)
        elif ns == "":
            # Where the thread is and the guard's fence in one read, with the record and
            # pending writes of the checkpoint this saver saw live last (a warm read: one
            # statement on SQLite), or else of the one the newest checkpoint snapshot names;
            # when the record's stamp confirms neither, the live one is looked for again.
            with self._lock:
                seen = self._pointers.get(sid)
            guess = seen[2].get(layout.ROOT) if seen is not None else None
            confirms = None  # besides the head, the snapshot whose stamp confirms the guess
            if not guess:  # a saver new to the thread: the newest checkpoint snapshot names it
                for snap, label in self._docs.newest_snapshots(sid, CHECKPOINT_LABEL,
                                                               limit=CANDIDATES):
                    guess, confirms = labelled_checkpoint(label), snap
                    if guess:
                        break
            found: dict[str, Any] | None = None
            at: tuple[str | None, int, int] | None
            if guess:
                at, pointers, found = self._docs.session_documents(
                    sid, layout.HEAD, layout.DOCS, [layout.checkpoint_key(ns, guess)],
                    prefix=layout.write_prefix(ns, guess))
            else:
                info, pointers = self._docs.session_values(sid, layout.HEAD)
                at = None if info is None else (info.head, info.epoch, info.messages)
            if at is None:
                return None
            rec = None
            if guess and found is not None:
                rec, writes = self._split_writes(ns, guess, found)
                if rec is not None and (rec.get("snap") is None
                                        or rec.get("snap") not in (at[0], confirms)):
                    rec = writes = None  # the session moved past it: find the live one
            if rec is None:
                rec, writes = self._live_with_writes(sid)
            with self._lock:  # what the next put expects: the live checkpoint's snapshot
                self._remember(self._pointers, sid, (
                    rec["snap"] if rec is not None else at[0], at[1],
                    {**pointers, layout.ROOT: rec["id"] if rec is not None else None}))
            if rec is None:  # no checkpoint snapshot, or its record is gone: the newest one
                rec = self._latest(sid, ns)
            delivered = self._deliver_notices(sid, thread_id, rec, at[2], pointers)
            if delivered is not rec:
                rec, writes = delivered, None
        else:
            rec = self._latest(sid, ns)
        if rec is None:
            return None
        with self._lock:
            self._remember(self._seen, (sid, rec["id"]), None)
        return self._tuple(sid, thread_id, rec, {}, remember=True, writes=writes)

    def _with_writes(self, sid: str, ns: str, checkpoint_id: str
                     ) -> tuple[dict | None, builtins.list[dict] | None]:
        """Checkpoint `checkpoint_id`'s record and its pending writes, in one read."""
        found = self._docs.get(sid, layout.DOCS, [layout.checkpoint_key(ns, checkpoint_id)],
                               prefix=layout.write_prefix(ns, checkpoint_id))
        return self._split_writes(ns, checkpoint_id, found)

    @staticmethod
    def _split_writes(ns: str, checkpoint_id: str, found: dict[str, Any]
                      ) -> tuple[dict | None, builtins.list[dict] | None]:
        """The record and the pending writes of checkpoint `checkpoint_id` among `found`."""
        rec = found.get(layout.checkpoint_key(ns, checkpoint_id))
        if rec is None:
            return None, None
        prefix = layout.write_prefix(ns, checkpoint_id)
        return rec, [doc for k, doc in found.items() if k.startswith(prefix)]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """List checkpoints, newest first.

        Args:
            config: ``configurable`` with ``thread_id`` and optionally ``checkpoint_ns`` (absent:
                every namespace) and ``checkpoint_id`` (only that one). None lists every thread
                this integration created (one store scan per thread).
            filter: metadata keys and values that must all match.
            before: only checkpoints older than this config's ``checkpoint_id``.
            limit: at most this many.

        Returns:
            Iterator of checkpoint tuples.
        """
        if limit is not None and limit <= 0:
            return
        if config is None:
            threads: list[Any] = self._threads()
            ns_filter = id_filter = None
        else:
            conf = config["configurable"]
            threads = [conf["thread_id"]]
            ns_filter = conf.get("checkpoint_ns")
            id_filter = get_checkpoint_id(config)
        before_id = get_checkpoint_id(before) if before else None
        for thread_id in threads:
            sid = session_id(thread_id)
            recs: Iterator[dict]
            if id_filter and ns_filter is not None:  # one checkpoint: one read
                key = layout.checkpoint_key(ns_filter, id_filter)
                recs = iter(self._docs.get(sid, layout.DOCS, [key]).values())
            elif limit is not None and not id_filter:
                page = limit if not filter else max(limit, 20)
                recs = (self._newest(sid, ns_filter, before_id, page) if ns_filter is not None
                        else self._newest_everywhere(sid, before_id, limit, filter, page))
            else:
                every = list(self._docs.scan(
                    sid, layout.DOCS, layout.checkpoint_prefix(ns_filter)).values())
                every.sort(key=lambda r: r["id"], reverse=True)
                recs = iter(every)
            scans: dict = {}
            for rec in recs:
                if id_filter and rec["id"] != id_filter:
                    continue
                if before_id and rec["id"] >= before_id:
                    continue
                if filter:
                    meta = self._load_meta(rec["meta"])
                    if not all(meta.get(k) == v for k, v in filter.items()):
                        continue
                yield self._tuple(sid, thread_id, rec, scans, remember=False)
                if limit is not None:
                    limit -= 1
                    if limit <= 0:
                        return

    def _newest_everywhere(self, sid: str, before_id: str | None, limit: int,
                           filter: dict[str, Any] | None, page: int) -> Iterator[dict]:
        """The newest `limit` checkpoint records of the thread across its namespaces (below
        `before_id`, matching `filter`), newest first, in the order a scan of them all sorted
        by id gives: each namespace's newest are read a page at a time (`_newest`), and the
        next namespace is found below the last one's keys (a namespace's keys are one range:
        its encoded name holds no ``/``), so a thread is read by what it returns, namespace by
        namespace, not whole."""
        found: builtins.list[builtins.list[dict]] = []
        below = None
        while True:
            last = self._docs.scan(sid, layout.DOCS, layout.checkpoint_prefix(),
                                   below=below, last=1)
            if not last:
                break
            ns = next(iter(last.values()))["ns"]
            mine: builtins.list[dict] = []
            for rec in self._newest(sid, ns, before_id, page):
                if filter:
                    meta = self._load_meta(rec["meta"])
                    if not all(meta.get(k) == v for k, v in filter.items()):
                        continue
                mine.append(rec)
                if len(mine) >= limit:
                    break
            found.append(mine)
            below = layout.checkpoint_prefix(ns)
        # key order (namespaces, then ids, ascending), then by id: what the whole scan gave
        every = [rec for mine in reversed(found) for rec in reversed(mine)]
        every.sort(key=lambda r: r["id"], reverse=True)
        return iter(every)

    def _newest(self, sid: str, ns: str, before_id: str | None, page: int) -> Iterator[dict]:
        """The namespace's checkpoint records newest first (below `before_id`), read a page of
        `page` at a time: ``list(limit=…)`` reads about what it returns, not the thread.
        Checkpoint ids sort by time (LangGraph's uuid6), and so do their keys."""
        prefix = layout.checkpoint_prefix(ns)
        below = layout.checkpoint_key(ns, before_id) if before_id else None
        while True:
            batch = self._docs.scan(sid, layout.DOCS, prefix, below=below, last=page)
            yield from reversed(list(batch.values()))
            if len(batch) < page:
                return
            below = next(iter(batch))

    # -- writing ----------------------------------------------------------------------------
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; in the root namespace also a Rewind snapshot (see module doc).

        Args:
            config: ``configurable`` with ``thread_id``, ``checkpoint_ns`` and the parent's
                ``checkpoint_id`` (absent for a thread's first checkpoint).
            checkpoint: the checkpoint to store.
            metadata: its metadata (merged with the config's metadata like LangGraph's savers).
            new_versions: channels written since the parent, with their new versions; only these
                values are stored.

        Returns:
            The config of the stored checkpoint.

        Raises:
            InvalidSessionId: the thread id cannot be a session id. TypeError: a value the
                serializer cannot handle. StoreUnavailable: the store cannot be reached.
        """
        conf = config["configurable"]
        thread_id = conf["thread_id"]
        sid = session_id(thread_id)
        ns = conf.get("checkpoint_ns") or ""
        meta = get_checkpoint_metadata(config, metadata)

        def run() -> None:
            self._put(sid, ns, conf.get("checkpoint_id"), checkpoint, meta, new_versions)

        if ns == "":
            # A root checkpoint's write creates the session when it is missing (one
            # transaction for a new thread's first checkpoint on SQLite).
            try:
                run()
            except UnknownSession:  # deleted while this put ran a part that does not create
                self._forget(sid)
                self._retrying(sid, run)
        else:
            self._retrying(sid, run)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                 "checkpoint_id": checkpoint["id"]}}

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes against a checkpoint (idempotent per task and index).

        Args:
            config: config of the checkpoint the writes belong to.
            writes: (channel, value) pairs.
            task_id: the task that wrote them.
            task_path: the task's path (orders the writes of one super-step).
        """
        conf = config["configurable"]
        sid = session_id(conf["thread_id"])
        ns = conf.get("checkpoint_ns") or ""
        checkpoint_id = conf["checkpoint_id"]
        entries: dict[str, tuple[int, str, Any]] = {}
        for idx, (channel, value) in enumerate(writes):
            widx = WRITES_IDX_MAP.get(channel, idx)
            entries[layout.write_key(ns, checkpoint_id, task_id, widx)] = (widx, channel, value)
        regular = [key for key, entry in entries.items() if entry[0] >= 0]

        def run() -> None:
            existing = self._docs.get(sid, layout.DOCS, regular) if regular else {}
            items = {
                key: {"task": task_id, "path": task_path, "idx": widx, "ch": channel,
                      "value": codec.encode(self.serde, value)}
                for key, (widx, channel, value) in entries.items()
                if widx < 0 or key not in existing
            }
            if items:
                self._docs.put(sid, layout.DOCS, items)

        self._retrying(sid, run)

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread: its Rewind session and all it owns (the audit log keeps a line).

        Args:
            thread_id: the thread to delete; a missing thread is a no-op.
        """
        sid = session_id(thread_id)
        self.engine.fleet.delete_session(sid, actor=ACTOR, reason="LangGraph delete_thread")
        self._forget(sid)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread to another thread.

        The target gets LangGraph's whole history (all namespaces, the full parent chains), the
        source's live conversation if it has none yet, and one snapshot of the copied latest
        checkpoint. Steps and snapshots of the source stay with the source. All of it is one
        atomic write (`Engine.documents.write_session`): a copy that fails (a size limit, the store)
        leaves the target's history, head and documents as they were.

        Args:
            source_thread_id: thread to copy from; a missing thread copies nothing.
            target_thread_id: thread to copy to (created when missing).

        Raises:
            SizeLimitExceeded: a copied document or message is over the engine's limits;
                nothing is written, and a missing target is not created.
        """
        src, dst = session_id(source_thread_id), session_id(target_thread_id)
        docs = self._docs.scan(src, layout.DOCS, "")
        if not docs:
            return
        head = self._head(src)
        copied = {}
        for key, doc in docs.items():
            if key.startswith("s/"):
                continue  # step numbers belong to the source session
            if key.startswith("c/"):
                doc = {**doc, "snap": None, "msgs": None, "epoch": None}
            copied[key] = doc
        head_key = layout.checkpoint_key("", head) if head else None
        rec = copied.get(head_key) if head_key else None
        label = cut_text(checkpoint_label(str(head), f"copied from thread {source_thread_id}"),
                         self.engine.limits.name_chars)  # a long thread id cuts the label

        def run() -> None:
            if rec is None or rec.get("late") or head_key is None:
                self._docs.put(dst, layout.DOCS, copied)
                return
            info = self.engine.session_info(dst)
            history = self._live_messages(src) if info is None or info.messages == 0 else []
            self._docs.write_session(
                dst, messages=history, messages_if_empty=True, snapshot=label,
                documents={layout.DOCS: copied}, stamp=(layout.DOCS, head_key),
                retention=self.retention)

        # Write first, create the target only when it is missing: a copy refused by a size
        # limit then leaves no trace at all, not even an empty target session.
        try:
            run()
        except UnknownSession:
            self._forget(dst)
            self._ensure(dst)
            run()
        else:
            self._ensure(dst)  # an existing target is marked as a LangGraph thread, as before
        self._forget_cache(dst)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune checkpoints of the given threads.

        ``keep_latest`` keeps the latest checkpoint of each namespace (the live one in the root
        namespace), its writes and the channel versions it needs, delta bases included.
        ``delete`` removes every checkpoint. Rewind's own records of the session (messages,
        steps, snapshots) stay; use `delete_thread` to remove the thread entirely.

        Args:
            thread_ids: threads to prune; missing threads are skipped.
            strategy: ``keep_latest`` or ``delete``.

        Raises:
            ValueError: unknown strategy.
        """
        if strategy not in ("keep_latest", "delete"):
            raise ValueError(f"strategy must be 'keep_latest' or 'delete', not {strategy!r}")
        for thread_id in thread_ids:
            sid = session_id(thread_id)
            docs = self._docs.scan(sid, layout.DOCS, "")
            if not docs:
                continue
            if strategy == "delete":
                doomed = {key: None for key in docs}
                self._retrying(sid, lambda s=sid, d=doomed: self._delete_docs(s, d))
                continue
            head = self._head(sid)
            by_ns: dict[str, list[dict]] = {}
            for key, doc in docs.items():
                if key.startswith("c/"):
                    by_ns.setdefault(doc["ns"], []).append(doc)
            kept = []
            for ns, recs in by_ns.items():
                live = [r for r in recs if not r.get("late")] or recs
                chosen = max(live, key=lambda r: r["id"])
                if ns == "" and head is not None:
                    chosen = next((r for r in recs if r["id"] == head), chosen)
                kept.append(chosen)
            self._delete_docs(sid, codec.unneeded(docs, kept))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata ``run_id`` is in `run_ids`.

        Looks through every thread this integration created (one store scan per thread).
        Channel versions that remaining checkpoints still need, delta bases included, stay.

        Args:
            run_ids: run ids to delete; unknown ones are ignored.
        """
        runs = {str(r) for r in run_ids}
        if not runs:
            return
        for sid in self._threads():
            docs = self._docs.scan(sid, layout.DOCS, "")
            recs = [doc for key, doc in docs.items() if key.startswith("c/")]
            if not any(rec.get("run") in runs for rec in recs):
                continue
            kept = [rec for rec in recs if rec.get("run") not in runs]
            self._delete_docs(sid, codec.unneeded(docs, kept))

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        """Next channel version: a zero-padded counter plus a random fraction, so two forks of
        one checkpoint never write the same (channel, version) with different values."""
        if current is None:
            counter = 0
        elif isinstance(current, int):
            counter = current
        else:
            counter = int(str(current).split(".")[0])
        return f"{counter + 1:032}.{random.random():016}"

    # -- put --------------------------------------------------------------------------------
    def _put(self, sid: str, ns: str, parent_id: str | None, checkpoint: Checkpoint,
             meta: CheckpointMetadata | dict, new_versions: ChannelVersions) -> None:
        checkpoint_id = checkpoint["id"]
        parent = self._record(sid, ns, parent_id) if parent_id else None
        parent_versions = parent["cp"].get("channel_versions", {}) if parent else {}
        parent_chains = (parent.get("lists") or {}) if parent else {}
        values = checkpoint["channel_values"]
        docs: dict[str, Any] = {}
        raws: dict[str, tuple[str, dict]] = {}
        lists: dict[str, codec.ListState] = {}
        appended = None  # messages this checkpoint adds to its parent's, for the mirror
        max_bytes = self.engine.limits.document_bytes // 2
        inline = codec.carried_inline(parent.get("vals") if parent else None,
                                      checkpoint.get("channel_versions", {}), new_versions)
        for channel, version in new_versions.items():
            key = layout.blob_key(ns, channel, version)
            if channel not in values:
                inline[channel] = [str(version)]
                continue
            value = values[channel]
            if not isinstance(value, list):
                serialized = tuple(self.serde.dumps_typed(value))
                if len(serialized[1]) <= codec.INLINE_BYTES:
                    inline[channel] = codec.inline_value(version, serialized)
                    continue
                docs[key] = codec.raw_value(serialized)
                raws[channel] = (str(version), {"raw_value": serialized})
                continue
            before = parent_versions.get(channel)
            base = None
            if before is not None and str(before) != str(version):
                base = self._list_state(sid, ns, channel, before, parent_chains.get(channel))
            lists[channel], docs[key], shared = codec.list_delta(self.serde, base, value,
                                                                 version, max_bytes)
            if channel == self.messages_channel and ns == "":
                if before is None:
                    appended = value
                elif base is not None and shared == len(base):
                    appended = value[len(base):]
        # the skip-delta chain of every list channel, so a read fetches its documents at once
        chains = codec.chains(parent_chains, checkpoint.get("channel_versions", {}), lists)
        rec = {
            "id": checkpoint_id, "ns": ns, "parent": parent_id,
            "cp": self._dump_checkpoint(checkpoint), "meta": self._dump_meta(meta),
            "run": meta.get("run_id") if isinstance(meta.get("run_id"), str) else None,
            "late": False, "snap": None, "msgs": None, "epoch": None, "lists": chains,
        }
        if inline:
            rec["vals"] = inline
        key = layout.checkpoint_key(ns, checkpoint_id)
        docs[key] = rec
        if ns != "":
            self._ensure(sid)
            self._docs.put(sid, layout.DOCS, docs)
        elif not self._put_as_seen(sid, parent_id, checkpoint_id, meta, rec, docs, appended):
            self._put_root(sid, parent_id, parent, checkpoint_id, meta, rec, docs, appended)
        with self._seen_changed:
            for channel, state in lists.items():
                self._remember(self._lists, (sid, ns, channel), state)
            for channel, raw in raws.items():
                self._remember(self._blobs, (sid, ns, channel), raw)
            self._remember(self._last, (sid, ns), rec)
            self._remember(self._seen, (sid, checkpoint_id), None)
            self._seen_changed.notify_all()

    def _put_as_seen(self, sid: str, parent_id: str | None, checkpoint_id: str,
                     meta: CheckpointMetadata | dict, rec: dict, docs: dict,
                     appended: builtins.list | None) -> bool:
        """Write a root checkpoint without reading the session first, when this saver saw its
        live checkpoint last (its previous put or read) and the checkpoint continues it: the
        write expects the session at the epoch it saw then with that checkpoint's snapshot still
        its newest manual one, which a guarded tool call's step snapshot leaves in place and no
        rollback, fork, fence or other checkpoint does. False (nothing written) when that is
        not known or the session moved; `_put_root` then reads and decides."""
        with self._lock:
            seen = self._pointers.get(sid)
            known = sid in self._ensured
        if seen is None:
            if known:
                return False
            seen = (None, 0, {})  # a thread new to this saver: new to the store, most likely
        at_head, at_epoch, pointers = seen
        head, fence = pointers.get(layout.ROOT), pointers.get(layout.FENCE) or {}
        if parent_id != head or (fence and parent_id == fence.get("base")):
            return False  # a fork, or maybe a late step of a fenced run: read and decide
        try:
            self._write_root(sid, checkpoint_id, meta, rec, docs, appended, pointers, known,
                             expect=(at_head, at_epoch))
        except RollbackConflict:
            with self._lock:
                self._pointers.pop(sid, None)
            return False
        return True

    def _put_root(self, sid: str, parent_id: str | None, parent: dict | None,
                  checkpoint_id: str, meta: CheckpointMetadata | dict, rec: dict, docs: dict,
                  appended: builtins.list | None) -> None:
        """Write a root checkpoint after reading the live one and the fence: a fork first rolls the
        session back to the parent; a late checkpoint is stored without becoming the head."""
        pointers = self._docs.values(sid, layout.HEAD)
        head, fence = self._head(sid), pointers.get(layout.FENCE) or {}
        if (fence and parent_id == fence.get("base")
                and checkpoint_id <= fence.get("until", "")
                and meta.get("source") == "loop"):
            rec["late"] = True  # the next step of a run the guard rolled back, stored late
        elif parent_id is not None and head is not None and parent_id != head:
            if self._fork(sid, parent, parent_id):
                head = parent_id
            elif parent is not None and (parent.get("late") or meta.get("source") == "loop"):
                rec["late"] = True
        if rec["late"]:
            self._ensure(sid)
            self._docs.put(sid, layout.DOCS, docs)
            return
        if not (parent_id == head or (parent_id is None and head is None)):
            appended = None  # not on the live conversation: nothing to mirror
        with self._lock:
            known = sid in self._ensured
        self._write_root(sid, checkpoint_id, meta, rec, docs, appended, pointers, known)

    def _write_root(self, sid: str, checkpoint_id: str, meta: CheckpointMetadata | dict,
                    rec: dict, docs: dict, appended: builtins.list | None, pointers: dict,
                    known: bool, expect: tuple[str | None, int] | None = None) -> None:
        """Mirrored messages, snapshot and documents: one atomic write. A thread
        this saver does not know yet is created by it (one transaction for its first
        checkpoint); a known one deleted meanwhile fails the write, and `put` then creates it
        again and retries."""
        chat: builtins.list[dict] = []
        if appended:
            chat = [c for c in (to_chat(m) for m in appended if not is_notice(m)) if c]
        label = checkpoint_label(checkpoint_id, f"{meta.get('source', '?')}, "
                                                f"step {meta.get('step', '?')}")
        epoch, node = self._docs.write_session(
            sid, messages=chat, snapshot=cut_text(label, self.engine.limits.name_chars),
            documents={layout.DOCS: docs}, stamp=(layout.DOCS, layout.checkpoint_key(
                "", checkpoint_id)),
            retention=self.retention, create=None if known else _THREAD_META, expect=expect)
        assert node is not None
        rec.update(snap=node.id, msgs=node.messages, epoch=epoch)
        with self._lock:
            self._remember(self._ensured, sid, None)
            self._remember(self._pointers, sid,
                           (node.id, epoch, {**pointers, layout.ROOT: checkpoint_id}))

    def _fork(self, sid: str, parent: dict | None, parent_id: str) -> bool:
        """Roll the session back to the parent's snapshot; False when it cannot be live again."""
        snap = parent.get("snap") if parent else None
        if not snap:
            return False
        try:
            self.engine.rollback(sid, to=snap, actor=ACTOR,
                                 reason=f"fork from checkpoint {parent_id}", notice=False,
                                 kind="fork")
        except (UnknownSnapshot, SnapshotNotRestorable):
            return False
        return True

    def _deliver_notices(self, sid: str, thread_id: Any, rec: dict | None,
                         messages: int, pointers: dict) -> dict | None:
        """Hand notices appended to the session after `rec` to the graph (see module doc).

        `rec` is the live checkpoint's record; None when the guard rolled back a run of a thread
        without any stored checkpoint before it (``durability="exit"``): the notices then start
        the thread's first checkpoint. `messages` is the session's live message count,
        `pointers` its values of `layout.HEAD` (read together).
        """
        channel = self.messages_channel
        if channel is None:
            return rec
        if rec is None:
            fence = pointers.get(layout.FENCE)
            if not fence or fence.get("base") is not None:
                return None
            seen = 0
        elif rec.get("msgs") is None:
            return rec
        else:
            seen = rec["msgs"]
        if messages <= seen:
            return rec
        notices = [m for m in self._live_messages(sid)[seen:] if is_notice(m)]
        if not notices:
            return rec
        if rec is None:
            tup = None
            checkpoint: dict = dict(empty_checkpoint())
            step = -1
        else:
            tup = self._tuple(sid, thread_id, rec, {}, remember=True)
            checkpoint = dict(tup.checkpoint)
            step = tup.metadata.get("step", -1)
            step = step if isinstance(step, int) else -1
        values = checkpoint["channel_values"]
        current = values.get(channel, [])
        if not isinstance(current, list):
            return rec
        versions = checkpoint["channel_versions"]
        version = self.get_next_version(versions.get(channel))
        checkpoint.update(
            id=str(uuid6(clock_seq=step + 1)), ts=datetime.now(UTC).isoformat(),
            channel_values={**values, channel: [*current, *map(notice_message, notices)]},
            channel_versions={**versions, channel: version}, updated_channels=[channel])
        metadata = {"source": "update", "step": step + 1, "parents": {}, "rewind": "notice"}
        configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
        if rec is not None:
            configurable["checkpoint_id"] = rec["id"]
        self.put(RunnableConfig(configurable=configurable), checkpoint,  # type: ignore[arg-type]
                 metadata, {channel: version})  # type: ignore[arg-type]
        return self._last[(sid, "")]

    # -- records and values -----------------------------------------------------------------
    def _live_with_writes(self, sid: str) -> tuple[dict | None, builtins.list[dict] | None]:
        """The live root checkpoint's record (as `threads.live_checkpoint` finds it) with its
        pending writes, in one read after the snapshots'."""
        for snap, label in self._docs.newest_snapshots(sid, CHECKPOINT_LABEL, limit=CANDIDATES):
            checkpoint_id = labelled_checkpoint(label)
            if checkpoint_id is not None:
                rec, writes = self._with_writes(sid, "", checkpoint_id)
                if rec is not None and rec.get("snap") == snap:
                    return rec, writes
        return None, None

    def _head(self, sid: str) -> str | None:
        """The live root checkpoint's id (as `threads.live_checkpoint` finds it, its record
        from this saver's memory when it wrote it last), None when there is none."""
        for snap, label in self._docs.newest_snapshots(sid, CHECKPOINT_LABEL, limit=CANDIDATES):
            checkpoint_id = labelled_checkpoint(label)
            rec = self._record(sid, "", checkpoint_id) if checkpoint_id is not None else None
            if rec is not None and rec.get("snap") == snap:
                return checkpoint_id
        return None

    def _latest(self, sid: str, ns: str) -> dict | None:
        """The newest live checkpoint record of namespace `ns` (a scan: the root namespace's
        head is read before, by `get_tuple`; read, not remembered: a thread held for on-call and
        resumed after the operator's decision must see the head's record as the store has it
        now)."""
        recs = list(self._docs.scan(sid, layout.DOCS, layout.checkpoint_prefix(ns)).values())
        live = [r for r in recs if not r.get("late")]
        return max(live, key=lambda r: r["id"], default=None)

    def _record(self, sid: str, ns: str, checkpoint_id: str) -> dict | None:
        with self._lock:
            last = self._last.get((sid, ns))
        if last is not None and last["id"] == checkpoint_id:
            return last
        key = layout.checkpoint_key(ns, checkpoint_id)
        return self._docs.get(sid, layout.DOCS, [key]).get(key)

    def _list_state(self, sid: str, ns: str, channel: str, version: Any,
                    chain: codec.Chain | None) -> codec.ListState | None:
        """The list at `version` (the parent's) to build the next delta on; `chain` is its
        skip-delta chain from the parent's record (None: stored before chains were recorded)."""
        version = str(version)
        with self._lock:
            cached = self._lists.get((sid, ns, channel))
        if cached is not None and cached.version == version:
            return cached
        if chain and str(chain[-1][0]) == version:
            docs = self._docs.get(sid, layout.DOCS, codec.chain_keys(ns, channel, chain))
            encodings = codec.chain_items(docs, ns, channel, chain, version)
            if encodings is not None:
                return codec.ListState(version, encodings, chain=chain)
        key = layout.blob_key(ns, channel, version)
        doc = codec.load(self._docs.get(sid, layout.DOCS, [key]).get(key))
        if doc is None or not codec.is_list_doc(doc):
            return None
        return codec.ListState(version, self._encodings(sid, ns, channel, version, doc, {}))

    def _encodings(self, sid: str, ns: str, channel: str, version: str, doc: dict,
                   scans: dict) -> Sequence[tuple]:
        with self._lock:
            cached = self._lists.get((sid, ns, channel))
        if cached is not None and cached.version == version:
            return cached.encodings
        if doc.get("base") is None:
            return codec.unpack(doc)
        scan = scans.get((ns, channel))
        if scan is None:
            prefix = layout.blob_prefix(ns, channel)
            found = self._docs.scan(sid, layout.DOCS, prefix)
            scan = scans[(ns, channel)] = {layout.version_of(k, prefix): codec.load(d)
                                           for k, d in found.items()}
        try:
            return codec.materialize(scan, version)
        except KeyError as exc:
            raise StoreError(
                f"thread {sid!r} in {self.engine.url}: channel {channel!r} version {version} "
                f"builds on a version that is no longer stored ({exc}); the thread's checkpoints "
                "were damaged"
            ) from exc

    def _held_values(self, sid: str, ns: str, versions: dict) -> dict | None:
        """The channel values at `versions` decoded from what this saver holds (`_lists`,
        `_blobs`), without a store read; None when one of them is not held (a warm read of the
        latest checkpoint, the common case, takes this path)."""
        held: builtins.list[tuple[str, Any, Any]] = []
        with self._lock:
            for channel, version in versions.items():
                version = str(version)
                listed = self._lists.get((sid, ns, channel))
                if listed is not None and listed.version == version:
                    held.append((channel, listed.encodings, None))
                    continue
                raw = self._blobs.get((sid, ns, channel))
                if raw is None or raw[0] != version:
                    return None
                if not raw[1].get("empty"):
                    held.append((channel, None, raw[1]))
        return {channel: codec.decode_list(self.serde, encodings) if encodings is not None
                else codec.value_of(self.serde, doc)
                for channel, encodings, doc in held}

    def _values(self, sid: str, ns: str, versions: dict, chains: dict, scans: dict,
                remember: bool) -> dict:
        """The channel values at `versions`: one store read for every document they need
        (each list's skip-delta chain included, `chains` from the record), unless `scans`
        already holds a whole channel (`list` reading many checkpoints)."""
        held = self._held_values(sid, ns, versions)
        if held is not None:
            return held
        keys = {ch: layout.blob_key(ns, ch, v) for ch, v in versions.items()}
        cached_docs: dict[str, Any] = {}
        with self._lock:
            for channel, key in keys.items():
                version = str(versions[channel])
                raw = self._blobs.get((sid, ns, channel))
                listed = self._lists.get((sid, ns, channel))
                if raw is not None and raw[0] == version:
                    cached_docs[key] = raw[1]
                elif listed is not None and listed.version == version:
                    cached_docs[key] = _CACHED_LIST
        wanted = set(keys.values()) - cached_docs.keys()
        usable: dict[str, codec.Chain] = {}
        for channel, chain in chains.items():
            if channel not in versions or str(chain[-1][0]) != str(versions[channel]):
                continue
            with self._lock:
                cached = self._lists.get((sid, ns, channel))
            if (cached is not None and cached.version == str(versions[channel])) or (
                    (ns, channel) in scans):
                continue
            usable[channel] = chain
            wanted.update(codec.chain_keys(ns, channel, chain))
        found = self._docs.get(sid, layout.DOCS, sorted(wanted)) if wanted else {}
        if remember:
            with self._lock:
                for channel, key in keys.items():
                    doc = found.get(key)
                    if (isinstance(doc, bytes) and codec.is_value_doc(doc)) or (
                            isinstance(doc, dict) and doc.get("empty")):
                        self._remember(self._blobs, (sid, ns, channel),
                                       (str(versions[channel]), codec.load(doc)))
        docs = codec.load_all({**found, **cached_docs})
        values = {}
        for channel, key in keys.items():
            doc = docs.get(key)
            if doc is None or doc.get("empty"):
                continue
            if not codec.is_list_doc(doc):
                values[channel] = codec.value_of(self.serde, doc)
                continue
            version = str(versions[channel])
            chain = usable.get(channel)
            encodings: Sequence[tuple] | None = (
                None if chain is None else codec.chain_items(docs, ns, channel, chain, version))
            if encodings is None:
                encodings = self._encodings(sid, ns, channel, version, doc, scans)
                chain = chains.get(channel) if channel not in usable else None
                if chain is not None and str(chain[-1][0]) != version:
                    chain = None
            values[channel] = codec.decode_list(self.serde, encodings)
            if remember:
                with self._lock:
                    cached = self._lists.get((sid, ns, channel))
                    if cached is None or cached.version != version:
                        self._remember(self._lists, (sid, ns, channel),
                                       codec.ListState(version, encodings, chain=chain))
        return values

    def _tuple(self, sid: str, thread_id: Any, rec: dict, scans: dict,
               remember: bool, writes: builtins.list[dict] | None = None) -> CheckpointTuple:
        """The tuple of record `rec`; `writes` its pending writes when read with it (else they
        are read here)."""
        ns, checkpoint_id = rec["ns"], rec["id"]
        versions = rec["cp"].get("channel_versions", {})
        inline, versions = codec.split_inline(self.serde, rec.get("vals"), versions)
        values = self._values(sid, ns, versions, rec.get("lists") or {}, scans, remember)
        if inline:
            values = {**inline, **values}
        if writes is None:
            writes = list(self._docs.scan(
                sid, layout.DOCS, layout.write_prefix(ns, checkpoint_id)).values())
        writes = sorted(writes, key=lambda w: writes_sort_key(w["path"], w["task"], w["idx"]))
        parent = rec.get("parent")
        return CheckpointTuple(
            config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                     "checkpoint_id": checkpoint_id}},
            checkpoint=self._load_checkpoint(rec, values),
            metadata=self._load_meta(rec["meta"]),
            parent_config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns,
                                            "checkpoint_id": parent}} if parent else None,
            pending_writes=[(w["task"], w["ch"], codec.decode(self.serde, w["value"]))
                            for w in writes],
        )

    def _dump_checkpoint(self, checkpoint: Checkpoint) -> dict:
        rest = {k: v for k, v in checkpoint.items() if k not in ("channel_values", "id")}
        plain = {k: rest.pop(k) for k in _PLAIN_FIELDS if k in rest}
        if rest:
            plain["rest"] = codec.encode(self.serde, rest)
        return plain

    def _load_checkpoint(self, rec: dict, values: dict) -> Checkpoint:
        stored = dict(rec["cp"])
        rest = stored.pop("rest", None)
        if rest is not None:
            stored.update(codec.decode(self.serde, rest))
        stored["id"] = rec["id"]
        stored["channel_values"] = values
        return stored  # type: ignore[return-value]

    def _dump_meta(self, meta: Mapping[str, Any]) -> dict:
        if _plain(meta):  # LangGraph's own metadata: no round trip through the encoder
            return {"json": meta}
        try:
            if json.loads(_JSON.encode(meta)) == meta:
                return {"json": meta}
        except (TypeError, ValueError):
            pass
        return {"typed": codec.encode(self.serde, meta)}

    def _load_meta(self, stored: dict) -> CheckpointMetadata:
        if "json" in stored:
            return stored["json"]
        return codec.decode(self.serde, stored["typed"])

    # -- housekeeping -----------------------------------------------------------------------
    def _delete_docs(self, sid: str, doomed: dict[str, None]) -> None:
        if doomed:
            self._docs.put(sid, layout.DOCS, doomed)
        self._forget_cache(sid)

    def _live_messages(self, sid: str) -> builtins.list[dict]:
        try:
            return self.engine.get_session(sid).state().messages
        except UnknownSession:
            return []

    def _threads(self) -> builtins.list[str]:
        """Ids of every session this integration created, by paging through the fleet."""
        found: dict[str, None] = {}
        offset, page = 0, 500
        while True:
            infos = self.engine.sessions(limit=page, offset=offset)
            for info in infos:
                if info.meta.get(layout.META_KEY) == layout.META_VALUE:
                    found.setdefault(info.id)
            if len(infos) < page:
                return list(found)
            offset += page

    def _ensure(self, sid: str) -> None:
        with self._lock:
            if sid in self._ensured:
                self._ensured.move_to_end(sid)
                return
        # a read first: a thread this integration made needs no write (a saver per request)
        info = self.engine.session_info(sid)
        if info is None or info.meta.get(layout.META_KEY) != layout.META_VALUE:
            self.engine.session(sid, meta=_THREAD_META)
        with self._lock:
            self._remember(self._ensured, sid, None)

    def _retrying(self, sid: str, fn):
        """Run a write with the session created; once more if it was deleted meanwhile."""
        self._ensure(sid)
        try:
            return fn()
        except UnknownSession:
            self._forget(sid)
            self._ensure(sid)
            return fn()

    def _remember(self, cache: OrderedDict, key, value) -> None:
        cache[key] = value
        cache.move_to_end(key)
        while len(cache) > self._cache_size:
            cache.popitem(last=False)

    def _forget_cache(self, sid: str) -> None:
        with self._lock:
            caches: tuple[OrderedDict[Any, Any], ...] = (self._lists, self._last, self._seen,
                                                         self._blobs)
            for cache in caches:
                for key in [k for k in cache if k[0] == sid]:
                    del cache[key]
            self._pointers.pop(sid, None)

    def _forget(self, sid: str) -> None:
        self._forget_cache(sid)
        with self._lock:
            self._ensured.pop(sid, None)
