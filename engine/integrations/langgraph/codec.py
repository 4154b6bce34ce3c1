"""How LangGraph values become JSON documents, and list channels become deltas (no I/O).

Values go through the saver's serializer (``serde.dumps_typed`` gives a type name and bytes).
Channel values are stored as documents of bytes (the store keeps them as they are, see
`engine.store.protocols.documents`): a small JSON header, then the serialized bytes (`raw_value`,
`raw_list`; `load` reads them back), so a read neither parses nor base64-decodes the bulk of a
checkpoint. Everything else (records, pending writes, documents stored before) is JSON, with
serialized bytes as ``[type, base64 text]`` (`Encoded`).

A list channel (the ``messages`` of a chat agent) grows by a message or two per checkpoint. Storing
it whole at every version costs the square of the conversation length. Here each version is a
delta against an earlier version of the same channel, on the line of checkpoints it descends from:

    {"base": "<base version>" | None, "keep": k, "pack": {"types", "sizes", "data"}}

meaning "the first k items of the base version, then these items" (the shape `load` gives; stored as
bytes by `raw_list`). The items are packed: their serialized bytes joined, with each item's size
and serializer type. Documents stored as JSON still read: packed (``"pack"``, the joined bytes as
one base64 text, `pack`) or, older, ``"items": [Encoded, …]``. A list with nothing in common
with what it would build on is stored whole (``base`` None, ``keep`` 0).

Which earlier version a delta builds on follows skip-deltas (as Subversion stores file versions):
the versions since the last whole copy are numbered 0, 1, 2, … along the line, and version q
builds on version q with its lowest set bit cleared (7 on 6, 6 on 4, 4 on 0, 8 on 0). Reading any
version therefore walks at most log2(q) + 1 documents back to a whole copy, each item of the
result is read from exactly one of them, and the saver names them all in the checkpoint record
(`ListState.chain`), so one store round trip fetches them. Storage stays near one copy of the
history: each item is stored about log2(n) / 2 times on average (at 1,000 checkpoints of one
message each, about 6 copies in all, against 500 for a checkpointer that copies the list at every
checkpoint).

``keep`` is the common prefix of the two versions as far as the saver can vouch for it: the
saver tracks, for every version on the chain, how many leading items the current list still
shares with it (`ListState.chain` floors). A pure append stores only what was appended since the
base; an edit near the end (a `RemoveMessage`, a message replaced by id) stores the tail from the
edit on.

Reading version v follows the chain of bases back to a whole copy (`materialize`).
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Mapping, Sequence
from typing import Any

from engine.integrations.langgraph import layout

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


Raw = tuple
"""``(type, bytes)``: one serialized value as the serializer's ``dumps_typed`` gives it."""


def pack(raws: Sequence[Raw]) -> dict:
    """List items as JSON, how they were stored before documents could be bytes:
    ``{"types": type or [type, …], "sizes": [int, …], "data": base64 of the joined bytes}``."""
    kinds = [kind for kind, _data in raws]
    return {"types": kinds[0] if kinds and kinds.count(kinds[0]) == len(kinds) else kinds,
            "sizes": [len(data) for _kind, data in raws],
            "data": base64.b64encode(b"".join(data for _kind, data in raws)).decode("ascii")}


RAW_MAGIC = b"RWD1"
"""First bytes of a channel value stored as bytes: then the header's length (4 bytes, big-endian),
the header (JSON), for a list the size of each item (``n`` unsigned 4-byte little-endian
integers, so reading them is one C call, not a JSON list of numbers), then the serialized bytes."""


_HEADER = json.JSONEncoder(separators=(",", ":"))
"""The encoder of the JSON header of a channel value stored as bytes (built once)."""


def _raw(header: dict, data: bytes, sizes: Sequence[int] = ()) -> bytes:
    head = _HEADER.encode(header).encode()
    return b"".join((RAW_MAGIC, len(head).to_bytes(4, "big"), head,
                     struct.pack(f"<{len(sizes)}I", *sizes), data))


def raw_value(serialized: Raw) -> bytes:
    """The stored form of a channel value that is not a list: ``dumps_typed``'s (type, bytes)."""
    return _raw({"type": serialized[0]}, serialized[1])


def raw_list(base: str | None, keep: int, raws: Sequence[Raw]) -> bytes:
    """The stored form of a list version: builds on the first `keep` items of version `base`
    (None: a whole copy), then `raws`."""
    kinds = [kind for kind, _data in raws]
    header = {"base": base, "keep": keep,
              "types": kinds[0] if kinds and kinds.count(kinds[0]) == len(kinds) else kinds,
              "n": len(raws)}
    return _raw(header, b"".join(data for _kind, data in raws),
                [len(data) for _kind, data in raws])


def load(doc: Any) -> Any:
    """A stored blob document as JSON-shaped data: one stored as bytes (`raw_value`, `raw_list`)
    becomes ``{"raw_value": (type, bytes)}`` or ``{"base", "keep", "raw": {"types", "sizes",
    "data"}}`` (data a memoryview of the stored bytes); anything else is returned as it is."""
    if not isinstance(doc, bytes):
        return doc
    if doc[:4] != RAW_MAGIC:
        raise ValueError("a channel value stored as bytes must start with " + repr(RAW_MAGIC))
    at = 8 + int.from_bytes(doc[4:8], "big")
    header = json.loads(doc[8:at])
    if "type" in header:
        return {"raw_value": (header["type"], doc[at:])}
    n = header["n"]
    sizes = list(struct.unpack_from(f"<{n}I", doc, at))
    return {"base": header["base"], "keep": header["keep"],
            "raw": {"types": header["types"], "sizes": sizes,
                    "data": memoryview(doc)[at + 4 * n:]}}


INLINE_BYTES = 256
"""A channel value that is not a list and serializes to at most this many bytes (a branch
marker, a counter, a flag) is kept in the checkpoint record (``vals``) instead of a document of
its own: a put writes one document fewer, and a read fetches none for it."""


def inline_value(version: object, serialized: Raw) -> list:
    """A record's ``vals`` entry for a small value: ``[version, type, base64 bytes]``;
    ``[version]`` alone stands for a channel emptied at that version."""
    return [str(version), serialized[0], base64.b64encode(serialized[1]).decode("ascii")]


def carried_inline(parent: Mapping[str, list] | None, versions: Mapping[str, Any],
                   written: Mapping[str, Any]) -> dict[str, list]:
    """The parent record's ``vals`` entries still current in a checkpoint at `versions` that
    writes the channels `written`: every record holds all its small values, so a read needs no
    other record, and pruning other checkpoints never takes one away."""
    if not parent:
        return {}
    return {channel: entry for channel, entry in parent.items()
            if channel not in written and channel in versions
            and entry[0] == str(versions[channel])}


def split_inline(serde: Any, inline: Mapping[str, list] | None, versions: Mapping[str, Any]
                 ) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the values a record's ``vals`` holds at `versions`, decoded; the versions left to read
    from documents)."""
    if not inline:
        return {}, dict(versions)
    values: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for channel, version in versions.items():
        entry = inline.get(channel)
        if entry is None or entry[0] != str(version):
            rest[channel] = version
        elif len(entry) == 3:
            values[channel] = serde.loads_typed((entry[1], base64.b64decode(entry[2])))
    return values, rest


def is_value_doc(doc: bytes) -> bool:
    """Whether stored bytes are a channel value that is not a list (`raw_value`)."""
    if doc[:4] != RAW_MAGIC:
        return False
    at = 8 + int.from_bytes(doc[4:8], "big")
    return b'"type"' in doc[8:at]


def load_all(docs: Mapping[str, Any]) -> dict[str, Any]:
    """`load` applied to every document of `docs` (key -> document)."""
    return {key: load(doc) if isinstance(doc, bytes) else doc for key, doc in docs.items()}


def value_of(serde: Any, doc: Mapping) -> Any:
    """The value a (loaded) non-list blob document stores."""
    if "raw_value" in doc:
        return serde.loads_typed(doc["raw_value"])
    return decode(serde, doc["value"])


def _packed(doc: Mapping) -> tuple[Any, list[int], bytes | memoryview] | None:
    """(types, sizes, joined bytes) of a packed list document; None for ``items``."""
    if "raw" in doc:
        raw = doc["raw"]
        return raw["types"], raw["sizes"], raw["data"]
    if "pack" in doc:
        packed = doc["pack"]
        return packed["types"], packed["sizes"], base64.b64decode(packed["data"])
    return None


def unpack(doc: Any) -> list[Raw]:
    """The items of a list document (stored as bytes, packed, or ``items`` as stored before
    packing)."""
    doc = load(doc)
    packed = _packed(doc)
    if packed is None:
        return [(e[0], base64.b64decode(e[1])) for e in doc["items"]]
    kinds, sizes, data = packed
    data, out, at = bytes(data), [], 0
    for i, size in enumerate(sizes):
        out.append((kinds if isinstance(kinds, str) else kinds[i], data[at:at + size]))
        at += size
    return out


def item_count(doc: Any) -> int:
    """How many items a list document stores itself."""
    doc = load(doc)
    packed = _packed(doc) if "items" not in doc else None
    return len(doc["items"]) if packed is None else len(packed[1])


class Joined(Sequence):
    """List items as one joined byte string (what `materialize_joined` reads): decoded in one
    call, split into `Raw` items only when one is asked for (the next delta's comparison)."""

    __slots__ = ("kinds", "parts", "sizes", "_data", "_items")

    def __init__(self, kinds: list[str], parts: Sequence[bytes | memoryview], sizes: list[int]):
        self.kinds, self.parts, self.sizes = kinds, parts, sizes
        self._data: bytes | None = None
        self._items: list[Raw] | None = None

    @property
    def data(self) -> bytes:
        """The items' bytes, joined (on first use: a read that only decodes joins them once,
        behind the array header, in `decode_list`)."""
        if self._data is None:
            self._data = b"".join(self.parts)
        return self._data

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, index: Any) -> Any:
        if self._items is None:
            items, at = [], 0
            for kind, size in zip(self.kinds, self.sizes, strict=True):
                items.append((kind, self.data[at:at + size]))
                at += size
            self._items = items
        return self._items[index]


def decode_list(serde: Any, encodings: Sequence[Raw]) -> list:
    """The items of a list channel, decoded (fresh objects).

    Items serialized as msgpack are joined under one msgpack array header and decoded in a single
    call: the same work as decoding a whole-list blob, not one call per message.
    """
    if encodings and (encodings.kinds.count("msgpack") == len(encodings) if isinstance(
            encodings, Joined) else all(e[0] == "msgpack" for e in encodings)):
        n = len(encodings)
        if n < 16:
            header = bytes([0x90 | n])
        elif n < 0x10000:
            header = b"\xdc" + n.to_bytes(2, "big")
        else:
            header = b"\xdd" + n.to_bytes(4, "big")
        blob = b"".join([header, *(encodings.parts if isinstance(encodings, Joined)
                                   else (e[1] for e in encodings))])
        items = serde.loads_typed(("msgpack", blob))
        if isinstance(items, list) and len(items) == n:
            return items
    return [serde.loads_typed(tuple(e)) for e in encodings]


Chain = list
"""The skip-delta chain of a list version: ``[[version, floor, position], …]``, oldest first, the
last entry the version itself. ``position`` counts versions along the line since the last whole
copy (0); ``floor`` is how many leading items the version shares with the last one (its own
length for the last)."""


class ListState:
    """One version of a list channel as the saver remembers it between checkpoints.

    `encodings` are the stored items. `decoded` holds private copies decoded from them, filled
    on first use: the next checkpoint's list is compared against these, never against objects the
    graph holds (a message changed in place by a node must still be seen as changed). `chain` is
    its skip-delta chain (`Chain`), None for a version stored before chains were recorded (the
    next version is then stored whole and starts a chain).
    """

    __slots__ = ("version", "encodings", "decoded", "chain")

    def __init__(self, version: str, encodings: Sequence[Raw], decoded: list | None = None,
                 chain: Chain | None = None):
        self.version = version
        """The channel version (as a string)."""
        self.encodings = encodings
        """Every item of the list at this version, serialized (`Raw`)."""
        self.decoded = decoded if decoded is not None else [_MISSING] * len(encodings)
        self.chain = chain
        """The skip-delta chain ending at this version (`Chain`), or None."""

    def __len__(self) -> int:
        return len(self.encodings)

    def same(self, serde: Any, i: int, item: Any) -> bool:
        """Whether `item` equals the stored item `i`."""
        mine = self.decoded[i]
        if mine is _MISSING:
            mine = self.decoded[i] = serde.loads_typed(tuple(self.encodings[i]))
        try:
            # fast path: same class, same fields (what pydantic's __eq__ checks first, without
            # its per-call overhead, which made comparing a long history cost most of a put)
            if (type(item) is type(mine) and hasattr(item, "__dict__")
                    and item.__dict__ == mine.__dict__
                    and getattr(item, "__pydantic_extra__", None)
                    == getattr(mine, "__pydantic_extra__", None)):
                return True
            if bool(item == mine):
                return True
        except Exception:  # noqa: BLE001 - an odd __eq__ only means "compare the bytes"
            pass
        return tuple(serde.dumps_typed(item)) == tuple(self.encodings[i])


def packed_size(encodings: Sequence[Raw]) -> int:
    """About the JSON size of `encodings` packed (bytes)."""
    return sum(len(e[1]) * 4 // 3 + 12 for e in encodings)


def list_delta(serde: Any, base: ListState | None, new: list, version: object,
               max_bytes: int | None = None) -> tuple[ListState, bytes, int]:
    """The document storing list `new` at `version`, the new state, and the common prefix.

    Args:
        serde: the saver's serializer.
        base: the parent checkpoint's version of the list, None for a whole copy.
        new: the list at `version`.
        version: the channel version being stored.
        max_bytes: a skip-delta whose items would pass this size builds on `base` instead (only
            what changed since the parent), so no document grows past the store's limit when a
            delta would not.

    Returns:
        (state of `new` for the next delta, the document to store (`raw_list`), how many
        leading items `new` shares with `base`).
    """
    step = 0
    if base is not None:
        limit = min(len(base), len(new))
        while step < limit and base.same(serde, step, new[step]):
            step += 1
    if base is None or step == 0 or base.chain is None:
        encodings = [tuple(serde.dumps_typed(item)) for item in new]
        if base is not None and step:
            encodings[:step] = base.encodings[:step]
        state = ListState(str(version), encodings, chain=[[str(version), len(new), 0]])
        return state, raw_list(None, 0, encodings), step
    suffix = [tuple(serde.dumps_typed(item)) for item in new[step:]]
    encodings = list(base.encodings[:step]) + suffix
    decoded = base.decoded[:step] + [_MISSING] * len(suffix)
    chain = [[v, min(int(floor), step), int(pos)] for v, floor, pos in base.chain]
    position = chain[-1][2] + 1
    target = position & (position - 1)
    at = max(i for i, entry in enumerate(chain) if entry[2] <= target)
    keep = chain[at][1]
    if max_bytes is not None and packed_size(encodings[keep:]) > max_bytes:
        at, keep = len(chain) - 1, step
    if keep == 0:  # nothing shared with the version it would build on: a whole copy
        state = ListState(str(version), encodings, decoded, [[str(version), len(new), 0]])
        return state, raw_list(None, 0, encodings), step
    chain = [*chain[:at + 1], [str(version), len(new), position]]
    state = ListState(str(version), encodings, decoded, chain)
    return state, raw_list(chain[at][0], keep, encodings[keep:]), step


def is_list_doc(doc: Any) -> bool:
    doc = load(doc)
    return "raw" in doc or "pack" in doc or "items" in doc


def _segments(versions: Mapping[str, Mapping], version: str) -> list[tuple[Mapping, int]]:
    """The documents of `version`'s delta chain with how many of their own items each gives,
    oldest first.

    Raises:
        KeyError: the chain refers to a version that is not stored, or loops.
    """
    segments: list[tuple[Mapping, int]] = []
    limit: int | None = None
    current: str | None = version
    seen: set[str] = set()
    while current is not None:
        if current in seen:
            raise KeyError(f"the delta chain of version {version} loops at {current}")
        seen.add(current)
        doc = load(versions[current])
        keep = int(doc.get("keep") or 0)
        if limit is None:
            limit = keep + item_count(doc)
        base = doc.get("base")
        if base is None:
            segments.append((doc, limit))
            break
        if limit > keep:
            segments.append((doc, limit - keep))
            limit = keep
        current = str(base)
    segments.reverse()
    return segments


def materialize(versions: Mapping[str, Mapping], version: str) -> list[Raw]:
    """Every item of a list channel at `version`, following the delta chain.

    Args:
        versions: the stored documents of the channel by version (one scan of its prefix).
        version: the version to rebuild.

    Raises:
        KeyError: the chain refers to a version that is not stored.
    """
    out: list[Raw] = []
    for doc, count in _segments(versions, version):
        out.extend(unpack(doc)[:count])
    return out


def materialize_joined(versions: Mapping[str, Mapping], version: str) -> Joined:
    """`materialize`, the items joined (`Joined`): no per-item objects on the way."""
    kinds: list[str] = []
    parts: list[bytes | memoryview] = []
    sizes: list[int] = []
    for doc, count in _segments(versions, version):
        packed = _packed(doc)
        if packed is None:
            raws = unpack(doc)[:count]
            kinds.extend(kind for kind, _data in raws)
            parts.extend(data for _kind, data in raws)
            sizes.extend(len(data) for _kind, data in raws)
            continue
        types, all_sizes, data = packed
        own = all_sizes[:count]
        kinds.extend([types] * len(own) if isinstance(types, str) else types[:count])
        parts.append(data[:sum(own)])
        sizes.extend(own)
    return Joined(kinds, parts, sizes)


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
                doc = load(blobs.get(key))
                base = doc.get("base") if doc else None
                key = key_of(ns, channel, base) if base is not None else None
    return needed


def chains(parent: Mapping[str, Chain], versions: Mapping[str, Any],
           written: Mapping[str, ListState]) -> dict[str, Chain]:
    """The ``lists`` of a checkpoint record: the chain of each list channel at its version, from
    the lists it wrote, else carried over from the parent's record."""
    out = {channel: chain for channel, chain in parent.items()
           if channel in versions and str(chain[-1][0]) == str(versions[channel])}
    out.update((channel, state.chain) for channel, state in written.items()
               if state.chain is not None)
    return out


def chain_keys(ns: str, channel: str, chain: Chain) -> list[str]:
    """Keys of the documents a list version is built from (`layout.blob_key`)."""
    return [layout.blob_key(ns, channel, v) for v, _floor, _pos in chain]


def chain_items(docs: Mapping[str, Mapping], ns: str, channel: str, chain: Chain,
                version: str) -> Joined | None:
    """Every item of a list at `version` from the documents its chain names (`docs` by key);
    None when one is missing (a thread whose records predate chains, or damaged: the caller
    scans the channel instead)."""
    found = {}
    for v, _floor, _pos in chain:
        doc = load(docs.get(layout.blob_key(ns, channel, v)))
        if doc is None or not is_list_doc(doc):
            return None
        found[str(v)] = doc
    try:
        return materialize_joined(found, version)
    except KeyError:
        return None


def unneeded(docs: Mapping[str, Mapping], kept: Sequence[Mapping]) -> dict[str, None]:
    """Deletions (key -> None) that leave only the `kept` checkpoint records of a thread's
    documents `docs`, their writes, their steps and the blobs they need."""
    blobs = {k: d for k, d in docs.items() if k.startswith("b/")}
    needed = referenced_blobs(kept, blobs, layout.blob_key)
    needed.update(layout.checkpoint_key(r["ns"], r["id"]) for r in kept)
    write_prefixes = tuple(layout.write_prefix(r["ns"], r["id"]) for r in kept)
    root_ids = {r["id"] for r in kept if r["ns"] == ""}
    doomed: dict[str, None] = {}
    for key, doc in docs.items():
        if key in needed or (write_prefixes and key.startswith(write_prefixes)):
            continue
        if key.startswith("s/") and doc.get("checkpoint") in root_ids:
            continue
        doomed[key] = None
    return doomed
