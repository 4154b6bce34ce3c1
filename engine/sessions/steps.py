"""Pure helpers of guarded steps: message and result canonical forms, the detector's view of a
stored step, and the JSON records stored with a step (token breakdown, verdict)."""

from __future__ import annotations

import json
from collections.abc import Callable
from json.scanner import make_scanner
from typing import Any

from engine.freeze import PolicyChoice
from engine.limits import Limits, canonical_within, check_text
from engine.loops.detector import Step, Verdict
from engine.loops.fingerprint import MAX_DEPTH, canonicalize, digest
from engine.loops.normalize import result_digest
from engine.records import StepRecord
from engine.types import TOKEN_BREAKDOWN_KEYS, StoredVerdict, TokenBreakdown

PREVIEW_CHARS = 500
"""Characters of a tool result kept for people (the digest covers the whole result)."""

_STRICT_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                                allow_nan=False)
"""`engine.types.CANONICAL_JSON`, but refusing NaN and infinities as `canonicalize` does."""


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_c_make_encoder = getattr(json.encoder, "c_make_encoder", None)
_C_STRICT = None if _c_make_encoder is None else _c_make_encoder(
    None, _refuse, json.encoder.encode_basestring, None, ":", ",", True, False, False
)
"""`_STRICT_JSON`'s C encoder made once (``JSONEncoder.encode`` makes one per call), without
its cycle check: only given values `_plain_upper_bound` walked (no cycle gets that far)."""


# typeshed names the argument's type wrongly: a decoder is the scanner's context
_SCAN = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]
"""`json.loads` without its wrapper: for texts `_strict_text` wrote (compact, one value)."""


def _strict_text(value: Any) -> str:
    if _C_STRICT is None:  # pragma: no cover - a Python without the C accelerator
        return _STRICT_JSON.encode(value)
    return "".join(_C_STRICT(value, 0))


_FLAT_ITEMS = 32
"""A dict of at most this many string, int or None values (most tool arguments and results)
is bounded in one loop."""


def _plain_upper_bound(value: Any, limit: int) -> int | None:
    """An upper bound of the UTF-8 bytes of the JSON text of `value` when it is plain JSON data
    (dict with str keys, list, tuple, str, int, float, bool, None, of exactly those types, nested
    less than `MAX_DEPTH` deep) and the bound is at most `limit`; else None. Every node adds at
    least one byte, so the walk stops after at most `limit` nodes (a cycle included)."""
    if type(value) is dict and len(value) <= _FLAT_ITEMS:  # the common case, without a stack
        total = 2 * len(value) + 2
        for key, part in value.items():
            kind = type(part)
            if type(key) is not str or not (kind is str or kind is int or part is None):
                break  # the general walk below judges it
            total += 6 * len(key) + 2 + (
                6 * len(part) + 2 if kind is str else 5 if part is None
                else part.bit_length() // 3 + 3)
        else:
            return total if total <= limit else None
    total = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        kind = type(item)
        if kind is str:
            total += 6 * len(item) + 2  # a character is at most 6 bytes (a \u escape)
        elif item is None or kind is bool:
            total += 5
        elif kind is int:
            total += item.bit_length() // 3 + 3
        elif kind is float:
            total += 32
        elif kind is dict:
            if depth >= MAX_DEPTH:
                return None
            total += 2 * len(item) + 2
            for key, part in item.items():
                if type(key) is not str:
                    return None
                total += 6 * len(key) + 2
                push((part, depth + 1))
        elif kind is list or kind is tuple:
            if depth >= MAX_DEPTH:
                return None
            total += len(item) + 2
            for part in item:
                push((part, depth + 1))
        else:
            return None
        if total > limit:
            return None
    return total


def json_within(
    value: Any, limit: int, what: str, field: str, *, need_value: bool = True
) -> tuple[Any, str]:
    """`engine.limits.canonical_within` on a guarded step's hot path: the same canonical text,
    and a canonical value equal to its, encoded by the C encoder when `value` is plain JSON data
    surely within `limit` (`_plain_upper_bound`); anything else (other types, a cycle, NaN, a
    lone surrogate, a value near the limit) goes through `canonical_within` and its errors.
    The value is a fresh copy decoded from the text (keys in sorted order, as a step read back
    from the store has them); with `need_value` False it is None.

    Raises:
        SizeLimitExceeded, TypeError, ValueError: as `canonical_within`.
    """
    if _plain_upper_bound(value, limit) is not None:
        try:
            text = _strict_text(value)
            text.encode("utf-8")  # a lone surrogate has no UTF-8 form: refused below
        except (ValueError, TypeError, RecursionError):
            pass
        else:
            return (_SCAN(text, 0)[0] if need_value else None), text
    return canonical_within(value, limit, what, field)


def result_preview(result: Any, limits: Limits | None = None) -> tuple[str | None, str | None]:
    """(digest, preview) of a tool result. The digest is the detector's normalized one (ids and
    timestamps masked), so a detector rebuilt from stored digests sees what the live one saw.

    Raises:
        SizeLimitExceeded: the result is larger than `limits.result_bytes` (its JSON encoding
        stops there). ValueError: nested too deep, a cycle or a lone surrogate.
    """
    if result is None:
        return None, None
    limits = limits or Limits()
    try:
        text = json_within(result, limits.result_bytes, "result", "result_bytes",
                           need_value=False)[1]
        result_hash = result_digest(result)
    except TypeError:
        text = check_text(repr(result), limits.result_bytes, "result", "result_bytes")
        result_hash = digest(text)
    return result_hash, text[:PREVIEW_CHARS]


def detector_step(rec: StepRecord) -> Step:
    """The detector's view of a stored step (to rebuild its window after a rollback): the same
    view replay takes (`engine.loops.replay.step_of`), so a rebuilt window judges as replay does.
    (Imported here: a session that never rebuilds its window does not load replay.)"""
    from engine.loops.replay import step_of

    return step_of(rec)


def budget_record(context: Any) -> TokenBreakdown | None:
    """The token breakdown to store with a step, from a `Context` or a breakdown dict.

    Raises:
        TypeError: neither a `Context` nor a dict.
    """
    if context is None:
        return None
    breakdown = getattr(context, "breakdown", context)
    if not isinstance(breakdown, dict):
        raise TypeError("context must be a Context from ContextBuilder.build or a breakdown dict")
    record: dict[str, int] = {
        k: int(v) for k, v in breakdown.items() if k in TOKEN_BREAKDOWN_KEYS and v is not None
    }
    for attr in ("tokens", "max_tokens"):
        value = getattr(context, attr, None)
        if isinstance(value, int):
            record["total" if attr == "tokens" else attr] = value
    return TokenBreakdown(**record)  # type: ignore[typeddict-item]


def verdict_record(
    verdict: Verdict,
    step_number: Callable[[int | None], int | None],
    now: float,
    policy: PolicyChoice | None = None,
) -> StoredVerdict:
    """The JSON form of a verdict, with detector indexes mapped to session step numbers and,
    when given, the loop policy the session follows on it and why."""
    record = StoredVerdict(
        rule=verdict.rule or "",
        explanation=verdict.explanation,
        evidence_steps=[n for n in (step_number(i) for i in verdict.evidence) if n is not None],
        loop_start_step=step_number(verdict.loop_start),
        details=canonicalize(verdict.details or {}, "details"),
        at=now,
    )
    if policy is not None:
        record["policy"] = policy.policy
        record["policy_reason"] = policy.reason
    return record
