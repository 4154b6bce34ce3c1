"""Contradiction checking between a new memory and older ones (pure code).

Vocabulary. A memory is an *utterance*: an optional speaker prefix (``Caroline: …``,
``小明：…``) and clauses. A *claim* is what one statement clause says about one *owner*
(the speaker for ``I``/``my``/``我``, a named person, or nobody in particular for
``the budget``) and one *attribute* (residence, employer, job, age, relationship status, a
preference for a thing, or a named attribute such as ``budget``, ``deploy target``, ``汇率``).
Two memories contradict when they hold claims on the same owner and attribute with different
values: a changed value, a flipped negation, a different number or date.

What is never a claim (so ordinary conversation is left alone): questions, greetings and
interjections (``Hey Mel!``, ``Wow``, ``Thanks``), hypotheticals and plans (``if``, ``maybe``,
``I'd love to``, ``想``, ``打算``), clauses about an unresolved ``it``/``that``/``he``/``they``,
opinions (``the stories were so inspiring``, ``今天很开心``), and statements about a person with a
bare copula (``Caroline is happy``). First-person claims of two different speakers never meet.

The default `RuleChecker` runs, per older memory, in this order and reports the first that fires:

1. ``typed`` claims: residence (``I live in / moved to Paris``, ``我住在/搬到了北京``), employer
   and job (``I work at / as``, ``我在…工作``), age, relationship status, preferences
   (``I love / hate / don't like X``, ``我(不)喜欢X``). A different value, or the same value with
   the polarity flipped, contradicts (kind ``value`` or ``negation``).
2. ``attribute`` claims: ``X is/was/= /: /fixed at/set to/is now A`` then ``X … B``
   (``X 是/为/固定为/设为/改为 A``). Numbers and dates in values compare as numbers and dates
   (``number``/``date``); other values differ when neither value's words contain the other's (a
   refinement is not a contradiction). With a plain copula (``is``, ``是``) a text value counts
   only for a known attribute noun (``name``, ``budget``, ``target``, ``favorite …``, ``地址``…).
3. ``wording``: two statement clauses of the same owner with near-identical words whose negation
   flipped (``negation``), or whose numbers or dates disagree (``number``/``date``); clauses
   about one-off events (``yesterday``, ``last week``, ``昨天``) are left out of the number rule.

`RuleChecker.keys` names the (owner, attribute) pairs of a text, so a caller can fetch older
memories that share a pair even when they share no word (``I live in Berlin`` / ``I moved to
Paris``). Resolution is the caller's: the newer fact wins, each reported older memory is marked
invalid (kept, not deleted) and a correction entry is logged. A smarter checker (an NLI model, an
LLM) plugs in through the `ContradictionChecker` protocol.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engine.memory import lexicon as lx
from engine.memory.tokenize import tokenize as default_tokenize

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


@dataclass(frozen=True)
class _Clause:
    """One statement clause of an utterance."""

    text: str
    owner: str | None
    """Whose clause it is when it speaks in the first person (the speaker, or "" without one);
    None when it does not."""
    question: bool
    hedged: bool
    event: bool
    unresolved: bool


@dataclass(frozen=True)
class _Claim:
    """What one clause says about one owner's attribute."""

    owner: str
    """Speaker or person name (lower case); "" for nobody in particular (``the budget``)."""
    attribute: str
    """``residence``, ``employer``, ``job``, ``age``, ``relationship``, ``pref:<object>`` or
    ``attr:<terms>``."""
    label: str
    """The attribute as written, for the reason."""
    value: str
    negated: bool
    strong: bool = True
    terms: frozenset[str] = frozenset()
    """Attribute terms (generic claims)."""
    head: str = ""
    """Last attribute term (generic claims)."""


class RuleChecker:
    """Deterministic, offline contradiction rules for English and Chinese memories."""

    def __init__(
        self,
        top_n: int = 8,
        min_similarity: float = 0.2,
        near_duplicate: float = 0.6,
        tokenizer: Callable[[str], list[str]] | None = None,
    ) -> None:
        """Configure the checker.

        Args:
            top_n: how many older memories are examined: those sharing an (owner, attribute)
                pair first, then the most similar by word overlap.
            min_similarity: word-overlap floor for an older memory without a shared pair to be
                examined at all.
            near_duplicate: word overlap of two clauses (numbers and dates left out) above which
                they are taken to state the same thing, for the wording rules.
            tokenizer: text -> terms; default: the retrieval tokenizer (stemming, stopwords,
                jieba for Chinese).
        """
        self.top_n = top_n
        self.min_similarity = min_similarity
        self.near_duplicate = near_duplicate
        self.tokenize = tokenizer or default_tokenize
        self._parsed: dict[str, tuple[list[_Clause], list[_Claim]]] = {}

    # -- parsing ------------------------------------------------------------------------------
    def _terms(self, text: str) -> frozenset[str]:
        return frozenset(t for t in self.tokenize(text) if not any(c.isdigit() for c in t))

    def _content_terms(self, text: str) -> frozenset[str]:
        """Terms without numbers, negation and "now"-words (for the wording rules)."""
        text = lx.NEGATION_EN.sub(" ", text)
        return frozenset(
            t
            for t in self._terms(text)
            if not lx.NEGATION_ZH.fullmatch(t) and t not in lx.NOW_WORDS
        )

    @staticmethod
    def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
        if not a and not b:
            return 0.0
        return len(a & b) / len(a | b)

    @staticmethod
    def _split_speaker(text: str) -> tuple[str | None, str]:
        match = lx.SPEAKER.match(text)
        if match is None:
            return None, text
        who, rest = match.group("who"), match.group("rest").strip()
        if who.lower() in lx.NOT_SPEAKERS:
            return None, rest
        short = len(rest) <= 40
        if _is_attribute_name(who) or (
            short and (lx.NUMBER.fullmatch(rest.replace(" ", "")) or lx.dates(rest)[0])
        ):
            return None, text  # "Budget: 500", "汇率：1.08": an attribute, not a speaker
        if len(rest.split()) < 2 and not lx.has_han(rest) and not re.search(r"[!?.]", rest):
            return None, text
        return who.lower(), rest

    def _clauses(self, text: str) -> tuple[str | None, list[_Clause]]:
        speaker, rest = self._split_speaker(text)
        out = []
        for raw in lx.CLAUSE.split(rest):
            raw = raw.strip()
            if not raw:
                continue
            question = raw.endswith(("?", "？"))
            body = raw.rstrip(".!?;。！？； ")
            previous = None
            while previous != body:
                previous = body
                body = lx.INTERJECTION.sub("", body)
                body = lx.INTERJECTION_ZH.sub("", body)
                body = lx.VOCATIVE.sub("", body)
            body = body.strip(" ,，-—")
            if not body:
                continue
            han = lx.has_han(body)
            lower = body.lower()
            if han:
                question = question or bool(lx.QUESTION_ZH.search(body))
                hedged = bool(lx.HEDGE_ZH.search(body))
                first = bool(lx.FIRST_PERSON_ZH.search(body))
                unresolved = bool(lx.UNRESOLVED_ZH.match(body))
            else:
                question = question or bool(lx.QUESTION_START.match(body))
                hedged = bool(lx.HEDGE_EN.search(lower))
                first = bool(lx.FIRST_PERSON_EN.search(lower))
                unresolved = bool(lx.UNRESOLVED_EN.match(body))
            if not han and lx.IMPERATIVE_EN.match(body):
                unresolved = True
            out.append(
                _Clause(
                    text=body,
                    owner=(speaker or "") if first else None,
                    question=question,
                    hedged=hedged,
                    event=bool(lx.EVENT_TIME.search(lower)),
                    unresolved=unresolved,
                )
            )
        return speaker, out

    def _parse(self, text: str) -> tuple[list[_Clause], list[_Claim]]:
        cached = self._parsed.get(text)
        if cached is not None:
            return cached
        speaker, clauses = self._clauses(text)
        claims: list[_Claim] = []
        for clause in clauses:
            if clause.question or clause.unresolved:
                continue
            typed = self._typed_claim(clause, speaker or "")
            if typed is not None:
                if not clause.hedged:
                    claims.append(typed)
                continue
            if clause.hedged and not lx.has_han(clause.text):
                if re.search(
                    r"\b(?:if|maybe|perhaps|might|would|could|hope|wish)\b|['’]d\b",
                    clause.text,
                    re.IGNORECASE,
                ):
                    continue
            generic = self._generic_claim(clause.text, speaker or "")
            if generic is not None:
                claims.append(generic)
        if len(self._parsed) > 20_000:
            self._parsed.clear()
        self._parsed[text] = (clauses, claims)
        return clauses, claims

    @staticmethod
    def _owner(subject: str, speaker: str) -> str:
        s = subject.lower().replace("’", "'")
        s = re.sub(r"\s+is$", "", s)
        if s in {"i", "i'm", "i am", "we", "we're", "we are", "我", "我们"}:
            return speaker
        kin = re.match(r"(?:my|our) (.+?)(?:\s+are)?$", s)
        if kin:
            return f"{speaker}:{kin.group(1)}"
        return s

    def _typed_claim(self, clause: _Clause, speaker: str) -> _Claim | None:
        text = clause.text
        if lx.has_han(text):
            for attribute, pattern in (
                ("residence", lx.RESIDENCE_ZH),
                ("employer", lx.WORK_ZH),
                ("age", lx.AGE_ZH),
                ("relationship", lx.RELATION_ZH),
            ):
                m = pattern.match(text)
                if m:
                    value = m.group("val").strip()
                    if attribute == "relationship" and value == "已婚":
                        value = "结婚"
                    negated = bool(m.groupdict().get("neg"))
                    return _Claim(
                        self._owner(m.group("subj"), speaker), attribute, attribute, value, negated
                    )
            m = lx.PREF_ZH.match(text)
            if m and not re.match(r"^(?:它|这|那|你|他|她|的)", m.group("val")):
                negative = m.group("verb") == "讨厌"
                negated = bool(m.group("neg")) != negative
                value = m.group("val").strip()
                return _Claim(
                    self._owner(m.group("subj"), speaker),
                    "pref",
                    "喜好",
                    value,
                    negated,
                    terms=self._terms(value),
                )
            return None
        for attribute, pattern in (
            ("residence", lx.RESIDENCE_EN),
            ("age", lx.AGE_EN),
            ("relationship", lx.RELATION_EN),
        ):
            m = pattern.match(text)
            if m:
                if attribute == "residence" and re.search(r"\blived\b|used to|\bgrew up\b", text):
                    return None
                negated = bool(m.groupdict().get("neg"))
                value = m.group("val").strip()
                return _Claim(
                    self._owner(m.group("subj"), speaker), attribute, attribute, value, negated
                )
        m = lx.WORK_EN.match(text)
        if m:
            value = m.group("val").strip()
            prep = m.group("prep") or "at"
            if re.search(r"\b(?:quit|left)\b", text[: m.start("val")]):  # "quit my job at X"
                negated = True
            else:
                negated = bool(m.group("neg"))
            if not self._terms(value) or re.match(
                r"(?:\d|hours|days|weeks|years|a while|long|myself|it|this|that)\b", value
            ):
                return None
            attribute = "job" if prep == "as" else "employer"
            return _Claim(
                self._owner(m.group("subj"), speaker), attribute, attribute, value, negated
            )
        m = lx.PREF_EN.match(text)
        if m:
            value = m.group("val").strip()
            verb = m.group("verb").lower()
            if verb == "stand" and not m.group("neg"):
                return None
            if lx.PRONOUN_OBJECT.match(value) or not self._terms(value):
                return None
            value = re.split(r"\s+(?:and|but|because|so|since|when|with|,)\s+", value)[0]
            negative = verb in lx.PREF_NEGATIVE or verb == "stand"
            negated = bool(m.group("neg")) != negative
            if verb == "stand":
                negated = True
            return _Claim(
                self._owner(m.group("subj"), speaker),
                "pref",
                "preference",
                value,
                negated,
                terms=self._terms(value),
            )
        return None

    def _generic_claim(self, text: str, speaker: str) -> _Claim | None:
        han = lx.has_han(text)
        match = lx.PREDICATE_ZH.search(text, 1) if han else lx.PREDICATE_EN.search(text.lower(), 1)
        if match is None:
            return None
        subject = text[: match.start()].strip(" ,，")
        pred = match.group().lower()
        value = text[match.end() :].strip()
        strong = pred not in lx.WEAK_EN and pred not in lx.WEAK_ZH
        stripped = lx.LEADING_STRONG.sub("", value)
        if stripped != value:
            strong, value = True, stripped
        if not value or len(subject) > 80 or (not han and subject.count(" ") > 6):
            return None
        owner_re, bad = (
            (lx.OWNER_ZH, lx.BAD_SUBJECT_ZH) if han else (lx.OWNER_EN, lx.BAD_SUBJECT_EN)
        )
        owner = ""
        attribute = subject
        m = owner_re.match(subject)
        if m:
            if m.group("mine"):
                owner = speaker
            elif m.group("yours"):
                owner = "you"
            elif m.group("third"):
                return None  # whose? unresolved
            elif m.group("name"):
                owner = m.group("name").lower()
            attribute = subject[m.end() :].strip()
        if not attribute or bad.search(attribute):
            return None
        if not han and len(attribute.split()) > 5:
            return None
        if not han and re.match(
            r"[A-Za-z]+ing\s+(?:that|the|a|an|on|with|my|your|his|her|out|to|in|at|for|about|up|"
            r"it|this|those|these|them|new|time)\b",
            attribute,
        ):
            return None  # "Finding that balance is key": an activity, not an attribute
        terms = frozenset(self.tokenize(attribute))  # ids count: "order A-1" is not "order A-2"
        if not terms:
            return None
        ordered = [t for t in self.tokenize(attribute) if t in terms]
        if not strong and not han and re.match(r"[a-z]+ed\b(?!\s+(?:to|at|as)\b)", value):
            return None  # "The refund was approved": a passive event, not a value
        if not strong and not _is_attribute_name(attribute):
            # A plain copula with a text value: only for attribute nouns, or a proper-noun
            # value of a determined attribute ("The project lead is Alice"). A bare name with
            # a plain copula ("Caroline is happy") says nothing about a single attribute.
            if re.fullmatch(r"[A-Z][a-z]+", attribute):
                return None
            proper = (
                not han
                and m is not None
                and re.fullmatch(r"(?:the\s+)?[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2}", value)
            )
            if not (lx.numbers(value) or lx.dates(value)[0] or proper):
                return None
        if not strong and not han and len(value.split()) > 6:
            return None  # a description, not a value
        evaluative = lx.EVALUATIVE_ZH if han else lx.EVALUATIVE_EN
        if evaluative.match(value) and not (lx.numbers(value) or lx.dates(value)[0]):
            return None
        return _Claim(
            owner,
            "attr",
            subject,
            value,
            lx.negated(text),
            strong=strong,
            terms=terms,
            head=ordered[-1],
        )

    # -- comparing ----------------------------------------------------------------------------
    def keys(self, text: str) -> frozenset[str]:
        """The (owner, attribute) pairs a text makes claims on, as strings.

        Older memories sharing a key are worth checking even without a shared word.
        """
        _, claims = self._parse(lx.normalize(text))
        out = set()
        for c in claims:
            if c.attribute == "attr":
                out.add(f"attr|{c.head}")
            elif c.attribute == "pref":
                for t in c.terms:
                    out.add(f"{c.owner}|pref|{t}")
            else:
                out.add(f"{c.owner}|{c.attribute}")
        return frozenset(out)

    @staticmethod
    def _owners_meet(a: str, b: str) -> bool:
        return a == b or a == "" or b == ""

    def _same_attribute(self, a: _Claim, b: _Claim) -> bool:
        if a.attribute != b.attribute:
            return False
        if a.attribute == "attr":
            if not self._owners_meet(a.owner, b.owner):
                return False
            if a.terms == b.terms:
                return True
            return a.head == b.head and self._jaccard(a.terms, b.terms) >= 0.6
        if a.owner != b.owner:
            return False
        if a.attribute == "pref":
            if not a.terms or not b.terms:
                return False
            return (
                a.terms <= b.terms or b.terms <= a.terms or self._jaccard(a.terms, b.terms) >= 0.5
            )
        return True

    def _values_differ(self, old: str, new: str) -> bool:
        if lx.has_han(old) or lx.has_han(new):
            x, y = old.replace(" ", ""), new.replace(" ", "")
            return not (x in y or y in x)
        a, b = self._terms(old), self._terms(new)
        if not a or not b:
            return old.strip().lower() != new.strip().lower()
        return not (a <= b or b <= a)

    def _compare_values(self, old: _Claim, new: _Claim) -> tuple[str, str, str] | None:
        old_dates, old_rest = lx.dates(old.value)
        new_dates, new_rest = lx.dates(new.value)
        if old_dates and new_dates:
            if lx.dates_disagree(old_dates, new_dates):
                return "date", lx.fmt_date(old_dates[0]), lx.fmt_date(new_dates[0])
            return None
        old_numbers, new_numbers = lx.numbers(old_rest), lx.numbers(new_rest)
        if old_numbers and new_numbers:
            if [v for v, _ in old_numbers] != [v for v, _ in new_numbers]:
                return "number", old_numbers[0][1], new_numbers[0][1]
            return None
        if old.attribute == "attr" and not (
            old.strong or new.strong or _is_attribute_name(new.label)
        ):
            return None
        if not self._values_differ(old.value, new.value):
            return None
        return "value", old.value, new.value

    def _by_claims(self, old_text: str, new_text: str) -> Contradiction | None:
        _, old_claims = self._parse(old_text)
        _, new_claims = self._parse(new_text)
        for new in new_claims:
            for old in old_claims:
                if not self._same_attribute(old, new):
                    continue
                label = new.label if new.attribute == "attr" else new.attribute
                if new.attribute == "pref":
                    if old.negated != new.negated:
                        return Contradiction(
                            older_id="",
                            kind="negation",
                            reason=f"preference flipped: earlier '{old_text.strip()}', "
                            f"now '{new_text.strip()}'",
                            attribute="preference",
                            old_value=old.value,
                            new_value=new.value,
                        )
                    continue
                if old.negated != new.negated:
                    if not self._values_differ(old.value, new.value):
                        return Contradiction(
                            older_id="",
                            kind="negation",
                            reason=f"'{label}' is negated: earlier '{old_text.strip()}', "
                            f"now '{new_text.strip()}'",
                            attribute=label,
                            old_value=old.value,
                            new_value=new.value,
                        )
                    continue
                if old.negated:
                    continue  # "not in Berlin" then "not in Paris": no conflict
                compared = self._compare_values(old, new)
                if compared is not None:
                    kind, old_shown, new_shown = compared
                    return Contradiction(
                        older_id="",
                        kind=kind,
                        reason=f"'{label}' was {old_shown}, now {new_shown}",
                        attribute=label,
                        old_value=old_shown,
                        new_value=new_shown,
                    )
        return None

    def _by_wording(self, old_text: str, new_text: str) -> Contradiction | None:
        old_clauses, old_claims = self._parse(old_text)
        new_clauses, new_claims = self._parse(new_text)
        if any(c.attribute == "attr" for c in old_claims) and any(
            c.attribute == "attr" for c in new_claims
        ):
            return None  # both name their attributes: the claim rule has had its say
        for new in new_clauses:
            if new.question or new.hedged or new.unresolved:
                continue
            new_terms = self._content_terms(new.text)
            if len(new_terms) < 2:
                continue
            for old in old_clauses:
                if old.question or old.hedged or old.unresolved:
                    continue
                if new.owner != old.owner:
                    continue
                old_terms = self._content_terms(old.text)
                if self._jaccard(new_terms, old_terms) < self.near_duplicate:
                    continue
                if lx.negated(old.text) != lx.negated(new.text):
                    return Contradiction(
                        older_id="",
                        kind="negation",
                        reason=f"negation flipped: earlier '{old.text}', now '{new.text}'",
                    )
                if old.event or new.event:
                    continue
                old_dates, old_rest = lx.dates(old.text)
                new_dates, new_rest = lx.dates(new.text)
                if old_dates and new_dates and lx.dates_disagree(old_dates, new_dates):
                    a, b = lx.fmt_date(old_dates[0]), lx.fmt_date(new_dates[0])
                    return Contradiction(
                        older_id="",
                        kind="date",
                        reason=f"dates disagree: {a} earlier, {b} now",
                        old_value=a,
                        new_value=b,
                    )
                old_numbers, new_numbers = lx.numbers(old_rest), lx.numbers(new_rest)
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
        new_text = lx.normalize(new_text)
        if not new_text:
            return []
        new_terms = self._terms(new_text)
        new_keys = self.keys(new_text)
        scored = []
        for position, (older_id, old_text) in enumerate(existing):
            old_text = lx.normalize(old_text)
            if old_text == new_text:
                continue
            overlap = self._jaccard(new_terms, self._terms(old_text))
            shared = bool(new_keys & self.keys(old_text))
            if shared or overlap >= self.min_similarity:
                scored.append((not shared, -overlap, position, older_id, old_text, overlap))
        scored.sort()
        found: list[tuple[float, int, Contradiction]] = []
        for *_, older_id, old_text, overlap in scored[: self.top_n]:
            hit = self._by_claims(old_text, new_text) or self._by_wording(old_text, new_text)
            if hit is not None:
                found.append(
                    (
                        -overlap,
                        len(found),
                        Contradiction(
                            older_id=older_id,
                            kind=hit.kind,
                            reason=hit.reason,
                            attribute=hit.attribute,
                            old_value=hit.old_value,
                            new_value=hit.new_value,
                            similarity=round(overlap, 4),
                        ),
                    )
                )
        found.sort(key=lambda f: (f[0], f[1]))
        return [c for *_, c in found]


def _is_attribute_name(attribute: str) -> bool:
    """Whether an attribute phrase names a known attribute noun (``budget``, ``favorite X``)."""
    if lx.has_han(attribute):
        return any(noun in attribute for noun in lx.ATTRIBUTE_NOUNS_ZH)
    return any(_stem(w) in lx.ATTRIBUTE_NOUNS_EN for w in re.findall(r"[a-z]+", attribute.lower()))


@functools.lru_cache(maxsize=4096)
def _stem(word: str) -> str:
    terms = default_tokenize(word)
    return terms[0] if terms else word
