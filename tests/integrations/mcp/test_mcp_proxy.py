"""`rewind mcp-proxy` with the `mcp` SDK's real client, in front of a real MCP server started by
the test (tests/mcp_servers/receipts.py), on stdio and over streamable HTTP on free loopback
ports: a looping call is refused with the explanation, healthy calls pass through unchanged, the
steps are in the store, and an operator's rollback reaches the client as a notice."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager

import pytest
from support.paths import ROOT

pytest.importorskip("mcp", reason="needs the mcp extra")

from mcp import Client, StdioServerParameters  # noqa: E402

from engine import Engine  # noqa: E402
from engine.integrations.mcp import ROLLED_BACK_NOTICE  # noqa: E402

ROOT = str(ROOT)
SERVER = os.path.join(ROOT, "tests", "mcp_servers", "receipts.py")
CROP = {"x": 10, "y": 70, "width": 120, "height": 20}
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


def proxy_params(store: str, *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "engine.cli", "mcp-proxy", "--store", store, *args],
        env=ENV,
        cwd=ROOT,
    )


def texts(result) -> list[str]:
    return [getattr(block, "text", "") for block in result.content]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the process serving port {port} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


@contextmanager
def process(*args: str, port: int):
    proc = subprocess.Popen(
        [sys.executable, *args],
        env=ENV,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, proc)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def crop_until_refused(client, calls: int = 5) -> list:
    return [await client.call_tool("image_crop", CROP) for _ in range(calls)]


def check_loop_results(results) -> None:
    first, _, third, fourth, fifth = results
    # the first calls reach the server: its own error, unchanged
    assert first.is_error and texts(first) == [
        "Error executing tool image_crop: invalid slice [10:130, 70:90] on a 100x80 image"
    ]
    # the third completes the loop: the server's answer, then Rewind's explanation and notice
    assert third.is_error and texts(third)[0] == texts(first)[0]
    assert "this call completed a loop" in texts(third)[1]
    # the notice says what happened to the proxy's records, never that the client's context
    # was reset (the proxy cannot touch it), and what the client should do
    notice = texts(third)[2]
    assert notice == f"Rewind notice: {ROLLED_BACK_NOTICE.format(tool='image_crop')}"
    assert "reset" not in notice and "do not repeat them" in notice
    # a call that would continue the loop is refused without reaching the server
    for refused in (fourth, fifth):
        assert refused.is_error and len(refused.content) == 1
        text = texts(refused)[0]
        assert text.startswith(
            "Rewind refused this call: image_crop with these arguments repeats a loop"
        )
        assert "The tool was not called" in text and "change the arguments" in text


def check_steps(store: str, sid: str) -> None:
    with Engine.open(store) as engine:
        steps = engine.get_session(sid).steps()
        crops = [s for s in steps if s.tool == "image_crop"]
        assert len(crops) == 5 and {s.args == CROP for s in crops} == {True}
        # three upstream failures, then two calls Rewind refused before they ran
        assert [s.status for s in crops] == ["error"] * 3 + ["refused"] * 2
        assert crops[2].verdict and crops[2].verdict["rule"] == "exact_repeat"
        assert crops[3].error.startswith("refused by Rewind: this call repeats a loop")
        info = engine.get_session(sid).info()
        # the refusals are no evidence: the one loop is the upstream's error, as "why flagged"
        # and `rewind show` tell it
        assert info.loops == 1 and info.rollbacks == 1 and info.meta.get("channel") == "mcp"
        assert info.last_verdict["evidence_steps"] == [c.n for c in crops[:3]]
        assert "invalid slice" in info.last_verdict["explanation"]
        assert "refused" not in info.last_verdict["explanation"]
        assert [a.actor for a in engine.audit(session=sid, action="rollback")] == ["rewind"]
        notices = [m["content"] for m in engine.get_session(sid).state().messages
                   if m.get("rewind_notice")]
        assert notices == [ROLLED_BACK_NOTICE.format(tool="image_crop")]


def test_stdio_proxy_refuses_a_loop_and_passes_healthy_calls(tmp_path):
    store = f"sqlite:///{tmp_path}/mcp.db"
    sid = f"mcp-test-{uuid.uuid4().hex[:6]}"

    async def scenario():
        async with Client(
            StdioServerParameters(command=sys.executable, args=[SERVER], env=ENV)
        ) as direct:
            bare = await direct.call_tool("echo", {"text": "héllo"})
            bare_tools = await direct.list_tools()
        async with Client(
            proxy_params(store, "--session", sid, "--", sys.executable, SERVER)
        ) as client:
            tools = await client.list_tools()
            echoed = await client.call_tool("echo", {"text": "héllo"})
            results = await crop_until_refused(client)
            total = await client.call_tool("read_total", {})
            other = await client.call_tool(
                "echo", {"text": "x"}, meta={"rewind/session": f"{sid}-named"}
            )
            resources = await client.list_resources()
            receipt = await client.read_resource("receipt://latest")
            prompt = await client.get_prompt("summarize", {"style": "long"})
        return bare, bare_tools, tools, echoed, results, total, other, resources, receipt, prompt

    (bare, bare_tools, tools, echoed, results, total, other, resources, receipt, prompt) = (
        asyncio.run(scenario())
    )
    # healthy calls and listings pass through unchanged
    assert [t.model_dump() for t in tools.tools] == [t.model_dump() for t in bare_tools.tools]
    assert echoed.content == bare.content and not echoed.is_error
    assert echoed.structured_content == bare.structured_content
    assert texts(total) == ["42.00 EUR"] and not total.is_error
    assert not other.is_error
    assert [r.uri for r in resources.resources] == ["receipt://latest"]
    assert receipt.contents[0].text.endswith("TOTAL 42.00 EUR")
    assert prompt.messages[0].content.text == "Summarize the receipt in a long way."
    check_loop_results(results)
    check_steps(store, sid)
    with Engine.open(store) as engine:
        assert [s.tool for s in engine.get_session(f"{sid}-named").steps()] == ["echo"]
        assert {sid, f"{sid}-named"} <= {s.id for s in engine.sessions()}


def test_an_operator_rollback_reaches_the_client_as_a_notice(tmp_path):
    store = f"sqlite:///{tmp_path}/notice.db"
    sid = "mcp-notice"

    async def scenario():
        async with Client(
            proxy_params(store, "--session", sid, "--", sys.executable, SERVER)
        ) as client:
            await client.call_tool("echo", {"text": "one"})
            await client.call_tool("echo", {"text": "two"})
            with Engine.open(store) as engine:
                first = engine.get_session(sid).tree()[0].id
                engine.rollback(
                    sid,
                    to=first,
                    actor="alice",
                    reason="wrong order",
                    notice="We reset this conversation; please check the order.",
                )
            after = await client.call_tool("echo", {"text": "three"})
            again = await client.call_tool("echo", {"text": "four"})
        return after, again

    after, again = asyncio.run(scenario())
    assert texts(after)[-1] == (
        "Rewind notice: We reset this conversation; please check the order."
    )
    assert len(again.content) == 1  # told once
    with Engine.open(store) as engine:
        steps = engine.get_session(sid).steps()
        assert [(s.args["text"], s.on_live_line) for s in steps] == [
            ("one", False),
            ("two", False),
            ("three", True),
            ("four", True),
        ]


def test_streamable_http_proxy_in_front_of_an_http_server(tmp_path):
    store = f"sqlite:///{tmp_path}/http.db"
    sid = "mcp-http"
    upstream_port, proxy_port = free_port(), free_port()

    async def scenario():
        async with Client(f"http://127.0.0.1:{proxy_port}/mcp") as client:
            echoed = await client.call_tool("echo", {"text": "over http"})
            results = await crop_until_refused(client)
        return echoed, results

    with (
        process(SERVER, "--http", str(upstream_port), port=upstream_port),
        process(
            "-m",
            "engine.cli",
            "mcp-proxy",
            "--store",
            store,
            "--session",
            sid,
            "--upstream",
            f"http://127.0.0.1:{upstream_port}/mcp",
            "--http",
            str(proxy_port),
            port=proxy_port,
        ),
    ):
        echoed, results = asyncio.run(scenario())
    assert texts(echoed) == ['{"text": "over http", "length": 9}'] and not echoed.is_error
    check_loop_results(results)
    check_steps(store, sid)


def test_cli_needs_an_upstream(capsys):
    from engine.cli.parser import main

    assert main(["mcp-proxy", "--store", "sqlite:///:memory:"]) == 2
    assert "give an upstream" in capsys.readouterr().err


def test_cli_refuses_a_session_id_no_store_takes_before_serving(capsys):
    """`--session` over 200 characters was taken, and every call then failed with "Internal
    server error"; it is refused at start, saying why."""
    from engine.cli.parser import main

    assert main(["mcp-proxy", "--store", "sqlite:///:memory:", "--session", "x" * 300,
                 "--", sys.executable, SERVER]) == 2
    assert "--session: a session id must be at most 200 characters" in capsys.readouterr().err


def test_a_quarantined_tool_is_refused_without_calling_it(tmp_path):
    """An operator's quarantine: the proxy answers with an isError result and the upstream tool
    is not called."""
    from mcp.server.mcpserver import MCPServer

    from engine.integrations.mcp import McpProxy, Upstream

    server = MCPServer("shop")
    refunds: list[str] = []

    @server.tool()
    def refund(order: str) -> str:
        """Refund an order."""
        refunds.append(order)
        return "refunded"

    async def scenario():
        async with Client(server) as client:
            with Engine.open(f"sqlite:///{tmp_path}/q.db") as engine:
                engine.quarantine("refund", actor="alice", reason="double refunds")
                proxy = McpProxy(engine, [Upstream(client=client)], session="q")
                return await proxy.call(proxy.session_for(None), "refund", {"order": "A-1"})

    result = asyncio.run(scenario())
    assert result.is_error and refunds == []
    assert texts(result)[0].startswith("Rewind refused this call: the tool refund is quarantined")


def test_a_config_file_names_the_servers(tmp_path):
    """`--config FILE` in the format MCP clients use: each server by command or URL."""
    import json

    from engine.integrations.mcp import load_config

    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "receipts": {
                        "command": sys.executable,
                        "args": [SERVER],
                        "env": {"RECEIPTS": "1"},
                    },
                    "remote": {"url": "http://127.0.0.1:9/mcp"},
                }
            }
        )
    )
    local, remote = load_config(str(config))
    assert list(local.command) == [sys.executable, SERVER] and local.env == {"RECEIPTS": "1"}
    assert remote.url == "http://127.0.0.1:9/mcp"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"mcpServers": {"x": {"args": []}}}))
    with pytest.raises(ValueError, match="needs a command or a url"):
        load_config(str(bad))

    # the proxy serves what the file names
    config.write_text(
        json.dumps({"mcpServers": {"receipts": {"command": sys.executable, "args": [SERVER]}}})
    )
    store = f"sqlite:///{tmp_path}/config.db"

    async def scenario():
        async with Client(
            proxy_params(store, "--session", "cfg", "--config", str(config))
        ) as client:
            return await client.call_tool("read_total", {})

    assert texts(asyncio.run(scenario())) == ["42.00 EUR"]
    with Engine.open(store) as engine:
        assert [s.tool for s in engine.get_session("cfg").steps()] == ["read_total"]


def test_the_proxys_refusals_are_never_loop_evidence(tmp_path, capsys):
    """However often a blocked call is repeated, the session keeps one loop, the upstream's:
    "why flagged" and `rewind show` describe the tool's own error, not Rewind's refusals."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from engine.cli.parser import main
    from engine.integrations.mcp import McpProxy, Upstream

    server = MCPServer("receipts")

    @server.tool()
    def image_crop(x: int, y: int, width: int, height: int) -> str:
        """Crop."""
        raise ToolError("invalid slice [10:130, 70:90] on a 100x80 image")

    store = f"sqlite:///{tmp_path}/evidence.db"

    async def scenario():
        async with Client(server) as client:
            with Engine.open(store) as engine:
                proxy = McpProxy(engine, [Upstream(client=client)], session="ev")
                session = proxy.session_for(None)
                return [await proxy.call(session, "image_crop", CROP) for _ in range(8)]

    results = asyncio.run(scenario())
    assert all(texts(r)[0].startswith("Rewind refused this call") for r in results[3:])
    with Engine.open(store) as engine:
        info = engine.get_session("ev").info()
        steps = engine.get_session("ev").steps()
    assert [s.error.startswith("refused by Rewind") for s in steps] == [False] * 3 + [True] * 5
    assert info.loops == 1 and info.rollbacks == 1
    assert info.last_verdict["evidence_steps"] == [1, 2, 3]
    assert "invalid slice" in info.last_verdict["explanation"]
    assert main(["show", "ev", "--store", store]) == 0
    shown = capsys.readouterr().out
    assert "invalid slice" in shown and "failed with 'refused by Rewind" not in shown


def test_a_session_handle_the_caller_made_still_gets_its_loop_blocked(tmp_path):
    """`McpProxy.call` with a handle of the caller's (which acts on loops itself, as the
    benchmark's do): the engine rolls back with its own notice and the loop's calls are blocked."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from engine.integrations.mcp import McpProxy, Upstream

    server = MCPServer("receipts")

    @server.tool()
    def image_crop(x: int, y: int, width: int, height: int) -> str:
        """Crop."""
        raise ToolError("invalid slice")

    async def scenario():
        async with Client(server) as client:
            with Engine.open(f"sqlite:///{tmp_path}/own.db") as engine:
                proxy = McpProxy(engine, [Upstream(client=client)])
                session = engine.session("own-handle")
                return [await proxy.call(session, "image_crop", CROP) for _ in range(4)]

    results = asyncio.run(scenario())
    assert "this call completed a loop" in texts(results[2])[1]
    assert texts(results[2])[2].startswith("Rewind notice: ")
    assert texts(results[3])[0].startswith("Rewind refused this call")


def test_a_proxy_meeting_ever_new_sessions_keeps_a_bounded_number_of_handles(
        tmp_path, monkeypatch):
    """A proxy up all day meets a new session per connection or per conversation (``_meta``);
    it once kept a handle (tens of kilobytes) for each of them for ever. It keeps the most
    recently used few, and a session whose handle went still has its loop caught: the handle
    opened again rebuilds its detector from the store."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from engine.integrations.mcp import McpProxy, Upstream
    from engine.integrations.mcp import proxy as proxy_module

    monkeypatch.setattr(proxy_module, "KEPT_HANDLES", 3)
    monkeypatch.setattr(proxy_module, "KEPT_SESSIONS", 5)
    server = MCPServer("receipts")

    @server.tool()
    def image_crop(x: int, y: int, width: int, height: int) -> str:
        """Crop."""
        raise ToolError("invalid slice")

    @server.tool()
    def read_total() -> str:
        """Total."""
        return "42.00 EUR"

    def named(sid: str, name: str, args: dict):
        import mcp_types

        return mcp_types.CallToolRequestParams(name=name, arguments=args,
                                               _meta={"rewind/session": sid})

    async def scenario():
        async with Client(server) as client:
            with Engine.open(f"sqlite:///{tmp_path}/many.db") as engine:
                proxy = McpProxy(engine, [Upstream(client=client)], session="mcp-base")
                first = [await proxy.on_call_tool(None, named("mcp-a", "image_crop", CROP))
                         for _ in range(2)]
                for n in range(20):
                    await proxy.on_call_tool(None, named(f"mcp-other-{n}", "read_total", {}))
                kept = (len(proxy._sessions), len(proxy._epochs), len(proxy._last_call))
                third = await proxy.on_call_tool(None, named("mcp-a", "image_crop", CROP))
                return first, kept, third, engine.session_info("mcp-a")

    first, kept, third, info = asyncio.run(scenario())
    assert kept[0] <= 3 and kept[1] <= 5 and kept[2] <= 5
    assert all("completed a loop" not in "\n".join(texts(r)) for r in first)
    assert "this call completed a loop" in texts(third)[1]
    assert info.loops == 1 and info.last_verdict["evidence_steps"] == [1, 2, 3]


def test_a_call_whose_arguments_are_over_the_engines_limit_still_reaches_the_tool(tmp_path):
    """An IDE agent writes a 1.5 MB file: the arguments are over the engine's 1 MB limit for
    recorded arguments, and the proxy once answered "Internal server error" without calling
    the tool. The call goes through, recorded by the arguments' digest and size, and repeating
    the same failing large call is still caught as a loop."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    from engine.integrations.mcp import McpProxy, Upstream

    server = MCPServer("files")
    written: list[int] = []

    @server.tool()
    def write_file(path: str, content: str) -> str:
        """Write a file."""
        if path == "/full":
            raise ToolError("disk full")
        written.append(len(content))
        return f"wrote {len(content)} characters"

    content = "x" * 1_500_000

    async def scenario():
        async with Client(server) as client:
            with Engine.open(f"sqlite:///{tmp_path}/large.db") as engine:
                proxy = McpProxy(engine, [Upstream(client=client)], session="large")
                session = proxy.session_for(None)
                ok = await proxy.call(session, "write_file", {"path": "/a", "content": content})
                failed = [await proxy.call(session, "write_file",
                                           {"path": "/full", "content": content})
                          for _ in range(4)]
                return ok, failed, engine.get_session("large").steps()

    ok, failed, recorded = asyncio.run(scenario())
    assert not ok.is_error and texts(ok) == ["wrote 1500000 characters"]
    assert written == [1_500_000]
    assert set(recorded[0].args) == {"digest", "bytes"} and recorded[0].args["bytes"] > 1_500_000
    assert recorded[1].args == recorded[2].args != recorded[0].args
    assert "this call completed a loop" in texts(failed[2])[1]
    assert texts(failed[3])[0].startswith("Rewind refused this call: write_file")


def _counting_server():
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("counter")
    called: list[str] = []

    @server.tool()
    def echo(text: str) -> str:
        """Echo."""
        called.append(text)
        return text

    return server, called


def _named(sid: str, text: str):
    import mcp_types

    return mcp_types.CallToolRequestParams(name="echo", arguments={"text": text},
                                           _meta={"rewind/session": sid})


def test_a_session_purged_while_its_client_stays_connected_starts_again(tmp_path):
    """Retention (`rewind purge --idle`) removed the session of a client that stayed connected:
    every later call was answered "Internal server error" until the proxy restarted. The
    session starts again, and the tool is called once per call."""
    from engine.integrations.mcp import McpProxy, Upstream

    server, called = _counting_server()

    async def scenario():
        async with Client(server) as client:
            with Engine.open(f"sqlite:///{tmp_path}/purged.db") as engine:
                proxy = McpProxy(engine, [Upstream(client=client)], session="mcp-base")
                first = await proxy.on_call_tool(None, _named("mcp-day", "morning"))
                purged = engine.fleet.purge_idle_sessions(0.0)
                gone = engine.session_info("mcp-day") is None
                later = await proxy.on_call_tool(None, _named("mcp-day", "evening"))
                return first, purged, gone, later, engine.get_session("mcp-day").steps()

    first, purged, gone, later, recorded = asyncio.run(scenario())
    assert gone, purged
    assert texts(first) == ["morning"] and texts(later) == ["evening"] and not later.is_error
    assert called == ["morning", "evening"]
    assert [s.args["text"] for s in recorded] == ["evening"]


def test_an_unreachable_store_gets_a_clear_refusal_and_the_tool_is_not_called(tmp_path):
    """The store (Redis) went away mid-session: the client got "Internal server error" and the
    proxy's log a traceback. The call is refused with the store's own error, the tool is not
    called (an unrecorded call would escape the guard), and the proxy serves on once the
    store is back."""
    import shutil

    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server")
    from engine.integrations.mcp import McpProxy, Upstream

    server, called = _counting_server()
    port = free_port()
    start = [shutil.which("redis-server"), "--port", str(port), "--save", "",
             "--appendonly", "no", "--bind", "127.0.0.1"]

    def redis() -> subprocess.Popen:
        proc = subprocess.Popen(start, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(port, proc)
        return proc

    async def scenario():
        store = redis()
        try:
            async with Client(server) as client:
                with Engine.open(f"redis://127.0.0.1:{port}/0") as engine:
                    proxy = McpProxy(engine, [Upstream(client=client)], session="mcp-r")
                    up = await proxy.on_call_tool(None, _named("mcp-r", "up"))
                    store.terminate()
                    store.wait()
                    down = await proxy.on_call_tool(None, _named("mcp-r", "down"))
                    store = redis()
                    back = await proxy.on_call_tool(None, _named("mcp-r", "back"))
                    return up, down, back
        finally:
            store.terminate()
            store.wait()

    up, down, back = asyncio.run(scenario())
    assert texts(up) == ["up"] and texts(back) == ["back"]
    assert down.is_error and texts(down)[0].startswith(
        "Rewind could not reach its store, so the tool was not called: cannot reach Redis")
    assert called == ["up", "back"]


def test_calls_in_flight_together_are_one_turn_and_not_failures_in_a_row(tmp_path):
    # A model guesses three names in one response and the client runs the calls together; all
    # three fail, and the next response finds the right one. Three failures of one attempt are
    # no loop: the proxy records the overlapping calls as one turn.
    store = f"sqlite:///{tmp_path}/mcp.db"
    sid = f"mcp-turns-{uuid.uuid4().hex[:6]}"

    async def scenario():
        async with Client(proxy_params(store, "--session", sid, "--", sys.executable, SERVER)
                          ) as client:
            guesses = await asyncio.gather(*(
                client.call_tool("lookup", {"name": name})
                for name in ("parse_cfg", "parseConfig", "load_config")))
            found = await client.call_tool("echo", {"text": "config.parse"})
            again = await client.call_tool("lookup", {"name": "config_parse"})
        return guesses, found, again

    guesses, found, again = asyncio.run(scenario())
    assert all(g.is_error and "no symbol named" in texts(g)[0] for g in guesses)
    assert not any("Rewind" in t for g in guesses for t in texts(g))
    assert not found.is_error and again.is_error
    with Engine.open(store) as engine:
        session = engine.get_session(sid)
        steps = session.steps()
        assert [s.tool for s in steps] == ["lookup"] * 3 + ["echo", "lookup"]
        turns = [s.turn for s in steps]
        assert None not in turns and len(set(turns[:3])) == 1
        assert len(set(turns)) == 3  # the batch, then one turn per call waited on
        assert session.info().loops == 0
