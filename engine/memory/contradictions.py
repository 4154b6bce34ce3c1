"""Contradiction checking between a new memory and the most similar older ones (pure code).

The default `RuleChecker` is deterministic and offline. Among the ``top_n`` older memories most
similar to the new one (word overlap), it reports, per older memory, the first rule that fires:

1. ``value``: the same attribute with a different value: ``X is/was/= /: /fixed at/set to A`` then
   ``X … B`` (``X 是/为/固定为/设为/改为 A`` in Chinese). Numbers and dates inside the values are
   compared as numbers and dates (``number`` / ``date``); other values differ when neither
   value's words contain the other's (so a refinement is not a contradiction).
2. ``negation``: the same statement with the negation flipped (``not``, ``never``, ``n't``, ``no``;
   ``不``, ``没``, ``未``, ``非``, ``无``, ``别``).
3. ``number`` / ``date``: near-identical wording whose numbers or dates disagree.

Resolution is the caller's: the newer fact wins, each reported older memory is marked invalid
(kept, not deleted) and a correction entry is logged. A smarter checker (an NLI model, an LLM)
plugs in through the `ContradictionChecker` protocol.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engine.memory.retrieval import tokenize as default_tokenize

__all__ = ["Contradiction", "ContradictionChecker", "RuleChecker"]


@dataclass(frozen=True)
class Contradiction:
    """An older memory that the new one contradicts."""

    older_id: str
    """Id of the older memory (to be marked invalid)."""
    kind: str
    """``value``, ``number``, ``date`` or ``negation``."""
    reason: str
    """One sentence for the console's correction log."""
    attribute: str | None = None
    """The attribute both memories talk about, when one was recognized."""
    old_value: str | None = None
    """What the older memory said."""
    new_value: str | None = None
    """What the new memory says."""
    similarity: float = 0.0
    """Word overlap of the two memories (Jaccard, 0..1)."""


@runtime_checkable
class ContradictionChecker(Protocol):
    """Finds which older memories a new memory contradicts."""

    def check(self, new_text: str, existing: Sequence[tuple[str, str]]) -> list[Contradiction]:
        """Compare a new memory with older ones.

        Args:
            new_text: the memory being written.
            existing: ``(id, text)`` of older, still valid memories (e.g. the top hits of a
                recall on ``new_text``).

        Returns:
            One `Contradiction` per contradicted older memory, most similar first.
        """
        ...


_NEGATION_EN = re.compile(
    r"\b(?:not|no|never|none|nobody|nothing|neither|nor|cannot|without)\b|n['’]t\b", re.IGNORECASE
)
_NEGATION_ZH = re.compile(r"不|没有|没|未|非|无|别|勿")
_CLAUSE = re.compile(r"(?<=[.!?;])\s+|[。！？；\n]+")

_STRONG_EN = [
    "is fixed at",
    "was fixed at",
    "fixed at",
    "is set to",
    "was set to",
    "set to",
    "set at",
    "changed to",
    "updated to",
    "moved to",
    "is now",
    "are now",
    "equals",
]
_WEAK_EN = ["is", "are", "was", "were", "will be", "costs", "cost"]
_PREDICATE_EN = re.compile(
    r"^(?P<subj>.+?)\s*(?P<pred>"
    + "|".join(rf"\b{re.escape(p)}\b" for p in _STRONG_EN + _WEAK_EN)
    + r"|=|:)\s*(?P<val>.+)$",
    re.IGNORECASE | re.DOTALL,
)
_STRONG_ZH = ["固定为", "设置为", "设定为", "设为", "改为", "更改为", "调整为", "变为", "等于"]
_WEAK_ZH = ["是", "为", "為"]
_PREDICATE_ZH = re.compile(
    r"^(?P<subj>.+?)(?P<pred>"
    + "|".join(re.escape(p) for p in _STRONG_ZH + _WEAK_ZH)
    + r"|＝|=|：|:)(?P<val>.+)$",
    re.DOTALL,
)
_LEADING_STRONG = re.compile(
    r"^(?:now\s+)?(?:" + "|".join(re.escape(p) for p in _STRONG_EN) + r"|now)\b\s*",
    re.IGNORECASE,
)

_MONTHS = {
    m: i
    for i, names in enumerate(
        [
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ],
        start=1,
    )
    for m in names
}
_MONTH = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DATE_PATTERNS = [
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"), ("y", "m", "d")),
    (re.compile(r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]"), ("y", "m", "d")),
    (re.compile(r"(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]"), ("m", "d")),
    (
        re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({_MONTH})\.?,?(?:\s+(\d{{4}}))?\b", re.I),
        ("d", "mon", "y"),
    ),
    (
        re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?(?:,?\s+(\d{{4}}))?\b", re.I),
        ("mon", "d", "y"),
    ),
]
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?")


def _normalize(text: str) -> str:
    return unicodedata.normalize("NFKC", text).strip()


def _dates(text: str) -> tuple[list[tuple[int | None, int, int]], str]:
    """Dates found in text as ``(year or None, month, day)``, and the text with them blanked."""
    found: list[tuple[int, tuple[int | None, int, int]]] = []
    blanked = text
    for pattern, fields in _DATE_PATTERNS:
        for match in pattern.finditer(blanked):
            values = dict(zip(fields, match.groups(), strict=True))
            try:
                month = _MONTHS[values["mon"].lower()] if "mon" in values else int(values["m"])
                day = int(values["d"])
                year = int(values["y"]) if values.get("y") else None
            except (KeyError, ValueError):
                continue
            if 1 <= month <= 12 and 1 <= day <= 31:
                found.append((match.start(), (year, month, day)))
        blanked = pattern.sub(lambda m: " " * len(m.group()), blanked)
    found.sort()
    return [d for _, d in found], blanked


def _numbers(text: str) -> list[tuple[float, str]]:
    """Numbers in text as ``(value, as written)``; ``1.10`` equals ``1.1``, ``2,000`` is 2000."""
    out = []
    for match in _NUMBER.finditer(text):
        try:
            out.append((float(match.group().replace(",", "")), match.group()))
        except ValueError:
            continue
    return out


def _negated(text: str) -> bool:
    """Odd number of negation markers."""
    count = len(_NEGATION_EN.findall(text)) + len(_NEGATION_ZH.findall(text))
    return count % 2 == 1


def _fmt_date(d: tuple[int | None, int, int]) -> str:
    year, month, day = d
    return f"{year:04d}-{month:02d}-{day:02d}" if year else f"{month:02d}-{day:02d}"


def _dates_disagree(a: list, b: list) -> bool:
    """True when the first dates of both sides differ in a component both specify."""
    (ya, ma, da), (yb, mb, db) = a[0], b[0]
    if (ma, da) != (mb, db):
        return True
    return ya is not None and yb is not None and ya != yb


@dataclass(frozen=True)
class _Claim:
    """An attribute-value statement found in one clause."""

    subject: str
    subject_terms: frozenset[str]
    head: str
    value: str
    strong: bool
    negated: bool


class RuleChecker:
    """Deterministic, offline contradiction rules for English and Chinese memories."""

    def __init__(
        self,
        top_n: int = 5,
        min_similarity: float = 0.2,
        near_duplicate: float = 0.6,
        tokenizer: Callable[[str], list[str]] | None = None,
    ) -> None:
        """Configure the checker.

        Args:
            top_n: how many of the most similar older memories are examined.
            min_similarity: word-overlap floor for an older memory to be examined at all.
            near_duplicate: word overlap (numbers and dates left out) above which two memories
                are taken to state the same thing, for the negation and number/date rules.
            tokenizer: text -> terms; default: the retrieval tokenizer (stemming, stopwords,
                jieba for Chinese).
        """
        self.top_n = top_n
        self.min_similarity = min_similarity
        self.near_duplicate = near_duplicate
        self.tokenize = tokenizer or default_tokenize

    def _terms(self, text: str) -> frozenset[str]:
        return frozenset(t for t in self.tokenize(text) if not any(c.isdigit() for c in t))

    @staticmethod
    def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
        if not a and not b:
            return 0.0
        return len(a & b) / len(a | b)

    def _claims(self, text: str) -> list[_Claim]:
        claims = []
        for clause in _CLAUSE.split(text):
            clause = clause.strip().rstrip(".!?;。！？；")
            if not clause:
                continue
            match = _PREDICATE_EN.match(clause) or _PREDICATE_ZH.match(clause)
            if match is None:
                continue
            subject = match.group("subj").strip(" ,，")
            pred = match.group("pred").lower()
            value = match.group("val").strip()
            strong = pred not in _WEAK_EN and pred not in _WEAK_ZH
            stripped = _LEADING_STRONG.sub("", value)
            if stripped != value:
                strong, value = True, stripped
            terms = self._terms(subject)
            if not terms or not value:
                continue
            ordered = [t for t in self.tokenize(subject) if t in terms]
            claims.append(
                _Claim(
                    subject=subject,
                    subject_terms=terms,
                    head=ordered[-1],
                    value=value,
                    strong=strong,
                    negated=_negated(clause),
                )
            )
        return claims

    def _same_attribute(self, a: _Claim, b: _Claim) -> bool:
        if a.subject_terms == b.subject_terms:
            return True
        return a.head == b.head and self._jaccard(a.subject_terms, b.subject_terms) >= 0.6

    def _compare_values(
        self, old: _Claim, new: _Claim
    ) -> tuple[str, str, str] | None:  # (kind, old shown, new shown)
        old_dates, old_rest = _dates(old.value)
        new_dates, new_rest = _dates(new.value)
        if old_dates and new_dates:
            if _dates_disagree(old_dates, new_dates):
                return "date", _fmt_date(old_dates[0]), _fmt_date(new_dates[0])
            return None
        old_numbers, new_numbers = _numbers(old_rest), _numbers(new_rest)
        if old_numbers and new_numbers:
            if old_numbers[0][0] != new_numbers[0][0]:
                return "number", old_numbers[0][1], new_numbers[0][1]
            return None
        comparable = old.strong or new.strong or len(old.subject_terms) >= 2
        if not comparable:
            return None
        old_terms, new_terms = self._terms(old.value), self._terms(new.value)
        if not old_terms or not new_terms:
            return None
        if old_terms <= new_terms or new_terms <= old_terms:
            return None  # the same value, or one refines the other
        return "value", old.value, new.value

    def _by_claims(self, old_text: str, new_text: str) -> Contradiction | None:
        for new in self._claims(new_text):
            for old in self._claims(old_text):
                if not self._same_attribute(old, new):
                    continue
                if old.negated != new.negated:
                    same_value = self._terms(old.value) == self._terms(new.value)
                    if same_value:
                        return Contradiction(
                            older_id="",
                            kind="negation",
                            reason=f"'{new.subject}' is negated: earlier '{old_text.strip()}', "
                            f"now '{new_text.strip()}'",
                            attribute=new.subject,
                            old_value=old.value,
                            new_value=new.value,
                        )
                    continue
                compared = self._compare_values(old, new)
                if compared is not None:
                    kind, old_shown, new_shown = compared
                    return Contradiction(
                        older_id="",
                        kind=kind,
                        reason=f"'{new.subject}' was {old_shown}, now {new_shown}",
                        attribute=new.subject,
                        old_value=old_shown,
                        new_value=new_shown,
                    )
        return None

    def _by_wording(self, old_text: str, new_text: str, overlap: float) -> Contradiction | None:
        if overlap < self.near_duplicate:
            return None
        if _negated(old_text) != _negated(new_text):
            return Contradiction(
                older_id="",
                kind="negation",
                reason=f"negation flipped: earlier '{old_text.strip()}', now '{new_text.strip()}'",
            )
        old_dates, old_rest = _dates(old_text)
        new_dates, new_rest = _dates(new_text)
        if old_dates and new_dates and _dates_disagree(old_dates, new_dates):
            a, b = _fmt_date(old_dates[0]), _fmt_date(new_dates[0])
            return Contradiction(
                older_id="",
                kind="date",
                reason=f"dates disagree: {a} earlier, {b} now",
                old_value=a,
                new_value=b,
            )
        old_numbers, new_numbers = _numbers(old_rest), _numbers(new_rest)
        old_values = sorted(v for v, _ in old_numbers)
        new_values = sorted(v for v, _ in new_numbers)
        if old_numbers and new_numbers and old_values != new_values:
            a = ", ".join(raw for _, raw in old_numbers)
            b = ", ".join(raw for _, raw in new_numbers)
            return Contradiction(
                older_id="",
                kind="number",
                reason=f"numbers disagree: {a} earlier, {b} now",
                old_value=a,
                new_value=b,
            )
        return None

    def check(self, new_text: str, existing: Sequence[tuple[str, str]]) -> list[Contradiction]:
        """Find the older memories that ``new_text`` contradicts.

        Args:
            new_text: the memory being written.
            existing: ``(id, text)`` of older, still valid memories.

        Returns:
            One `Contradiction` per contradicted older memory, most similar first.
        """
        new_text = _normalize(new_text)
        new_terms = self._terms(new_text)
        scored = []
        for position, (older_id, old_text) in enumerate(existing):
            old_text = _normalize(old_text)
            overlap = self._jaccard(new_terms, self._terms(old_text))
            if overlap >= self.min_similarity:
                scored.append((-overlap, position, older_id, old_text, overlap))
        scored.sort()
        found = []
        for _, _, older_id, old_text, overlap in scored[: self.top_n]:
            if old_text == new_text:
                continue
            hit = self._by_claims(old_text, new_text) or self._by_wording(
                old_text, new_text, overlap
            )
            if hit is not None:
                found.append(
                    Contradiction(
                        older_id=older_id,
                        kind=hit.kind,
                        reason=hit.reason,
                        attribute=hit.attribute,
                        old_value=hit.old_value,
                        new_value=hit.new_value,
                        similarity=round(overlap, 4),
                    )
                )
        return found
