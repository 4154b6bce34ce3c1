"""RewindStore: LangGraph's long-term store on Rewind session memory. Items are keyed memories
(put overwrites exactly by namespace and key), search is the memory's hybrid retrieval, and a
rollback of the session undoes what was put, overwritten or deleted after the target."""

from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

pytest.importorskip("langgraph.store.base", reason="needs the langgraph extra")

from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.store.base import BaseStore, Item, SearchItem  # noqa: E402

from engine import Engine  # noqa: E402
from engine.integrations.langgraph import RewindSaver, RewindStore  # noqa: E402
from engine.integrations.langgraph.store import fact_key  # noqa: E402
from engine.memory.decay import DAY  # noqa: E402
from engine.memory.embeddings import HashingEmbedder  # noqa: E402
from engine.memory.session import MemoryConfig  # noqa: E402


@pytest.fixture
def clock():
    return [1_800_000_000.0]


def _open(url, clock):
    def tick():
        clock[0] += 1.0
        return clock[0]

    return Engine.open(url, memory=MemoryConfig(embedder=HashingEmbedder()), clock=tick)


@pytest.fixture
def mem_engine(store_url, clock):
    return _open(store_url, clock)


@pytest.fixture
def store(mem_engine):
    return RewindStore(mem_engine.session("agent-memory"))


def test_put_get_overwrite_delete(store):
    ns = ("users", "u1")
    assert isinstance(store, BaseStore)
    assert store.get(ns, "home") is None
    store.put(ns, "home", {"text": "lives in Boston", "since": 2019})
    item = store.get(ns, "home")
    assert isinstance(item, Item)
    assert (item.namespace, item.key, item.value) == (ns, "home", {"text": "lives in Boston",
                                                                    "since": 2019})
    assert isinstance(item.created_at, datetime) and item.created_at == item.updated_at
    store.put(ns, "home", {"text": "lives in Denver", "since": 2024})
    newer = store.get(ns, "home")
    assert newer.value["text"] == "lives in Denver"
    assert newer.created_at == item.created_at < newer.updated_at
    # the overwrite is an exact keyed replacement: the older memory is kept, invalid by "key"
    memory = store.session.memory
    [old] = [m for m in memory.items(include_invalid=True) if not m.valid]
    assert (old.key, old.invalid_by, old.invalid_confidence) == ("users/u1/home", "key", 1.0)
    assert [c["judge"] for c in memory.corrections()] == ["key"]
    store.delete(ns, "home")
    assert store.get(ns, "home") is None
    store.delete(ns, "home")  # deleting what is not there is a no-op


def test_keys_are_escaped_and_namespaces_kept_apart(store):
    store.put(("a", "b/c"), "k", {"text": "one"})
    store.put(("a", "b"), "c/k", {"text": "two"})
    assert fact_key(("a", "b/c"), "k") != fact_key(("a", "b"), "c/k")
    assert store.get(("a", "b/c"), "k").value == {"text": "one"}
    assert store.get(("a", "b"), "c/k").value == {"text": "two"}
    assert [i.value["text"] for i in store.search(("a", "b"))] == ["two"]


def test_a_free_text_memory_or_other_keyed_fact_is_no_store_item(store):
    store.session.memory.add("I live in Boston", importance=0.9)
    store.session.memory.add("EUR/USD at 1.08", key="users/u1/fx")
    assert store.get(("users", "u1"), "fx") is None
    assert store.search(("users",)) == []
    assert store.list_namespaces() == []


def test_search_by_query_prefix_and_filter(store):
    store.put(("users", "u1"), "home", {"text": "lives in Denver, Colorado", "kind": "place"})
    store.put(("users", "u1"), "food", {"text": "allergic to peanuts", "kind": "health"})
    store.put(("users", "u2"), "home", {"text": "lives in Lisbon", "kind": "place"})
    store.put(("docs",), "readme", {"content": "where the city council meets in Denver"})
    hits = store.search(("users",), query="which city does the user live in? Denver")
    assert all(isinstance(h, SearchItem) for h in hits)
    assert hits[0].key == "home" and hits[0].namespace == ("users", "u1")
    assert hits[0].score is not None and hits[0].score > 0
    assert {h.namespace[0] for h in hits} == {"users"}  # the prefix keeps docs out
    places = store.search(("users",), filter={"kind": "place"})
    assert [(h.namespace, h.key) for h in places] == [(("users", "u2"), "home"),
                                                      (("users", "u1"), "home")]  # newest first
    assert places[0].score is None
    assert store.search(("users",), filter={"kind": {"$ne": "place"}})[0].key == "food"
    assert len(store.search(("users",), limit=1, offset=1)) == 1
    assert store.search(("nobody",), query="Denver") == []


def test_an_item_put_with_index_false_is_listed_but_not_searched(store):
    store.put(("users", "u1"), "secret", {"text": "the door code is 4711"}, index=False)
    store.put(("users", "u1"), "door", {"text": "the door is blue"})
    assert [h.key for h in store.search(("users",), query="door code")] == ["door"]
    assert {h.key for h in store.search(("users",))} == {"secret", "door"}


def test_list_namespaces(store):
    for ns in [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "f"), ("x", "b")]:
        store.put(ns, "k", {"text": "v"})
    assert store.list_namespaces() == [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "f"),
                                       ("x", "b")]
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [("a", "b", "c"),
                                                                     ("a", "b", "d")]
    assert store.list_namespaces(suffix=("b",)) == [("x", "b")]
    assert store.list_namespaces(prefix=("*", "b")) == [("a", "b", "c"), ("a", "b", "d", "e"),
                                                        ("x", "b")]
    assert store.list_namespaces(limit=1, offset=3) == [("x", "b")]


def test_a_rollback_undoes_an_overwrite_and_a_delete(store):
    session, ns = store.session, ("users", "u1")
    store.put(ns, "home", {"text": "lives in Boston"})
    store.put(ns, "phone", {"text": "555-0100"})
    snap = session.snapshot("facts known")
    store.put(ns, "home", {"text": "lives on the moon"})  # a loop made it up
    store.delete(ns, "phone")
    store.put(ns, "pet", {"text": "has a dragon"})
    assert store.get(ns, "home").value == {"text": "lives on the moon"}
    session.rollback(to=snap, actor="op", reason="the loop made it up", notice=False)
    assert store.get(ns, "home").value == {"text": "lives in Boston"}
    assert store.get(ns, "phone").value == {"text": "555-0100"}
    assert store.get(ns, "pet") is None
    assert [h.value["text"] for h in store.search(ns, query="where does the user live")][0] == (
        "lives in Boston"
    )


def test_keyed_items_never_decay_nor_get_evicted(mem_engine, clock):
    store = RewindStore(mem_engine.session("agent-memory"))
    for i in range(30):  # more than the short-term buffer's capacity (10)
        store.put(("n",), f"k{i}", {"text": f"fact number {i}"})
    clock[0] += 365 * DAY
    assert store.session.memory.prune() == []
    assert len(store.search(("n",), limit=100)) == 30


def test_another_engine_on_the_same_file_sees_the_overwrite(tmp_path, clock):
    url = f"sqlite:///{tmp_path}/rewind.db"
    first = RewindStore(_open(url, clock).session("agent-memory"))
    second = RewindStore(_open(url, clock).session("agent-memory"))
    first.put(("users", "u1"), "home", {"text": "lives in Boston"})
    assert second.get(("users", "u1"), "home").value == {"text": "lives in Boston"}
    second.put(("users", "u1"), "home", {"text": "lives in Denver"})
    assert first.get(("users", "u1"), "home").value == {"text": "lives in Denver"}
    assert len(first.session.memory.facts("users/")) == 1


def test_async_operations(store):
    async def go():
        await store.aput(("users", "u1"), "home", {"text": "lives in Denver"})
        got = await store.aget(("users", "u1"), "home")
        found = await store.asearch(("users",), query="Denver")
        await store.adelete(("users", "u1"), "home")
        return got, found, await store.aget(("users", "u1"), "home")

    got, found, gone = asyncio.run(go())
    assert got.value == {"text": "lives in Denver"}
    assert [f.key for f in found] == ["home"]
    assert gone is None


def test_bad_values_are_refused(store):
    with pytest.raises(TypeError):
        store.put(("users",), "k", ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.put((), "k", {"text": "no namespace"})


def test_a_graph_keeps_its_long_term_facts_in_the_store_and_a_rollback_undoes_them(mem_engine):
    """A real LangGraph graph compiled with the Rewind checkpointer and store: its node writes a
    fact through the store LangGraph injects; rolling the memory session back undoes it."""
    store = RewindStore(mem_engine.session("agent-memory"))

    def remember(state: MessagesState, *, store: BaseStore) -> dict:
        text = state["messages"][-1].content
        store.put(("users", "u1"), "home", {"text": text})
        found = store.search(("users", "u1"), query="where do I live")
        return {"messages": [("ai", f"noted; I know: {found[0].value['text']}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    graph = builder.compile(checkpointer=RewindSaver(mem_engine), store=store)
    config = {"configurable": {"thread_id": "t-store"}}
    out = graph.invoke({"messages": [("user", "I live in Boston")]}, config)
    assert out["messages"][-1].content == "noted; I know: I live in Boston"
    snap = store.session.snapshot("after Boston")
    graph.invoke({"messages": [("user", "I live on the moon")]}, config)
    assert store.get(("users", "u1"), "home").value == {"text": "I live on the moon"}
    store.session.rollback(to=snap, actor="op", reason="bad fact", notice=False)
    assert store.get(("users", "u1"), "home").value == {"text": "I live in Boston"}


# -- one session per namespace ------------------------------------------------------------------
@pytest.fixture
def spread(mem_engine):
    return RewindStore(mem_engine, depth=2)


def test_each_namespace_has_a_session_of_its_own(spread, mem_engine):
    spread.put(("users", "u1"), "home", {"text": "lives in Denver"})
    spread.put(("users", "u2"), "home", {"text": "lives in Lisbon"})
    spread.put(("users", "u2", "pets"), "cat", {"text": "a cat named Io"})
    assert spread.session_id(("users", "u1")) == "langgraph-store/users/u1"
    assert spread.session_id(("users", "u2", "pets")) == "langgraph-store/users/u2"
    ids = {s.id for s in mem_engine.sessions()}
    assert {"langgraph-store/users/u1", "langgraph-store/users/u2"} <= ids
    assert [m.key for m in mem_engine.session("langgraph-store/users/u1").memory.facts()] == [
        "users/u1/home"]
    assert spread.get(("users", "u2"), "home").value == {"text": "lives in Lisbon"}
    # reading a namespace that never had an item creates no session
    assert spread.get(("users", "u9"), "home") is None
    spread.delete(("users", "u9"), "home")
    assert mem_engine.session_info("langgraph-store/users/u9") is None


def test_a_rollback_touches_only_its_namespace(spread):
    spread.put(("users", "u1"), "home", {"text": "lives in Boston"})
    spread.put(("users", "u2"), "home", {"text": "lives in Lisbon"})
    u1 = spread.session_for(("users", "u1"))
    snap = u1.snapshot("facts known")
    spread.put(("users", "u1"), "home", {"text": "lives on the moon"})  # a loop made it up
    spread.put(("users", "u2"), "home", {"text": "moved to Porto"})     # u2's real news
    u1.rollback(to=snap, actor="op", reason="the loop made it up", notice=False)
    assert spread.get(("users", "u1"), "home").value == {"text": "lives in Boston"}
    assert spread.get(("users", "u2"), "home").value == {"text": "moved to Porto"}


def test_search_and_listing_span_the_namespace_sessions(spread, mem_engine, clock):
    spread.put(("users", "u1"), "home", {"text": "lives in Denver, Colorado", "kind": "place"})
    spread.put(("users", "u2"), "home", {"text": "lives in Lisbon", "kind": "place"})
    spread.put(("users", "u2"), "food", {"text": "allergic to peanuts", "kind": "health"})
    spread.put(("docs",), "readme", {"content": "the council meets in Denver"})
    other = RewindStore(mem_engine, prefix="other-store", depth=2)
    other.put(("users", "u1"), "home", {"text": "lives in Denver too"})  # another store's item
    hits = spread.search(("users",), query="which city does the user live in? Denver")
    assert hits[0].namespace == ("users", "u1") and hits[0].key == "home"
    assert {h.namespace[0] for h in hits} == {"users"}
    assert "lives in Denver too" not in {h.value["text"] for h in hits}
    listed = spread.search(("users",), filter={"kind": "place"})
    assert [i.namespace for i in listed] == [("users", "u2"), ("users", "u1")]  # newest first
    assert spread.list_namespaces() == [("docs",), ("users", "u1"), ("users", "u2")]
    assert spread.list_namespaces(prefix=("users",)) == [("users", "u1"), ("users", "u2")]
    assert spread.list_namespaces(prefix=("*", "u2")) == [("users", "u2")]
    # another process on the same store finds the namespace sessions
    again = RewindStore(mem_engine, depth=2)
    assert {h.key for h in again.search(("users",))} == {"home", "food"}


def test_a_long_namespace_gets_a_hashed_session_id(spread):
    ns = ("users", "x" * 300)
    spread.put(ns, "k", {"text": "long"})
    sid = spread.session_id(ns)
    assert sid.startswith("langgraph-store/#") and len(sid) <= 200
    assert spread.get(ns, "k").value == {"text": "long"}
    assert spread.session_id(("users", "a/b")) == "langgraph-store/users/a%2Fb"


def test_bad_mappings_are_refused(mem_engine):
    with pytest.raises(ValueError, match="depth"):
        RewindStore(mem_engine, depth=0)
    with pytest.raises(ValueError):
        RewindStore(mem_engine, prefix="")


def test_items_of_one_session_move_to_namespace_sessions(mem_engine):
    from engine.integrations.langgraph.store import move_items

    old = RewindStore(mem_engine.session("agent-memory"))
    old.put(("users", "u1"), "home", {"text": "lives in Boston"})
    old.put(("users", "u2"), "home", {"text": "lives in Lisbon"}, index=False)
    old.put(("users", "u1"), "home", {"text": "lives in Denver"})
    first = old.get(("users", "u1"), "home")
    new = RewindStore(mem_engine, depth=2)
    assert move_items(old.session, new) == 2
    moved = new.get(("users", "u1"), "home")
    assert moved.value == {"text": "lives in Denver"} and moved.created_at == first.created_at
    hits = new.search(("users",), query="Lisbon")
    assert ("users", "u2") not in {tuple(h.namespace) for h in hits}  # index=False kept
    assert move_items(old.session, new) == 0  # nothing changed since
    # the old session is left as it was
    assert old.get(("users", "u2"), "home").value == {"text": "lives in Lisbon"}
    with pytest.raises(ValueError, match="one session per namespace"):
        move_items(old.session, old)


def test_async_operations_on_namespace_sessions(spread):
    async def go():
        await spread.aput(("users", "u1"), "home", {"text": "lives in Denver"})
        return await spread.aget(("users", "u1"), "home"), await spread.asearch(("users",))

    got, found = asyncio.run(go())
    assert got.value == {"text": "lives in Denver"} and [f.key for f in found] == ["home"]
