"""What session memory needs from its host (the engine's `Runtime` satisfies it structurally).

Memory depends on this narrow protocol, not on `engine.runtime`, so the memory package sits below
the runtime and the stores: a store with the four calls below, a clock, the size limits
and the memory configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from engine.limits import Limits
    from engine.memory.config import MemoryConfig

__all__ = ["MemoryHost", "MemoryStore"]


class MemoryStore(Protocol):
    """The store calls memory makes: one versioned namespace and the session's event feed."""

    def put(self, sid: str, ns: str, items: dict[str, Any], now: float) -> int:
        """Set keys of a versioned namespace in one write (None deletes a key)."""
        ...

    def get_all(self, sid: str, ns: str) -> dict[str, Any]:
        """Current values of a namespace on the live line."""
        ...

    def events(
        self, since: int = 0, limit: int = 1000, session: str | None = None
    ) -> Sequence[Any]:
        """Feed events after a cursor (each with ``id``, ``type`` and ``data``)."""
        ...

    def last_event_id(self) -> int:
        """Cursor of the newest event."""
        ...


class MemoryHost(Protocol):
    """Store, clock, limits and memory configuration of the engine a session memory lives in."""

    @property
    def store(self) -> MemoryStore: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def limits(self) -> Limits: ...

    def memory(self) -> MemoryConfig:
        """The engine's `MemoryConfig`."""
        ...
