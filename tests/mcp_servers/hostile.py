"""A hostile (or merely broken) MCP server for the proxy's robustness tests, on stdio.

It speaks JSON-RPC by hand instead of through the SDK, so it can send what no well-behaved server
would: a result larger than Rewind's limits, a lone surrogate (``"\\ud800"``, valid JSON syntax
that has no UTF-8 form), a raw byte that is not UTF-8, no answer at all, or nothing but its exit.

Tools (each answers the call named after it):
    echo {text}        the text back (a healthy call, to show the proxy still serves)
    big {size}         a text result of `size` bytes
    surrogate          a text result holding a lone surrogate
    bad_utf8           a result line with the byte 0xFF inside a string
    not_an_object      a response whose result is a string (valid JSON, not JSON-RPC)
    chatter            a stray line on stdout ("debug: cropping…"), then its answer
    hang               never answers (the server keeps reading)
    exit               the process exits at once with status 3, a line on stderr first
    secret             the value of $HOSTILE_TOKEN
    grow               adds the tool ``late`` and sends notifications/tools/list_changed
    late               answers "late" (listed only after ``grow``)
    stats              how many tools/list requests this server has answered

``--needs-env NAME``: exit at start (status 2, saying why on stderr) unless $NAME is set, as a
server that needs a token does.
"""

from __future__ import annotations

import json
import os
import sys

PROTOCOL = "2025-11-25"
TOOLS = ["echo", "big", "surrogate", "bad_utf8", "not_an_object", "chatter", "hang", "exit",
         "secret", "grow", "stats"]
state = {"lists": 0, "tools": list(TOOLS)}


def send(raw: bytes) -> None:
    sys.stdout.buffer.write(raw + b"\n")
    sys.stdout.buffer.flush()


def answer(rid: object, result: dict) -> None:
    send(json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode())


def text_result(text: str) -> dict:
    return {"content": [{"type": "text", "text": text}], "isError": False}


def tool(name: str) -> dict:
    props = {"text": {"type": "string"}} if name == "echo" else {}
    if name == "big":
        props = {"size": {"type": "integer"}}
    return {"name": name, "description": f"the {name} tool",
            "inputSchema": {"type": "object", "properties": props}}


def call(rid: object, name: str, args: dict) -> None:
    if name == "echo":
        answer(rid, text_result(str(args.get("text", ""))))
    elif name == "big":
        answer(rid, text_result("x" * int(args.get("size", 11_000_000))))
    elif name == "surrogate":
        # json.dumps writes the lone surrogate as the escape \ud800, which is what a JavaScript
        # server's JSON.stringify sends too
        answer(rid, text_result("before \ud800 after"))
    elif name == "bad_utf8":
        line = json.dumps({"jsonrpc": "2.0", "id": rid, "result": text_result("before @ after")})
        send(line.encode().replace(b"@", b"\xff"))
    elif name == "not_an_object":
        send(json.dumps({"jsonrpc": "2.0", "id": rid, "result": "done"}).encode())
    elif name == "chatter":
        send("debug: cropping the receipt…".encode())
        answer(rid, text_result("chattered"))
    elif name == "hang":
        return
    elif name == "exit":
        sys.stderr.write("hostile: exiting on purpose\n")
        sys.stderr.flush()
        os._exit(3)
    elif name == "secret":
        answer(rid, text_result(os.environ.get("HOSTILE_TOKEN", "<unset>")))
    elif name == "grow":
        if "late" not in state["tools"]:
            state["tools"].append("late")
        send(json.dumps({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}).encode())
        answer(rid, text_result("grown"))
    elif name == "late" and "late" in state["tools"]:
        answer(rid, text_result("late"))
    elif name == "stats":
        answer(rid, text_result(json.dumps({"lists": state["lists"]})))
    else:
        send(json.dumps({"jsonrpc": "2.0", "id": rid,
                         "error": {"code": -32602, "message": f"unknown tool {name}"}}).encode())


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--needs-env" and not os.environ.get(sys.argv[2]):
        sys.stderr.write(f"hostile: ${sys.argv[2]} is not set; cannot start\n")
        sys.exit(2)
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        rid, method = msg.get("id"), msg.get("method")
        if rid is None:
            continue  # a notification
        if method == "initialize":
            answer(rid, {"protocolVersion": PROTOCOL,
                         "capabilities": {"tools": {"listChanged": True}},
                         "serverInfo": {"name": "hostile", "version": "1"}})
        elif method == "tools/list":
            state["lists"] += 1
            answer(rid, {"tools": [tool(n) for n in state["tools"]]})
        elif method == "tools/call":
            params = msg.get("params") or {}
            call(rid, params.get("name", ""), params.get("arguments") or {})
        elif method == "ping":
            answer(rid, {})
        else:
            send(json.dumps({"jsonrpc": "2.0", "id": rid,
                             "error": {"code": -32601, "message": f"no method {method}"}}).encode())


if __name__ == "__main__":
    main()
