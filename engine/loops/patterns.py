"""Which regular expressions a detector setting may hold: none that backtracks catastrophically.

A declared `overflow_pattern` is searched in every failing step's error text, in every process on
the store. Python's `re` backtracks, so ``(a+)+$`` takes seconds on a 27-character error and
doubles with each character more. `check_pattern` reads the parsed pattern (the `re` parser's own
tree, so it judges exactly what will run) and refuses the shapes that blow up exponentially:

- a quantifier inside a repeated group (``(a+)+``, ``(a*b?)*``, ``(?:x{2,}){3}``);
- alternatives inside a repeated group (``(a|ab)*``; single characters such as ``(a|b)*`` are a
  character class to the parser and are fine);
- back-references and conditional groups (``(a)\\1``, ``(?(1)a|b)``), which no bound tames;
- more than `MAX_QUANTIFIERS` quantifiers in all (``a?a?a?…aaa`` is exponential in their number).

What remains can still be slow in polynomial ways on a long text (``a.*b.*c`` on a 20,000-
character error), which no rule short of forbidding ``.*`` prevents: the detector also searches
with a time limit (`engine.loops.detector.OVERFLOW_SEARCH_S`). Pure functions, no I/O.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

# The parser `re` itself uses (`sre_parse` is its deprecated alias), so the check judges exactly
# what will run; private, hence imported by name.
_c: Any = importlib.import_module("re._constants")
_p: Any = importlib.import_module("re._parser")

MAX_PATTERN_CHARS = 1000
"""Longer patterns are refused before they are parsed."""
MAX_QUANTIFIERS = 16
"""Quantifiers (``?``, ``*``, ``+``, ``{m,n}``) a pattern may hold in all."""

_REPEATS = {_c.MAX_REPEAT, _c.MIN_REPEAT} | (
    {_c.POSSESSIVE_REPEAT} if hasattr(_c, "POSSESSIVE_REPEAT") else set()
)
_REFERENCES = {_c.GROUPREF, _c.GROUPREF_EXISTS} | (
    {_c.GROUPREF_IGNORE} if hasattr(_c, "GROUPREF_IGNORE") else set()
)


class UnsafePattern(ValueError):
    """A pattern that is not a regular expression, or one that may backtrack catastrophically."""


def check_pattern(pattern: Any, name: str = "overflow_pattern") -> str:
    """`pattern` when it is a regular expression that cannot backtrack catastrophically.

    Args:
        pattern: the regular expression (as `re` reads it, case-insensitive or not).
        name: the setting it comes from, for the message.

    Raises:
        UnsafePattern: not a string, too long, not a valid expression, or one of the shapes the
            module docstring lists; the message names the setting and the offending part.
    """
    if not isinstance(pattern, str):
        raise UnsafePattern(f"{name} must be a regular expression (text), not "
                            f"{type(pattern).__name__}")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise UnsafePattern(f"{name} is {len(pattern)} characters long; at most "
                            f"{MAX_PATTERN_CHARS} are allowed")
    try:
        re.compile(pattern)
        tree = _p.parse(pattern)
    except re.error as exc:
        raise UnsafePattern(f"{name} is not a valid regular expression: {exc}") from None
    count = _walk(list(tree), False, pattern, name)
    if count > MAX_QUANTIFIERS:
        raise UnsafePattern(f"{name} has {count} quantifiers; at most {MAX_QUANTIFIERS} are "
                            "allowed, as each one can double the work of a failed match")
    return pattern


def _refuse(name: str, pattern: str, why: str) -> UnsafePattern:
    return UnsafePattern(
        f"{name} {pattern!r:.120} is refused: {why}, which can make matching one error text take "
        "minutes in every process on the store (write the alternatives or repeats out flat, "
        "e.g. 'a+b' rather than '(a+)+b')")


def _walk(items: list[tuple[Any, Any]], repeated: bool, pattern: str, name: str) -> int:
    """Quantifiers in `items`; refuses the unsafe shapes. `repeated`: inside a group that a
    quantifier repeats more than once."""
    count = 0
    for op, arg in items:
        if op in _REFERENCES:
            raise _refuse(name, pattern, "it uses a back-reference or a conditional group")
        if op in _REPEATS:
            low, high, body = arg
            if repeated:
                raise _refuse(name, pattern, "a quantifier sits inside a repeated group")
            count += 1 + _walk(list(body), high > 1, pattern, name)
        elif op is _c.BRANCH:
            if repeated:
                raise _refuse(name, pattern, "a repeated group holds alternatives")
            for branch in arg[1]:
                count += _walk(list(branch), repeated, pattern, name)
        elif op is _c.SUBPATTERN:
            count += _walk(list(arg[-1]), repeated, pattern, name)
        elif op in (_c.ASSERT, _c.ASSERT_NOT):
            count += _walk(list(arg[1]), repeated, pattern, name)
        elif getattr(_c, "ATOMIC_GROUP", None) is not None and op is _c.ATOMIC_GROUP:
            count += _walk(list(arg), repeated, pattern, name)
    return count
