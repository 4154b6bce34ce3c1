"""For tests whose flagged sessions must go on stepping (replays, turns, explanations): under the
flag policy a handle now holds the session for on-call at its flag; these tests judge what comes
after, as an agent Rewind only watches would."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from engine import Session


@pytest.fixture
def keep_stepping(monkeypatch) -> Iterator[None]:
    """Every session handle made while the test runs goes on after its flag (not held)."""
    init = Session.__init__

    def not_held(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.holds_on_loops = False

    monkeypatch.setattr(Session, "__init__", not_held)
    yield
