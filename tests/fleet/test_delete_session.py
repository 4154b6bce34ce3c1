"""Deleting a session: the session and what it owns go, and the audit row is written in the same
write (a failed audit write deletes nothing)."""

from __future__ import annotations

import pytest


def test_deleting_a_session_writes_its_audit_row_in_the_same_write(tmp_path, open_engine,
                                                                    monkeypatch):
    import engine.store.sqlite.store as sqlite_store

    engine = open_engine(f"sqlite:///{tmp_path}/d.db")
    engine.session("gone").append_message("user", "hi")

    def broken(*args, **kwargs):
        raise RuntimeError("disk went away while writing the audit row")

    monkeypatch.setattr(sqlite_store, "add_audit", broken)
    with pytest.raises(RuntimeError):
        engine.fleet.delete_session("gone", actor="alice", reason="gdpr")
    monkeypatch.undo()
    assert engine.get_session("gone").state().messages  # not deleted without its row
    assert engine.fleet.delete_session("gone", actor="alice", reason="gdpr") is True
    (row,) = engine.audit(action="delete")
    assert row.session == "gone" and row.reason == "gdpr"
