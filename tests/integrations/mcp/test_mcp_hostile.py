"""`rewind mcp-proxy` in front of a hostile or broken MCP server (tests/mcp_servers/hostile.py, a
real server started as a subprocess by the proxy the test starts): whatever the server does, the
client gets an answer that says what happened, the proxy keeps serving, and every step the proxy
opened has ended. Also: the server inherits the proxy's environment, a server that cannot start
is reported plainly, an unknown tool costs no re-listing, and `rewind doctor` reports steps left
running."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from support.paths import ROOT

pytest.importorskip("mcp", reason="needs the mcp extra")

from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from engine import Engine  # noqa: E402

ROOT = str(ROOT)
HOSTILE = os.path.join(ROOT, "tests", "mcp_servers", "hostile.py")
RECEIPTS = os.path.join(ROOT, "tests", "mcp_servers", "receipts.py")
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
ENV.pop("HOSTILE_TOKEN", None)


def proxy(store: str, *args: str, env: dict | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "engine.cli", "mcp-proxy", "--store", store, "--session", "s", *args],
        env=env or ENV,
        cwd=ROOT,
    )


def text(result) -> str:
    return "\n".join(getattr(block, "text", "") for block in result.content)


def steps(store: str, sid: str = "s") -> list:
    with Engine.open(store) as engine:
        return engine.get_session(sid).steps()


def assert_every_step_ended(store: str, sid: str = "s") -> None:
    assert [s.n for s in steps(store, sid) if s.status == "running"] == []


def test_oversized_and_undecodable_results_become_clear_errors_and_the_proxy_serves_on(tmp_path):
    store = f"sqlite:///{tmp_path}/hostile.db"

    async def scenario():
        async with Client(proxy(store, "--", sys.executable, HOSTILE)) as client:
            out = {}
            for tool in ("big", "surrogate", "bad_utf8", "not_an_object"):
                out[tool] = await client.call_tool(tool, {})
                out[f"after {tool}"] = await client.call_tool("echo", {"text": f"after {tool}"})
            return out

    out = asyncio.run(scenario())
    big, surrogate, bad = out["big"], out["surrogate"], out["bad_utf8"]
    assert big.is_error and "was not passed on" in text(big)
    assert "10,000,000 bytes" in text(big) and "Ask for less" in text(big)
    assert surrogate.is_error and "lone surrogate (\\ud800)" in text(surrogate)
    assert bad.is_error and "not UTF-8 (0xFF)" in text(bad)
    # valid JSON naming its request but no JSON-RPC answer: at once, not after --timeout
    not_rpc = out["not_an_object"]
    assert not_rpc.is_error and "not valid JSON-RPC (result: Input should be" in text(not_rpc)
    for tool in ("big", "surrogate", "bad_utf8", "not_an_object"):
        after = out[f"after {tool}"]
        assert not after.is_error and text(after) == f"after {tool}"
    recorded = steps(store)
    assert [(s.tool, s.status) for s in recorded] == [
        ("big", "error"), ("echo", "ok"), ("surrogate", "error"), ("echo", "ok"),
        ("bad_utf8", "error"), ("echo", "ok"), ("not_an_object", "error"), ("echo", "ok")]
    assert "not passed on" in recorded[0].error and "lone surrogate" in recorded[2].error


def test_an_upstream_that_never_answers_times_out(tmp_path):
    store = f"sqlite:///{tmp_path}/hang.db"

    async def scenario():
        async with Client(proxy(store, "--timeout", "1", "--", sys.executable, HOSTILE)) as client:
            return await client.call_tool("hang", {}), await client.call_tool("echo", {"text": "x"})

    hung, echoed = asyncio.run(scenario())
    assert hung.is_error and "did not answer hang within 1 s" in text(hung)
    assert "--timeout" in text(hung) and not echoed.is_error
    assert [(s.tool, s.status) for s in steps(store)] == [("hang", "error"), ("echo", "ok")]


def test_a_call_the_client_gives_up_on_ends_its_step(tmp_path):
    store = f"sqlite:///{tmp_path}/gave-up.db"

    async def scenario():
        async with Client(proxy(store, "--", sys.executable, HOSTILE)) as client:
            with pytest.raises(MCPError, match="timed out"):
                await client.call_tool("hang", {}, read_timeout_seconds=0.5)
            return await client.call_tool("echo", {"text": "still here"})

    assert text(asyncio.run(scenario())) == "still here"
    recorded = steps(store)
    assert [(s.tool, s.status) for s in recorded] == [("hang", "error"), ("echo", "ok")]
    assert recorded[0].error.startswith("cancelled: the client gave up")


def test_an_upstream_that_exits_ends_its_own_calls_only(tmp_path):
    store = f"sqlite:///{tmp_path}/exit.db"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "hostile": {"command": sys.executable, "args": [HOSTILE]},
        "receipts": {"command": sys.executable, "args": [RECEIPTS]}}}))

    from mcp.client.stdio import stdio_client

    async def scenario():
        with open(tmp_path / "proxy.err", "w") as errlog:
            async with Client(stdio_client(proxy(store, "--config", str(config)),
                                           errlog=errlog)) as client:
                return [await client.call_tool(name, args) for name, args in
                        [("exit", {}), ("echo", {"text": "x"}), ("read_total", {})]]

    exited, echoed, total = asyncio.run(scenario())
    # the proxy's log (a desktop assistant keeps it) says where it records, and once which
    # server was lost
    said = (tmp_path / "proxy.err").read_text()
    assert (f"rewind mcp-proxy: recording the tool calls of session s into {store}; "
            f"serving {sys.executable} {HOSTILE}, ") in said
    assert "hostile: exiting on purpose" in said  # the server's own last words
    assert said.count("exited or closed its output") == 1
    assert f"{HOSTILE}` exited or closed its output" in said
    assert "its tools answer with an error saying so until rewind mcp-proxy is restarted" in said
    assert exited.is_error and "failed during the call" in text(exited)
    assert "exited or closed its output" in text(exited)
    assert echoed.is_error and text(echoed).startswith("The upstream server is not available")
    assert not total.is_error and text(total) == "42.00 EUR"  # the other server still serves
    assert [(s.tool, s.status) for s in steps(store)] == [
        ("exit", "error"), ("echo", "error"), ("read_total", "ok")]


def test_the_upstream_inherits_the_proxys_environment(tmp_path):
    """A server that needs a variable the MCP client configured for it (a token) gets it."""
    store = f"sqlite:///{tmp_path}/env.db"
    env = {**ENV, "HOSTILE_TOKEN": "s3cret"}

    async def scenario():
        params = proxy(store, "--", sys.executable, HOSTILE, "--needs-env", "HOSTILE_TOKEN",
                       env=env)
        async with Client(params) as client:
            return await client.call_tool("secret", {})

    assert text(asyncio.run(scenario())) == "s3cret"


@pytest.mark.parametrize("command, said", [
    (["/nonexistent/mcp-server"], "cannot start the upstream server `/nonexistent/mcp-server`"),
    ([sys.executable, HOSTILE, "--needs-env", "HOSTILE_TOKEN"], "exited or closed its output"),
])
def test_an_upstream_that_cannot_start_is_reported_plainly(tmp_path, command, said):
    done = subprocess.run(
        [sys.executable, "-m", "engine.cli", "mcp-proxy", "--store",
         f"sqlite:///{tmp_path}/x.db", "--", *command],
        env=ENV, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert said in done.stderr and "please report" not in done.stderr
    if "--needs-env" in command:  # the server's own reason reaches the user too
        assert "$HOSTILE_TOKEN is not set" in done.stderr


def test_an_unknown_tool_costs_no_relisting_until_the_list_changes(tmp_path):
    store = f"sqlite:///{tmp_path}/cache.db"

    async def scenario():
        async with Client(proxy(store, "--", sys.executable, HOSTILE)) as client:
            unknown = [await client.call_tool("nosuch", {}) for _ in range(4)]
            before = json.loads(text(await client.call_tool("stats", {})))["lists"]
            await client.call_tool("grow", {})  # adds `late`, says notifications/tools/list_changed
            late = await client.call_tool("late", {})
            after = json.loads(text(await client.call_tool("stats", {})))["lists"]
            return unknown, before, late, after

    unknown, before, late, after = asyncio.run(scenario())
    assert all(r.is_error and "Unknown tool nosuch" in text(r) for r in unknown)
    assert before == 1  # one listing for four calls of an unknown tool
    assert not late.is_error and text(late) == "late" and after > before


def test_doctor_reports_steps_left_running(tmp_path, capsys):
    from engine.cli.parser import main

    store = f"sqlite:///{tmp_path}/doctor.db"
    with Engine.open(store) as engine:
        engine.session("lost").step("fetch", {"url": "x"}).__enter__()  # its process "died"
        with engine.session("fine").step("fetch", {}) as call:
            call.ok("done")
    assert main(["doctor", "--store", store, "--stuck-after", "0s"]) == 0
    said = capsys.readouterr().out
    assert "1 step(s) left running" in said and "session lost step 1 (fetch)" in said
    assert "session fine" not in said
    assert main(["doctor", "--store", store]) == 0  # only steps older than 5 minutes by default
    assert "left running" not in capsys.readouterr().out


def test_a_request_the_sdk_cannot_parse_is_answered_with_its_reason(tmp_path):
    """A client that speaks JSON-RPC by hand, as a JavaScript client's JSON.stringify does: a
    tools/call whose text holds a lone surrogate (half of an emoji a model's output cut in two)
    once got no answer at all, so the client waited forever; it gets a JSON-RPC error naming
    the surrogate, a line that is not JSON gets a parse error, and the proxy serves on."""
    import queue
    import threading

    store = f"sqlite:///{tmp_path}/unreadable.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "mcp-proxy", "--store", store, "--session", "s",
         "--", sys.executable, RECEIPTS],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, cwd=ROOT)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()

    def send(raw: bytes) -> None:
        proc.stdin.write(raw + b"\n")
        proc.stdin.flush()

    def answer() -> dict:
        return json.loads(lines.get(timeout=60))  # a guard against a hang, not a timing check

    def call(rid: int, text_json: str) -> bytes:
        return (b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": {"name": '
                b'"echo", "arguments": {"text": "%s"}}}' % (rid, text_json.encode()))

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "by-hand", "version": "1"}}}).encode())
        assert answer()["id"] == 0
        send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
        send(call(1, "half an emoji: \\ud83d"))
        refused = answer()
        send(b"this is not JSON")
        parse_error = answer()
        send(call(2, "whole: \\ud83d\\ude00"))
        served = answer()
    finally:
        proc.stdin.close()
        proc.wait(30)
        stderr = proc.stderr.read().decode("utf-8", "replace")
    assert refused["id"] == 1 and refused["error"]["code"] == -32600
    assert "lone surrogate (\\ud83d)" in refused["error"]["message"]
    assert "valid Unicode" in refused["error"]["message"]
    assert parse_error["id"] is None and parse_error["error"]["code"] == -32700
    assert "not JSON" in parse_error["error"]["message"]
    assert served["id"] == 2
    assert json.loads(served["result"]["content"][0]["text"])["text"] == "whole: \U0001f600"
    assert "a client request could not be read: it holds a lone surrogate" in stderr
    assert [(s.tool, s.args["text"]) for s in steps(store)] == [("echo", "whole: \U0001f600")]


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
def test_a_changed_tool_list_reaches_the_client(tmp_path, era):
    """The server adds a tool and says so (notifications/tools/list_changed): the proxy once
    kept the news to itself and said in its handshake that its list never changes, so a client
    never learned of the new tool. A handshake-era client gets the notification; a 2026-07-28
    client gets the event on its subscriptions/listen stream; both then list the new tool."""
    store = f"sqlite:///{tmp_path}/changed.db"

    async def scenario():
        heard = asyncio.Event()

        async def on_message(message):
            if type(message).__name__ == "ToolListChangedNotification":
                heard.set()

        async with Client(proxy(store, "--", sys.executable, HOSTILE), mode=era,
                          message_handler=on_message) as client:
            before = [t.name for t in (await client.list_tools()).tools]
            if era == "legacy":
                capability = client.server_capabilities.tools.list_changed
                await client.call_tool("grow", {})
                await asyncio.wait_for(heard.wait(), 60)  # a guard against a hang
            else:
                async with client.listen(tools_list_changed=True) as events:
                    capability = events.honored.tools_list_changed
                    await client.call_tool("grow", {})
                    await asyncio.wait_for(events.__anext__(), 60)
            after = [t.name for t in (await client.list_tools()).tools]
            late = await client.call_tool("late", {})
            return capability, before, after, late

    capability, before, after, late = asyncio.run(scenario())
    assert capability is True
    assert "late" not in before and after == [*before, "late"]
    assert text(late) == "late" and not late.is_error


def test_a_stray_line_on_the_upstreams_stdout_is_one_clear_log_line(tmp_path):
    """A server that prints to stdout (a banner, a debug line) breaks no call, and the proxy's
    log says so in one line quoting it, where the SDK alone logged a fifteen-line traceback
    for each such line."""
    from mcp.client.stdio import stdio_client

    store = f"sqlite:///{tmp_path}/chatter.db"

    async def scenario():
        with open(tmp_path / "proxy.err", "w") as errlog:
            async with Client(stdio_client(proxy(store, "--", sys.executable, HOSTILE),
                                           errlog=errlog)) as client:
                return [await client.call_tool("chatter", {}) for _ in range(2)]

    results = asyncio.run(scenario())
    assert [text(r) for r in results] == ["chattered", "chattered"]
    said = (tmp_path / "proxy.err").read_text()
    assert "Traceback" not in said
    lines = [x for x in said.splitlines() if "wrote a line that is not JSON to stdout" in x]
    assert len(lines) == 2 and "'debug: cropping the receipt…' (ignored)" in lines[0]


def test_the_proxy_says_where_a_relative_store_is(tmp_path):
    """The default store is a relative path, resolved in whatever folder the MCP client starts
    the proxy in: the proxy's first line names that folder."""
    from mcp.client.stdio import stdio_client

    params = proxy("sqlite:///.rewind/rewind.db", "--", sys.executable, RECEIPTS)
    params.cwd = str(tmp_path)

    async def scenario():
        with open(tmp_path / "proxy.err", "w") as errlog:
            async with Client(stdio_client(params, errlog=errlog)) as client:
                return await client.call_tool("read_total", {})

    assert text(asyncio.run(scenario())) == "42.00 EUR"
    said = (tmp_path / "proxy.err").read_text()
    assert ("into sqlite:///.rewind/rewind.db (a path relative to "
            f"{os.path.realpath(tmp_path)}); serving") in said
    assert (tmp_path / ".rewind" / "rewind.db").exists()
