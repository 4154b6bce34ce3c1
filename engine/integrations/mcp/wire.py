"""Lines of the MCP wire that the SDK cannot parse, on either side of the proxy.

The SDK drops a line it cannot parse (it logs it, or not even that), and the request the line
belonged to waits forever: an upstream's answer holding a lone surrogate (``"\\ud800"``, which
has no UTF-8 form), a byte that is not UTF-8, or a result that is not an object left the proxy's
call waiting for ``--timeout``; a client's request holding a lone surrogate (JavaScript's
``JSON.stringify`` writes one for half of an emoji that a model's output cut in two) was never
answered at all. `unreadable` recovers the request id of such a line and says what was wrong
with it, so that request can be answered with a JSON-RPC error instead.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import mcp_types as types

__all__ = ["Unreadable", "error_for", "unreadable"]

_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
_LONE_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_MEMBER_OF = {"method": ("JSONRPCRequest", "JSONRPCNotification"),
              "result": ("JSONRPCResponse",), "error": ("JSONRPCError",)}
"""The members of the SDK's message union a message with that key was meant to be, whose
validation errors say what is wrong with it."""


@dataclass(frozen=True)
class Unreadable:
    """What was wrong with a line the SDK could not parse."""

    id: int | str | None
    """The id of the request the line names (None: it names none, or is not JSON)."""
    what: str
    """What the line holds, to follow "answered with" or "holds": "a lone surrogate (…)"."""
    code: int
    """The JSON-RPC error code that fits: PARSE_ERROR for a line that is not JSON, else
    INVALID_REQUEST."""


def _request_id(doc: Any) -> int | str | None:
    rid = doc.get("id") if isinstance(doc, dict) else None
    if not isinstance(rid, (int, str)) or isinstance(rid, bool):
        return None
    return rid


def _from_text(line: str) -> Unreadable:
    try:
        doc = json.loads(line)  # unlike the SDK's parser, json takes lone surrogates
    except ValueError:
        return Unreadable(None, "a line that is not JSON", types.PARSE_ERROR)
    if bad := _ESCAPED_BYTE.search(line):
        what = f"bytes that are not UTF-8 (0x{ord(bad.group()) - 0xDC00:02X})"
    elif bad_escape := _LONE_SURROGATE.search(line):
        what = f"a lone surrogate ({bad_escape.group()}), which has no UTF-8 form"
    else:
        what = "a line that is not JSON-RPC"
    return Unreadable(_request_id(doc), what, types.INVALID_REQUEST)


def _from_message(doc: dict, errors: list[dict]) -> Unreadable:
    members = next((m for key, m in _MEMBER_OF.items() if key in doc), ())
    detail = next((e for e in errors if e.get("loc") and e["loc"][0] in members), None)
    where = ".".join(str(p) for p in detail["loc"][1:]) if detail else ""
    reason = f" ({where}: {detail.get('msg')})" if detail and where else (
        f" ({detail.get('msg')})" if detail else "")
    return Unreadable(_request_id(doc), f"a message that is not valid JSON-RPC{reason}",
                      types.INVALID_REQUEST)


def unreadable(exc: BaseException) -> Unreadable | None:
    """What was wrong with the line whose parse failed with `exc` (an item the SDK's transports
    put on a read stream), or None when `exc` is no parse error of a line."""
    errors = getattr(exc, "errors", None)
    try:
        found = list(errors()) if callable(errors) else []
    except (TypeError, AttributeError, ValueError):
        return None
    for error in found:
        # the whole line is the input of an error at the top (no loc): the JSON did not parse
        given = error.get("input") if isinstance(error, dict) and not error.get("loc") else None
        if isinstance(given, (bytes, bytearray)):
            given = bytes(given).decode("utf-8", "surrogateescape")
        if isinstance(given, str):
            return _from_text(given)
    for error in found:
        given = error.get("input") if isinstance(error, dict) else None
        if isinstance(given, dict) and ("jsonrpc" in given or "id" in given):
            return _from_message(given, found)
    return None


def error_for(rid: int | str | None, code: int, message: str) -> types.JSONRPCError:
    """A JSON-RPC error answering request `rid`."""
    return types.JSONRPCError(jsonrpc="2.0", id=rid,
                              error=types.ErrorData(code=code, message=message))
