"""Audit and events: the part of the storage contract operators and the console read back.

Part of `engine.store.base.Store` (see there for the model and the rules every method follows).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from engine.records import AuditEvent, Event


@runtime_checkable
class AuditStore(Protocol):
    """The audit log (who did what, why) and the event feed (what changed, by cursor)."""

    def audit(
        self,
        *,
        session: str | None = None,
        actor: str | None = None,
        action: str | None = None,
        since: float | None = None,
        limit: int = 1000,
    ) -> list[AuditEvent]:
        """Audit events matching every given filter, newest first.

        Args:
            session, actor, action: only events with this value.
            since: only events at or after this time.
            limit: at most this many.
        """
        ...

    def count_audit(self, action: str, since: float) -> int:
        """How many audit events of `action` happened at or after `since` (none loaded)."""
        ...

    def add_audit(
        self,
        actor: str,
        action: str,
        session: str | None,
        snapshot: str | None,
        reason: str | None,
        detail: dict[str, Any],
        now: float,
    ) -> None:
        """Append an audit event (and a feed event of type `action`)."""
        ...

    def events(self, since: int = 0, limit: int = 1000, session: str | None = None) -> list[Event]:
        """Feed events with cursor greater than `since`, oldest first.

        Args:
            since: the cursor (`Event.id`) last seen; 0 for the start.
            limit: at most this many.
            session: only this session's events.
        """
        ...

    def last_event_id(self) -> int:
        """Cursor of the newest event (0 when none)."""
        ...

    def loops(self, since: float, after: int = 0, limit: int = 1000) -> list[Event] | None:
        """The feed's ``loop`` events (each starts a loop episode, see `EventType.LOOP`) that
        come after (`since`, `after`), ordered by time, then cursor; read through an index, so
        the cost follows the episodes returned, not the steps of the feed.

        Args:
            since: only events at or after this time (with `after`: after it).
            after: of the events at exactly `since`, only those with a cursor greater than
                this; pass the last event's ``(at, id)`` to read the next page.
            limit: at most this many.

        Returns:
            The events, or None when the store cannot answer for `since`: a release that
            wrote no ``loop`` events may have written steps then (scan the feed's ``step``
            events instead, as `engine.fleet.queries.LoopTally` does).
        """
        ...
