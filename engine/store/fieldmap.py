"""Declarative maps from a stored row (a SQLite row, a Redis hash, a decoded JSON object) to a
typed record: one `FieldMap` per record type and backend names each column, the record field it
fills and how its text becomes the field's value. Decoders read columns by name, never by
position, so a column added to a SELECT list or a hash cannot shift the others.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

R = TypeVar("R")


def same(value: Any) -> Any:
    """The stored value as it is."""
    return value


class Named(Protocol):
    """A row whose columns are read by name (`sqlite3.Row`, a dict)."""

    def __getitem__(self, key: str, /) -> Any: ...


@dataclass(frozen=True)
class Column:
    """One stored column and the record field it fills."""

    name: str
    """The column (or hash field, or JSON key) as stored."""
    field: str
    """The record field it fills; one column may fill several fields."""
    convert: Callable[[Any], Any] = same
    """From the stored value to the field's value."""
    optional: bool = False
    """The column may be absent (a hash written before it existed): read as None then."""


class FieldMap(Generic[R]):
    """How one record type is read from one backend's rows.

    Args:
        record: the record type (or any callable taking the fields as keywords).
        columns: every column the record is built from, in SELECT order.
    """

    def __init__(self, record: Callable[..., R], *columns: Column):
        self.record = record
        self.columns = columns
        names = dict.fromkeys(c.name for c in columns)
        self.names: tuple[str, ...] = tuple(names)
        """The columns read, each once, in the order given."""
        # Unpacked once: a replay decodes a million rows, and the attribute lookups and the
        # call of `same` per column were a third of the cost of reading a step.
        self._plan = tuple(
            (c.name, c.field, None if c.convert is same else c.convert, c.optional) for c in columns
        )
        self._at = tuple((self.names.index(c.name), c.field,
                          None if c.convert is same else c.convert) for c in columns)
        """`_plan` by position in `names`, for `decode_selected`."""
        self._selected = _positional_decoder(record, self._at)

    def select(self, absent: frozenset[str] = frozenset()) -> str:
        """The SQL SELECT list of the columns; those in `absent` (missing from an older file)
        read as NULL under their own name."""
        return ", ".join(f"NULL AS {n}" if n in absent else n for n in self.names)

    def decode_selected(self, row: tuple[Any, ...], **extra: Any) -> R:
        """`decode` of a plain row whose first columns are this map's `select()` list, in its
        order (more may follow): the columns are still named by this map, which wrote the
        SELECT list, but read without a lookup by name (a session's summary is read at every
        turn of an integration, a replay reads every step of a fleet)."""
        if not extra:
            return self._selected(row)
        values = {}
        for at, field, convert in self._at:
            raw = row[at]
            values[field] = raw if convert is None else convert(raw)
        return self.record(**values, **extra)

    def decode(self, row: Named, **extra: Any) -> R:
        """The record of `row`; `extra` fills the fields no column holds (derived by the
        caller from more than one column or from outside the row)."""
        values = {}
        for name, field, convert, optional in self._plan:
            try:
                raw = row[name]
            except KeyError:
                if not optional:
                    raise
                raw = None
            values[field] = raw if convert is None else convert(raw)
        return self.record(**values, **extra)


def _positional_decoder(
    record: Callable[..., R], at: tuple[tuple[int, str, Callable[[Any], Any] | None], ...]
) -> Callable[[Sequence[Any]], R]:
    """``lambda row: record(field=convert(row[at]), ...)`` for the columns `at`, written out
    once, as `dataclasses` writes an ``__init__``: a loop over the columns, a dict of the values
    and a call with ``**`` cost twice the record itself, and a replay decodes a million rows.
    Only names this module makes appear in the source; the fields are checked identifiers."""
    scope: dict[str, Any] = {"record": record}
    args = []
    for i, (position, field, convert) in enumerate(at):
        if not field.isidentifier():
            raise ValueError(f"record field {field!r} is not an identifier")
        value = f"row[{int(position)}]"
        if convert is not None:
            scope[f"convert_{i}"] = convert
            value = f"convert_{i}({value})"
        args.append(f"{field}={value}")
    decoder: Callable[[Sequence[Any]], R] = eval(  # noqa: S307 - source built above
        f"lambda row: record({', '.join(args)})", scope
    )
    return decoder
