"""Integration reads cost what they return: `RewindSession.get_items(limit)` and `pop_item` read
the tail of the live line, not the whole history (counted: the messages the engine hands back; a
read of N items takes the N newest messages with the session's summary, then only what hidden
and item-less messages left short), and still skip hidden and item-less messages correctly."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("agents")

from engine import Engine  # noqa: E402
from engine.documents import Documents  # noqa: E402
from engine.integrations.openai_agents import RewindSession  # noqa: E402


@pytest.fixture()
def counted(monkeypatch):
    """The messages `Engine.documents.live_messages` and `live_tail` returned, per call."""
    sizes: list[int] = []
    original, tail = Documents.live_messages, Documents.live_tail

    def counting(self, sid, *, since=0, until=None):
        out = original(self, sid, since=since, until=until)
        sizes.append(len(out))
        return out

    def counting_tail(self, sid, ns, last):
        out = tail(self, sid, ns, last)
        if out is not None and out[3]:
            sizes.append(len(out[3]))
        return out

    monkeypatch.setattr(Documents, "live_messages", counting)
    monkeypatch.setattr(Documents, "live_tail", counting_tail)
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
    # each pop reads the newest message with the session's summary; the second then skips
    # the one it finds hidden and reads the one before it
    assert counted == [1, 1, 1]
    counted.clear()
    assert asyncio.run(session.get_items(limit=3)) == items[-5:-2]
    assert counted == [3, 2]  # the 3 newest (2 of them hidden), then the 2 still wanted
    # a message Rewind wrote without an SDK item and a non-chat role is skipped, not counted
    session.rewind.append_message("tool", "Rewind bookkeeping")
    assert asyncio.run(session.get_items(limit=2)) == items[-4:-2]
    assert len(asyncio.run(session.get_items())) == 998
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items(limit=5)) == []
    engine.close()


def test_pops_hide_ranges_and_reads_skip_them_unread(store_url, counted):
    """However many items were popped, a read costs what it returns: hidden positions are kept
    as ranges (a run of pops is one), and the spans between them are read, not the hidden."""
    engine = Engine.open(store_url)
    session = RewindSession(engine, "popped")
    items = [{"role": "user", "content": f"turn {i}"} for i in range(300)]
    asyncio.run(session.add_items(items))
    for i in range(200):
        assert asyncio.run(session.pop_item()) == items[-1 - i]
    more = [{"role": "user", "content": f"more {i}"} for i in range(5)]
    asyncio.run(session.add_items(more))
    asyncio.run(session.pop_item())
    asyncio.run(session.add_items([{"role": "user", "content": "last"}]))
    hidden = engine.documents.values("popped", "var")["openai_agents.hidden"]
    assert hidden == [[100, 300], [304, 305]]
    counted.clear()
    expected = [*items[96:100], *more[:4], {"role": "user", "content": "last"}]
    assert asyncio.run(session.get_items(limit=9)) == expected
    assert counted == [9, 4]  # the 9 newest (5 visible), then the 4 still wanted, not 200
    counted.clear()
    assert asyncio.run(session.pop_item()) == expected[-1]
    assert asyncio.run(session.pop_item()) == expected[-2]
    assert sum(counted) == 3
    assert asyncio.run(session.get_items()) == [*items[:100], *more[:3]]
    # positions stored one by one (before ranges) still hide the same items
    engine.session("popped").set_var("openai_agents.hidden", [101, 100, *range(102, 300)])
    assert asyncio.run(session.get_items(limit=3)) == [
        more[3], more[4], {"role": "user", "content": "last"}]
    assert asyncio.run(session.pop_item()) == {"role": "user", "content": "last"}
    hidden = engine.documents.values("popped", "var")["openai_agents.hidden"]
    assert hidden == [[100, 300], [305, 306]]
    engine.close()



def test_a_run_of_messages_without_items_is_read_in_growing_spans(store_url, counted):
    engine = Engine.open(store_url)
    session = RewindSession(engine, "bookkeeping")
    asyncio.run(session.add_items([{"role": "user", "content": "first"}]))
    session.rewind.append_messages([{"role": "tool", "content": f"t{i}"} for i in range(100)])
    counted.clear()
    assert asyncio.run(session.get_items(limit=1)) == [{"role": "user", "content": "first"}]
    assert len(counted) <= 8 and sum(counted) <= 101  # 1, 2, 4, … messages: not one by one
    engine.close()

def test_live_messages_since_a_position(store_url):
    engine = Engine.open(store_url)
    s = engine.session("tail")
    s.append_messages([{"role": "user", "content": str(i)} for i in range(10)])
    read = engine.documents.live_messages
    assert [m["content"] for m in read("tail", since=7)] == ["7", "8", "9"]
    assert [m["content"] for m in read("tail", since=3, until=5)] == ["3", "4"]
    assert engine.documents.live_messages("tail", since=5, until=5) == []
    assert engine.documents.live_messages("tail", since=6, until=2) == []
    assert [m["content"] for m in engine.documents.live_messages("tail", until=1)] == ["0"]
    assert len(engine.documents.live_messages("tail")) == 10
    assert engine.documents.live_messages("tail", since=10) == []
    assert engine.documents.live_messages("nobody", since=3) == []


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


def test_a_full_read_decodes_a_long_history_a_chunk_at_a_time(store_url, counted,
                                                                monkeypatch):
    """A full read reads each visible span in pieces of at most READ_CHUNK messages (one decode
    holds the interpreter's lock, and with it the event loop), across hidden ranges."""
    from engine.integrations.openai_agents import session as module

    monkeypatch.setattr(module, "READ_CHUNK", 7)
    engine = Engine.open(store_url)
    session = RewindSession(engine, "chunks")
    items = [{"role": "user" if i % 2 else "assistant", "content": f"turn {i}"}
             for i in range(40)]
    asyncio.run(session.add_items(items))
    for _ in range(3):
        asyncio.run(session.pop_item())
    asyncio.run(session.add_items([{"role": "user", "content": "after"}]))
    counted.clear()
    assert asyncio.run(session.get_items()) == [*items[:-3], {"role": "user", "content": "after"}]
    assert max(counted) <= 7 and sum(counted) == 38
    engine.close()


def test_chat_items_are_stored_flat_and_older_messages_still_read(store_url):
    """A chat item's message is its role, its text and the marker of its text field, nothing
    nested; messages stored with an empty rest (as before) read back the same."""
    engine = Engine.open(store_url)
    session = RewindSession(engine, "flat")
    asyncio.run(session.add_items([{"role": "user", "content": "hi"},
                                   {"type": "message", "role": "user", "content": "typed"}]))
    stored = session.rewind.state().messages
    assert stored[0] == {"role": "user", "content": "hi", "sdk_text": "content"}
    assert stored[1]["sdk_rest"] == {"type": "message"}
    session.rewind.append_messages([
        {"role": "assistant", "content": "older", "sdk_rest": {}, "sdk_text": "content"},
        {"role": "tool", "content": "out", "sdk_rest": {"type": "function_call_output",
                                                        "call_id": "c1"},
         "sdk_text": "output"}])
    expected = [{"role": "user", "content": "hi"},
                {"type": "message", "role": "user", "content": "typed"},
                {"role": "assistant", "content": "older"},
                {"type": "function_call_output", "call_id": "c1", "output": "out"}]
    assert asyncio.run(session.get_items()) == expected
    assert asyncio.run(session.get_items(limit=2)) == expected[-2:]
    assert asyncio.run(session.pop_item()) == expected[-1]
    assert asyncio.run(session.pop_item()) == expected[-2]
    engine.close()


# -- any sequence of adds, pops, reads, clears and rollbacks -------------------------------------
def test_session_reads_match_a_plain_list_under_any_sequence(tmp_path):
    """`RewindSession` against a plain list of visible items: adds, pops (hidden as ranges),
    reads with and without a limit, clears, messages without an item, and rollbacks to a
    snapshot (which restore the items and the hidden ranges of that moment)."""
    import uuid

    from hypothesis import settings
    from hypothesis import strategies as st
    from hypothesis.stateful import (
        Bundle,
        RuleBasedStateMachine,
        invariant,
        rule,
        run_state_machine_as_test,
    )

    from engine import NothingToRollBack, SnapshotNotRestorable, UnknownSnapshot

    engine = Engine.open(f"sqlite:///{tmp_path}/sm.db")
    counter = iter(range(10**9))

    class SessionMachine(RuleBasedStateMachine):
        snaps = Bundle("snaps")

        def __init__(self):
            super().__init__()
            self.sid = f"sm-{uuid.uuid4().hex}"
            self.session = RewindSession(engine, self.sid)
            self.items: list[dict] = []
            self.saved: dict[str, list[dict]] = {}

        @rule(n=st.integers(1, 4))
        def add(self, n):
            new = [{"role": "user", "content": f"item {next(counter)}"} for _ in range(n)]
            asyncio.run(self.session.add_items(new))
            self.items += new

        @rule(k=st.integers(1, 6))
        def pop(self, k):
            for _ in range(k):
                expected = self.items.pop() if self.items else None
                assert asyncio.run(self.session.pop_item()) == expected

        @rule()
        def bookkeeping(self):  # a message Rewind writes without an SDK item
            self.session.rewind.append_message("tool", "not an item")

        @rule()
        def clear(self):
            asyncio.run(self.session.clear_session())
            self.items = []

        @rule(limit=st.integers(1, 12))
        def read(self, limit):
            assert asyncio.run(self.session.get_items(limit=limit)) == self.items[-limit:]

        @rule(target=snaps)
        def snapshot(self):
            snap = self.session.rewind.snapshot(f"s{next(counter)}")
            self.saved[snap] = list(self.items)
            return snap

        @rule(snap=snaps)
        def rollback(self, snap):
            if snap not in self.saved:
                return
            try:
                engine.rollback(self.sid, to=snap, actor="test", reason="r", notice=False)
            except (NothingToRollBack, SnapshotNotRestorable, UnknownSnapshot):
                return  # a target no longer restorable (retired, abandoned) changes nothing
            self.items = list(self.saved[snap])
            self.session = RewindSession(engine, self.sid)  # a new run after the rollback

        @invariant()
        def all_items(self):
            assert asyncio.run(self.session.get_items()) == self.items

    run_state_machine_as_test(
        SessionMachine, settings=settings(max_examples=40, stateful_step_count=30,
                                          deadline=None))
    engine.close()
