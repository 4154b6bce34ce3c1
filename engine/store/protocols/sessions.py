"""Sessions and steps: the part of the storage contract an agent writes through on every turn.

Part of `engine.store.base.Store` (see there for the model and the rules every method follows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from engine.records import (
    MessageRecord,
    ReplayHistory,
    SessionInfo,
    SnapshotNode,
    StepRecord,
)
from engine.store.requests import (
    ALL_SESSIONS,
    AuditEntry,
    DecisionRequest,
    Retention,
    SessionCursor,
    SessionFilter,
    SessionWrite,
    StepOutcome,
    StepStart,
    StepTicket,
)
from engine.types import SessionStatus, StoredVerdict


@runtime_checkable
class SessionStore(Protocol):
    """Sessions and steps: the session records, their history (messages and versioned
    key-value namespaces) and the steps recorded on them."""

    def ensure_session(self, sid: str, meta: dict[str, Any] | None, now: float) -> SessionInfo:
        """Create the session if missing; merge `meta` keys into an existing one.

        Args:
            sid: the session id.
            meta: free metadata (tenant, scenario, prompt_version, locale, …); None or {} leaves
                an existing session's meta as it is.
            now: creation time of a new session.

        Returns:
            The session summary after the call.
        """
        ...

    def get_session(self, sid: str) -> SessionInfo | None:
        """The session summary.

        Returns:
            The summary, or None when no such session exists.
        """
        ...

    def list_sessions(
        self,
        where: SessionFilter = ALL_SESSIONS,
        *,
        limit: int = 200,
        offset: int = 0,
        after: SessionCursor | None = None,
    ) -> list[SessionInfo]:
        """Sessions matching every field `where` gives, most recently active first.

        Args:
            where: the filter (status, tenant, scenario, prompt_version, updated_since);
                `ALL_SESSIONS` for none.
            limit: at most this many.
            offset: skip this many first (paging; each page costs the rows skipped).
            after: start right after this session (keyset paging: each page costs only what
                it reads; `SessionCursor.after(last_of_the_previous_page)`).

        Returns:
            The summaries, newest `updated_at` first (ties: greater id first).
        """
        ...

    def count_sessions(self, where: SessionFilter = ALL_SESSIONS) -> int:
        """How many sessions match every field `where` gives (as in `list_sessions`).

        Args:
            where: the filter; `ALL_SESSIONS` for none.

        Returns:
            The count. One field besides `updated_since` is counted without loading the
            sessions; a Redis store loads them to count a status and a facet, or two facets.
        """
        ...

    def set_status(
        self, sid: str, status: SessionStatus, verdict: StoredVerdict | None, now: float
    ) -> None:
        """Set the session status; a verdict (loop) is stored as the session's last verdict and
        counted as a loop.

        Raises:
            UnknownSession: no such session.
        """
        ...

    def delete_session(self, sid: str, now: float, audit: AuditEntry | None = None) -> bool:
        """Delete a session and everything it owns (audit events and compensations stay), and
        write `audit` (about `sid`) when it existed: in the same transaction on SQLite; on Redis
        before the delete (the audit log is fleet-wide there), so a crash between the two can
        leave the audit row of an attempted delete, never a deleted session without one.

        Returns:
            True if it existed.
        """
        ...

    def append_messages(self, sid: str, messages: list[dict[str, Any]], now: float) -> int:
        """Append chat messages (each with a ``role``) to the live line.

        Returns:
            The session's epoch after the write.

        Raises:
            UnknownSession: no such session.
        """
        ...

    def put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> int:
        """Set keys of namespace `ns` (None deletes a key), versioned, in one write.

        Returns:
            The session's epoch after the write.

        Raises:
            UnknownSession: no such session.
        """
        ...

    def get_all(self, sid: str, ns: str) -> dict[str, Any]:
        """Current values of namespace `ns` on the live line ({} for an unknown session)."""
        ...

    def get_session_values(self, sid: str, ns: str) -> tuple[SessionInfo | None, dict[str, Any]]:
        """`get_session` and `get_all` of namespace `ns` in one read: the session summary (None
        for an unknown session) and the current values ({} then). What an integration reads
        first on every turn (LangGraph's latest checkpoint: the thread and the guard's fence)."""
        ...

    def get_session_docs(self, sid: str, ns: str, doc_ns: str, keys: list[str], *,
                         prefix: str | None = None
                         ) -> tuple[tuple[str | None, int, int] | None, dict[str, Any],
                                    dict[str, Any]]:
        """Where the session is, the values of namespace `ns` (as `get_all`) and documents of
        namespace `doc_ns` (as `doc_get` of `keys` and `prefix`) in one read (one statement
        on SQLite). Where it is: its head snapshot id, epoch and live message count (None for
        an unknown session, with {} and {}). A reader that can guess which documents the
        values will name (LangGraph's latest checkpoint, read warm) needs no second read."""
        ...

    def live_messages(self, sid: str, *, since: int = 0,
                      until: int | None = None) -> list[dict[str, Any]]:
        """Messages on the live line, oldest first ([] for an unknown session).

        Args:
            since: only those at live-line positions `since` and after (0: all); a read of
                the tail costs what it returns, not the history.
            until: only those before position `until` (None: to the end); a read of a span
                costs what it returns.
        """
        ...

    def live_tail(self, sid: str, ns: str, last: int
                  ) -> tuple[int, int, dict[str, Any], list[dict[str, Any]]] | None:
        """In one consistent read (one round trip): the session's epoch, its live message
        count, the current values of namespace `ns` (as `get_all`) and its last `last` live
        messages, oldest first (as `live_messages` from position count - `last`; all of them
        when fewer, none for 0). None for an unknown session."""
        ...

    def all_messages(self, sid: str) -> list[MessageRecord]:
        """Every message, live and abandoned, in write order."""
        ...

    def begin_step(
        self,
        sid: str,
        step: StepStart,
        snapshot_label: str | None,
        now: float,
        retention: Retention,
    ) -> StepTicket:
        """Record the start of a step (status running), after a write-ahead snapshot of kind
        ``step`` when `snapshot_label` is given; both in one atomic write.

        Returns:
            The ticket that `end_step` takes.

        Raises:
            UnknownSession: no such session.
        """
        ...

    def end_step(self, sid: str, ticket: StepTicket, outcome: StepOutcome, now: float) -> bool:
        """Record a step's outcome.

        A step whose session was rolled back while it ran lands on the abandoned branch and is
        marked late; it never reaches the live line. A late side-effecting step that ended ok
        gets its compensation queued, as the rollback would have done. A looping verdict also
        sets the session status to looping and stores the verdict as the session's last verdict;
        a step that ends ok without one makes the session healthy again (unless stopped).

        Returns:
            True when the step was late.

        Raises:
            UnknownSession: no such session.
        """
        ...

    def record_steps(
        self,
        sid: str,
        steps: list[tuple[StepStart, StepOutcome]],
        expect: tuple[int, int],
        now: float,
        documents: tuple[str, dict[str, Any]] | None = None,
    ) -> int | None:
        """Record steps that already ended (no write-ahead snapshot), in order, in one atomic
        write: each as `begin_step` without a snapshot followed by `end_step` would, feed
        events included, but none can be late.

        Args:
            expect: (step count, epoch) the caller saw: nothing is written when the session
                has other steps or another epoch now (the caller numbered the steps, and
                judged them, from what it saw).
            documents: (namespace, documents) set in the same write, as `doc_put` would (None
                deletes one); not written either when `expect` no longer holds.

        Returns:
            The number of the first step written, or None when `expect` no longer holds.

        Raises:
            UnknownSession: no such session.
        """
        ...

    def steps(
        self, sid: str, *, live_only: bool = False, last: int | None = None
    ) -> list[StepRecord]:
        """Steps in step order.

        Args:
            live_only: only the steps on the live line.
            last: keep only the newest N.
        """
        ...

    def replay_histories(self, sids: Sequence[str]) -> dict[str, ReplayHistory]:
        """What a replay reads of each session: its steps (every branch) and, as None, each
        user message, in the order they happened (`engine.records.ReplayHistory`): the same
        as `steps` and `all_messages` give, read together for many sessions.

        Args:
            sids: the sessions; read as one batch (the caller bounds its size).

        Returns:
            Session id -> its history, for every id given (an unknown session: empty).
        """
        ...

    def add_notice(self, sid: str, message: dict[str, Any], actor: str, now: float) -> None:
        """Append a recovery notice (a chat message) to the live line and audit it.

        Raises:
            UnknownSession: no such session.
        """
        ...

    def decide(self, sid: str, request: DecisionRequest) -> StoredVerdict:
        """Write an operator's decision on a session waiting for on-call, all in one atomic
        write: the decision on the session's last verdict (``decision``, see
        `DecisionRequest.record`), the note appended to the live line (a release's), status
        ``healthy`` (a release) or ``stopped`` (a stop), the audit row (action ``release`` or
        ``stop``) and feed events.
        The check that the session waits with no decision yet (`refuse_undecidable`) runs in
        that same write, so of two operators deciding at once, the second is refused.

        Returns:
            The session's last verdict with the decision.

        Raises:
            UnknownSession: no such session. DecisionRefused: it does not wait, or was decided
                already. Nothing is written.
        """
        ...

    # -- atomic multi-part writes (one door to the store) ------------------------------------
    def write_session(
        self, sid: str, write: SessionWrite, now: float, retention: Retention
    ) -> tuple[int, SnapshotNode | None]:
        """Several writes to one session as one atomic write (one transaction on SQLite, one
        script on Redis and Redis Cluster): all of them happen, or none.

        In this order, each exactly as its own method would write it (same sequence numbers,
        same feed events): `write["messages"]` appended (`append_messages`; skipped when
        `write["messages_if_empty"]` and the live line holds messages already), each namespace
        of `write["values"]` set (`put`), a ``manual`` snapshot labelled `write["snapshot"]`
        taken (`take_snapshot`, with `retention`), and each namespace of `write["documents"]`
        set (`doc_put`). The document `write["stamp"]` names, a dict among the documents, is
        stored with the snapshot's ``snap`` (id), ``msgs`` (live message count) and ``epoch``.
        With `write["create"]` (meta), a missing session is created first (`ensure_session`):
        in the same transaction on SQLite, as a step of its own before the script on Redis.
        With `write["expect"]` (snapshot id, epoch), the write happens only when the session
        is at that epoch with that newest manual snapshot on its live line (step snapshots
        taken since do not count), checked in the same transaction (script); a session just
        created is at (None, 0).

        Returns:
            (the session's epoch, the snapshot taken or None).

        Raises:
            UnknownSession: no such session (and no `create`). Nothing is written.
            RollbackConflict: the session is not at `write["expect"]`. Nothing is written.
            ValueError: a stamp without a snapshot, or naming no dict among the documents.
        """
        ...
