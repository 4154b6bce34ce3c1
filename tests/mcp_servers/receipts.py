"""A small MCP server for the proxy's tests and example (stdio, or streamable HTTP with
``--http PORT``): image_crop always fails with "invalid slice", read_total answers, echo returns
its arguments, lookup waits a moment and fails (a guessed name that is not there); a resource
and a prompt to pass through."""

from __future__ import annotations

import json
import sys

import anyio
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


@server.tool()
def echo(text: str) -> str:
    """Return the text, with its length."""
    return json.dumps({"text": text, "length": len(text)})


@server.tool()
async def lookup(name: str) -> str:
    """Look a symbol up by name (slowly: long enough for calls issued together to overlap)."""
    await anyio.sleep(0.5)
    raise ToolError(f"no symbol named {name}")


@server.resource("receipt://latest")
def latest_receipt() -> str:
    """The latest receipt as text."""
    return "Coffee 3.50\nCake 4.00\nTOTAL 42.00 EUR"


@server.prompt()
def summarize(style: str = "short") -> str:
    """Ask for a summary of the receipt."""
    return f"Summarize the receipt in a {style} way."


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
