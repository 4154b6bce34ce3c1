"""Size limits: how much one write may carry, checked before anything reaches the store.

Agents and users are not trusted to be brief: a 50 MB argument, notice or reason would be stored,
copied into every snapshot delta and drawn by the console. Every limit below is generous for real
work and configurable per engine (``Engine.open(url, limits=Limits(args_bytes=4_000_000))``); the
`Runtime` carries them, so sessions, memory and operator actions all check the same numbers.

Sizes of structured values (arguments, results, messages, variables, meta) are counted in UTF-8
bytes of their canonical JSON; texts (notices, reasons, names) in characters. A value over its
limit raises `SizeLimitExceeded` (a `ValueError`) naming the limit and how to raise it. The one
exception is a step's error text, which is cut to `error_chars` instead: a failing tool must
still be recorded as failed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from engine.errors import SizeLimitExceeded
from engine.loops.fingerprint import MAX_DEPTH, canonicalize
from engine.types import CANONICAL_JSON

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")

__all__ = ["Limits", "SizeLimitExceeded", "canonical_within", "check_text", "cut_text",
           "json_within"]


@dataclass(frozen=True)
class Limits:
    """Upper bounds of what one call may write. All positive integers."""

    args_bytes: int = 1_000_000
    """A step's arguments, and a compensation's arguments (canonical JSON, UTF-8 bytes)."""
    result_bytes: int = 10_000_000
    """A tool result handed to ``call.ok`` (canonical JSON, bytes); only a 500-character preview
    and a digest are stored, but the digest is computed over the whole result."""
    message_bytes: int = 1_000_000
    """One chat message, or the text of an agent turn (canonical JSON, bytes)."""
    variables_bytes: int = 1_000_000
    """The values of one ``set_var``/``set_vars`` call (canonical JSON, bytes)."""
    meta_bytes: int = 64_000
    """A session's meta as passed to ``engine.session`` (canonical JSON, bytes)."""
    notice_chars: int = 10_000
    """A recovery notice shown to the end user (characters)."""
    reason_chars: int = 2_000
    """An operator's reason for a rollback, delete or other action (characters)."""
    actor_chars: int = 200
    """An actor's name as written to the audit log (characters)."""
    name_chars: int = 200
    """A tool name, compensation handler name, snapshot label or variable name (characters)."""
    error_chars: int = 20_000
    """A failed step's error text; longer texts are cut (not refused) to this many characters."""
    memory_text: int = 100_000
    """One memory's text (characters); enforced by ``SessionMemory.add``."""
    document_bytes: int = 10_000_000
    """One document an integration keeps in a session or fleet-wide (a LangGraph checkpoint
    record or channel value, the alert worker's state; canonical JSON, bytes)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"Limits.{f.name} must be a positive integer, not {value!r}")


def _too_big(what: str, size: str, limit: int, field: str, unit: str) -> SizeLimitExceeded:
    return SizeLimitExceeded(
        f"{what} is {size} {unit}; the limit is {limit:,} {unit} (Limits.{field}). Store large "
        "payloads elsewhere and pass a reference, or raise the limit with "
        f"Engine.open(url, limits=Limits({field}=…))"
    )


def canonical_within(value: Any, limit: int, what: str, field: str) -> tuple[Any, str]:
    """`value` as canonical data and as canonical JSON text, refused past `limit` bytes.

    A value whose JSON text is surely longer than `limit` is refused before it is converted
    (`_surely_longer`, a walk that stops at the limit); what passes that lower bound has a text
    of at most a few times `limit` (escapes, multi-byte characters, numbers), which the C
    encoder writes in one go before it is measured.

    Raises:
        SizeLimitExceeded: over the limit. TypeError / ValueError: from `canonicalize` (no JSON
        form, nested too deep, a cycle, a lone surrogate).
    """
    if _surely_longer(value, limit):
        raise _too_big(what, f"more than {limit:,}", limit, field, "bytes")
    canonical = canonicalize(value, what)
    text = CANONICAL_JSON.encode(canonical)
    size = len(text) if text.isascii() else len(text.encode("utf-8"))
    if size > limit:
        raise _too_big(what, f"{size:,}", limit, field, "bytes")
    return canonical, text


def json_within(value: Any, limit: int, what: str, field: str) -> Any:
    """`value`, refused when its JSON text is longer than `limit` bytes; for data that is
    JSON already (the documents an integration builds), stored as it is. Unlike
    `canonical_within` it neither converts nor copies the value, and it measures with the C
    encoder alone: on a hot path (a LangGraph checkpoint record, a few dozen small values) the
    lower-bound walk `canonical_within` runs first cost more than the encoding it would spare.
    A value far over the limit is encoded once before it is refused; its text is about the
    size of the value itself, and no Python walk or copy of it is made.

    Raises:
        SizeLimitExceeded: over the limit. TypeError: no JSON form. ValueError: a lone
        surrogate, or a container that holds itself.
    """
    text = _MEASURE.encode(value)
    try:
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError:
        canonicalize(value, what)  # names where the lone surrogate is
        raise
    if size > limit:
        raise _too_big(what, f"{size:,}", limit, field, "bytes")
    return value


_MEASURE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
"""The encoder `json_within` measures with, built once (``json.dumps`` with arguments builds
one per call)."""


def bytes_within(key: str, value: bytes, limit: int, what: str, field: str) -> bytes:
    """`value` (a document kept as bytes), refused when it and its `key` pass `limit` bytes.

    Raises:
        SizeLimitExceeded: over the limit.
    """
    size = len(value) + len(key.encode("utf-8", "surrogatepass"))
    if size > limit:
        raise _too_big(what, f"{size:,}", limit, field, "bytes")
    return value


def _surely_longer(value: Any, limit: int) -> bool:
    """True when the JSON text of `value` is sure to be longer than `limit` bytes.

    A cheap lower bound (a string counts its characters and quotes, a container its brackets and
    separators, anything else one character), walked only until it passes the limit, so a huge
    value is refused before `canonicalize` copies it. Deeper than `MAX_DEPTH` the walk stops and
    leaves the verdict to `canonicalize`. The leaves of a container (strings, numbers) are
    counted where they are met, not pushed and popped: most of a document's values are leaves.
    """
    total = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        kind = type(item)
        if kind is dict or kind is list or kind is tuple:
            parts: Any = item
            if kind is dict:
                total += 2 * len(item) + 1
                parts = [*item, *item.values()]
            else:
                total += len(item) + 1
            if total > limit:
                return True
            if depth >= MAX_DEPTH:
                continue
            depth += 1
            for part in parts:
                if type(part) is str:
                    total += len(part) + 2
                elif part is None or type(part) in _ONE_CHARACTER:
                    total += 1
                else:
                    push((part, depth))
            if total > limit:
                return True
            continue
        if kind is str:
            total += len(item) + 2
        elif kind is int or kind is float or kind is bool or item is None:
            total += 1
        elif isinstance(item, Mapping):
            total += 2 * len(item) + 1
            if total <= limit and depth < MAX_DEPTH:
                depth += 1
                for key, part in item.items():
                    push((key, depth))
                    push((part, depth))
        elif isinstance(item, str):
            total += len(item) + 2
        elif isinstance(item, (bytes, bytearray)):
            total += len(item) * 4 // 3 + 2
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += len(item) + 1
            if total <= limit and depth < MAX_DEPTH:
                depth += 1
                for part in item:
                    push((part, depth))
        else:
            total += 1
        if total > limit:
            return True
    return False


_ONE_CHARACTER = frozenset({int, float, bool})
"""Leaf types `_surely_longer` counts as one character where it meets them."""


def check_text(text: str, limit: int, what: str, field: str) -> str:
    """`text` when it has at most `limit` characters and no lone surrogate.

    Raises:
        SizeLimitExceeded: longer than `limit`. ValueError: a lone surrogate.
    """
    if len(text) > limit:
        raise _too_big(what, f"{len(text):,}", limit, field, "characters")
    if type(text) is str and text.isascii():  # no lone surrogate (a tool name, every step)
        return text
    canonicalize(text, what)  # refuses lone surrogates with a clear message
    return text


def cut_text(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with a marker saying how much was dropped, and with
    any lone surrogate replaced by U+FFFD (for texts that must be recorded, never refused)."""
    if len(text) > limit:
        marker = f"… [cut; {len(text):,} characters in all]"
        text = text[: max(0, limit - len(marker))] + marker
    return _LONE_SURROGATE.sub("\ufffd", text)


def chat_message(role: Any, content: Any, extra: dict, limits: Limits | None = None) -> dict:
    """A canonical chat message.

    Raises:
        ValueError: empty or non-string role. TypeError: content not representable as JSON.
        SizeLimitExceeded: the message is larger than `limits.message_bytes`.
    """
    limits = limits or Limits()
    if not isinstance(role, str) or not role:
        raise ValueError(f"a message role must be a non-empty string, not {role!r}")
    check_text(role, limits.name_chars, "a message role", "name_chars")
    msg = {"role": role, "content": content, **extra}
    return canonical_within(msg, limits.message_bytes, "message", "message_bytes")[0]
