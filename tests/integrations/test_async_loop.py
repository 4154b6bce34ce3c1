"""The integrations' ``async`` methods keep the event loop free: their store work runs on a worker
thread, never on the loop's, and a store call that blocks does not stop other coroutines (a
heartbeat task releases the blocked call; were the call on the loop, the heartbeat could not run
and the call would be left waiting). bench/async_stall.py measures the stalls."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from support.agents_sdk import CONFIG, Scripted, call, fresh_id, lookup, say

from engine import Engine
from engine.integrations.openai_agents import RewindSession, ToolGuard

HOLD_S = 10.0
"""How long a held store call waits for the heartbeat (a fail-safe, never reached when the loop
is free)."""


class WatchedStore:
    """The engine's store, recording the thread of every call; `hold()` makes the next call wait
    until the heartbeat releases it."""

    def __init__(self, inner: Any):
        self._inner = inner
        self.threads: set[int] = set()
        self.entered = threading.Event()
        self.release = threading.Event()
        self.held: list[bool] = []
        self._holding = False

    def hold(self) -> None:
        self._holding = True

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def watched(*args: Any, **kwargs: Any) -> Any:
            self.threads.add(threading.get_ident())
            if self._holding:
                self._holding = False
                self.entered.set()
                self.held.append(self.release.wait(HOLD_S))
            return attr(*args, **kwargs)

        return watched


def watch(engine: Engine) -> WatchedStore:
    watched = WatchedStore(engine._runtime.store)
    engine._runtime.store = watched
    return watched


async def heartbeat(store: WatchedStore) -> int:
    """Tick until the held call has begun, then release it; the ticks counted."""
    ticks = 0
    while not store.release.is_set():
        ticks += 1
        if store.entered.is_set():
            store.release.set()
        await asyncio.sleep(0.001)
    return ticks


async def while_held(store: WatchedStore, work: Any) -> Any:
    store.hold()
    beat = asyncio.create_task(heartbeat(store))
    try:
        return await work
    finally:
        store.release.set()
        await beat


# -- RewindSession ------------------------------------------------------------------------------
def test_session_store_calls_run_off_the_loop(engine):
    session = RewindSession(engine, fresh_id())
    store = watch(engine)

    async def scenario() -> int:
        await session.add_items([{"role": "user", "content": "hi"},
                                 {"role": "assistant", "content": "hello"}])
        assert [i["content"] for i in await session.get_items()] == ["hi", "hello"]
        assert (await session.pop_item())["content"] == "hello"
        await session.clear_session()
        assert await session.get_items() == []
        return threading.get_ident()

    loop_thread = asyncio.run(scenario())
    assert store.threads and loop_thread not in store.threads


def test_a_held_session_read_does_not_stop_the_loop(sqlite_url, open_engine):
    engine = open_engine(sqlite_url)
    session = RewindSession(engine, fresh_id())
    asyncio.run(session.add_items([{"role": "user", "content": "hi"}]))
    store = watch(engine)

    items = asyncio.run(while_held(store, session.get_items()))
    assert store.held == [True]  # the heartbeat ran while the read was held, and released it
    assert items == [{"role": "user", "content": "hi"}]


# -- ToolGuard ----------------------------------------------------------------------------------
def test_guarded_tool_calls_do_their_store_work_off_the_loop(engine):
    session = RewindSession(engine, fresh_id())
    model = Scripted([lambda n: call("lookup", {"order": "A-1"}, n),
                      lambda n: say("found it", n)])
    from agents import Agent, Runner

    agent = ToolGuard(session).agent(Agent(name="clerk", model=model, tools=[lookup]))
    store = watch(engine)

    async def scenario() -> tuple[Any, int]:
        result = await Runner.run(agent, "where is A-1?", session=session, run_config=CONFIG)
        return result, threading.get_ident()

    result, loop_thread = asyncio.run(scenario())
    assert store.threads and loop_thread not in store.threads
    assert result.final_output == "found it"
    assert [s.tool for s in session.rewind.steps()] == ["lookup"]


# -- RewindStore (LangGraph) --------------------------------------------------------------------
def test_store_abatch_runs_off_the_loop(sqlite_url, open_engine):
    pytest.importorskip("langgraph")
    from langgraph.store.base import GetOp, PutOp

    from engine.integrations.langgraph import RewindStore

    engine = open_engine(sqlite_url)
    memory = RewindStore(engine.session(fresh_id()))
    store = watch(engine)

    async def scenario() -> tuple[list, int]:
        await memory.abatch([PutOp(("users", "u1"), "home", {"text": "lives in Denver"})])
        got = await while_held(store, memory.abatch([GetOp(("users", "u1"), "home")]))
        return got, threading.get_ident()

    got, loop_thread = asyncio.run(scenario())
    assert got[0].value == {"text": "lives in Denver"}
    assert store.held == [True]
    assert loop_thread not in store.threads


# -- the MCP proxy ------------------------------------------------------------------------------
def test_a_held_store_write_does_not_stop_the_proxy(sqlite_url, open_engine):
    """One slow store write of a tool call leaves the loop free for the proxy's other clients."""
    pytest.importorskip("mcp")
    import mcp_types as types
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    from engine.integrations.mcp import McpProxy, Upstream

    server = MCPServer("shop")

    @server.tool()
    def refund(order: str) -> str:
        """Refund an order."""
        return f"refunded {order}"

    engine = open_engine(sqlite_url)
    store = watch(engine)

    async def scenario() -> tuple[Any, Any, int]:
        async with Client(server) as client:
            proxy = McpProxy(engine, [Upstream(client=client)], session="mcp-held")
            params = types.CallToolRequestParams(name="refund", arguments={"order": "A-1"})
            first = await proxy.on_call_tool(None, params)
            listed = await proxy.on_list_tools(None, None)
            held = await while_held(store, proxy.on_call_tool(None, params))
            assert [t.name for t in listed.tools] == ["refund"]
            return first, held, threading.get_ident()

    first, held, loop_thread = asyncio.run(scenario())
    assert not first.is_error and not held.is_error
    assert store.held == [True]
    assert store.threads and loop_thread not in store.threads
    assert [s.status for s in engine.get_session("mcp-held").steps()] == ["ok", "ok"]


# -- the worker ---------------------------------------------------------------------------------
def test_a_cancelled_caller_waits_for_its_store_call_to_finish():
    """A cancelled step must not leave its store call running behind the caller's back: the
    cancellation goes on once the call ended (its step is then known, and can be ended)."""
    from engine.integrations.threads import off_loop

    release, began, ended = threading.Event(), threading.Event(), threading.Event()

    def store_call() -> str:
        began.set()
        release.wait(HOLD_S)
        ended.set()
        return "done"

    class Handle:
        pass

    async def scenario() -> tuple[bool, bool, bool]:
        task = asyncio.create_task(off_loop(Handle(), store_call))
        while not began.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        for _ in range(20):
            await asyncio.sleep(0.001)
        waiting = not task.done()  # still waiting for the call, not abandoned
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        return waiting, ended.is_set(), task.cancelled()

    waiting, finished, cancelled = asyncio.run(scenario())
    assert waiting and finished and cancelled


def test_a_handles_calls_run_in_order_on_one_thread_in_the_callers_context():
    """The worker keeps what a caller of `asyncio.to_thread` gets: the caller's context
    variables, the call's result or its own exception; and a handle's calls run one after the
    other on the same thread (its store connection)."""
    import contextvars

    from engine.integrations.threads import off_loop

    tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant", default="none")

    class Handle:
        pass

    handle = Handle()

    def seen(i: int) -> tuple[int, str, int]:
        return i, tenant.get(), threading.get_ident()

    def fails() -> None:
        raise KeyError("no such order")

    async def scenario() -> tuple[list, int]:
        tenant.set("acme")
        got = await asyncio.gather(*(off_loop(handle, seen, i) for i in range(20)))
        with pytest.raises(KeyError, match="no such order"):
            await off_loop(handle, fails)
        return got, threading.get_ident()

    got, loop_thread = asyncio.run(scenario())
    assert [g[0] for g in got] == list(range(20))
    assert {g[1] for g in got} == {"acme"}
    assert len({g[2] for g in got}) == 1 and got[0][2] != loop_thread

