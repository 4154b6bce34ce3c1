"""Contradiction judges: does a newer memory replace an older one? (pure code)

`SessionMemory.add` picks candidate pairs by retrieval (the older memories closest in words, and
those the judge's `keys` say talk about the same owner and attribute) and asks a
`ContradictionJudge` about all of them in one batch. Each answer is a `Judgement` with a
confidence and a reason, which the memory stores on the invalidated item and in its correction
log, with the judge's name, so the console can show why and by whom a memory was invalidated.

Shipped judges:

- `RulesJudge` (the default): conservative, offline rules for first-person and owner-attributed
  state changes in English and Chinese: where someone lives (``I moved to Denver``,
  ``我搬到了上海``), where and as what they work (``I now work at …``, ``I quit my job``,
  ``我跳槽到…``), personal attributes (``my new number is …``, ``I changed my email to …``,
  ``我的手机号改成…``), habits that stopped (``I no longer …``, ``I don't … anymore``,
  ``I stopped …``, ``我不再…``, ``我不…了``), habits taken up again against an older "I don't"
  or "I stopped" (``I've started running again``, ``我又开始跑步了``), switches and named
  replacements (``I switched from X to Y``, ``I replaced my Honda with a Tesla``, ``I upgraded
  from my iPhone 12 to …``, ``I use Y instead of X now``, ``我改用…``, ``我把旧电脑换成了…``;
  the older memory must say the owner has or uses X), promotions (``I was promoted to …``,
  ``我升职为…``), any attribute changed (``I changed my commute to …``), where a thing is and
  where it was moved (``my bike is in the garage`` … ``I moved my bike to the shed``: a move
  meets only an older place of the same thing), personal bests per named event (``my 5K
  personal best is 27:45`` … ``a new personal best of 26:30 in the 5K``), and counts the user
  keeps, restated with a new value (``I've completed 4 projects`` … ``I just finished my 5th
  project``, ``我现在已经读了5本书``: `engine.memory.tallies`); and, as people type them in chat,
  plain states said as current, ends of things and plans, switches to a thing of the same kind,
  new numbers and the same statement with another number (`engine.memory.judge_frames`). Each
  statement is read clause by clause, with a dropped subject put back (``traded in the civic``,
  ``钢琴放弃了，改学吉他了``); a sentence that opens as a correction (``sorry, I got that wrong``,
  ``更正一下``) states a change. It reads only prose statements
  (`engine.memory.surface`): formats never decide; questions, quoted text, other people's
  statements, plans, hypotheticals and negations (``I haven't moved``) claim no change.
- `FunctionJudge`: calls a function the user passes (their LLM), batched and cached.
- `CheckerJudge`: wraps an older `ContradictionChecker` (such as `RuleChecker`).

- `NLIJudge` (`engine.memory.nli`): a natural-language-inference model the user has on disk.
  No NLI model ships with Rewind (none is packaged on the registries this project installs
  from), and weights are never fetched from a model hub at run time.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

from engine.memory.judge_frames import (
    Frame,
    corrected,
    frame_keys,
    frames,
    judge_frames,
    stated_clauses,
)
from engine.memory.judge_rules import (  # the phrasings the rules judge reads
    _AGE,
    _CHANGE_MARK,
    _CHANGED,
    _CHANGED_ANY,
    _CUT_EN,
    _DONT,
    _EN,
    _EVALUATIVE,
    _EVENT,
    _HAVE_COUNT,
    _INSTEAD,
    _INSTEAD_MARK,
    _LEAD_EN,
    _MOVED_OBJECT,
    _MY_ATTR,
    _MY_NEW,
    _NOT_ATTRIBUTE,
    _PAST_EN,
    _PLACE_WORDS,
    _PREF,
    _RECORD,
    _RECORD_NEW,
    _RECORD_OWNER,
    _RECORD_VALUE,
    _RELATION,
    _RELATION_VALUE,
    _REPLACED,
    _STARTED,
    _STOPPED,
    _SWITCHED,
    _THING_CHANGED,
    _THING_IS,
    _WHERE,
    _ZH,
    _ZH_ATTR,
    _ZH_BA,
    _ZH_EVALUATIVE,
    _ZH_REPLACED,
    _ZH_STARTED,
    _ZH_STOPPED,
    _ZH_SWITCHED,
    _ZH_THING_CHANGED,
    _ZH_THING_IS,
)
from engine.memory.surface import HAN, Sentence, statements
from engine.memory.tallies import Tally, restated, tallies
from engine.memory.tokenize import tokenize

__all__ = [
    "CheckerJudge",
    "ContradictionJudge",
    "FunctionJudge",
    "Judgement",
    "RulesJudge",
]


@dataclass(frozen=True)
class Judgement:
    """A judge's answer about one (older, newer) pair."""

    contradicts: bool
    """Whether the newer memory replaces the older one."""
    confidence: float
    """0..1; the memory invalidates only at or above `MemoryConfig.min_confidence`."""
    reason: str
    """One sentence for the console."""
    kind: str = "update"
    """``update``, ``negation``, ``key`` (an exact keyed fact) or the judge's own word."""


NO = Judgement(False, 0.0, "")


@runtime_checkable
class ContradictionJudge(Protocol):
    """Decides which older memories a newer one replaces."""

    name: str
    """Shown with each invalidation (``rules``, ``llm``, …). A judge may also have
    ``keys(text) -> set of str`` (the owner|attribute pairs a text claims): older memories sharing
    one are candidates even without a shared word."""

    def judge(self, pairs: Sequence[tuple[str, str]]) -> list[Judgement]:
        """Judge a batch of pairs.

        Args:
            pairs: ``(older_text, newer_text)`` pairs, all with the same newer text when called
                by `SessionMemory.add`.

        Returns:
            One `Judgement` per pair, in order.
        """
        ...


class _Cache:
    """A small LRU of judgements by (older, newer) text."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data: OrderedDict[tuple[str, str], Judgement] = OrderedDict()

    def get(self, pair: tuple[str, str]) -> Judgement | None:
        found = self.data.get(pair)
        if found is not None:
            self.data.move_to_end(pair)
        return found

    def put(self, pair: tuple[str, str], value: Judgement) -> None:
        self.data[pair] = value
        if len(self.data) > self.size:
            self.data.popitem(last=False)


class FunctionJudge:
    """Asks a function the user passes (an LLM call, a local NLI model), batched and cached."""

    def __init__(
        self,
        fn: Callable[[list[tuple[str, str]]], Sequence[Any]],
        name: str = "llm",
        cache_size: int = 4096,
    ) -> None:
        """Wrap a judging function.

        Args:
            fn: takes ``[(older_text, newer_text), …]`` and returns one answer per pair: a
                `Judgement`, a ``(contradicts, confidence, reason)`` tuple, a dict with those
                keys, or a bool (confidence 1 or 0).
            name: shown with each invalidation.
            cache_size: pairs remembered (the same pair is never asked twice while cached).
        """
        self.fn = fn
        self.name = name
        self._cache = _Cache(cache_size)

    def judge(self, pairs: Sequence[tuple[str, str]]) -> list[Judgement]:
        """Judge a batch; only the pairs not cached reach the function, in one call.

        Raises:
            ValueError: the function returned a different number of answers than pairs.
        """
        out: list[Judgement | None] = [self._cache.get(p) for p in pairs]
        todo = list(dict.fromkeys(p for p, j in zip(pairs, out, strict=True) if j is None))
        if todo:
            answers = list(self.fn(todo))
            if len(answers) != len(todo):
                raise ValueError(
                    f"judge {self.name!r} returned {len(answers)} answers for {len(todo)} pairs: "
                    "return exactly one per pair, in order"
                )
            for pair, answer in zip(todo, answers, strict=True):
                self._cache.put(pair, _judgement(answer))
        return [
            j if j is not None else self._cache.get(p) or NO
            for p, j in zip(pairs, out, strict=True)
        ]


def _judgement(answer: Any) -> Judgement:
    if isinstance(answer, Judgement):
        return answer
    if isinstance(answer, bool):
        return Judgement(answer, 1.0 if answer else 0.0, "")
    if isinstance(answer, dict):
        return Judgement(
            bool(answer.get("contradicts")),
            float(answer.get("confidence", 1.0 if answer.get("contradicts") else 0.0)),
            str(answer.get("reason", "")),
            str(answer.get("kind", "update")),
        )
    contradicts, confidence, reason = answer
    return Judgement(bool(contradicts), float(confidence), str(reason))


class CheckerJudge:
    """Adapts a `ContradictionChecker` (``check(new_text, [(id, text)])``) to a judge."""

    def __init__(self, checker: Any, name: str | None = None, confidence: float = 0.8) -> None:
        self.checker = checker
        self.name = name or type(checker).__name__
        self.confidence = confidence
        self.keys = getattr(checker, "keys", None)

    def judge(self, pairs: Sequence[tuple[str, str]]) -> list[Judgement]:
        """One `check` per distinct newer text."""
        out = [NO] * len(pairs)
        by_new: dict[str, list[int]] = {}
        for i, (_, new) in enumerate(pairs):
            by_new.setdefault(new, []).append(i)
        for new, rows in by_new.items():
            found = self.checker.check(new, [(str(i), pairs[i][0]) for i in rows])
            for c in found:
                out[int(c.older_id)] = Judgement(True, self.confidence, c.reason, c.kind)
        return out


# -- the rules judge ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Claim:
    owner: str
    attribute: str
    """``residence``, ``employer``, ``job``, ``my:<attr>``, ``do`` (a habit), ``use``."""
    value: str
    negated: bool
    changed: bool
    """Said as a change (``moved to``, ``new``, ``no longer``): higher confidence."""
    old: str = ""
    """What was switched from (``switched from X to Y``)."""


def _owner(subject: str, speaker: str) -> str:
    s = subject.lower().strip().removesuffix("'s")
    if s in {"i", "we", "my", "our", "我", "我们", "我的", "我们的", "i'm"}:
        return speaker
    if s in {"the", ""}:
        return "*"  # nobody in particular ("the deadline"): meets any owner
    return s.removesuffix("的").removesuffix("'")


def _clean(value: str) -> str:
    value = _CUT_EN.sub("", value.strip())
    return value.strip(" .!,'\"").strip()


class RulesJudge:
    """The default judge: conservative rules for explicit state changes (see the module)."""

    name = "rules"

    def __init__(self, cache_size: int = 20_000) -> None:
        self._claims: dict[str, tuple[list[_Claim], list[Sentence]]] = {}
        self._frames: dict[str, list[Frame]] = {}
        self._tallies: dict[str, list[Tally]] = {}
        self._size = cache_size
        self._cache = _Cache(cache_size)

    # -- reading ---------------------------------------------------------------------------
    def claims(self, text: str) -> tuple[list[_Claim], list[Sentence]]:
        """The state claims of a text, and its prose statements (cached)."""
        found = self._claims.get(text)
        if found is not None:
            return found
        sentences = statements(text)
        claims: list[_Claim] = []
        for s in sentences:
            said: list[_Claim] = []
            for clause in stated_clauses(s):  # "Priya left, my new manager is Daniel"
                part = Sentence(s.owner, clause, False)
                if re.search(f"[{HAN}]", clause):
                    said += self._zh(part)
                elif not _PAST_EN.search(clause):
                    said += self._en(part)
            if corrected(s):  # "sorry, I got that wrong, my birthday is March 13th"
                said = [replace(c, changed=True) for c in said]
            claims += said
        if len(self._claims) > self._size:
            self._claims.clear()
        self._claims[text] = (claims, sentences)
        return claims, sentences

    def _en(self, s: Sentence) -> list[_Claim]:
        text = _LEAD_EN.sub("", s.text)
        text = re.sub(r"^[A-Z][a-z]+,\s+", "", text)  # "Mel, I moved …"
        if text[:1].islower():
            text = text[0].upper() + text[1:] if text.startswith("i ") else text
        out = []
        for attribute, negated, changed, pattern in _EN:
            m = pattern.match(text)
            if m is None:
                continue
            value = _clean(m.group("val") or "")
            if attribute != "employer" or not negated:
                if not value or value.lower() in {"it", "this", "that", "home", "there", "here"}:
                    continue
            out.append(
                _Claim(_owner(m.group("subj"), s.owner), attribute, value.lower(), negated, changed)
            )
            break
        for m in (_MY_ATTR.match(text), _MY_NEW.match(text)):
            if m is None:
                continue
            value = _clean(m.group("val"))
            if not value or re.match(
                r"(?:so|very|really|too|pretty|quite|super|a bit|kind of)\b", value
            ):
                continue
            attr = _attr(m.group("attr"))
            changed = bool(m.groupdict().get("new") or m.groupdict().get("now"))
            out.append(
                _Claim(
                    _owner(m.group("subj"), s.owner), f"my:{attr}", value.lower(), False, changed
                )
            )
            break
        for pattern, attribute in ((_AGE, "age"), (_RELATION, "relationship")):
            m = pattern.match(text)
            if m is not None:
                subj = m.group("subj") or m.group("subj2")
                raw = (m.group("val") or m.group("val2")).lower()
                changed = bool(m.group("val2")) or bool(re.search(r"\b(?:now|again)\b", text))
                out.append(
                    _Claim(
                        _owner(subj, s.owner),
                        attribute,
                        _RELATION_VALUE.get(raw, raw),
                        False,
                        changed,
                    )
                )
        marked = bool(_CHANGE_MARK.search(text))
        m = _PREF.match(text)
        if m is not None:
            value = _clean(m.group("val"))
            verb = m.group("verb").rstrip("s")
            if value and not re.match(r"(?:it|that|this|them|you|to|how|what|when|up)\b", value):
                negative = verb in {"hate", "dislike"}
                negated = bool(m.group("neg")) != negative
                if verb == "stand":  # only "can't stand X" is a preference: a dislike
                    negated = True
                    if not m.group("neg"):
                        value = ""
                attribute = "prefer" if verb == "prefer" else "pref"
                out.append(
                    _Claim(
                        _owner(m.group("subj"), s.owner), attribute, value.lower(), negated, marked
                    )
                )
        m = _HAVE_COUNT.match(text)
        if m is not None:
            noun = re.sub(r"(?:es|s)$", "", m.group("attr"))
            out.append(
                _Claim(
                    _owner(m.group("subj"), s.owner), f"count:{noun}", m.group("val"), False, marked
                )
            )
        m = _THING_CHANGED.match(text)
        changed = m is not None
        if m is None and not out:
            m = _THING_IS.match(text)
        if m is not None:
            subj = m.group("subj") or m.groupdict().get("subj2") or ""
            attr = (m.group("attr") or m.groupdict().get("attr2") or "").lower()
            if _NOT_ATTRIBUTE.intersection(attr.split()):
                m = None  # "so you moved to Paris": a person, not an attribute
        if m is not None:
            value = _clean(m.group("val") or m.groupdict().get("val2") or "")
            if value and not _EVALUATIVE.match(value) and len(value.split()) <= 6:
                out.append(
                    _Claim(
                        _owner(subj, s.owner), f"the:{_attr(attr)}", value.lower(), False, changed
                    )
                )
        out += _places(text, s.owner)
        out += _records(text, s.owner)
        m = _CHANGED.match(text)
        if m is not None:
            subj = m.group("subj") or m.group("subj2")
            attr = _attr(m.group("attr") or m.group("attr2"))
            value = _clean(m.group("val") or m.group("val2"))
            if value:
                out.append(_Claim(_owner(subj, s.owner), f"my:{attr}", value.lower(), False, True))
        elif not _MOVED_OBJECT.match(text):
            m = _CHANGED_ANY.match(text)
            if m is not None:
                value = _clean(m.group("val"))
                if value and not _EVALUATIVE.match(value):
                    attr = f"my:{_attr(m.group('attr'))}"
                    owner = _owner(m.group("subj"), s.owner)
                    out.append(_Claim(owner, attr, value.lower(), False, True))
        for m in (_REPLACED.match(text), _INSTEAD.match(text)):
            if m is None or (m.re is _INSTEAD and not _INSTEAD_MARK.search(s.text)):
                continue
            value = _clean(m.group("val"))
            old = _clean(m.groupdict().get("old") or m.groupdict().get("old2") or "")
            if value and old:
                attribute = "replace" if m.re is _REPLACED else "use"
                owner = _owner(m.group("subj"), s.owner)
                out.append(_Claim(owner, attribute, value.lower(), False, True, old.lower()))
                break
        m = _STARTED.match(text)
        if m is not None:
            value = _clean(re.sub(r"\s+again\b.*$", "", m.group("val")))
            value = re.sub(r"^to\s+", "", value)
            if value and not re.match(r"(?:it|this|that|with|on|at|in|out|off|over|up)\b", value):
                out.append(
                    _Claim(_owner(m.group("subj"), s.owner), "start", value.lower(), False, True)
                )
        m = _DONT.match(text)
        if m is not None:
            value = _clean(m.group("val"))
            if value:
                out.append(
                    _Claim(_owner(m.group("subj"), s.owner), "dont", value.lower(), True, False)
                )
        m = _SWITCHED.match(text)
        if m is not None:
            value, old = _clean(m.group("val")), _clean(m.group("old"))
            if value and old:
                out.append(
                    _Claim(
                        _owner(m.group("subj"), s.owner),
                        "use",
                        value.lower(),
                        False,
                        True,
                        old.lower(),
                    )
                )
        m = _STOPPED.match(text)
        if m is not None:
            value = _clean(m.group("anymore1") or m.group("anymore2") or m.group("val") or "")
            if value and len(tokenize(value)) >= 1:
                out.append(
                    _Claim(_owner(m.group("subj"), s.owner), "do", value.lower(), True, True)
                )
        return out

    def _zh(self, s: Sentence) -> list[_Claim]:
        text = re.sub(
            r"^(?:对了|其实|告诉你|好消息|更新一下|顺便说一下|现在|嗯|哦|啊)[，,！!\s]*", "", s.text
        )
        out = []
        for attribute, negated, changed, pattern in _ZH:
            m = pattern.match(text)
            if m is None:
                continue
            value = (m.group("val") or "").strip()
            if not value and not negated:
                continue
            out.append(_Claim(_owner(m.group("subj"), s.owner), attribute, value, negated, changed))
            break
        for pattern in (_ZH_ATTR, _ZH_BA):
            m = pattern.match(text)
            if m is not None:
                value = m.group("val").strip()
                changed = bool(m.groupdict().get("new")) or bool(
                    re.search("改|换|变|更新", m.group())
                )
                out.append(
                    _Claim(
                        _owner(m.group("subj"), s.owner),
                        f"my:{_attr(m.group('attr'))}",
                        value,
                        False,
                        changed,
                    )
                )
                break
        if not out or all(c.owner != s.owner for c in out):  # "公司搬到亦庄了": a thing moved
            m = _ZH_THING_CHANGED.match(text) or _ZH_THING_IS.match(text)
            if m is not None and not _ZH_EVALUATIVE.match(m.group("val")):
                changed = m.re is _ZH_THING_CHANGED
                attr = re.sub("^(?:我们的|我的|我们|我)", "", m.group("attr")) or m.group("attr")
                owner = s.owner if m.group("attr").startswith("我") else "*"
                out.append(
                    _Claim(owner, f"the:{_attr(attr)}", m.group("val").strip(), False, changed)
                )
        m = _ZH_SWITCHED.match(text)
        if m is not None and m.group("old"):
            out.append(
                _Claim(
                    _owner(m.group("subj"), s.owner),
                    "use",
                    m.group("val").strip(),
                    False,
                    True,
                    m.group("old").strip(),
                )
            )
        m = _ZH_STOPPED.match(text)
        if m is not None and (_ZH_BARE_VERB.fullmatch(m.group("val")) or "也" in text[:4]):
            m = None  # "我也不喜欢", "我不知道": an answer, not a habit that stopped
        if m is not None and not out:
            # "我不看书了" says it changed; "我不喜欢看书" how it is (a restart meets it)
            said = bool(re.search("不再|已经不|再也不|戒", m.group())) or m.group().endswith("了")
            owner = _owner(m.group("subj"), s.owner)
            out.append(_Claim(owner, "do" if said else "dont", m.group("val"), True, said))
        m = _ZH_REPLACED.match(text)
        if m is not None and not _ZH_BA.match(text):
            owner = _owner(m.group("subj"), s.owner)
            value, old = m.group("val").strip(), m.group("old").strip()
            out.append(_Claim(owner, "replace", value, False, True, old))
        m = _ZH_STARTED.match(text)
        if m is not None:
            out.append(
                _Claim(_owner(m.group("subj"), s.owner), "start", m.group("val"), False, True)
            )
        return out

    def frames(self, text: str) -> list[Frame]:
        """The plain states and changes of a text (`engine.memory.judge_frames`, cached)."""
        found = self._frames.get(text)
        if found is None:
            if len(self._frames) > self._size:
                self._frames.clear()
            _, sentences = self.claims(text)
            found = self._frames[text] = [f for s in sentences for f in frames(s)]
        return found

    def tallies(self, text: str) -> list[Tally]:
        """The first-person counts of a text (`engine.memory.tallies`, cached)."""
        found = self._tallies.get(text)
        if found is None:
            if len(self._tallies) > self._size:
                self._tallies.clear()
            found = self._tallies[text] = tallies(text)
        return found

    def keys(self, text: str) -> frozenset[str]:
        """``owner|attribute`` pairs the text claims: older memories sharing one are candidates
        even without a shared word (``I live in Berlin`` / ``I moved to Paris``)."""
        claims, sentences = self.claims(text)
        owner = sentences[0].owner if sentences else ""
        return (
            frozenset(
                f"{c.owner}|{c.attribute}"
                for c in claims
                if c.attribute not in {"do", "use", "pref", "start", "dont", "replace"}
            )
            | {f"{t.owner}|tally:{t.noun}" for t in self.tallies(text)}
            | {f"{t.owner}|tally:*" for t in self.tallies(text)}  # "down to 188" meets any
            | frame_keys(owner, self.frames(text), sentences)
        )

    # -- judging ---------------------------------------------------------------------------
    def judge(self, pairs: Sequence[tuple[str, str]]) -> list[Judgement]:
        """Judge each ``(older, newer)`` pair (cached)."""
        out = []
        for pair in pairs:
            found = self._cache.get(pair)
            if found is None:
                found = self._one(*pair)
                self._cache.put(pair, found)
            out.append(found)
        return out

    def _one(self, old_text: str, new_text: str) -> Judgement:
        found = self._claimed(old_text, new_text)
        if found.contradicts:
            return found
        hit = restated(self.tallies(old_text), self.tallies(new_text))
        if hit is None:
            _, old_sentences = self.claims(old_text)
            framed = judge_frames(old_sentences, self.frames(new_text), self.frames(old_text))
            if framed is None:
                return NO
            return Judgement(True, 0.8, framed[1], framed[0])
        new = hit[1]
        was, now = (", ".join(f"{v:g}" for v in sorted(t.values)) for t in hit)
        return Judgement(True, 0.8, f"{_who(new.owner)} {new.noun} count now {now} (was {was})")

    def _claimed(self, old_text: str, new_text: str) -> Judgement:
        new_claims, _ = self.claims(new_text)
        if not new_claims:
            return NO
        old_claims, old_sentences = self.claims(old_text)
        for new in new_claims:
            for old in old_claims:
                if new.attribute == "start":
                    if (
                        old.attribute in {"do", "dont"}
                        and old.owner == new.owner
                        and _within(new.value, old.value)
                    ):
                        return Judgement(
                            True,
                            0.8,
                            f"{_who(new.owner)} started {new.value} (was: not {old.value})",
                            "negation",
                        )
                    continue
                if _base(old.attribute) != _base(new.attribute):
                    continue
                if old.owner != new.owner and not (
                    new.attribute.startswith(("the:", "my:")) and "*" in (old.owner, new.owner)
                ):
                    continue
                if new.attribute in {"do", "use"}:
                    continue
                if new.attribute == "pref":
                    if (
                        new.changed
                        and old.negated != new.negated
                        and _overlaps(old.value, new.value)
                    ):
                        return Judgement(
                            True,
                            0.85,
                            f"{_who(new.owner)} changed their mind about {new.value}",
                            "negation",
                        )
                    continue
                if new.attribute == "prefer" or new.attribute.startswith("count:"):
                    if not new.changed:
                        continue  # "I prefer tea" / "I prefer coffee": contexts, not a change
                if new.attribute.startswith("count:") and not new.changed:
                    continue
                if old.negated:
                    continue
                if new.negated:
                    if not new.value or _overlaps(old.value, new.value):
                        shown = f" {old.value}" if old.value else ""
                        return Judgement(
                            True,
                            0.85,
                            f"{_who(new.owner)} no longer: {new.attribute}{shown}",
                            "negation",
                        )
                    continue
                if not new.changed and _restates(old.value, new_text):
                    continue  # "I moved to Lisbon" / "I live in Alfama, the old part of lisbon"
                promoted = new.changed and _base(new.attribute) == "job"
                if _overlaps(old.value, new.value) and not (promoted and old.value != new.value):
                    continue  # "Boston" / "Boston, MA"; but "engineer" -> "senior engineer" is new
                if new.attribute.startswith("the:") and not new.changed:
                    continue  # "the X is A" then "the X is B": two descriptions, not a change
                label = new.attribute.removeprefix("my:").removeprefix("the:")
                confidence = 0.9 if new.changed else 0.75
                return Judgement(
                    True,
                    confidence,
                    f"{_who(new.owner)} {label} changed: '{old.value}' -> '{new.value}'",
                )
            if new.attribute in {"do", "use", "replace"}:
                target = new.value if new.attribute == "do" else new.old
                for s in old_sentences:
                    if s.owner != new.owner or s.hedged or _negated(s.text):
                        continue
                    if not _first_person(s.text, new.owner):
                        continue
                    if new.attribute == "replace" and not _POSSESSED.search(s.text):
                        continue  # "I need a laptop bag": no laptop of theirs to replace
                    if _contains(s.text, target):
                        verb = "stopped" if new.attribute == "do" else f"switched to {new.value}"
                        return Judgement(
                            True,
                            0.85,
                            f"{_who(new.owner)} {verb}: was '{target}'",
                            "negation" if new.attribute == "do" else "update",
                        )
        return NO


def _places(text: str, speaker: str) -> list[_Claim]:
    """Where the text says a thing is (``the:place of <thing>``), or that it was moved."""
    moved = _MOVED_OBJECT.match(text)
    m = moved or _WHERE.match(text)
    if m is None:
        return []
    attr = (m.groupdict().get("attr") or m.groupdict().get("attr2") or "").lower()
    det = m.groupdict().get("det") or m.groupdict().get("det2") or m.groupdict().get("subj") or ""
    value = _clean(_PLACE_WORDS.sub("", m.group("val") or m.groupdict().get("val2") or ""))
    if not attr or not value or _NOT_ATTRIBUTE.intersection(attr.split()):
        return []
    thing = re.sub(r"^(?:old|new|favou?rite)\s+", "", attr)
    owner = _owner(det, speaker)
    return [_Claim(owner, f"the:place of {thing}", value.lower(), False, moved is not None)]


def _records(text: str, speaker: str) -> list[_Claim]:
    """A first-person personal best with its event and value (``the:record <event>``)."""
    m = _RECORD.search(text)
    if m is None or not _RECORD_OWNER.match(text[: m.end()]):
        return []  # "My friend set a new personal best": someone else's record
    value = _RECORD_VALUE.search(text, m.end())
    events = list(_EVENT.finditer(text))
    if value is None or not events:
        return []
    # the event named nearest the record ("training for a triathlon … a 5K with a personal best")
    event = min(events, key=lambda e: min(abs(e.start() - m.end()), abs(m.start() - e.end())))
    name = re.sub(r"\s+", "", event.group("event").lower()).replace("-", "")
    name = re.sub(r"(?<=\d)(?:km|k)$", "k", name)
    changed = bool(_RECORD_NEW.search(text))
    shown = _duration(re.sub(r"\s+", " ", value.group("val").lower()))
    return [_Claim(speaker, f"the:record {name}", shown, False, changed)]


def _duration(value: str) -> str:
    """A time in one spelling (``27:45``, ``27 minutes and 45 seconds`` -> ``27:45``), so a
    record restated in other words is the same record."""
    if re.fullmatch(r"\d{1,2}(?::\d\d){1,2}", value):
        parts = [int(p) for p in value.split(":")]
    else:
        units = {"h": 0, "m": 0, "s": 0}
        found = re.findall(r"(\d+)\s*(hours?|hrs?|minutes?|mins?|seconds?|secs?)", value)
        if not found or re.search(r"kg|kilo|lb|pound|point|km|mile", value):
            return value
        for number, unit in found:
            units[unit[0]] = int(number)
        parts = [units["h"], units["m"], units["s"]] if units["h"] else [units["m"], units["s"]]
    return ":".join([str(parts[0])] + [f"{p:02d}" for p in parts[1:]])


def _base(attribute: str) -> str:
    """``my:budget`` and ``the:budget`` name one attribute."""
    return attribute.removeprefix("my:").removeprefix("the:")


def _attr(label: str) -> str:
    """One name per personal attribute (``phone number``, ``number``, ``cell`` -> ``phone``)."""
    label = re.sub(r"\s+", " ", label.lower()).replace("favourite", "favorite")
    if re.fullmatch(r"(?:(?:phone|mobile|cell|work|home) )?(?:number|phone)", label):
        return "phone"
    if re.fullmatch(r"e-?mail(?: address)?", label):
        return "email"
    if re.fullmatch(r"手机号码?|电话号码?|电话|号码", label):
        return "phone"
    found = re.fullmatch(
        r"(?P<head>[a-z]+) (?:with|for|of|at) (?:the |my |our )?(?P<mod>[a-z]+)", label
    )
    if found:  # "the meeting with the contractor" is "the contractor meeting"
        label = f"{found.group('mod')} {found.group('head')}"
    if label in {"job title", "职位", "职务"}:
        return "job"  # "my job title is …" and "I was promoted to …" state one attribute
    return label


def _restates(value: str, text: str) -> bool:
    """The newer text names the older value itself, not as what was left (``… of lisbon``, but
    not ``moved from Lisbon``): a refinement, not a change."""
    if not value or len(value) < 3:
        return False
    found = re.search(rf"(?<![\w])(?P<before>\w+\s+)?{re.escape(value)}(?![\w])", text.lower())
    return found is not None and (found.group("before") or "").strip() not in {
        "from",
        "left",
        "leaving",
        "quit",
        "was",
        "not",
        "从",
        "离开",
    }


def _who(owner: str) -> str:
    return {"": "the user", "*": "the"}.get(owner, owner.title())


def _terms(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


def _overlaps(a: str, b: str) -> bool:
    """Same value, or one refines the other (``Boston`` / ``Boston, MA``)."""
    if re.search(f"[{HAN}]", a + b):
        x, y = _ZH_PLAIN.sub("", a.replace(" ", "")), _ZH_PLAIN.sub("", b.replace(" ", ""))
        return bool(x) and bool(y) and (x in y or y in x)
    if _EXACT.fullmatch(a.strip()) or _EXACT.fullmatch(b.strip()):
        return a.strip(" .").lower() == b.strip(" .").lower()  # an email, a number, an id
    ta, tb = _terms(a), _terms(b)
    if not ta or not tb:
        return a.strip().lower() == b.strip().lower()
    return ta <= tb or tb <= ta


_POSSESSED = re.compile(
    r"\b(?:my|our|i\s+(?:have|own|drive|ride|use|bought|got)|i've\s+(?:got|had|been\s+using)|"
    r"we\s+(?:have|own|use|bought|got))\b|我的|我们的|我(?:有|用|开|骑|买了)",
    re.I,
)


# A value said as one token with a digit or an @ (an email, a phone number, a handle): two of
# them are the same value only when they are equal.
_EXACT = re.compile(r"(?=\S*[@\d])[\w.+@-]*[@\d][\w.+@-]*")
# Measure words and degree words: "一家很小的公司" and "一家小公司" are one value.
_ZH_PLAIN = re.compile(r"[一这那每][家个所间位台辆]|很|非常|特别|挺|的")
_ZH_BARE_VERB = re.compile(r"喜欢|知道|认识|是|想|要|会|能|行|对|记得|清楚|懂|明白|确定|在意|介意")


def _within(phrase: str, whole: str) -> bool:
    """Every word of ``phrase`` is in ``whole`` (``running`` in ``run on Sundays``)."""
    if re.search(f"[{HAN}]", phrase + whole):
        x, y = phrase.replace(" ", ""), whole.replace(" ", "")
        return bool(x) and x in y
    need = _terms(phrase)
    return bool(need) and need <= _terms(whole)


def _contains(sentence: str, phrase: str) -> bool:
    if re.search(f"[{HAN}]", phrase):
        return phrase.replace(" ", "") in sentence.replace(" ", "")
    need = _terms(phrase)
    return bool(need) and need <= _terms(sentence)


def _negated(text: str) -> bool:
    return bool(
        re.search(r"\b(?:not|never|no longer|don't|doesn't|didn't|won't|can't)\b|n't\b", text, re.I)
        or re.search(r"不|没|别", text)
    )


def _first_person(text: str, owner: str) -> bool:
    if re.search(r"\b(?:i|i'm|i've|we|my|our)\b", text, re.I) or "我" in text:
        return True
    return bool(owner) and owner in text.lower()
