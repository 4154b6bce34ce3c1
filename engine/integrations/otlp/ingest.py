"""Spans to steps: a durable spool, per-session buffering, start-time order, idempotent span
ids, bounded memory.

**Durable before accepted.** `Ingestor.accept` writes the spans it takes to the store's spool
(fleet documents of namespace ``otlp_spool``, keyed by the receiver's `IngestConfig.spool_name`,
one atomic write per request) before it returns, so the receiver's 200 means they are in the
store. A spool document is deleted once every span of it is written (or found a duplicate); a
receiver started again under the same name takes back what is left (`replay`), and a span
written before the kill but still spooled is then a duplicate, dropped. When the store cannot
take a request (it is down, its disk is full) or is failing the writer, `accept` raises
`Unavailable` (503): spans wait in the exporters, never in this process's memory.

**Owned ids.** Every session id is the receiver's `IngestConfig.session_prefix` (``otel-``)
followed by the id the span names (or ``trace-<trace id>``), so spans cannot create the id of a
session an agent embedding Rewind opens later; and the engine refuses such an agent a handle on
a watch-only session (`Engine.session`).

**Delivery.** Exporters send spans in batches, out of order across batches, and again after a
timeout (a retry). Every accepted span waits in its session's buffer; once the oldest span of a
session has waited `settle_s` seconds, the whole buffer is written in start-time order (ties by
span id). So a span that arrives within the settle window of its neighbours takes its right place
among them, and the detector judges the steps in the order the agent made them.

**Batches.** The tool spans of one flush of a session go to the store together: each run of
them on one handle (judged, or late) is one `Session.record_steps` call, one store write, which
judges every step in order exactly as one ``with s.step(...)`` after the other would. A chat span
ends the run (its messages start a new task for the detector), so steps and messages keep their
order.

**Late spans.** A span arriving after spans of its session that started later were written is
*late*: it is still recorded as a step (after them: step numbers follow writing order) but is not
judged: it goes through a handle with the loop policy ``off``, whose verdict is discarded, and the
judging handle's window never sees it, so a late span can neither raise a flag nor re-flag a loop
that was flagged already. Its span id, start time and step number are kept in the session's
``otlp`` document (``late``), so its true place can be shown.

**Idempotency.** The ids of the last `remembered_span_ids` spans written to a session are kept in
its ``otlp`` document (``state``) and in memory; a span id seen before is counted as a duplicate
and dropped, across restarts too. The document is written in the same store write as the flush's
last steps (`Session.record_steps` takes it along), so a failure cannot leave those steps written
and their ids forgotten. (A flush that takes several writes, a chat span or late spans between tool
spans, writes the ids with its last: a failure between them forgets the earlier ones.)

**Watch-only.** Sessions are created with meta ``{"source": "otlp", "watch_only": True}`` and
judged with the loop policy ``flag``: Rewind cannot roll back or notify an agent it does not run,
so a loop is flagged (and paged by `rewind alert`), never acted on. No write-ahead snapshots are
taken (nothing could be restored into the agent). A quarantined tool cannot be refused either,
yet the engine records a quarantined call as a refusal (a step the detector skips): the span is
counted (``quarantined``) and what really happened (span, tool, outcome) is kept in the session's
``otlp`` document ``quarantined``.

**Embedded agents.** A span naming a session that exists and is not watch-only (an agent that
embeds Rewind and exports traces too), under the name the span gives or the receiver's, is
dropped (``embedded``): that session is guarded already, and its steps must not be written
twice.

**Bounds.** At most `max_session_spans` spans wait per session and `max_buffered_spans` in all:
a request that would pass either is refused whole (`Backpressure`, HTTP 429, safe to retry since
span ids are idempotent), unless nothing waits there yet (a request alone over a bound could
never fit, and the body limit bounds it). At most `max_sessions` sessions' states and
`max_traces` trace-to-session links are kept in memory (least recently used go first; a state
is reread from its document); a state keeps its remembered span ids as one bytearray.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import sys
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from engine.errors import SizeLimitExceeded, StoreError
from engine.integrations.otlp.conventions import Action, classify, valid_session_id
from engine.integrations.otlp.decode import SpanData

if TYPE_CHECKING:
    from engine.engine import Engine
    from engine.sessions.session import Session, StepCall

__all__ = ["Backpressure", "IngestConfig", "Ingestor", "Unavailable"]

NAMESPACE = "otlp"
SPOOL = "otlp_spool"
"""Fleet document namespace of the receivers' spool: what was accepted and not yet written."""
WATCHED = {"source": "otlp", "watch_only": True}
"""The meta of every session the receiver creates."""
LATE_KEPT = 100


@dataclass(frozen=True)
class IngestConfig:
    """How the receiver turns spans into steps, and its memory bounds."""

    settle_s: float = 2.0
    """Seconds a session's spans wait for their out-of-order neighbours before being written."""
    session_attributes: tuple[str, ...] = ()
    """Attributes naming the session, read after `gen_ai.conversation.id` (see conventions)."""
    max_session_spans: int = 5_000
    """Spans that may wait in one session's buffer."""
    max_buffered_spans: int = 100_000
    """Spans that may wait in all buffers together."""
    remembered_span_ids: int = 2_048
    """Span ids kept per session to drop redeliveries."""
    max_sessions: int = 1_000
    """Session states kept in memory."""
    max_traces: int = 10_000
    """Trace-to-session links kept in memory (a span with no session id of its own joins the
    session another span of its trace named)."""
    session_prefix: str = "otel-"
    """Every session the receiver writes is named by this prefix and the id the span gives
    (or ``trace-<trace id>``): spans cannot create an id outside it, so they cannot squat a
    session an embedded agent opens later. "" writes the ids as the spans name them."""
    spool_name: str = "receiver"
    """This receiver's name in the spool (`rewind otlp`: host:port); a receiver started again
    under the same name replays what the earlier one accepted and had not written."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:32]


def _span_key(span_id: str) -> bytes:
    """A span id as the 8 bytes it is (OTLP's width); an id of another width (no valid
    exporter sends one) as 8 bytes of its digest, so every key has the same width and the
    remembered ids are stored as one string of them."""
    try:
        raw = bytes.fromhex(span_id)
    except ValueError:
        raw = span_id.encode("utf-8", "replace")
    if len(raw) == 8:
        return raw
    return hashlib.blake2b(raw, digest_size=8).digest()


class Backpressure(Exception):
    """Accepting a request would pass a memory bound; nothing of it was accepted."""


class Unavailable(Exception):
    """The store cannot take a request's spans now; nothing of it was accepted (HTTP 503)."""


def _spooled(a: Action) -> dict[str, Any]:
    """An accepted action as spool data (`Action(**data)` gives it back)."""
    return {f.name: getattr(a, f.name) for f in fields(a)}


class _SpanIds:
    """The ids (8 bytes each, see `_span_key`) of the last spans written to a session, oldest
    first, as one bytearray: 16 KiB for 2,048 ids, where a dict of them took about 200 KiB."""

    __slots__ = ("data",)

    def __init__(self) -> None:
        self.data = bytearray()

    def __contains__(self, key: bytes) -> bool:
        at = self.data.find(key)
        while at != -1 and at % 8:
            at = self.data.find(key, at + 1)
        return at != -1

    def add(self, key: bytes, keep: int) -> None:
        """Remember `key`, keeping the last `keep` ids."""
        self.data += key
        over = len(self.data) - 8 * keep
        if over > 0:
            del self.data[:over]


@dataclass
class _State:
    """What the writer remembers of one session between flushes."""

    judged: Session
    late: Session | None = None
    seen: _SpanIds = field(default_factory=_SpanIds)
    """Span ids (8 bytes each, see `_span_key`) of the last spans written, oldest first."""
    high_ns: int = 0
    last_user: str | None = None
    """Digest of the last user message written: a model turn repeats its input every call."""
    late_spans: list[dict[str, Any]] = field(default_factory=list)
    quarantined: list[dict[str, Any]] = field(default_factory=list)
    meta: dict[str, str] = field(default_factory=dict)
    dirty: set[str] = field(default_factory=set)
    """Documents of the session changed since they were last written."""


@dataclass
class _Batch:
    """Tool spans of one session waiting to be written together through one handle."""

    handle: Session | None = None
    calls: list[StepCall] = field(default_factory=list)
    actions: list[tuple[Action, bool]] = field(default_factory=list)
    """The span of each call, and whether it is late."""
    skipped: int = 0
    """Items of the flush taken without a call (duplicates, malformed spans)."""


class Ingestor:
    """Buffers accepted spans per session and writes them through the engine's API.

    `accept` is called by request threads; `flush` by one writer thread (or a test)."""

    def __init__(self, engine: Engine, config: IngestConfig | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.engine = engine
        self.config = config or IngestConfig()
        self.clock = clock
        self.counts: dict[str, int] = dict.fromkeys(
            ("spans", "tool", "chat", "unknown", "duplicate", "late", "steps", "messages",
             "quarantined", "refused", "malformed", "embedded", "errors", "replayed"), 0)
        """Running totals: spans received, tool / chat / unknown spans, duplicates dropped,
        late spans, steps and messages written, quarantined tools, spans refused (429), spans
        the engine refused as data (dropped), spans of sessions an embedded engine guards
        (dropped), write errors (retried)."""
        self.last_error: str | None = None
        self.others: dict[str, int] = {}
        """After `replay`: spool documents other receivers (by name) left, which they write
        when started again under that name."""
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._pending: dict[str, dict[str, tuple[float, Action, str]]] = {}
        """Per session, per span id: when it was accepted, the span, its spool document."""
        self._spool_left: dict[str, int] = {}
        """Per spool document: how many of its actions are still to be written."""
        self._spool_finished: list[str] = []
        """Spool documents all written, to delete."""
        self._failing: str | None = None
        """The writer's last store error, until a write succeeds again."""
        self._buffered = 0
        self._traces: OrderedDict[str, str] = OrderedDict()
        self._states: OrderedDict[str, _State] = OrderedDict()

    # -- request side ---------------------------------------------------------------------
    def accept(self, spans: Sequence[SpanData]) -> int:
        """Classify `spans`, put the agent steps among them in the store's spool, then in the
        buffers. Returns how many were taken (unknown spans are counted and ignored). When it
        returns, what it took is durable: a receiver killed right after finds it in the spool
        when it starts again (`replay`).

        Raises:
            Backpressure: a bound would be passed; nothing was taken.
            Unavailable: the store cannot take them now (or is failing the writer); nothing
                was taken.
        """
        actions, malformed = [], 0
        for span in spans:
            try:
                action = classify(span, self.config.session_attributes)
            except (ValueError, TypeError, KeyError, AttributeError):
                malformed += 1  # one odd span must not cost the rest of the request
                continue
            if action is not None:
                actions.append(action)
        with self._lock:
            self.counts["malformed"] += malformed
            if self._failing is not None and self._buffered:
                # Spans that cannot be written must not pile up in memory: the exporters
                # keep them, and retry.
                self.counts["refused"] += len(spans)
                raise Unavailable(f"the store is failing ({self._failing}); {self._buffered} "
                                  "span(s) wait to be written; retry later")
            for a in actions:
                if a.session is not None:
                    a.named = a.session
                    a.session = self._owned(a.session)
                    self._link(a.trace_id, a.session)
            by_session: dict[str, list[Action]] = {}
            for a in actions:
                if a.session is None:
                    # through valid_session_id: OTLP/JSON lets a trace id be any hex, and an
                    # id no store takes would be retried forever
                    a.session = self._traces.get(a.trace_id) or self._owned(
                        f"trace-{a.trace_id or 'none'}")
                by_session.setdefault(a.session, []).append(a)
            # A request over a bound is refused only while others wait: its retry fits once
            # they are written, while one that could never fit (a Collector's batch can hold
            # more spans of one session than a buffer) would be retried until it is lost. A
            # request is bounded by the body limit, so memory stays bounded.
            if self._buffered and (
                    self._buffered + len(actions) > self.config.max_buffered_spans):
                self.counts["refused"] += len(spans)
                raise Backpressure(f"{self._buffered} spans are waiting to be written (at most "
                                   f"{self.config.max_buffered_spans}); retry later")
            for sid, items in by_session.items():
                waiting = len(self._pending.get(sid, ()))
                if waiting and waiting + len(items) > self.config.max_session_spans:
                    self.counts["refused"] += len(spans)
                    raise Backpressure(f"session {sid!r} has {waiting} spans waiting (at most "
                                       f"{self.config.max_session_spans}); retry later")
            # Durable before buffered (and before the 200): under the lock, so the spool
            # holds requests in the order they were buffered.
            try:
                keys = self._spool(actions)
            except (StoreError, ConnectionError, sqlite3.Error) as exc:
                self.counts["refused"] += len(spans)
                raise Unavailable(f"the store cannot take the spans now ({exc}); retry "
                                  "later") from exc
            self._buffer(actions, keys, self.clock())
            self.counts["spans"] += len(spans)
            self.counts["unknown"] += len(spans) - len(actions) - malformed
            for a in actions:
                self.counts[a.kind] += 1
        return len(actions)

    def _owned(self, sid: str) -> str:
        """The receiver's session id for the id a span names: under the receiver's prefix, so
        a span cannot create (squat) an id an embedded agent may open later."""
        prefix = self.config.session_prefix
        full = prefix + sid
        # an id too long (or not printable) after the prefix: the prefix and a digest
        return full if valid_session_id(full) == full else prefix + valid_session_id(
            "\0" + full)

    def _buffer(self, actions: Sequence[Action], keys: Sequence[str], now: float) -> None:
        """Put spooled `actions` (the i-th under spool key keys[i]) in their sessions' buffers;
        the caller holds the lock."""
        for a, key in zip(actions, keys, strict=True):
            assert a.session is not None
            buffer = self._pending.setdefault(a.session, {})
            if a.span_id in buffer:
                self.counts["duplicate"] += 1
                self._spooled_done(key)
                continue
            buffer[a.span_id] = (now, a, key)
            self._buffered += 1

    # -- the spool ------------------------------------------------------------------------
    def _spool(self, actions: Sequence[Action]) -> list[str]:
        """Write `actions` to the store's spool (fleet documents of namespace ``otlp_spool``,
        under this receiver's name) in one atomic write; returns each one's document key.

        Raises:
            StoreError: the store did not take them (nothing was written).
        """
        if not actions:
            return []
        limit = max(1, self.engine.limits.document_bytes // 2)
        docs: dict[str, Any] = {}
        keys: list[str] = []
        chunk: list[dict[str, Any]] = []
        size = 0
        stamp = f"{self.config.spool_name}/{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"

        def close() -> None:
            nonlocal chunk, size
            if chunk:
                docs[f"{stamp}-{len(docs):04d}"] = {"v": 1, "actions": chunk}
                chunk, size = [], 0

        for a in actions:
            item = _spooled(a)
            n = len(json.dumps(item, default=str))
            if chunk and size + n > limit:
                close()
            chunk.append(item)
            size += n
            keys.append(f"{stamp}-{len(docs):04d}")
        close()
        try:
            self.engine.documents.put_fleet(SPOOL, docs)
        except (TypeError, ValueError):
            # A value with no JSON form (or a document over the limit): as text, as the
            # engine would record it anyway.
            self.engine.documents.put_fleet(SPOOL, json.loads(json.dumps(docs, default=str)))
        for key in docs:
            self._spool_left[key] = self._spool_left.get(key, 0) + len(
                docs[key]["actions"])
        return keys

    def _spooled_done(self, key: str) -> None:
        """One action of spool document `key` is written (or was not needed)."""
        left = self._spool_left.get(key, 0) - 1
        if left > 0:
            self._spool_left[key] = left
        else:
            self._spool_left.pop(key, None)
            self._spool_finished.append(key)

    def _drop_finished(self) -> None:
        """Delete the spool documents whose actions are all written. A failure keeps them
        listed for the next flush: a replay of a written span is a duplicate, dropped."""
        with self._lock:
            done, self._spool_finished = self._spool_finished, []
        if not done:
            return
        try:
            self.engine.documents.put_fleet(SPOOL, dict.fromkeys(done))
        except Exception:  # noqa: BLE001 - the writer must outlive a store hiccup
            with self._lock:
                self._spool_finished.extend(done)

    def replay(self) -> int:
        """Take back the spans this receiver's spool holds (what an earlier run under the
        same `IngestConfig.spool_name` accepted and had not written: it was killed, or the
        store failed it); they are written at the next flush. Returns how many.

        Raises:
            StoreError: the store cannot be read.
        """
        prefix = self.config.spool_name + "/"
        spool = self.engine.documents.fleet(SPOOL)
        found = {k: v for k, v in spool.items() if k.startswith(prefix)}
        self.others = {}
        for key in spool:
            if not key.startswith(prefix):
                name = key.rpartition("/")[0]
                self.others[name] = self.others.get(name, 0) + 1
        taken = 0
        with self._lock:
            ripe = self.clock() - self.config.settle_s
            for key, doc in found.items():
                items = doc.get("actions") if isinstance(doc, dict) else None
                actions = []
                for item in items or []:
                    try:
                        actions.append(Action(**item))
                    except TypeError:
                        self.counts["malformed"] += 1
                if not actions:
                    self._spool_finished.append(key)
                    continue
                self._spool_left[key] = self._spool_left.get(key, 0) + len(actions)
                for a in actions:
                    if a.session is not None:
                        self._link(a.trace_id, a.session)
                self._buffer(actions, [key] * len(actions), ripe)
                taken += len(actions)
            self.counts["replayed"] += taken
        return taken

    def _link(self, trace_id: str, sid: str) -> None:
        self._traces[trace_id] = sid
        self._traces.move_to_end(trace_id)
        while len(self._traces) > self.config.max_traces:
            self._traces.popitem(last=False)

    @property
    def buffered(self) -> int:
        """Spans accepted and not yet written."""
        return self._buffered

    # -- writer side ----------------------------------------------------------------------
    def flush(self, force: bool = False) -> int:
        """Write every session whose oldest waiting span has settled (all with `force`), in
        start-time order. Returns the number of spans taken from the buffers."""
        with self._write_lock:
            now = self.clock()
            ripe: dict[str, list[tuple[float, Action, str]]] = {}
            with self._lock:
                for sid, buffer in list(self._pending.items()):
                    if force or min(t for t, _, _ in buffer.values()) <= (
                            now - self.config.settle_s):
                        ripe[sid] = list(buffer.values())
                        del self._pending[sid]
                        self._buffered -= len(buffer)
            for sid, items in ripe.items():
                items.sort(key=lambda item: (item[1].start_ns, item[1].span_id))
                done = self._write(sid, items)
                with self._lock:
                    for _, _, key in items[:done]:
                        self._spooled_done(key)
            self._drop_finished()
            return sum(len(items) for items in ripe.values())

    def _write(self, sid: str, items: list[tuple[float, Action, str]]) -> int:
        """Write `items` to session `sid`; returns how many were taken (the rest went back to
        the buffer, to be retried, and stay in the spool)."""
        done = 0
        try:
            state = self._state(sid, items)
            if state is None:
                self.counts["embedded"] += len(items)
                return len(items)
            batch = _Batch()
            for _, action, _ in items:
                if _span_key(action.span_id) in state.seen:
                    self.counts["duplicate"] += 1
                    batch.skipped += 1
                    continue
                late = action.start_ns < state.high_ns
                handle = state.judged
                if late:
                    if state.late is None:
                        state.late = self.engine.session(sid, meta=dict(WATCHED), on_loop="off")
                    handle = state.late
                if batch.handle is not handle or action.kind != "tool":
                    done += self._record(state, batch)
                    batch.handle = handle
                if action.kind == "tool":
                    self._prepare(state, batch, action, late)
                else:
                    if late:
                        self.counts["late"] += 1
                    self._messages(handle, state, action)
                    self._remember(state, action)
                    done += 1
            done += self._record(state, batch, documents=self._documents(state))
            if state.dirty:  # no steps took the documents along, or they changed after
                self.engine.documents.put(sid, NAMESPACE, self._documents(state))
                state.dirty.clear()
            with self._lock:
                self._failing = None
            return len(items)
        except Exception as exc:  # noqa: BLE001 - the writer must outlive a store hiccup
            self.counts["errors"] += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            print(f"rewind otlp: writing session {sid!r} failed ({self.last_error}); "
                  f"{len(items) - done} span(s) will be retried", file=sys.stderr)
            self._states.pop(sid, None)
            with self._lock:
                if isinstance(exc, StoreError):
                    self._failing = self.last_error
                buffer = self._pending.setdefault(sid, {})
                for arrived, action, key in items[done:]:
                    if action.span_id not in buffer:
                        buffer[action.span_id] = (arrived, action, key)
                        self._buffered += 1
                    else:
                        self._spooled_done(key)
            return done

    def _state(self, sid: str, items: list[tuple[float, Action, str]]) -> _State | None:
        meta: dict[str, str] = {}
        for _, a, _ in items:
            meta.update(a.meta)
        state = self._states.get(sid)
        if state is not None:
            self._states.move_to_end(sid)
            if all(state.meta.get(k) == v for k, v in meta.items()):
                return state
            state.meta.update(meta)
            self.engine.session(sid, meta={**WATCHED, **meta})
            return state
        named = {a.named for _, a, _ in items if a.named and a.named != sid}
        for candidate in (sid, *sorted(named)):
            known = self.engine.session_info(candidate)
            if known is not None and not known.meta.get("watch_only"):
                # an agent that embeds Rewind is guarded already: its spans add nothing
                return None
        handle = self.engine.session(sid, meta={**WATCHED, **meta}, on_loop="flag")
        state = _State(judged=handle, meta=meta)
        saved = self.engine.documents.get(sid, NAMESPACE, ["state", "late", "quarantined"])
        doc = saved.get("state") or {}
        ids = base64.b64decode(doc.get("ids") or "")
        for i in range(0, len(ids) - 7, 8):
            state.seen.add(ids[i:i + 8], self.config.remembered_span_ids)
        for span in doc.get("seen", []):  # as written before the ids were one string
            state.seen.add(_span_key(span), self.config.remembered_span_ids)
        state.high_ns = int(doc.get("high_ns") or 0)
        state.last_user = doc.get("last_user")
        state.late_spans = list(saved.get("late") or [])
        state.quarantined = list(saved.get("quarantined") or [])
        self._states[sid] = state
        while len(self._states) > self.config.max_sessions:
            self._states.popitem(last=False)
        return state

    def _prepare(self, state: _State, batch: _Batch, action: Action, late: bool) -> None:
        """Add a tool span to `batch` as a finished call (a span the engine refuses as data
        is counted malformed and remembered, as if written)."""
        assert batch.handle is not None
        try:
            call = self._call(batch.handle, action)
        except (ValueError, TypeError) as exc:
            # The span, not the store: retrying would fail the same way, forever.
            self._malformed(action, exc)
            batch.skipped += 1
        else:
            batch.calls.append(call)
            batch.actions.append((action, late))
        self._remember(state, action)

    def _record(self, state: _State, batch: _Batch,
                documents: dict[str, Any] | None = None) -> int:
        """Write the calls of `batch` in one store write, with `documents` (the session's
        ``otlp`` documents) when given and there are calls; returns how many items of the flush
        it took (written, duplicates and malformed spans), and empties it."""
        taken = batch.skipped + len(batch.calls)
        if batch.calls:
            assert batch.handle is not None
            if documents:
                batch.handle.record_steps(batch.calls, documents=(NAMESPACE, documents))
                state.dirty.clear()
            else:
                batch.handle.record_steps(batch.calls)
        for call, (action, late) in zip(batch.calls, batch.actions, strict=True):
            step = call.n
            if call.refused is not None:
                self.counts["quarantined"] += 1
                step = None
                state.quarantined = [*state.quarantined, {
                    "span": action.span_id, "tool": action.tool, "ok": action.ok,
                    "error": (action.error or "")[:500]}][-LATE_KEPT:]
                state.dirty.add("quarantined")
            else:
                self.counts["steps"] += 1
            if late:
                self.counts["late"] += 1
                state.late_spans = [*state.late_spans, {"span": action.span_id, "step": step,
                                    "start_ns": action.start_ns}][-LATE_KEPT:]
                state.dirty.add("late")
        batch.calls, batch.actions, batch.skipped = [], [], 0
        return taken

    def _messages(self, handle: Session, state: _State, action: Action) -> None:
        messages = [m for m in action.messages
                    if not (m["role"] == "user" and _digest(m["content"]) == state.last_user)]
        try:
            if messages:
                handle.append_messages(messages)
                self.counts["messages"] += len(messages)
        except (ValueError, TypeError) as exc:
            self._malformed(action, exc)
            return
        users = [_digest(m["content"]) for m in action.messages if m["role"] == "user"]
        state.last_user = users[-1] if users else state.last_user
        state.dirty.add("state")

    def _malformed(self, action: Action, exc: Exception) -> None:
        self.counts["malformed"] += 1
        self.last_error = f"span {action.span_id}: {type(exc).__name__}: {exc}"

    def _remember(self, state: _State, action: Action) -> None:
        state.seen.add(_span_key(action.span_id), self.config.remembered_span_ids)
        state.high_ns = max(state.high_ns, action.start_ns)
        state.dirty.add("state")

    def _call(self, handle: Session, action: Action) -> StepCall:
        """The span as a finished call of `handle`, not yet recorded (`Session.record_steps`).

        Raises:
            ValueError, TypeError: the engine refuses the span as data (a tool name it cannot
                store); the call is then not recorded.
        """
        tool = (action.tool or "tool")[: self.engine.limits.name_chars]
        try:
            call = handle.step(tool, action.args, snapshot=False, turn=action.turn)
        except (SizeLimitExceeded, TypeError, ValueError):
            # Too large or not JSON: the digest still lets the detector see a repeat.
            text = repr(action.args).encode("utf-8", "replace")
            call = handle.step(tool, {"digest": hashlib.sha256(text).hexdigest(),
                                      "bytes": len(text)}, snapshot=False, turn=action.turn)
        if action.ok:
            try:
                call.ok(action.result)
            except (ValueError, TypeError) as exc:
                # recorded failed, as a `with` block records what raised in it; and counted
                call.fail(exc)
                self._malformed(action, exc)
        else:
            call.fail(action.error or "error")
        return call

    @staticmethod
    def _documents(state: _State) -> dict[str, Any]:
        """The session's ``otlp`` documents that changed since they were written: ``state``
        (the remembered span ids, as one base64 string of 8 bytes each, oldest first; the
        latest start; the last user message), ``late`` and ``quarantined``."""
        docs: dict[str, Any] = {}
        if "state" in state.dirty:
            docs["state"] = {"ids": base64.b64encode(state.seen.data).decode("ascii"),
                             "high_ns": state.high_ns, "last_user": state.last_user}
        if "late" in state.dirty:
            docs["late"] = state.late_spans
        if "quarantined" in state.dirty:
            docs["quarantined"] = state.quarantined
        return docs

    def run(self, stop: threading.Event, interval_s: float = 0.1) -> None:
        """Flush settled sessions every `interval_s` until `stop` is set, then everything."""
        while not stop.wait(interval_s):
            self.flush()
        self.flush(force=True)
