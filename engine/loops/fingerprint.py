"""Canonical JSON and stable fingerprints of tool calls.

A fingerprint is the SHA-256 of the tool name and its canonical arguments: keys sorted, no
whitespace, values converted deterministically (datetime, Decimal, bytes, tuple, set, …). It is the
same across processes, hosts and Python versions because it depends only on the JSON text.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as _dt
import decimal
import enum
import hashlib
import json
import json.encoder
import math
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["canonicalize", "canonical_json", "fingerprint", "digest", "MAX_DEPTH"]

MAX_DEPTH = 100
"""How deeply containers may nest in a canonical value (deeper, or cyclic, values are refused)."""
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def canonicalize(value: Any, _path: str = "args") -> Any:
    """Convert `value` into plain JSON data (dict / list / str / int / float / bool / None).

    Conversions are deterministic: datetimes become ISO 8601 strings (naive ones are kept naive),
    Decimal becomes its exact string, bytes become ``{"$bytes": base64}``, tuples become lists and
    sets and frozensets become sorted lists (sorted by their canonical JSON text), enums their
    value, UUIDs their string, dataclasses their fields.

    Raises:
        TypeError: for values with no well-defined JSON form (objects, functions, NaN, infinity,
            dict keys that are not strings), naming where in the value the problem is.
        ValueError: containers nested deeper than `MAX_DEPTH` or holding themselves (a cycle),
            and strings with a lone surrogate (they have no UTF-8 form).
    """
    try:
        return _plain(value, set())
    except _NotPlain:  # anything to convert, or to refuse: the walk that names where
        return _canonical(value, _path, set())


class _NotPlain(Exception):
    """`_plain` met a value it leaves to `_canonical`."""


_NOT_PLAIN = _NotPlain()


def _plain(value: Any, _open: set[int]) -> Any:
    """`_canonical` of plain JSON data (dict with string keys, list, tuple, str, int, float,
    bool, None, each of exactly that type), without building a path for every value: what
    canonicalizing a message or a step's arguments meets almost always. Raises `_NotPlain` on
    anything else (a type to convert, a lone surrogate, NaN, a key that is not a string, a
    cycle, nesting past `MAX_DEPTH`); the caller then starts over with `_canonical`, which gives
    the same result or the same error as before this fast path existed."""
    kind = type(value)
    if kind is str:
        if not value.isascii() and _LONE_SURROGATE.search(value):
            raise _NOT_PLAIN
        return value
    if value is None or kind is bool or kind is int:
        return value
    if kind is float:
        if not math.isfinite(value):
            raise _NOT_PLAIN
        return value
    if kind is dict or kind is list or kind is tuple:
        if id(value) in _open or len(_open) >= MAX_DEPTH:
            raise _NOT_PLAIN
        _open.add(id(value))
        if kind is dict:
            out: Any = {}
            for k, v in value.items():
                if type(k) is not str or (not k.isascii() and _LONE_SURROGATE.search(k)):
                    raise _NOT_PLAIN
                out[k] = _plain(v, _open)
        else:
            out = [_plain(v, _open) for v in value]
        _open.discard(id(value))
        return out
    raise _NOT_PLAIN


def _canonical(value: Any, _path: str, _open: set[int]) -> Any:
    # `_open` holds the ids of the containers being converted above this value: meeting one
    # again is a cycle, and its size is the nesting depth.
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        if _LONE_SURROGATE.search(value):
            raise ValueError(
                f"{_path}: the text holds a lone surrogate ({value!r:.80}), which has no UTF-8 "
                "form; decode bytes with errors='replace' or drop the character"
            )
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise TypeError(f"{_path}: {value!r} has no JSON form; use a string or a number")
        return value
    if isinstance(value, enum.Enum):
        return _canonical(value.value, _path, _open)
    if isinstance(value, (Mapping, list, tuple, set, frozenset)) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        if id(value) in _open:
            raise ValueError(f"{_path}: the value contains itself (a cycle); pass plain data")
        if len(_open) >= MAX_DEPTH:
            where = _path if len(_path) <= 80 else _path[:77] + "..."
            raise ValueError(f"{where}: nested deeper than {MAX_DEPTH} levels; pass flatter data")
        _open.add(id(value))
        try:
            return _container(value, _path, _open)
        finally:
            _open.discard(id(value))
    return _scalar(value, _path)


def _container(value: Any, _path: str, _open: set[int]) -> Any:
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(
                    f"{_path}: dict key {k!r} is a {type(k).__name__}; JSON keys must be strings"
                )
            _canonical(k, f"{_path} key", _open)  # refuses a lone surrogate in the key
            out[k] = _canonical(v, f"{_path}.{k}", _open)
        return out
    if isinstance(value, (list, tuple)):
        return [_canonical(v, f"{_path}[{i}]", _open) for i, v in enumerate(value)]
    if isinstance(value, (set, frozenset)):
        items = [_canonical(v, f"{_path}{{}}", _open) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, ensure_ascii=False))
    return _canonical(  # a dataclass: its fields, one level deeper
        {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, _path, _open
    )


def _scalar(value: Any, _path: str) -> Any:
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise TypeError(f"{_path}: {value!r} has no JSON form")
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(
        f"{_path}: a {type(value).__name__} cannot be stored as JSON; "
        "pass plain data (dict, list, str, number, bool, None, datetime, Decimal, bytes)"
    )


def canonical_json(value: Any) -> str:
    """The canonical JSON text of `value`: sorted keys, no spaces, UTF-8 kept as is."""
    return json.dumps(
        canonicalize(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


def digest(text: str) -> str:
    """Short stable digest (first 16 hex chars of SHA-256) of a text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


_PLAIN_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                               allow_nan=False)


def _plain_encoder() -> Callable[[Any], str]:
    """`_PLAIN_JSON.encode`, built once: the C encoder it makes on every call (two steps'
    fingerprints and digests a step), kept. Without cycle markers a value that holds itself
    raises RecursionError instead of ValueError; both send the caller to `canonical_json`."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator: the encoder as it is
        return _PLAIN_JSON.encode
    try:
        encoder = make(None, _PLAIN_JSON.default, json.encoder.encode_basestring, None, ":",
                       ",", True, False, False)
    except TypeError:  # another signature (another Python): the encoder as it is
        return _PLAIN_JSON.encode
    join = "".join

    def encode(value: Any) -> str:
        return join(encoder(value, 0))

    return encode


_ENCODE = _plain_encoder()


def normalized_digest(value: Any, prefix: str = "") -> str:
    """`digest(prefix + canonical_json(value))` for a value the loop normalizer returned, without
    converting it again.

    The normalizer's output is plain JSON data with string keys, so its JSON text is already the
    canonical one and the digest is the same. Anything the fast encoder refuses (NaN, a lone
    surrogate, a cycle, a value that is not JSON) goes through `canonical_json`, which raises its
    clear errors. Unlike `canonical_json` it does not refuse nesting deeper than `MAX_DEPTH`;
    `Session.step` refuses that before the detector sees the arguments.
    """
    try:
        return digest(prefix + _ENCODE(value))
    except (TypeError, ValueError, RecursionError):
        return digest(prefix + canonical_json(value))


def fingerprint_normalized(tool: str | None, args: Any) -> str:
    """`fingerprint` of arguments the loop normalizer returned (see `normalized_digest`)."""
    return normalized_digest(args if args is not None else {}, f"{tool or ''}\x00")


def fingerprint(tool: str | None, args: Any) -> str:
    """Stable fingerprint of a tool call: digest of the tool name and the canonical args."""
    return digest(f"{tool or ''}\x00{canonical_json(args if args is not None else {})}")
