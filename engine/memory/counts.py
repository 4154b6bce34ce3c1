"""Counts the owner keeps, for the rules judge (`engine.memory.rules`): `tallies` finds them in a
memory, `restated` tells when a newer memory says the same count again with a new value that is
current. English and Chinese; pure code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.memory.surface import (
    HAN,
    HEDGE_EN,
    HEDGE_ZH,
    QUESTION_EN,
    QUESTION_ZH,
    QUOTED,
    SENTENCE,
    prose_lines,
)
from engine.memory.tokenize import tokenize

# A count the owner keeps, restated with a new value: "I've completed 4 projects since starting
# painting classes" ... "I just finished my 5th project"; "I'm on page 200" ... "I'm now on page
# 220"; "我已经读了3本书" ... "我现在已经读了5本书". Both first-person, same owner, no plan, goal or
# question, not about someone else ("my brother …"); the newer one says the count is current
# ("now", "so far", "this month", "that makes", "just hit", "现在", "已经", "一共" …) or corrects
# it; both count the same noun (the words after the number, "ones" the last plural before it, a
# count after its noun: "to-watch list, currently 25"); the same subject (no two disjoint sets of
# names, a shared name or two shared content words, or all the content words one of them has);
# other values. Events ("I caught 7 bass on 7/10"), dates, years, percentages and money are no
# counts.

_WORDS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten "
                                       "eleven twelve thirteen fourteen fifteen sixteen seventeen "
                                       "eighteen nineteen twenty".split())}
_ORDINALS = {w: i for i, w in enumerate("zeroth first second third fourth fifth sixth seventh "
                                        "eighth ninth tenth".split()) if i}
_NUMBER = (
    r"(?P<num>\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)(?P<ord>st|nd|rd|th)?"
    rf"|(?P<word>{'|'.join(_WORDS)}|{'|'.join(_ORDINALS)})"
)
_COUNT_EN = re.compile(
    rf"(?<![\w$£€/:.#-])(?:{_NUMBER})(?![\w%/:-]|\.\d)"
    r"(?P<np>(?:\s+of\s+(?:my|our|[A-Za-z]+'s))?"
    r"(?:\s+(?!(?:of|to|in|on|at|and|or|for|by|with|from|as|that|which|who|since|so|"
    r"now|than|per|a|an|the|is|are|was|were|i|we|it|they|this|these)\b)[A-Za-z][\w&'-]*){1,3})",
    re.I)
_ANAPHOR = re.compile(rf"(?<![\w$£€/:.#-])(?:{_NUMBER})\s+(?:(?:new|more|different|other)\s+)?"
                      r"(?:ones|of them)\b", re.I)
# A count said after its noun: "titles on my to-watch list, currently 25", "followers, now at 600".
_BARE_NOW = re.compile(
    rf"(?<![\w'])(?:currently|now|right now|so far|to date|in total)(?:\s+(?:at|up\s+to))?\s+"
    rf"(?:{_NUMBER})(?=\s*(?:$|[,.;!)]|(?:and|but|which|so)\b))", re.I)
_PLURAL = re.compile(r"\b([a-z]{2,}[^s'\W]s)\b")
_NOT_PLURAL = frozenset(
    "this his was has its yes always perhaps towards afterwards sometimes various previous thanks "
    "unless does goes makes takes gets looks seems means ones sounds works comes feels lots "
    "minutes hours days weeks months years times".split()
)
# "twice a week" is a count of times, like "three times a week"
_TIMES = {"once": 1.0, "twice": 2.0, "thrice": 3.0}
_TIMES_A = re.compile(r"\b(once|twice|thrice)\s+(?:a|per|every|each)\s+(?:day|week|month|year)\b",
                      re.I)
_ONE_UNIT = re.compile(r"\b(?:a|an|one)\s+(?P<noun>day|week|month|year)\b", re.I)
_COUNTED = re.compile(r"\b(?P<noun>[a-z]+)\s+count\s+(?:is\s+|to\s+|at\s+|of\s+)?(?:now\s+)?"
                      r"(?P<num>\d[\d,]*)\b", re.I)
_PAGE_EN = re.compile(r"\b(?P<noun>page|level|chapter|episode|lesson|season|volume)\s+"
                      r"(?P<num>\d+)\b(?!\s*[%/:])", re.I)
_FILLER = frozenset("new more different other additional whole full total such free old recent "
                    "last great good big small".split())
_NOT_NOUN = frozenset(
    "am pm percent hundred thousand million billion dollars bucks euros pounds cents yuan "
    "o'clock jan feb mar apr may jun jul aug sep sept oct nov dec january february march april "
    "june july august september october november december monday tuesday wednesday thursday "
    "friday saturday sunday ones them those years-old ago before after later earlier".split()
)
_NOW_EN = re.compile(
    r"\b(?:now|so far|currently|right now|at the moment|at this point|to date|in total|already|"
    r"since|these days|total|(?:in|over|during) the (?:past|last) (?:\w+ )?(?:days?|weeks?|months?|"
    r"years?)|this (?:week|month|year)|(?:increased|upped|raised|bumped|boosted|grown|grew|"
    r"reduced|cut|lowered|dropped|brought)(?:\s+[\w'-]+){0,3}\s+(?:up\s+|down\s+)?to"
    r"|(?:that|this|which|it)\s+makes|bringing\s+(?:my|our|the|it)(?:\s+\w+){0,2}\s+to|"
    r"for\s+a\s+total\s+of|and\s+counting|"
    r"(?:i'm|i\s+am|we're|we\s+are)\s+(?:now\s+)?(?:at|up\s+to|down\s+to)(?=\s+(?:page\s+|level\s+)?\d)|"
    r"^(?:down|up)\s+to(?=\s+\d)|"
    r"(?:just|finally)\s+(?:hit|reached|crossed|passed|surpassed|got\s+to|made\s+it\s+to))\b", re.I)
_CORRECTION = re.compile(r"\b(?:actually|correct(?:ion)?|i meant)\b.*\bnot\s+\d", re.I)
_GOAL_EN = re.compile(r"\b(?:need|needs|needed|aim|aiming|goal|target|determined|trying to|"
                      r"try to|to reach|to hit|to get to|hoping)\b", re.I)
_FIRST_EN = re.compile(r"\b(?:i|i'm|i've|we|we've|we're|my|our)\b", re.I)
_COUNT_CLAUSE = re.compile(
    r",\s+(?:and|but|so|which|while)\s+|\s+(?:-|—|–)\s+|;\s*|,\s+(?=i\b)|\s+and\s+(?=i\b|i'll\b)"
    r"|,\s+(?=(?:what|who|where|when|why|how|which|do|does|did|can|could|would|will|should|is|"
    r"are|any)\b)"
    r"|,\s+(?-i:(?=[A-Z][a-z]+\s+(?:is|was|'s)\b))",  # "…4 marathons so far, Boston is the dream"
    re.I,
)
_YOU = re.compile(r"\byou\b", re.I)
_PERSON = (
    r"(?:mom|mum|dad|mother|father|parents?|brother|sister|siblings?|wife|husband|partner|spouse|"
    r"friends?|son|daughter|kids?|children|child|boss|manager|colleagues?|co-?workers?|"
    r"neighbou?rs?|cousins?|uncle|aunt|grand(?:ma|pa|mother|father|parents?)|room-?mates?|"
    r"boyfriend|girlfriend|fianc[eé]e?|team-?mates?|classmates?|mentor|coach|doctor)"
)
_THIRD_EN = re.compile(
    r"^\W*(?:(?:by the way|also|and|but|so|oh|well|btw)[\s,]+)*"
    rf"(?:(?:my|our)\s+(?:[a-z'-]+\s+){{0,2}}?{_PERSON}\b|(?:he|she|they)\b)", re.I)
_SELF_EN = re.compile(r"\b(?:i|i'm|i've|we|we've|we're)\b", re.I)
_CAPITAL = re.compile(r"(?<![\w'])([A-Z][\w&'-]*|[a-z]+[A-Z][\w-]*)")
_NOT_NAME = frozenset("I I'm I've I'd I'll By So But And Also Oh Well Speaking Actually The "
                      "This That It My We Our Since Anyway".split())
_GENERIC = frozenset(
    "way got get realli pretti feel alreadi total just like lot also actual thing much mani "
    "great good new sinc now current right far keep track well still even speak one "
    # units and "go": "yoga twice a week" and "the gym three times a week" share no subject
    "go goe went day week month year time hour minut everi".split()
)
_ZH_DIGITS = {c: i for i, c in enumerate("零一二三四五六七八九十")} | {"两": 2}
_COUNT_ZH = re.compile(
    rf"(?P<num>\d+|[零一二两三四五六七八九十]+)\s*(?P<cls>公斤|[个本次篇页首部件只位名门家张道条口辆台套双支头匹块杯瓶份斤])"
    rf"(?P<noun>[{HAN}]{{0,2}})"
)
_PAGE_ZH = re.compile(r"第\s*(?P<num>\d+|[一二三四五六七八九十]+)\s*(?P<noun>[页章集级课])")
_NOW_ZH = re.compile(r"现在|目前|已经|一共|总共|累计|至今|为止")
_GOAL_ZH = re.compile(r"需要|目标|争取|达到")
_FIRST_ZH = re.compile(r"我|咱")
_OTHER_ZH = re.compile(r"他|她|你|它|您|[爸妈哥姐弟妹]|老公|老婆|朋友|同事|邻居|孩子|儿子|女儿|"
                       r"家人")
_CLAUSE_ZH = re.compile(r"[，,；;]")


@dataclass(frozen=True)
class Tally:
    """A count: its owner, noun and values; whether it is said as current (``now``, ``已经`` …);
    the content words of its statement and of the part carrying the count (``that's my 5th
    marathon now``; None when not known), the noun and numbers left out; capitalised names."""

    owner: str
    noun: str
    values: frozenset[float]
    current: bool
    terms: frozenset[str]
    names: frozenset[str]
    own: frozenset[str] | None = None


def _value(num: str | None, word: str | None) -> float | None:
    if num:
        return float(num.replace(",", "")) if re.fullmatch(r"[\d,]*\.?\d+", num) else None
    found = _WORDS.get((word or "").lower(), _ORDINALS.get((word or "").lower()))
    return None if found is None else float(found)


def _zh_value(num: str) -> float | None:
    if num.isdigit():
        return float(num)
    if not all(c in _ZH_DIGITS for c in num) or len(num) > 3:
        return None
    if len(num) == 1:
        return float(_ZH_DIGITS[num])
    if num[0] == "十":
        return 10.0 + _ZH_DIGITS[num[1]]
    if num[1] == "十":
        return _ZH_DIGITS[num[0]] * 10.0 + (_ZH_DIGITS[num[2]] if len(num) == 3 else 0)
    return None


def _singular(noun: str) -> str:
    """The singular of a counted noun (``species`` stays, ``parties`` -> ``party``)."""
    n = noun.lower()
    if n in {"species", "series", "people", "news"} or n.endswith(("ss", "us", "is")):
        return n
    if n.endswith("ies") and len(n) > 4:
        return n[:-3] + "y"
    if n.endswith(("ches", "shes", "xes")):
        return n[:-2]
    return n[:-1] if n.endswith("s") and len(n) > 3 else n


_NUMBER_WORDS = frozenset(tokenize(" ".join([*_WORDS, *_ORDINALS, *_TIMES])))


def _content(text: str) -> frozenset[str]:
    """Content words: no numbers (in digits or words), no generic words."""
    return frozenset(t for t in tokenize(text) if not re.fullmatch(r"[\d.,:/]+", t)
                     and t not in _GENERIC and t not in _NUMBER_WORDS)


def _count_clauses(sentence: str, zh: bool) -> list[str]:
    """The statement clauses of a sentence: in a question, those before the question starts."""
    parts = [c for c in (_CLAUSE_ZH if zh else _COUNT_CLAUSE).split(sentence) if c.strip()]
    if not sentence.rstrip().endswith(("?", "？")):
        return parts
    out = []
    for c in parts[:-1]:  # the last clause carries the question mark: it is the question
        c = c.strip()
        if QUESTION_ZH.search(c) if zh else (QUESTION_EN.match(c) or _YOU.search(c)):
            break
        out.append(c)
    return out


def _antecedent(before: str) -> str | None:
    """The thing "ones" / "of them" counts: the last plural noun said before it."""
    found = [w for w in _PLURAL.findall(before.lower()) if w not in _NOT_PLURAL]
    return _singular(found[-1]) if found else None


def _hits_en(clause: str, before: str) -> list[tuple[str, float | None]]:
    hits: list[tuple[str, float | None]] = []
    for m in _ANAPHOR.finditer(clause):
        noun = _antecedent(before + " " + clause[: m.start()])
        if noun:
            hits.append((noun, _value(m.group("num"), m.group("word"))))
    for m in _BARE_NOW.finditer(clause):
        noun = _antecedent(clause[: m.start()])  # the noun of this clause, not an earlier one
        if noun:
            hits.append((noun, _value(m.group("num"), m.group("word"))))
    for m in _COUNT_EN.finditer(clause):
        if re.fullmatch(r"(?:19|20)\d\d", m.group("num") or ""):
            continue  # a year
        value = _value(m.group("num"), m.group("word"))
        for word in m.group("np").split():
            word = word.lower().strip("'")
            if word in {"of", "my", "our"} or word.endswith("'s"):
                continue
            if word in _NOT_NOUN:
                break
            if word not in _FILLER:
                hits.append((_singular(word), value))
    for pattern in (_PAGE_EN, _COUNTED):
        hits += [(_singular(m.group("noun")), _value(m.group("num"), None))
                 for m in pattern.finditer(clause)]
    hits += [(m.group("noun").lower(), 1.0) for m in _ONE_UNIT.finditer(clause)]
    hits += [("time", _TIMES[m.group(1).lower()]) for m in _TIMES_A.finditer(clause)]
    hits += [("*", _value(m.group("num"), None)) for m in _UPDOWN_EN.finditer(clause)]
    return hits


# A count said with no noun, going up or down: "down to 188", "I'm down to 9", "瘦到126了". It
# restates the one count of the older memory ("I weigh 210 lbs"), whatever its noun.
_UPDOWN_EN = re.compile(
    r"(?:^|\b(?:i'm|i\s+am|we're|we\s+are)\s+)(?:now\s+)?(?:down|up|back)\s+to\s+"
    r"(?P<num>\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)"
    r"(?![\w%/:.,-]|\s+(?!(?:now|today|already|so far)\b)[a-z])", re.I)
_UPDOWN_ZH = re.compile(r"(?:瘦到|胖到|涨到|降到|减到|长到|升到)(?P<num>\d+)"
                        r"(?![\d个本次篇页首部件只位名门家张道条口辆台套双支头匹块杯瓶份])")


def _hits_zh(clause: str) -> list[tuple[str, float | None]]:
    hits = [  # "三只猫了": the particle is no part of the noun; "三只" alone names nothing
        (m.group("cls") + m.group("noun").rstrip("了的啦呢吗吧"), _zh_value(m.group("num")))
        for m in _COUNT_ZH.finditer(clause)
        if m.group("noun").rstrip("了的啦呢吗吧") or m.group("cls") in {"斤", "公斤"}
    ]
    hits += [("*", float(m.group("num"))) for m in _UPDOWN_ZH.finditer(clause)]
    return hits + [(m.group("noun"), _zh_value(m.group("num"))) for m in _PAGE_ZH.finditer(clause)]


def tallies(text: str) -> list[Tally]:
    """The first-person counts a text states, one per (statement, counted noun)."""
    owner, lines = prose_lines(text, quotes=True)
    out: list[Tally] = []
    before = ""
    for line in lines:
        for raw in SENTENCE.split(line):
            raw = raw.strip()
            before, said = before + " " + raw, before
            zh = bool(re.search(f"[{HAN}]", raw))
            names = frozenset(m.group(1).removesuffix("'s") for m in _CAPITAL.finditer(raw)
                              if m.start() and m.group(1) not in _NOT_NAME)
            sentence = QUOTED.sub(" ", raw)
            dropped = (_UPDOWN_ZH if zh else _UPDOWN_EN).match(sentence)  # "down to 188!!"
            if not (_FIRST_ZH if zh else _FIRST_EN).search(sentence) and not dropped:
                if not zh or _OTHER_ZH.search(sentence):
                    continue  # Chinese drops the subject: "现在三只狗了" is the speaker's
            found: dict[str, tuple[set[float], bool]] = {}
            for clause in _count_clauses(sentence, zh):
                hedge, goal, now = (HEDGE_ZH, _GOAL_ZH, _NOW_ZH) if zh else (HEDGE_EN, _GOAL_EN,
                                                                              _NOW_EN)
                corrected = not zh and bool(_CORRECTION.search(sentence))
                if hedge.search(clause) or (goal.search(clause) and not corrected):
                    continue
                if not zh and _THIRD_EN.match(clause) and not _SELF_EN.search(clause):
                    continue  # "my brother keeps 25 titles on his list": his count, not mine
                current = corrected or bool(now.search(clause))
                hits = _hits_zh(clause) if zh else _hits_en(clause, said)
                said += " " + clause
                for noun, value in hits:
                    if value is None:
                        continue
                    values, was = found.setdefault(noun, (set(), False))
                    values.add(value)
                    found[noun] = (values, was or current)
            if not found:
                continue
            terms = _content(sentence)
            for noun, (values, current) in found.items():
                rest_terms = terms - _content(noun)
                own = _own_content(sentence, noun, values, zh)
                out.append(Tally(owner, noun, frozenset(values), current, rest_terms, names, own))
    return out


# Nouns too general to be one count when nothing else is said ("it's been 3 months now").
_BARE_NOT = frozenset("time day week month year hour minute second page".split())
_NOW_TERMS = frozenset("现在 目前 已经 一共 总共 累计 至今 有 我们 了 up down".split())


def _bare(terms: frozenset[str]) -> frozenset[str]:
    """Terms other than "now" words and counted classifiers (``三只``)."""
    return frozenset(t for t in terms if t not in _NOW_TERMS and t not in {"st", "nd", "rd", "th"}
                     and not re.match(r"[\d零一二两三四五六七八九十]", t))  # "5th", "三只"


def _own_content(sentence: str, noun: str, values: set[float], zh: bool) -> frozenset[str] | None:
    """The content words of the comma-delimited part that says the count, noun left out."""
    if zh:
        for part in _CLAUSE_ZH.split(sentence):
            if noun != "*" and noun in part:
                return frozenset(t for t in _content(part) if t not in noun)
        return None
    stem = noun.rstrip("s")[:5]
    for part in re.split(r"[,;:!?()]|\s+[-–—]\s+", sentence):
        low = part.lower()
        if (noun == "*" or stem in low) and re.search(r"\d|\b(?:" + "|".join(_WORDS) + r")\b", low):
            return _content(part) - _content(noun)
    return None


def restated(old: list[Tally], new: list[Tally]) -> tuple[Tally, Tally] | None:
    """The (old, new) tallies when the newer memory restates a count with a new value."""
    for n in new:
        if not n.current and n.noun != "*":
            continue
        if n.noun == "*":  # "down to 188": the older memory's one count
            counts = {o.values for o in old}
            if len(counts) == 1 and counts != {frozenset({1.0})}:  # not "一辆", "a week"
                o = old[0]
                if o.owner == n.owner and not o.values & n.values:
                    return o, n
            continue
        for o in old:
            if o.owner != n.owner or o.noun != n.noun or o.values & n.values:
                continue
            if o.names and n.names and not o.names & n.names:
                continue  # "three courses on Coursera" / "two courses on edX"
            shared = o.terms & n.terms
            if o.names & n.names or len(shared) >= 2:
                return o, n
            if shared and (shared == o.terms or shared == n.terms):
                return o, n  # "I go to yoga twice a week" / "now three times a week": all it says
            bare = n.own if n.own is not None else n.terms
            if not _bare(bare) and n.noun not in _BARE_NOT:
                return o, n  # "I weigh 92 kg" / "I'm down to 84 kg now": the count, nothing else
    return None
