"""`Session.append_messages(..., snapshot=label)`: the messages and a snapshot after them in one
atomic write, the same rows as `append_messages` then `snapshot`, on every store."""

from __future__ import annotations

import pytest

from engine import SizeLimitExceeded


def test_messages_and_their_snapshot_are_one_write(engine):
    s = engine.session("appended")
    s.append_messages([{"role": "user", "content": "hi"}])
    s.append_messages([{"role": "assistant", "content": "hello"},
                       {"role": "assistant", "content": "anything else?"}], snapshot="run end")
    head = s.tree()[-1]
    assert head.label == "run end" and head.is_head and head.messages == 3
    assert [m["content"] for m in s.state().messages] == ["hi", "hello", "anything else?"]
    s.append_messages([{"role": "user", "content": "no"}])
    s.rollback(to=head.id, actor="test", reason="back to the answer", notice=False)
    assert [m["content"] for m in s.state().messages] == ["hi", "hello", "anything else?"]


def test_a_bad_label_writes_nothing(engine):
    s = engine.session("bad-label")
    s.append_messages([{"role": "user", "content": "hi"}])
    before = (s.info().messages, len(s.tree()))
    with pytest.raises(TypeError):
        s.append_messages([{"role": "assistant", "content": "x"}], snapshot=7)  # type: ignore
    with pytest.raises(SizeLimitExceeded):
        s.append_messages([{"role": "assistant", "content": "x"}], snapshot="l" * 100_000)
    assert (s.info().messages, len(s.tree())) == before


def test_no_messages_and_a_label_take_the_snapshot_alone(engine):
    s = engine.session("label-only")
    s.append_messages([{"role": "user", "content": "hi"}])
    s.append_messages([], snapshot="checkpoint")
    assert s.tree()[-1].label == "checkpoint" and s.tree()[-1].messages == 1
