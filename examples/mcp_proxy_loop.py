"""Any MCP client behind `rewind mcp-proxy`: a looping tool call is refused, the steps are stored.

This file is both sides. Run as is, it is an MCP client (the `mcp` SDK's `Client`) that starts

    rewind mcp-proxy --store STORE --session ID -- python examples/mcp_proxy_loop.py --serve

and calls the tools like a model stuck on a failing crop would. Run with ``--serve`` it is the
upstream MCP server (stdio): image_crop always fails with "invalid slice", read_total answers.
The proxy passes the first calls through, flags the loop at the third identical failure (that
result comes back with Rewind's explanation and the recovery notice), and answers the fourth
itself with an ``isError`` result telling the model what to do instead; the server never sees it.

    python examples/mcp_proxy_loop.py [STORE_URL] [--session ID]

Under the ``flag`` policy (``rewind freeze --on-loop flag``, or $REWIND_FREEZE_ON_LOOP=flag with a
freeze window, which the proxy inherits) the third call's result says the conversation waits for
on-call; the example stops calling tools and waits for an operator's decision, e.g.

    rewind --store STORE_URL release mcp-receipts --actor alice --reason ok

then reads the total through the proxy (a stopped session ends the example).

Without STORE_URL it writes where the console reads by default ($REWIND_STORE, else
sqlite:///.rewind/rewind.db in the current folder), so `rewind dashboard` run from the same
folder shows the session.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CROP = {"x": 10, "y": 70, "width": 120, "height": 20}


def serve() -> None:
    """The upstream MCP server, on stdio."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("receipts")

    @server.tool()
    def image_crop(x: int, y: int, width: int, height: int) -> str:
        """Crop the receipt image to a box and return the text in it."""
        raise ToolError(f"invalid slice [{x}:{x + width}, {y}:{y + height}] on a 100x80 image")

    @server.tool()
    def read_total() -> str:
        """Read the total printed at the bottom of the receipt."""
        return "42.00 EUR"

    server.run()


async def run_async(store: str, session: str, out: Callable[[str], Any] = print,
                    wait: float | None = None) -> list[Any]:
    """Drive the proxy like a looping model; returns the tool results in call order. When the
    session waits for on-call, waits (at most `wait` seconds; None: as long as it takes) for
    the operator's decision before it goes on."""
    from mcp import Client, StdioServerParameters

    from engine import Engine

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proxy = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "engine.cli",
            "mcp-proxy",
            "--store",
            store,
            "--session",
            session,
            "--",
            sys.executable,
            str(Path(__file__).resolve()),
            "--serve",
        ],
        env=env,
        cwd=str(ROOT),
    )
    results = []
    async with Client(proxy) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        out(f"tools behind the proxy: {', '.join(names)}")
        with Engine.open(store, create=False) as engine:
            for attempt in range(1, 5):
                result = await client.call_tool("image_crop", CROP)
                results.append(result)
                first = result.content[0].text if result.content else ""
                out(f"image_crop #{attempt}: is_error={result.is_error}: {first[:90]}")
                for extra in result.content[1:]:
                    out(f"    + {extra.text[:110]}")
                info = engine.session_info(session)
                if info is not None and info.waiting:  # policy flag: a person decides
                    out(f"the session waits for on-call: rewind release|stop|rollback {session} "
                        "--actor A --reason R")
                    decision = await engine.get_session(session).await_decision(timeout=wait)
                    out(f"decision: {decision.kind} by {decision.actor}: {decision.reason}")
                    if decision.kind == "stopped":
                        return results
                    break
        total = await client.call_tool("read_total", {})
        results.append(total)
        out(f"read_total: {total.content[0].text}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", nargs="?", default=None,
                        help="store URL (default: the console's, $REWIND_STORE or "
                        "sqlite:///.rewind/rewind.db)")
    parser.add_argument("--session", default="mcp-receipts")
    parser.add_argument("--serve", action="store_true", help="be the upstream MCP server")
    args = parser.parse_args(argv)
    if args.serve:
        serve()
        return 0
    from engine import Engine, resolve_url

    store = resolve_url(args.store)
    if store.startswith("sqlite:///") and ":memory:" not in store:
        # The proxy runs from the project folder: a relative path must name the file the
        # console opens from the folder this example was started in.
        path = Path(store[len("sqlite:///") :]).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        store = f"sqlite:///{path}"
    asyncio.run(run_async(store, args.session))
    with Engine.open(store) as engine:
        steps = engine.get_session(args.session).steps()
        print(f"session {args.session}: " + ", ".join(f"{s.tool}={s.status}" for s in steps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
