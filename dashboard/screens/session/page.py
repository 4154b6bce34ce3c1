"""What every tab of one session page reads: the session's bundle, its verdict, the user and the
suggested rollback target, read once by `session.main`."""

from __future__ import annotations

from dataclasses import dataclass

from dashboard import data
from dashboard.signin.access import User
from dashboard.views.session import header as header_views
from engine import SnapshotNode, StoredVerdict


@dataclass(frozen=True)
class Page:
    """What every tab of one session page reads."""

    url: str | None
    """Store URL the console reads."""
    sid: str
    """Session id, exactly as asked for."""
    user: User
    bundle: data.SessionBundle
    verdict: StoredVerdict | None
    """The session's latest loop verdict, if any."""
    target_text: str
    """How the suggested rollback target is named ("no restorable snapshot" when none)."""

    @property
    def nodes(self) -> dict[str, SnapshotNode]:
        return {n.id: n for n in self.bundle.tree}

    @property
    def watch_only(self) -> bool:
        """Rewind watches this session's agent (OpenTelemetry) but does not run it."""
        return header_views.is_watch_only(self.bundle.info)
