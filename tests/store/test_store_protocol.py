"""Every store backend has every method of the `Store` protocol, with the same parameters, and
`Store` is exactly its focused protocols (`STORE_PROTOCOLS`), each member in one of them.

mypy checks the types (see `engine/store/sqlite/__init__.py`); this checks at run time what a
caller relies on: the method exists, and its parameters have the protocol's names, kinds (keyword
only or not) and defaults. A backend whose method forwards ``*args, **kwargs`` (the fallback
store's generated delegates) accepts any call and passes.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from collections.abc import Callable
from typing import Any, Protocol

import pytest

from engine.store.base import STORE_PROTOCOLS, Store, protocol_members

# (name, module, class); a backend whose module cannot be imported (its client library missing)
# is skipped, not failed.
BACKENDS = [
    ("sqlite", "engine.store.sqlite.store", "SQLiteStore"),
    ("redis", "engine.store.redis.store", "RedisStore"),
    ("fallback", "engine.store.fallback", "FallbackStore"),
]

# (backend, method) pairs known to differ, to be fixed on the backend's side.
PENDING: dict[tuple[str, str], str] = {}

MEMBERS = protocol_members(Store)
METHODS = [n for n in MEMBERS if callable(getattr(Store, n))]
ATTRIBUTES = [n for n in MEMBERS if isinstance(getattr(Store, n), property)]


def _backend(module: str, cls: str) -> Any:
    try:
        return getattr(importlib.import_module(module), cls)
    except ImportError as exc:
        pytest.skip(f"{module} cannot be imported here: {exc}")


def _shape(fn: Callable[..., Any]) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def _forwards_everything(fn: Callable[..., Any]) -> bool:
    kinds = [p.kind for p in inspect.signature(fn).parameters.values()][1:]
    return kinds == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]


def test_the_protocol_lists_the_methods_it_should():
    assert {"rollback", "begin_step", "end_step", "purge_branches", "close"} <= set(METHODS)
    assert ATTRIBUTES == ["url"]


def test_store_is_its_focused_protocols_and_declares_nothing_of_its_own():
    assert set(Store.__bases__) - {Protocol} == set(STORE_PROTOCOLS)
    own = [n for n in vars(Store) if not n.startswith("_")]
    assert own == [], f"Store declares {own}: put them in one of its focused protocols"
    union = set().union(*(protocol_members(p) for p in STORE_PROTOCOLS))
    assert union == set(MEMBERS)


def test_no_member_is_in_two_focused_protocols():
    owners: dict[str, list[str]] = {}
    for protocol in STORE_PROTOCOLS:
        assert protocol_members(protocol), f"{protocol.__name__} declares nothing"
        for name in protocol_members(protocol):
            owners.setdefault(name, []).append(protocol.__name__)
    shared = {name: who for name, who in owners.items() if len(who) > 1}
    assert shared == {}, f"members declared by more than one protocol: {shared}"


def test_protocol_members_follows_a_composition_of_protocols():
    class Reads(Protocol):
        def read(self) -> int: ...

    class Writes(Protocol):
        @property
        def where(self) -> str: ...

        def write(self, value: int) -> None: ...

    class Both(Reads, Writes, Protocol):
        pass

    assert protocol_members(Both) == ["read", "where", "write"]
    assert protocol_members(Reads) == ["read"]


@pytest.mark.parametrize(
    "protocol", STORE_PROTOCOLS, ids=[p.__name__ for p in STORE_PROTOCOLS]
)
def test_an_open_sqlite_store_fills_each_focused_protocol(protocol):
    from engine.store.sqlite.store import SQLiteStore

    store = SQLiteStore("sqlite:///:memory:")
    try:
        assert isinstance(store, protocol)
    finally:
        store.close()


@pytest.mark.parametrize(
    ("backend", "method"),
    [
        pytest.param(
            name,
            method,
            id=f"{name}-{method}",
            marks=[pytest.mark.xfail(strict=False, reason=PENDING[(name, method)])]
            if (name, method) in PENDING
            else [],
        )
        for name, _, _ in BACKENDS
        for method in METHODS
    ],
)
def test_backend_method_matches_the_protocol(backend, method):
    _, module, cls_name = next(b for b in BACKENDS if b[0] == backend)
    cls = _backend(module, cls_name)
    impl = getattr(cls, method, None)
    assert callable(impl), f"{cls_name} has no method {method}"
    if _forwards_everything(impl):
        return
    assert _shape(impl) == _shape(getattr(Store, method)), (
        f"{cls_name}.{method}{inspect.signature(impl)} differs from "
        f"Store.{method}{inspect.signature(getattr(Store, method))}"
    )


def test_an_open_sqlite_store_is_a_store():
    from engine.store.sqlite.store import SQLiteStore

    store = SQLiteStore("sqlite:///:memory:")
    try:
        assert isinstance(store, Store)  # every method and the url attribute
    finally:
        store.close()


def _maps(module: str) -> dict[str, Any]:
    from engine.store.fieldmap import FieldMap

    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        pytest.skip(f"{module} cannot be imported here: {exc}")
    return {n: v for n, v in vars(mod).items() if isinstance(v, FieldMap)}


# Fields a decoder passes itself (derived from several columns or from outside the row).
DERIVED = {
    ("sqlite", "SNAPSHOT"): {"abandoned_reason", "restorable", "is_head"},
    ("redis", "EVENT"): {"id"},
    ("redis", "BRANCH"): {"id"},
    ("redis", "MESSAGE"): {"branch"},
}


@pytest.mark.parametrize(
    ("backend", "module"),
    [("sqlite", "engine.store.sqlite.rows"), ("redis", "engine.store.redis.codec")],
)
def test_every_record_field_is_read_from_a_named_column(backend, module):
    import dataclasses

    maps = _maps(module)
    assert maps, f"{module} declares no column-to-field maps"
    for name, fmap in maps.items():
        if not dataclasses.is_dataclass(fmap.record):
            continue  # a partial map (a step's begin or end object) builds a dict
        fields = [c.field for c in fmap.columns]
        assert len(fields) == len(set(fields)), f"{name} fills a field twice"
        expected = {f.name for f in dataclasses.fields(fmap.record)}
        derived = DERIVED.get((backend, name), set())
        assert set(fields) | derived == expected, (
            f"{backend} {name}: fields without a column: {expected - set(fields) - derived}; "
            f"columns for no field: {set(fields) - expected}"
        )


@dataclasses.dataclass(frozen=True)
class _Thing:
    id: int
    missing: bool
    note: str | None


def _thing_map(optional_note: bool):
    from engine.store.fieldmap import Column, FieldMap

    return FieldMap(
        _Thing,
        Column("ref", "id", int),
        Column("ref", "missing", lambda v: v is None),
        Column("note", "note", optional=optional_note),
    )


def test_a_field_map_reads_by_name_and_stands_null_in_for_absent_columns():
    Thing, fmap = _Thing, _thing_map(optional_note=True)
    assert fmap.select() == "ref, note"
    assert fmap.select(absent=frozenset({"note"})) == "ref, NULL AS note"
    assert fmap.decode({"note": "x", "ref": "7"}) == Thing(7, False, "x")
    assert fmap.decode({"ref": "7"}) == Thing(7, False, None)
    with pytest.raises(KeyError):
        fmap.decode({"note": "x"})


def test_a_field_map_decodes_a_plain_row_by_the_positions_of_its_select_list():
    from engine.store.fieldmap import Column, FieldMap

    Thing, fmap = _Thing, _thing_map(optional_note=False)
    assert fmap.select() == "ref, note"
    assert fmap.decode_selected(("7", "x")) == fmap.decode({"ref": "7", "note": "x"})
    assert fmap.decode_selected(("7", None, "more columns")) == Thing(7, False, None)
    with pytest.raises(ValueError):
        fmap.decode_selected(("seven", "x"))  # a converter's error is the caller's
    with pytest.raises(ValueError, match="not an identifier"):
        FieldMap(Thing, Column("ref", "id); print(1"))


def test_a_stored_step_status_that_names_no_status_is_refused():
    from engine.store.sqlite.rows import STEP
    from engine.types import StepStatus

    row = ["bogus" if name == "status" else None for name in STEP.names]
    row[STEP.names.index("n")] = 1
    row[STEP.names.index("args")] = "{}"
    with pytest.raises(ValueError, match="bogus"):
        STEP.decode_selected(tuple(row))
    row[STEP.names.index("status")] = "ok"
    assert STEP.decode_selected(tuple(row)).status is StepStatus.OK


@pytest.mark.parametrize(
    "text", ['{"a": [1, 2.5, null]}', "[]", '"x"', " {} ", "{}  ", "{} x", "", "{", "nul"])
def test_a_stored_json_value_decodes_or_fails_as_json_loads_does(text):
    import json

    from engine.store.sqlite.rows import json_value

    try:
        expected = json.loads(text)
    except ValueError as exc:
        with pytest.raises(ValueError, match=re.escape(str(exc))):
            json_value(text)
    else:
        assert json_value(text) == expected
