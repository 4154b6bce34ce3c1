"""RewindSaver reads at length: a checkpoint read after many checkpoints returns exactly what was
written (any mix of appends, edits, removals, forks and pending writes, warm or cold saver), and
a latest read does bounded work: the documents it fetches grow with log2 of the thread's length,
never with the thread, counted (not timed)."""

from __future__ import annotations

import base64
import json
import math
import uuid

import pytest

pytest.importorskip("langgraph.prebuilt", reason="needs the langgraph extra")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402

from engine import Engine, Limits  # noqa: E402
from engine.documents import Documents  # noqa: E402
from engine.integrations.langgraph import RewindSaver, layout  # noqa: E402
from engine.integrations.langgraph.codec import (  # noqa: E402
    is_list_doc,
    item_count,
    load,
    pack,
    unpack,
)


def put(saver, sid: str, parent: dict | None, messages: list, version, step: int,
        extra: object = None, source: str = "loop") -> tuple[dict, str]:
    """Put one checkpoint of `messages` (and a plain channel) under `parent`."""
    cp = empty_checkpoint()
    version = saver.get_next_version(version)
    cp["channel_values"] = {"messages": messages, "count": extra}
    cp["channel_versions"] = {"messages": version, "count": version}
    config = {"configurable": {"thread_id": sid, "checkpoint_ns": ""}}
    if parent:
        config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    stored = saver.put(config, cp, {"source": source, "step": step, "parents": {}},
                       {"messages": version, "count": version})
    return stored, version


@pytest.fixture
def counted(monkeypatch):
    """Documents the engine handed back, per call: [(method, prefix or None, {key: doc})]."""
    calls: list[tuple[str, str | None, dict]] = []
    get, scan = Documents.get, Documents.scan

    def get_documents(self, sid, ns, keys, *, prefix=None):
        out = get(self, sid, ns, keys, prefix=prefix)
        calls.append(("get", prefix, out))
        return out

    def scan_documents(self, sid, ns, prefix=""):
        out = scan(self, sid, ns, prefix)
        calls.append(("scan", prefix, out))
        return out

    monkeypatch.setattr(Documents, "get", get_documents)
    monkeypatch.setattr(Documents, "scan", scan_documents)
    return calls


def grow(saver, sid: str, n: int) -> tuple[list, list]:
    """n checkpoints, one message more each; (configs, lists)."""
    configs: list[dict] = []
    lists: list[list] = []
    history: list = []
    parent, version = None, None
    for i in range(n):
        history = [*history, (AIMessage if i % 2 else HumanMessage)(f"m{i}", id=f"m{i}")]
        parent, version = put(saver, sid, parent, history, version, i, extra=i)
        configs.append(parent)
        lists.append(history)
    return configs, lists


def blob_docs(calls) -> list[dict]:
    return [doc for _how, _prefix, out in calls for key, doc in out.items()
            if key.startswith("b/") and is_list_doc(doc)]


@pytest.mark.parametrize("n", [1, 2, 3, 64, 300])
def test_latest_read_fetches_a_bounded_chain(sqlite_url, counted, n):
    engine = Engine.open(sqlite_url)
    _configs, lists = grow(RewindSaver(engine), "long", n)
    counted.clear()
    tup = RewindSaver(engine).get_tuple({"configurable": {"thread_id": "long"}})  # cold
    assert tup.checkpoint["channel_values"]["messages"] == lists[-1]
    assert tup.checkpoint["channel_values"]["count"] == n - 1
    # no scan of a channel's versions; writes are scanned by their checkpoint's own prefix
    assert [p for how, p, _out in counted if how == "scan" and not p.startswith("w/")] == []
    docs = blob_docs(counted)
    assert len(docs) <= math.log2(n) + 1
    assert sum(item_count(d) for d in docs) == len(lists[-1])  # each item read once
    assert len(counted) <= 2  # the record with its writes, its values
    engine.close()


def test_every_checkpoint_reads_back_cold_after_many(sqlite_url):
    engine = Engine.open(sqlite_url)
    configs, lists = grow(RewindSaver(engine), "many", 200)
    cold = RewindSaver(engine)
    for config, expected in zip(configs, lists, strict=True):
        assert cold.get_tuple(config).checkpoint["channel_values"]["messages"] == expected
    listed = list(RewindSaver(engine).list({"configurable": {"thread_id": "many"}}))
    assert [t.checkpoint["channel_values"]["messages"] for t in listed] == lists[::-1]
    engine.close()


def test_a_thread_stored_before_chains_reads_and_continues(sqlite_url, counted):
    """Records without ``lists`` and unpacked list items (stored by an older version) read by
    scanning, as before; the next checkpoint starts a chain with one whole copy."""
    engine = Engine.open(sqlite_url)
    saver = RewindSaver(engine)
    configs, lists = grow(saver, "old", 20)
    records = engine.documents.scan("old", layout.DOCS, layout.checkpoint_prefix(""))
    engine.documents.put("old", layout.DOCS,
                         {k: {key: v for key, v in r.items() if key != "lists"}
                          for k, r in records.items()})
    blobs = engine.documents.scan("old", layout.DOCS, layout.blob_prefix("", "messages"))
    engine.documents.put("old", layout.DOCS, {  # one base64 text per item, unpacked
        k: {"base": load(d)["base"], "keep": load(d)["keep"],
            "items": [[kind, base64.b64encode(data).decode()] for kind, data in unpack(d)]}
        for k, d in blobs.items()})
    fresh = RewindSaver(engine)
    assert fresh.get_tuple({"configurable": {"thread_id": "old"}}).checkpoint[
        "channel_values"]["messages"] == lists[-1]
    version = fresh.get_tuple(configs[-1]).checkpoint["channel_versions"]["messages"]
    more = [*lists[-1], AIMessage("after", id="after")]
    nxt, _ = put(RewindSaver(engine), "old", configs[-1], more, version, 20)
    counted.clear()
    assert RewindSaver(engine).get_tuple(nxt).checkpoint["channel_values"]["messages"] == more
    assert [p for how, p, _out in counted if how == "scan" and p.startswith("b/")] == []
    assert RewindSaver(engine).get_tuple(configs[5]).checkpoint["channel_values"][
        "messages"] == lists[5]
    engine.close()



def test_a_thread_stored_as_json_reads_and_continues(sqlite_url):
    """Channel values stored as JSON (packed base64 lists, ``{"value": [type, base64]}``), as
    before documents could be bytes, read back at every checkpoint, and new checkpoints (stored
    as bytes) build on them."""
    engine = Engine.open(sqlite_url)
    configs, lists = grow(RewindSaver(engine), "json", 40)
    blobs = engine.documents.scan("json", layout.DOCS, "b/")
    assert blobs and all(isinstance(d, bytes) for d in blobs.values())
    as_json = {}
    for key, raw in blobs.items():
        doc = load(raw)
        if is_list_doc(doc):
            as_json[key] = {"base": doc["base"], "keep": doc["keep"], "pack": pack(unpack(doc))}
        else:
            kind, data = doc["raw_value"]
            as_json[key] = {"value": [kind, base64.b64encode(data).decode()]}
    engine.documents.put("json", layout.DOCS, as_json)
    assert not any(isinstance(d, bytes)
                   for d in engine.documents.scan("json", layout.DOCS, "b/").values())
    cold = RewindSaver(engine)
    for i, config in enumerate(configs):
        values = cold.get_tuple(config).checkpoint["channel_values"]
        assert values["messages"] == lists[i] and values["count"] == i
    version = cold.get_tuple(configs[-1]).checkpoint["channel_versions"]["messages"]
    more = [*lists[-1], AIMessage("after", id="after")]
    nxt, _ = put(RewindSaver(engine), "json", configs[-1], more, version, 40, extra=40)
    values = RewindSaver(engine).get_tuple(nxt).checkpoint["channel_values"]
    assert values["messages"] == more and values["count"] == 40
    assert RewindSaver(engine).get_tuple(configs[7]).checkpoint["channel_values"][
        "messages"] == lists[7]
    engine.close()

# -- any sequence of puts, writes and reads ------------------------------------------------------
op = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 3)),
    st.tuples(st.just("edit"), st.integers(0, 50)),
    st.tuples(st.just("remove"), st.integers(0, 50)),
    st.tuples(st.just("fork"), st.integers(0, 50)),
    st.tuples(st.just("writes"), st.integers(1, 3)),
    st.tuples(st.just("read"), st.integers(0, 50)),
    st.tuples(st.just("cold"), st.integers(0, 50)),
)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=st.lists(op, min_size=1, max_size=60))
def test_reads_return_exactly_what_was_written(sqlite_url, ops):
    engine = Engine.open(sqlite_url)
    sid = f"h-{uuid.uuid4().hex[:8]}"
    saver = RewindSaver(engine)
    stored: list[tuple[dict, list, str, object]] = []  # (config, messages, version, count)
    writes: dict[str, list] = {}
    live = -1  # index in `stored` of the thread's latest checkpoint
    serial = 0

    def checkpoint(parent_at: int, messages: list, source: str = "loop") -> None:
        nonlocal live
        parent, version = (stored[parent_at][0], stored[parent_at][2]) if parent_at >= 0 else (
            None, None)
        config, version = put(saver, sid, parent, messages, version, len(stored),
                              extra={"n": len(stored)}, source=source)
        stored.append((config, messages, version, {"n": len(stored)}))
        live = len(stored) - 1

    for kind, arg in ops:
        serial += 1
        current = list(stored[live][1]) if stored else []
        if kind == "append" or not stored:
            checkpoint(live, [*current, *(HumanMessage(f"u{serial}.{k}", id=f"u{serial}.{k}")
                                          for k in range(max(1, arg if kind == "append" else 1)))])
        elif kind == "edit" and current:
            i = arg % len(current)
            current[i] = AIMessage(f"edited {serial}", id=current[i].id)
            checkpoint(live, current)
        elif kind == "remove" and current:
            del current[arg % len(current)]
            checkpoint(live, current)
        elif kind == "fork":
            at = arg % len(stored)
            # time travel (``update_state`` on an old checkpoint): the fork becomes the latest
            checkpoint(at, [*stored[at][1], AIMessage(f"fork {serial}", id=f"f{serial}")],
                       "update")
        elif kind == "writes":
            config = stored[live][0]
            pending = [("count", {"w": serial, "k": k}) for k in range(arg)]
            saver.put_writes(config, pending, f"task-{serial}")
            writes.setdefault(config["configurable"]["checkpoint_id"], []).extend(
                (f"task-{serial}", ch, v) for ch, v in pending)
        elif kind in ("read", "cold"):
            config, messages, _version, count = stored[arg % len(stored)]
            reader = saver if kind == "read" else RewindSaver(engine)
            tup = reader.get_tuple(config)
            assert tup.checkpoint["channel_values"]["messages"] == messages
            assert tup.checkpoint["channel_values"]["count"] == count
    cold = RewindSaver(engine)
    latest = cold.get_tuple({"configurable": {"thread_id": sid}})
    assert latest.config == stored[live][0]
    assert latest.checkpoint["channel_values"]["messages"] == stored[live][1]
    for config, messages, _version, count in stored:
        tup = RewindSaver(engine).get_tuple(config)
        assert tup.checkpoint["channel_values"] == {"messages": messages, "count": count}
        expected = writes.get(config["configurable"]["checkpoint_id"], [])
        assert sorted(map(repr, tup.pending_writes)) == sorted(map(repr, expected))
    engine.close()


def test_no_document_passes_the_limit_when_deltas_would_not(sqlite_url):
    """A skip-delta that would pass half ``Limits.document_bytes`` builds on the parent instead:
    a long conversation of messages each far under the limit is never refused for its length."""
    engine = Engine.open(sqlite_url, limits=Limits(document_bytes=40_000))
    saver = RewindSaver(engine)
    configs: list[dict] = []
    lists: list[list] = []
    history: list = []
    parent, version = None, None
    for i in range(120):
        history = [*history, HumanMessage(f"{i} " + "x" * 400, id=str(i))]
        parent, version = put(saver, "big", parent, history, version, i)
        configs.append(parent)
        lists.append(history)
    docs = engine.documents.scan("big", layout.DOCS, layout.blob_prefix("", "messages"))
    assert max(len(d) if isinstance(d, bytes) else len(json.dumps(d))
               for d in docs.values()) <= 40_000
    cold = RewindSaver(engine)
    for config, expected in zip(configs[::7] + configs[-1:], lists[::7] + lists[-1:],
                                strict=True):
        assert cold.get_tuple(config).checkpoint["channel_values"]["messages"] == expected
    engine.close()
