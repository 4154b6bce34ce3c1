"""RewindSaver beyond the conformance suite: delta storage of message lists, checkpoints as
snapshots, forks as branches, rollbacks from outside (console, CLI) reaching the graph, late
checkpoints, and the guard's options."""

from __future__ import annotations

import asyncio
import math
import uuid

import pytest

pytest.importorskip("langgraph.prebuilt", reason="needs the langgraph extra")

from langchain_core.messages import (  # noqa: E402
    AIMessage,
    HumanMessage,
    RemoveMessage,
    ToolMessage,
)
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.base import empty_checkpoint  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402

from engine import (  # noqa: E402
    Engine,
    Limits,
    LoopDetected,
    SizeLimitExceeded,
    StoreUnavailable,
)
from engine.integrations.langgraph import (  # noqa: E402
    LoopGuard,
    RewindSaver,
    RewindToolNode,
    layout,
    let_loops_through,
)
from engine.integrations.langgraph.codec import (  # noqa: E402
    item_count,
    load,
    materialize,
    pack,
    raw_list,
    raw_value,
)
from engine.integrations.langgraph.threads import live_checkpoint  # noqa: E402
from engine.recovery.notices import NOTICE_FLAG  # noqa: E402


@pytest.fixture
def saver(engine):
    return RewindSaver(engine)


def echo_graph(saver):
    """user message in, one AI message out."""

    def bot(state: MessagesState) -> dict:
        return {"messages": [AIMessage(f"echo {state['messages'][-1].content}")]}

    builder = StateGraph(MessagesState)
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    return builder.compile(checkpointer=saver)


def thread() -> dict:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:10]}"}}


def blobs(engine, sid: str, channel: str = "messages") -> dict:
    prefix = layout.blob_prefix("", channel)
    return {layout.version_of(k, prefix): load(d)
            for k, d in engine.store.doc_scan(sid, layout.DOCS, prefix).items()}


def put_chain(saver, sid: str, lists: list[list]) -> list[dict]:
    """Put one checkpoint per list (each the child of the previous) and return the configs."""
    configs = []
    parent = None
    version = None
    for i, messages in enumerate(lists):
        cp = empty_checkpoint()
        version = saver.get_next_version(version)
        cp["channel_values"] = {"messages": messages}
        cp["channel_versions"] = {"messages": version}
        config = {"configurable": {"thread_id": sid, "checkpoint_ns": ""}}
        if parent:
            config["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
        parent = saver.put(config, cp, {"source": "loop", "step": i, "parents": {}},
                           {"messages": version})
        configs.append(parent)
    return configs


# -- storage ------------------------------------------------------------------------------------
def test_growing_message_list_is_stored_about_once(engine, saver):
    sid = "grow"
    history = [HumanMessage("hi", id="m0")]
    lists = []
    for i in range(1, 40):
        history = [*history, AIMessage(f"reply {i}", id=f"m{i}")]
        lists.append(history)
    configs = put_chain(saver, sid, lists)
    docs = blobs(engine, sid)
    # skip-deltas: each message is stored about log2(n) / 2 times, not once per checkpoint
    stored = sum(item_count(d) for d in docs.values())
    assert stored <= len(lists[-1]) * (1 + math.log2(len(lists)) / 2)
    assert sum(1 for d in docs.values() if d["base"] is None) == 1
    for config, expected in zip(configs, lists, strict=True):
        assert saver.get_tuple(config).checkpoint["channel_values"]["messages"] == expected
    # a saver with a cold cache rebuilds from the store alone
    cold = RewindSaver(engine)
    assert cold.get_tuple(configs[17]).checkpoint["channel_values"]["messages"] == lists[17]
    assert cold.get_tuple({"configurable": {"thread_id": sid}}).checkpoint[
        "channel_values"]["messages"] == lists[-1]


def test_list_edits_keep_the_common_prefix(engine, saver):
    sid = "edits"
    a = [HumanMessage("q", id="1"), AIMessage("draft", id="2")]
    b = [HumanMessage("q", id="1"), AIMessage("final", id="2")]  # last message replaced
    c = [HumanMessage("other", id="9")]  # nothing in common
    configs = put_chain(saver, sid, [a, b, c])
    docs = sorted(blobs(engine, sid).values(), key=lambda d: d["keep"])
    kinds = sorted((d["base"] is None, d["keep"], item_count(d)) for d in docs)
    assert kinds == [(False, 1, 1), (True, 0, 1), (True, 0, 2)]
    for config, expected in zip(configs, [a, b, c], strict=True):
        assert RewindSaver(engine).get_tuple(config).checkpoint["channel_values"][
            "messages"] == expected


def test_message_changed_in_place_is_stored(engine, saver):
    sid = "in-place"
    first = AIMessage("draft", id="a")
    configs = put_chain(saver, sid, [[first]])
    first.content = "changed after the checkpoint"  # a node mutating state in place
    configs += put_chain_from(saver, sid, configs[-1], [[first, HumanMessage("next", id="b")]])
    fresh = RewindSaver(engine)
    assert fresh.get_tuple(configs[0]).checkpoint["channel_values"]["messages"][0].content == \
        "draft"
    assert fresh.get_tuple(configs[1]).checkpoint["channel_values"]["messages"][0].content == \
        "changed after the checkpoint"


def put_chain_from(saver, sid, parent, lists):
    tup = saver.get_tuple(parent)
    version = tup.checkpoint["channel_versions"]["messages"]
    configs = []
    for messages in lists:
        cp = empty_checkpoint()
        version = saver.get_next_version(version)
        cp["channel_values"] = {"messages": messages}
        cp["channel_versions"] = {"messages": version}
        config = {"configurable": {"thread_id": sid, "checkpoint_ns": "",
                                   "checkpoint_id": parent["configurable"]["checkpoint_id"]}}
        parent = saver.put(config, cp, {"source": "loop", "step": 9, "parents": {}},
                           {"messages": version})
        configs.append(parent)
    return configs


def test_materialize_follows_partial_keeps():
    def items(*texts):
        return pack([("t", t.encode()) for t in texts])

    docs = {
        "1": {"base": None, "keep": 0, "pack": items("a", "b", "c")},
        "2": {"base": "1", "keep": 2, "pack": items("x")},
        "3": {"base": "2", "keep": 1, "pack": items("y", "zz")},
        # stored before packing: one base64 text per item
        "4": {"base": "3", "keep": 2, "items": [["u", "cQ=="]]},
    }
    assert [e[1] for e in materialize(docs, "2")] == [b"a", b"b", b"x"]
    assert [e[1] for e in materialize(docs, "3")] == [b"a", b"y", b"zz"]
    assert materialize(docs, "4") == [("t", b"a"), ("t", b"y"), ("u", b"q")]
    # stored as bytes (what the saver writes now), on a base stored as JSON
    docs["5"] = raw_list("4", 2, [("v", b"w")])
    assert materialize(docs, "5") == [("t", b"a"), ("t", b"y"), ("v", b"w")]
    assert load(raw_value(("t", b"v"))) == {"raw_value": ("t", b"v")}
    with pytest.raises(KeyError):
        materialize({"4": {"base": "0", "keep": 1, "pack": items()}}, "4")


def test_prune_keeps_the_delta_chain_of_the_latest(engine, saver):
    sid = "prune"
    lists, history = [], []
    for i in range(10):
        history = [*history, HumanMessage(f"m{i}", id=str(i))]
        lists.append(history)
    configs = put_chain(saver, sid, lists)
    saver.prune([sid])
    assert [t.config for t in saver.list({"configurable": {"thread_id": sid}})] == [configs[-1]]
    fresh = RewindSaver(engine)
    assert fresh.get_tuple({"configurable": {"thread_id": sid}}).checkpoint["channel_values"][
        "messages"] == lists[-1]


# -- sessions, snapshots, branches ----------------------------------------------------------------
def test_checkpoints_are_snapshots_and_messages_are_mirrored(engine, saver):
    graph = echo_graph(saver)
    config = thread()
    graph.invoke({"messages": [HumanMessage("one")]}, config)
    graph.invoke({"messages": [HumanMessage("two")]}, config)
    sid = config["configurable"]["thread_id"]
    session = engine.get_session(sid)
    assert session.info().meta[layout.META_KEY] == layout.META_VALUE
    history = list(graph.get_state_history(config))
    labels = {n.label.split()[1]: n for n in session.tree()}
    assert {s.config["configurable"]["checkpoint_id"] for s in history} == set(labels)
    assert session.info().head == labels[history[0].config["configurable"]["checkpoint_id"]].id
    live = session.state().messages
    assert [(m["role"], m["content"]) for m in live] == [
        ("user", "one"), ("assistant", "echo one"), ("user", "two"), ("assistant", "echo two")]
    state = graph.get_state(config)
    assert [m.id for m in state.values["messages"]] == [m["id"] for m in live]


def test_fork_is_a_branch_of_the_snapshot_tree(engine, saver):
    graph = echo_graph(saver)
    config = thread()
    graph.invoke({"messages": [HumanMessage("one")]}, config)
    first_turn = graph.get_state(config).config
    graph.invoke({"messages": [HumanMessage("two")]}, config)
    fork = graph.update_state(first_turn, {"messages": [HumanMessage("instead")]})
    sid = config["configurable"]["thread_id"]
    session = engine.get_session(sid)
    branches = session.branches()
    assert len(branches) == 1 and branches[0].actor == "langgraph"
    parent = first_turn["configurable"]["checkpoint_id"]
    assert branches[0].reason == f"fork from checkpoint {parent}"
    abandoned = [n for n in session.tree() if not n.on_live_line]
    assert abandoned and all(n.branch == branches[0].id for n in abandoned)
    latest = graph.get_state(config)
    assert latest.config["configurable"]["checkpoint_id"] == fork["configurable"]["checkpoint_id"]
    assert [m.content for m in latest.values["messages"]] == ["one", "echo one", "instead"]
    assert [m["content"] for m in session.state().messages] == ["one", "echo one", "instead"]
    graph.invoke({"messages": [HumanMessage("three")]}, config)
    assert [m.content for m in graph.get_state(config).values["messages"]][-2:] == [
        "three", "echo three"]


def test_console_rollback_reaches_the_graph(engine, saver):
    graph = echo_graph(saver)
    config = thread()
    graph.invoke({"messages": [HumanMessage("one")]}, config)
    good = graph.get_state(config).config["configurable"]["checkpoint_id"]
    graph.invoke({"messages": [HumanMessage("two")]}, config)
    sid = config["configurable"]["thread_id"]
    session = engine.get_session(sid)
    target = next(n.id for n in session.tree() if n.label.split()[1] == good)
    # an operator in the console: the engine's rollback, outside the graph
    engine.rollback(sid, to=target, actor="alice", reason="wrong answer")
    state = graph.get_state(config)
    contents = [m.content for m in state.values["messages"]]
    assert contents[:2] == ["one", "echo one"] and len(contents) == 3
    notice = state.values["messages"][2]
    assert isinstance(notice, AIMessage) and notice.additional_kwargs[NOTICE_FLAG] is True
    assert state.config["configurable"]["checkpoint_id"] > good  # a new checkpoint on top
    again = graph.get_state(config)  # delivered once
    assert again.config == state.config
    result = graph.invoke({"messages": [HumanMessage("three")]}, config)
    assert [m.content for m in result["messages"]][3:] == ["three", "echo three"]
    assert [m["content"] for m in session.state().messages][3:] == ["three", "echo three"]


def test_late_checkpoint_of_a_rolled_back_run_is_not_latest(engine, saver):
    sid = "late"
    lists = [[HumanMessage("a", id="a")], [HumanMessage("a", id="a"), AIMessage("b", id="b")]]
    first, second = put_chain(saver, sid, lists)
    snap = next(n.id for n in engine.get_session(sid).tree()
                if n.label.split()[1] == first["configurable"]["checkpoint_id"])
    engine.rollback(sid, to=snap, actor="alice", notice=False)
    late = put_chain_from(saver, sid, second, [[*lists[1], AIMessage("c", id="c")]])[0]
    key = layout.checkpoint_key("", late["configurable"]["checkpoint_id"])
    assert engine.store.doc_get(sid, layout.DOCS, [key])[key]["late"] is True
    latest = saver.get_tuple({"configurable": {"thread_id": sid}})
    assert latest.config["configurable"]["checkpoint_id"] == first["configurable"][
        "checkpoint_id"]
    assert saver.get_tuple(late) is not None  # still in LangGraph's history


def test_copy_thread_target_is_a_session_with_history(engine, saver):
    graph = echo_graph(saver)
    config = thread()
    graph.invoke({"messages": [HumanMessage("one")]}, config)
    source = config["configurable"]["thread_id"]
    saver.copy_thread(source, source + "-copy")
    copy_config = {"configurable": {"thread_id": source + "-copy"}}
    assert graph.get_state(copy_config).values == graph.get_state(config).values
    copied = engine.get_session(source + "-copy")
    assert [m["content"] for m in copied.state().messages] == ["one", "echo one"]
    assert copied.info().head is not None
    graph.invoke({"messages": [HumanMessage("two")]}, copy_config)
    assert len(graph.get_state(config).values["messages"]) == 2


def _thread_state(engine, sid: str) -> dict:
    """Everything a copy could write to thread `sid`, and the feed of its session."""
    info = engine.session_info(sid)
    if info is None:
        return {"session": None}
    s = engine.get_session(sid)
    return {"head": (info.head, info.messages), "messages": s.state().messages,
            "pointer": {**engine.documents.values(sid, layout.HEAD),
                        "root": (live_checkpoint(engine, sid) or {}).get("id")},
            "tree": [n.id for n in s.tree()],
            "docs": engine.documents.scan(sid, layout.DOCS),
            "events": [(e.id, e.type) for e in engine.events(session=sid)]}


@pytest.mark.parametrize("limits", [Limits(document_bytes=300), Limits(message_bytes=40)],
                         ids=["document", "message"])
def test_a_copy_refused_by_a_size_limit_writes_nothing(engine, saver, limits):
    graph = echo_graph(saver)
    source, target = thread(), thread()
    graph.invoke({"messages": [HumanMessage("one " * 20)]}, source)
    src, dst = source["configurable"]["thread_id"], target["configurable"]["thread_id"]
    small = RewindSaver(Engine(engine.store, limits=limits))
    with pytest.raises(SizeLimitExceeded):
        small.copy_thread(src, dst)
    assert _thread_state(engine, dst) == {"session": None}  # not even an empty target
    engine.session(dst)  # an existing, empty target takes the history as well
    before = _thread_state(engine, dst)
    with pytest.raises(SizeLimitExceeded):
        small.copy_thread(src, dst)
    assert _thread_state(engine, dst) == before


def test_a_copy_is_one_write_and_a_failure_in_it_leaves_the_target_as_it_was(
        engine, saver, monkeypatch):
    graph = echo_graph(saver)
    source, target = thread(), thread()
    graph.invoke({"messages": [HumanMessage("one")]}, source)
    graph.invoke({"messages": [HumanMessage("mine")]}, target)
    src, dst = source["configurable"]["thread_id"], target["configurable"]["thread_id"]
    before = _thread_state(engine, dst)
    store = engine.store
    writes: list[str] = []
    for name in ("ensure_session", "append_messages", "put", "take_snapshot", "doc_put",
                 "write_session", "rollback", "set_status"):
        def recorded(*args, _name=name, _real=getattr(store, name), **kwargs):
            writes.append(_name)
            if _name == "write_session" and fail:
                raise StoreUnavailable("the store went away mid-copy")
            return _real(*args, **kwargs)
        monkeypatch.setattr(store, name, recorded)
    fail = True
    with pytest.raises(StoreUnavailable):
        saver.copy_thread(src, dst)
    assert writes == ["write_session"]
    assert _thread_state(engine, dst) == before
    fail = False
    saver.copy_thread(src, dst)
    assert writes == ["write_session", "write_session"]
    monkeypatch.undo()
    after = _thread_state(engine, dst)
    assert after["messages"] == before["messages"]  # the target had a conversation already
    assert after["pointer"]["root"] != before["pointer"]["root"]
    assert graph.get_state(target).values == graph.get_state(source).values


def test_delete_thread_deletes_the_session(engine, saver):
    graph = echo_graph(saver)
    config = thread()
    graph.invoke({"messages": [HumanMessage("one")]}, config)
    sid = config["configurable"]["thread_id"]
    saver.delete_thread(sid)
    assert engine.store.get_session(sid) is None
    assert graph.get_state(config).values == {}
    graph.invoke({"messages": [HumanMessage("again")]}, config)  # the thread can start over
    assert len(graph.get_state(config).values["messages"]) == 2


# -- the guard ----------------------------------------------------------------------------------
@tool
def flaky(x: int) -> str:
    """Fails for negative numbers."""
    if x < 0:
        raise ValueError("negative")
    return f"ok {x}"


def run_tools(node, calls, sid="guard"):
    """Run a RewindToolNode as the only node of a graph without a checkpointer."""
    builder = StateGraph(MessagesState)
    builder.add_node("tools", node)
    builder.add_edge(START, "tools")
    message = AIMessage("", tool_calls=[{"name": n, "args": a, "id": f"c{i}"}
                                        for i, (n, a) in enumerate(calls)])
    out = builder.compile().invoke({"messages": [message]},
                                   {"configurable": {"thread_id": sid}})
    return {"messages": out["messages"][1:]}


def test_guard_records_steps_and_keeps_error_handling(engine):
    node = RewindToolNode([flaky], engine, handle_tool_errors=True)
    out = run_tools(node, [("flaky", {"x": 1})])
    assert out["messages"][0].content == "ok 1"
    out = run_tools(node, [("flaky", {"x": -1})])
    assert out["messages"][0].status == "error"
    steps = engine.get_session("guard").steps()
    assert [(s.tool, s.args, s.status) for s in steps] == [
        ("flaky", {"x": 1}, "ok"), ("flaky", {"x": -1}, "error")]
    assert "negative" in steps[1].error
    strict = RewindToolNode([flaky], engine, handle_tool_errors=False)
    with pytest.raises(ValueError):
        run_tools(strict, [("flaky", {"x": -2})])
    assert engine.get_session("guard").steps()[-1].status == "error"


def test_guard_loop_without_rewind_checkpoints_rolls_the_session_back(engine):
    node = RewindToolNode([flaky], engine, handle_tool_errors=True)
    session = engine.session("plain")
    session.snapshot("start")
    with pytest.raises(LoopDetected) as caught:
        for _ in range(3):
            run_tools(node, [("flaky", {"x": -1})], sid="plain")
    assert caught.value.rollback is not None and caught.value.rollback.actor == "rewind"
    assert session.info().status == "rolled_back"
    assert session.state().messages[-1][NOTICE_FLAG] is True


def test_guard_flag_interrupts_the_thread_while_it_waits_for_on_call(engine):
    ran = []

    @tool
    def crop(x: int) -> str:
        """Crop with a box that never fits."""
        ran.append(x)
        raise ValueError("invalid slice")

    node = RewindToolNode([crop], engine, handle_tool_errors=True, on_loop="flag")
    engine.session("policy-flag").snapshot("start")
    outs = [run_tools(node, [("crop", {"x": -1})], sid="policy-flag") for _ in range(6)]
    assert [len(o["messages"]) for o in outs] == [1, 1, 0, 0, 0, 0]  # interrupted from the 3rd
    assert len(ran) == 3  # the looping call is not run again while the session waits
    info = engine.get_session("policy-flag").info()
    assert info.status == "looping" and info.rollbacks == 0 and info.waiting
    assert info.steps == 3


@pytest.mark.parametrize("policy,raises", [("off", False), ("nudge_then_rollback", True)])
def test_guard_policies(engine, policy, raises):
    node = RewindToolNode([flaky], engine, handle_tool_errors=True, on_loop=policy)
    sid = f"policy-{policy}"
    engine.session(sid).snapshot("start")
    contents = []
    try:
        for _ in range(6):
            contents.append(run_tools(node, [("flaky", {"x": -1})], sid=sid)["messages"][0].content)
    except LoopDetected:
        assert raises
    else:
        assert not raises
    info = engine.get_session(sid).info()
    if policy == "off":
        assert info.loops == 0
    if policy == "nudge_then_rollback":
        assert any("Rewind:" in c for c in contents) and info.rollbacks == 1


def test_guard_side_effects_queue_compensations(engine):
    refunds = []
    engine.compensations.register("points.refund", lambda args, key: refunds.append((args, key)))

    @tool
    def deduct(points: int) -> str:
        """Deduct points for a delivery that never arrives."""
        return "deducted"

    guard = LoopGuard(engine, side_effects={"deduct": lambda a: ("points.refund", a)})
    node = RewindToolNode([deduct], guard, handle_tool_errors=True)
    engine.session("saga").snapshot("start")
    with pytest.raises(LoopDetected) as caught:
        for _ in range(5):
            run_tools(node, [("deduct", {"points": 5})], sid="saga")
    steps = engine.get_session("saga").steps()
    assert all(s.side_effect and s.compensation == ("points.refund", {"points": 5})
               for s in steps)
    assert len(caught.value.rollback.compensations) == len(steps)
    assert [args for args, _ in refunds] == [{"points": 5}] * len(steps)


def test_let_loops_through_keeps_handler_semantics():
    verdict = type("V", (), {"rule": "r", "explanation": "e"})()
    loop = LoopDetected(verdict)
    handle = let_loops_through(True)
    assert "ValueError" in handle(ValueError("x"))
    with pytest.raises(LoopDetected):
        handle(loop)
    only_value = let_loops_through(ValueError)
    with pytest.raises(KeyError):
        only_value(KeyError("k"))

    def custom(e: ValueError) -> str:
        return f"custom {e}"

    handle = let_loops_through(custom)
    assert handle(ValueError("v")) == "custom v"
    with pytest.raises(TypeError):
        handle(TypeError("t"))
    assert let_loops_through(False) is False
    assert let_loops_through("sorry")(RuntimeError()) == "sorry"


def test_guard_in_async_tool_node(engine):
    node = RewindToolNode([flaky], engine, handle_tool_errors=True)
    builder = StateGraph(MessagesState)
    builder.add_node("tools", node)
    builder.add_edge(START, "tools")
    message = AIMessage("", tool_calls=[{"name": "flaky", "args": {"x": 2}, "id": "c1"}])
    out = asyncio.run(builder.compile().ainvoke({"messages": [message]},
                                                {"configurable": {"thread_id": "async-guard"}}))
    assert isinstance(out["messages"][-1], ToolMessage)
    assert [s.status for s in engine.get_session("async-guard").steps()] == ["ok"]


def test_remove_message_edit_is_mirrored_only_when_appending(engine, saver):
    graph = echo_graph(saver)
    config = thread()
    graph.invoke({"messages": [HumanMessage("one", id="h1")]}, config)
    bot_id = graph.get_state(config).values["messages"][-1].id
    graph.update_state(config, {"messages": [RemoveMessage(id=bot_id)]})
    sid = config["configurable"]["thread_id"]
    assert [m.content for m in graph.get_state(config).values["messages"]] == ["one"]
    # the session history is append-only: the removal is in LangGraph's state, not mirrored
    assert [m["content"] for m in engine.get_session(sid).state().messages] == ["one",
                                                                                "echo one"]


def test_step_of_an_aborted_run_stored_late_is_fenced(engine, saver):
    """The guard rolled a run back before LangGraph stored that run's next checkpoint (stored in
    the background): the checkpoint arrives building on the restored one, but stays late."""
    from langgraph.checkpoint.base.id import uuid6

    sid = "fenced"
    first, second = put_chain(saver, sid, [[HumanMessage("a", id="a")],
                                           [HumanMessage("a", id="a"), AIMessage("b", id="b")]])
    aborted_id = str(uuid6(clock_seq=5))  # created by the run before the rollback
    snap = next(n.id for n in engine.get_session(sid).tree()
                if n.label.split()[1] == first["configurable"]["checkpoint_id"])
    engine.rollback(sid, to=snap, actor="rewind", notice=False)
    engine.store.put(sid, layout.HEAD, {layout.FENCE: {
        "base": first["configurable"]["checkpoint_id"], "until": aborted_id}}, engine.clock())
    cp = empty_checkpoint()
    cp["id"] = aborted_id
    version = saver.get_next_version(None)
    cp["channel_values"] = {"messages": [HumanMessage("a", id="a"), AIMessage("x", id="x")]}
    cp["channel_versions"] = {"messages": version}
    saver.put({"configurable": {"thread_id": sid, "checkpoint_ns": "",
                                "checkpoint_id": first["configurable"]["checkpoint_id"]}},
              cp, {"source": "loop", "step": 5, "parents": {}}, {"messages": version})
    latest = saver.get_tuple({"configurable": {"thread_id": sid}})
    assert latest.config["configurable"]["checkpoint_id"] == first["configurable"][
        "checkpoint_id"]
    # a new run building on the same checkpoint is not fenced
    fresh = put_chain_from(saver, sid, first, [[HumanMessage("a", id="a"),
                                                HumanMessage("c", id="c")]])[0]
    assert saver.get_tuple({"configurable": {"thread_id": sid}}).config == fresh


def test_guard_follows_the_freeze_unless_exempted(store_url, open_engine):
    import datetime as dt

    from engine import FreezeWindow

    now = dt.datetime.now(dt.UTC)
    engine = open_engine(store_url, freeze=FreezeWindow(
        now - dt.timedelta(hours=1), now + dt.timedelta(days=1), "Holiday freeze", "flag"))
    node = RewindToolNode([flaky], engine, handle_tool_errors=True)
    engine.session("frozen").snapshot("start")
    for _ in range(4):  # flagged, not rolled back: no LoopDetected; the thread waits
        run_tools(node, [("flaky", {"x": -1})], sid="frozen")
    info = engine.get_session("frozen").info()
    assert info.status == "looping" and info.rollbacks == 0 and info.waiting
    assert info.last_verdict["policy_reason"] == "freeze: Holiday freeze"
    # a policy in the graph's code does not escape a declared freeze ...
    own = RewindToolNode([flaky], engine, handle_tool_errors=True, on_loop="rollback")
    engine.session("own").snapshot("start")
    for _ in range(4):
        run_tools(own, [("flaky", {"x": -1})], sid="own")
    assert engine.get_session("own").info().waiting
    # ... unless the guard's sessions are exempted from it
    strict = RewindToolNode([flaky], LoopGuard(engine, on_loop="rollback", freeze_exempt=True),
                            handle_tool_errors=True)
    engine.session("strict").snapshot("start")
    with pytest.raises(LoopDetected) as caught:
        for _ in range(4):
            run_tools(strict, [("flaky", {"x": -1})], sid="strict")
    assert caught.value.rollback is not None
    assert engine.get_session("strict").info().last_verdict["policy_reason"] == (
        "set for this session; exempt from freeze: Holiday freeze")


# -- short threads ------------------------------------------------------------------------------
def test_a_new_threads_first_checkpoint_is_one_transaction(open_engine, tmp_path):
    engine = open_engine(f"sqlite:///{tmp_path}/rewind.db")
    saver = RewindSaver(engine)
    statements: list[str] = []
    engine.store._db.conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
    put_chain(saver, "chat-1", [[HumanMessage("hi", id="h1")]])
    engine.store._db.conn.set_trace_callback(None)  # type: ignore[attr-defined]
    assert [s for s in statements if s.startswith("BEGIN")] == ["BEGIN IMMEDIATE"]
    info = engine.session_info("chat-1")
    assert info.meta == {layout.META_KEY: layout.META_VALUE} and info.messages == 1
    assert [n.label.split(" (")[0] for n in engine.session("chat-1").tree()][-1].startswith(
        "checkpoint")


def test_list_with_a_limit_pages_back_through_filters_and_before(engine, saver):
    configs = put_chain(saver, "long", [[HumanMessage(f"m{j}", id=f"m{j}")
                                         for j in range(i + 1)] for i in range(45)])
    ids = [c["configurable"]["checkpoint_id"] for c in configs]
    root = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
    got = [t.config["configurable"]["checkpoint_id"] for t in saver.list(root, limit=3)]
    assert got == ids[::-1][:3]
    got = [t.config["configurable"]["checkpoint_id"]
           for t in saver.list(root, before=configs[30], limit=4)]
    assert got == ids[:30][::-1][:4]
    # a filter that matches only early checkpoints: the pages go back until enough match
    got = [t.metadata["step"] for t in saver.list(root, filter={"step": 2}, limit=1)]
    assert got == [2]
    got = [t.metadata["step"] for t in saver.list(root, filter={"source": "loop"}, limit=25)]
    assert got == list(range(44, 19, -1))
    assert len(list(saver.list(root, limit=100))) == 45


def test_list_with_a_limit_and_no_namespace_reads_namespace_by_namespace(engine, saver,
                                                                         monkeypatch):
    """Without ``checkpoint_ns``, ``list(limit=…)`` gives what sorting every namespace's
    checkpoints by id gives (subgraph namespaces included, with before and filters), reading
    each namespace's newest, not the thread."""
    from engine.documents import Documents

    ids: list[str] = []
    parents: dict[str, str | None] = {}
    for i in range(60):  # root and two subgraphs, their checkpoints interleaved in time
        ns = ["", "child:a", "child:b-1"][i % 3]
        cp = empty_checkpoint()
        cp["channel_values"] = {"n": i}
        cp["channel_versions"] = {"n": saver.get_next_version(None)}
        config = {"configurable": {"thread_id": "nested", "checkpoint_ns": ns}}
        if parents.get(ns):
            config["configurable"]["checkpoint_id"] = parents[ns]
        stored = saver.put(config, cp, {"source": "loop", "step": i, "parents": {}},
                           cp["channel_versions"])
        parents[ns] = stored["configurable"]["checkpoint_id"]
        ids.append(parents[ns])
    thread = {"configurable": {"thread_id": "nested"}}
    everything = [t.checkpoint["id"] for t in saver.list(thread)]
    assert everything == sorted(ids, reverse=True)
    read: list[int] = []
    scan = Documents.scan

    def counting(self, sid, ns, prefix="", **kwargs):
        out = scan(self, sid, ns, prefix, **kwargs)
        read.append(len(out))
        return out

    monkeypatch.setattr(Documents, "scan", counting)
    for limit, before, filter_ in [(1, None, None), (5, None, None), (7, ids[40], None),
                                   (4, None, {"step": 3}), (3, ids[30], {"source": "loop"}),
                                   (100, None, None)]:
        expected = [t.checkpoint["id"] for t in saver.list(
            thread, before={"configurable": {"checkpoint_id": before}} if before else None,
            filter=filter_)][:limit]
        read.clear()
        got = [t.checkpoint["id"] for t in saver.list(
            thread, limit=limit, before={"configurable": {"checkpoint_id": before}} if before
            else None, filter=filter_)]
        assert got == expected
        if limit < 10 and not filter_:
            assert sum(read) <= 3 * (limit + 1) + 4  # each namespace's newest, not all 60
    one = saver.list({"configurable": {"thread_id": "nested", "checkpoint_ns": "child:a",
                                       "checkpoint_id": ids[31]}})
    assert [t.checkpoint["id"] for t in one] == [ids[31]]


def test_a_saver_per_request_writes_nothing_to_mark_a_known_thread(open_engine, tmp_path):
    url = f"sqlite:///{tmp_path}/rewind.db"
    configs = put_chain(RewindSaver(open_engine(url)), "chat-2", [[HumanMessage("hi", id="h")]])
    engine = open_engine(url)
    statements: list[str] = []
    engine.store._db.conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
    RewindSaver(engine).put_writes(configs[0], [("messages", AIMessage("x", id="a"))], "task-1")
    engine.store._db.conn.set_trace_callback(None)  # type: ignore[attr-defined]
    assert len([s for s in statements if s.startswith("BEGIN")]) == 1  # the writes alone


def test_a_warm_saver_sees_a_rollback_made_by_another_process(open_engine, tmp_path):
    """The saver keeps what it last wrote to answer the next read without the store; a head
    moved elsewhere (the console, another worker) is still what it reads."""
    url = f"sqlite:///{tmp_path}/rewind.db"
    saver = RewindSaver(open_engine(url))
    configs = put_chain(saver, "chat-3", [[HumanMessage("a", id="a")],
                                          [HumanMessage("a", id="a"), AIMessage("b", id="b")]])
    latest = {"configurable": {"thread_id": "chat-3"}}
    assert saver.get_tuple(latest).config == configs[1]
    other = open_engine(url)
    first = next(n for n in other.session("chat-3").tree()
                 if configs[0]["configurable"]["checkpoint_id"] in (n.label or ""))
    other.session("chat-3").rollback(to=first.id, actor="alice", reason="r", notice=False)
    tup = saver.get_tuple(latest)
    assert tup.config == configs[0]
    assert [m.content for m in tup.checkpoint["channel_values"]["messages"]] == ["a"]


def test_the_live_checkpoint_is_the_newest_checkpoint_snapshot_on_the_live_line(engine, saver):
    """A step snapshot or an operator's snapshot (even one labelled like a checkpoint's) taken
    after a checkpoint leaves it the latest; a rollback to one of them, or to an older
    checkpoint's snapshot, makes the checkpoint at or before it the latest, for this warm
    saver, a fresh one and the next put."""
    sid = "live-line"
    configs = put_chain(saver, sid, [[HumanMessage("a", id="a")],
                                     [HumanMessage("a", id="a"), AIMessage("b", id="b")]])
    latest = {"configurable": {"thread_id": sid}}
    s = engine.get_session(sid)
    with s.step("tool", {"x": 1}) as call:  # a guarded tool call's write-ahead snapshot
        call.ok("fine")
    step_snap = s.info().head
    s.append_message("user", "after")
    s.snapshot("mine")
    for reader in (saver, RewindSaver(engine)):
        assert reader.get_tuple(latest).config == configs[1]
    engine.rollback(sid, to=step_snap, reason="back to the step", notice=False)
    assert RewindSaver(engine).get_tuple(latest).config == configs[1]
    first = next(n.id for n in s.tree()
                 if configs[0]["configurable"]["checkpoint_id"] in (n.label or ""))
    engine.rollback(sid, to=first, reason="back to the first", notice=False)
    s.append_message("user", "kept")
    s.snapshot("checkpoint nightly (ops)")  # labelled like a checkpoint's, names none
    for reader in (saver, RewindSaver(engine)):  # not the newest record: the live one
        assert reader.get_tuple(latest).config == configs[0]
    # the warm saver's next put continues the first checkpoint, as the graph would
    more = put_chain_from(saver, sid, configs[0], [[HumanMessage("a", id="a"),
                                                    AIMessage("c", id="c")]])
    assert saver.get_tuple(latest).config == more[-1]
    assert [m["content"] for m in s.state().messages] == ["a", "kept", "c"]
