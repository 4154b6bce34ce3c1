"""Integration reads cost what they return: `RewindSession.get_items(limit)` and `pop_item` read
the tail of the live line, not the whole history (counted: the messages the engine hands back),
and still skip hidden and item-less messages correctly."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("agents")

from engine import Engine  # noqa: E402
from engine.integrations.openai_agents import RewindSession  # noqa: E402


@pytest.fixture()
def counted(monkeypatch):
    """The messages `Engine.live_messages` returned, per call."""
    sizes: list[int] = []
    original = Engine.live_messages

    def counting(self, sid, *, since=0):
        out = original(self, sid, since=since)
        sizes.append(len(out))
        return out

    monkeypatch.setattr(Engine, "live_messages", counting)
    return sizes


def test_get_items_and_pop_item_read_the_tail(store_url, counted):
    engine = Engine.open(store_url)
    session = RewindSession(engine, "long-chat")
    items = [{"role": "user" if i % 2 else "assistant", "content": f"turn {i}"}
             for i in range(1_000)]
    for i in range(0, 1_000, 100):
        asyncio.run(session.add_items(items[i:i + 100]))
    counted.clear()
    assert asyncio.run(session.get_items(limit=20)) == items[-20:]
    assert sum(counted) <= 20
    counted.clear()
    assert asyncio.run(session.pop_item()) == items[-1]
    assert asyncio.run(session.pop_item()) == items[-2]
    assert sum(counted) <= 2 + 1 + 2  # the second pop reads past the first one it hid
    counted.clear()
    assert asyncio.run(session.get_items(limit=3)) == items[-5:-2]
    assert sum(counted) <= 3 + 2
    # a message Rewind wrote without an SDK item and a non-chat role is skipped, not counted
    session.rewind.append_message("tool", "Rewind bookkeeping")
    assert asyncio.run(session.get_items(limit=2)) == items[-4:-2]
    assert len(asyncio.run(session.get_items())) == 998
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items(limit=5)) == []
    engine.close()


def test_live_messages_since_a_position(store_url):
    engine = Engine.open(store_url)
    s = engine.session("tail")
    s.append_messages([{"role": "user", "content": str(i)} for i in range(10)])
    assert [m["content"] for m in engine.live_messages("tail", since=7)] == ["7", "8", "9"]
    assert len(engine.live_messages("tail")) == 10
    assert engine.live_messages("tail", since=10) == []
    assert engine.live_messages("nobody", since=3) == []


def test_items_come_back_exactly_and_their_text_is_stored_once(store_url):
    engine = Engine.open(store_url)
    session = RewindSession(engine, "shapes")
    text = "the refund of order A-1 went through " * 20
    items = [
        {"role": "user", "content": text},
        {"type": "message", "role": "assistant", "id": "m1", "status": "completed",
         "content": [{"type": "output_text", "text": text, "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "refund", "arguments": '{"o": 1}'},
        {"type": "function_call_output", "call_id": "c1", "output": text},
        {"role": "assistant", "content": ""},
    ]
    asyncio.run(session.add_items(items))
    assert asyncio.run(session.get_items()) == items
    assert asyncio.run(session.get_items(limit=2)) == items[-2:]
    stored = session.rewind.state().messages
    assert [m["content"] for m in stored][:1] == [text]
    plain = [stored[i] for i in (0, 3)]
    assert all(text not in str({k: v for k, v in m.items() if k != "content"}) for m in plain)
    assert asyncio.run(session.pop_item()) == items[-1]
