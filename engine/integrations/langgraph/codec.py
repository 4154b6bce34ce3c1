"""How LangGraph values become JSON documents, and list channels become deltas (no I/O).

Values go through the saver's serializer (``serde.dumps_typed`` gives a type name and bytes) and
are stored as ``[type, base64 text]`` (`Encoded`), so a store only ever sees JSON.

A list channel (the ``messages`` of a chat agent) grows by a message or two per checkpoint. Storing
it whole at every version costs the square of the conversation length. Here each version is a
delta against an earlier version of the same channel, normally the parent checkpoint's:

    {"base": "<base version>" | None, "keep": k, "items": [Encoded, …]}

meaning "the first k items of the base version, then these items". The saver keeps the longest
common prefix of the old and the new list: a pure append stores only the new messages; an edit
near the end (a `RemoveMessage`, a message replaced by id) stores the tail from the edit on; a list
with nothing in common with its base is stored whole (``base`` None, ``keep`` 0).

Reading version v walks the chain of bases back to a whole copy (`materialize`). All deltas of a
channel together hold about one copy of the history, so reading every version of a channel in one
scan costs about what a full-copy checkpointer pays to read one version.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

Encoded = list
"""``[type, base64 text]``: one serialized value (a list, the shape JSON gives back)."""

_MISSING = object()


def encode(serde: Any, value: Any) -> Encoded:
    """`value` serialized with the saver's serializer, as JSON data."""
    kind, data = serde.dumps_typed(value)
    return [kind, base64.b64encode(data).decode("ascii")]


def decode(serde: Any, enc: Encoded) -> Any:
    """The value `encode` stored (a fresh object on every call)."""
    return serde.loads_typed((enc[0], base64.b64decode(enc[1])))


def decode_list(serde: Any, encodings: list[Encoded]) -> list:
    """The items of a list channel, decoded (fresh objects).

    Items serialized as msgpack are joined under one msgpack array header and decoded in a single
    call: the same work as decoding a whole-list blob, not one call per message.
    """
    if encodings and all(e[0] == "msgpack" for e in encodings):
        n = len(encodings)
        if n < 16:
            header = bytes([0x90 | n])
        elif n < 0x10000:
            header = b"\xdc" + n.to_bytes(2, "big")
        else:
            header = b"\xdd" + n.to_bytes(4, "big")
        blob = header + b"".join(base64.b64decode(e[1]) for e in encodings)
        items = serde.loads_typed(("msgpack", blob))
        if isinstance(items, list) and len(items) == n:
            return items
    return [decode(serde, e) for e in encodings]


class ListState:
    """One version of a list channel as the saver remembers it between checkpoints.

    `encodings` are the stored items. `decoded` holds private copies decoded from them, filled
    on first use: the next checkpoint's list is compared against these, never against objects the
    graph holds (a message changed in place by a node must still be seen as changed).
    """

    __slots__ = ("version", "encodings", "decoded")

    def __init__(self, version: str, encodings: list[Encoded], decoded: list | None = None):
        self.version = version
        """The channel version (as a string)."""
        self.encodings = encodings
        """Every item of the list at this version, serialized."""
        self.decoded = decoded if decoded is not None else [_MISSING] * len(encodings)

    def __len__(self) -> int:
        return len(self.encodings)

    def same(self, serde: Any, i: int, item: Any) -> bool:
        """Whether `item` equals the stored item `i`."""
        mine = self.decoded[i]
        if mine is _MISSING:
            mine = self.decoded[i] = decode(serde, self.encodings[i])
        try:
            if bool(item == mine):
                return True
        except Exception:  # noqa: BLE001 - an odd __eq__ only means "compare the bytes"
            pass
        return encode(serde, item) == self.encodings[i]


def list_delta(serde: Any, base: ListState | None, new: list, version: object
               ) -> tuple[ListState, dict]:
    """The document storing list `new` at `version` as a delta against `base`, and the new state.

    Args:
        serde: the saver's serializer.
        base: the version to build on (normally the parent checkpoint's), None for a whole copy.
        new: the list at `version`.
        version: the channel version being stored.

    Returns:
        (state of `new` for the next delta, the document to store).
    """
    keep = 0
    if base is not None:
        limit = min(len(base), len(new))
        while keep < limit and base.same(serde, keep, new[keep]):
            keep += 1
        if keep == 0:
            base = None
    suffix = [encode(serde, item) for item in new[keep:]]
    if base is None:
        state = ListState(str(version), suffix)
    else:
        state = ListState(str(version), base.encodings[:keep] + suffix,
                          base.decoded[:keep] + [_MISSING] * len(suffix))
    doc = {"base": base.version if base is not None else None, "keep": keep, "items": suffix}
    return state, doc


def is_list_doc(doc: Mapping) -> bool:
    return "items" in doc


def materialize(versions: Mapping[str, Mapping], version: str) -> list[Encoded]:
    """Every item of a list channel at `version`, following the delta chain.

    Args:
        versions: the stored documents of the channel by version (one scan of its prefix).
        version: the version to rebuild.

    Raises:
        KeyError: the chain refers to a version that is not stored.
    """
    segments: list[list[Encoded]] = []
    limit: int | None = None
    current: str | None = version
    seen: set[str] = set()
    while current is not None:
        if current in seen:
            raise KeyError(f"the delta chain of version {version} loops at {current}")
        seen.add(current)
        doc = versions[current]
        own, keep = doc["items"], int(doc.get("keep") or 0)
        if limit is None:
            limit = keep + len(own)
        base = doc.get("base")
        if base is None:
            segments.append(own[:limit])
            break
        if limit > keep:
            segments.append(own[:limit - keep])
            limit = keep
        current = str(base)
    out: list[Encoded] = []
    for segment in reversed(segments):
        out.extend(segment)
    return out


def referenced_blobs(records: Sequence[Mapping], blobs: Mapping[str, Mapping], key_of) -> set[str]:
    """Keys of the blobs that `records` need: their channel versions and every delta base.

    Args:
        records: checkpoint records that stay.
        blobs: every stored blob document by key.
        key_of: ``(ns, channel, version) -> key``.
    """
    needed: set[str] = set()
    for rec in records:
        ns = rec["ns"]
        for channel, version in rec["cp"].get("channel_versions", {}).items():
            key: str | None = key_of(ns, channel, version)
            while key is not None and key not in needed:
                needed.add(key)
                doc = blobs.get(key)
                base = doc.get("base") if doc else None
                key = key_of(ns, channel, base) if base is not None else None
    return needed
