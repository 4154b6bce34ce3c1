"""Statements clause by clause, for the rules judge (`engine.memory.rules`) and its counts
(`engine.memory.counts`): each clause with a dropped subject put back (``traded in the civic``,
``钢琴放弃了``), and whether a sentence opens as a correction (``sorry, I got that wrong``,
``更正一下``), which states a change. English and Chinese; pure code.
"""

from __future__ import annotations

import re

from engine.memory.surface import BEEN_GOING, HAN, HEDGE_EN, HEDGE_ZH, TELLING_YOU_ZH, Sentence


def has_han(text: str) -> bool:
    return bool(re.search(f"[{HAN}]", text))


_FIRST = r"(?:I|I'm|I've|I'd|we|We|we're|We're|we've|We've|my|My|our|Our)"
_SPLIT_EN = re.compile(
    rf"(,\s*(?:and|but|so|then)\s+|;\s*|\s+[-–—]+\s+|,\s+(?={_FIRST}\b)|\s+(?:and|but|so)\s+(?={_FIRST}\b)"
    r"|(?:,|\s+and)\s+(?=(?:traded|dropped|cancell?ed|switched|upgraded|moved|migrated|sold|quit|"
    r"got|lost|stopped|started|left|joined|deleted|closed|bought|ditched|replaced|swapped|not)\b)"
    r"|,\s+(?=[\w'-]+(?:\s+[\w'-]+)?(?:\s+is|'s|\s+was|\s+got)\s))"
)
# Sentence openers that make the rest a correction or an update ("Sorry, I got that wrong, …").
CORRECTION_EN = re.compile(
    r"^(?:(?:sorry|oops|my bad|correction|scratch that|wait|no|actually|update|to be clear|"
    r"to clarify|just to clarify|let me correct (?:that|myself)|i (?:got|had) (?:that|it) wrong|"
    r"i was wrong|i misspoke|i meant|i mean)\b[\s,!:.-]*)+", re.IGNORECASE)
_SPLIT_ZH = re.compile(rf"[，,；;、]|(?<=[{HAN}])\s+(?=[{HAN}])|然后|而且|但是|不过|所以")
_ZH_LEAD = re.compile(
    r"^(?:对了|其实|告诉你|跟你说一下|跟你说|和你说一下|说一声|好消息|更新一下|更正一下|更正|说错了|不对|"
    r"顺便说一下|嗯|哦|啊)+")
_ZH_SUBJECT = re.compile(rf"^(?:我们|我|咱们|[{HAN}]{{2,3}}(?:的|和|跟))")
# A clause that starts with its verb says what the speaker did (``traded in the civic``,
# ``not doing keto anymore``, ``down to 188``): chat drops the "I".
_DROPPED_I = re.compile(
    r"^(?=(?:traded|dropped|cancell?ed|switched|upgraded|downgraded|moved|migrated|sold|quit|got|"
    r"lost|stopped|started|left|joined|converted|changed|gave|deleted|closed|bought|ditched|"
    r"dumped|replaced|swapped|rehomed|retired|adopted|finally|just|recently|officially|"
    r"no longer|relocated|transferred|broke up|split up|unsubscribed|given up|gave up)\b)"
    r"|^(?P<be>(?=(?:not|no longer|down to|up to|back to|using|doing|living|working|based)\b))"
    r"|^(?P<have>(?=been\b))", re.IGNORECASE)
# A short reply to a question ("不喜欢", "不认识", "没有啊") answers it: no statement of its own.
_ZH_REPLY = re.compile(
    rf"^(?:[{HAN}]{{0,3}}|(?:不|没|没有)(?:太|怎么|很)?(?:喜欢|认识|知道|是|想|要|会|能|行|对|用|错|好|记得|清楚|去|有)"
    r"[啊呀哦吧呢的了!！。.~]*)$")
_ZH_DROPPED = re.compile(r"^(?:不再?|没再|已经|现在|改|换|搬|跳槽|辞|离开|戒|刚|从|开始|又)")
_CONDITION = re.compile(r"\b(?:if|unless|in case|whenever|as soon as)\b|如果|要是|假如|万一|的话",
                        re.I)
# A predicate that needs two people ("… sam and I broke up"): the "I" after "and" is the second
# half of one subject, so the clause keeps the hedge of what comes before it.
_RECIPROCAL = re.compile(
    r"(?:I|i)\s+(?:(?:finally|just|officially|recently)\s+)?(?:broke up|split(?: up)?|separated|"
    r"divorced|got (?:married|engaged|divorced|back together)|are (?:dating|together|engaged|"
    r"married|done|over|through)|have been (?:dating|together|married)|moved in together|met|"
    r"ended (?:it|things)|called it quits)\b")


def corrected(s: Sentence) -> bool:
    """Whether the statement opens as a correction or an update (``sorry, I got that wrong``,
    ``actually``, ``更正一下``): what it states replaces what was said."""
    if has_han(s.text):
        return bool(re.match(r"(?:更正|说错了|不对|纠正)", s.text))
    return bool(CORRECTION_EN.match(s.text))


def _en_clause(p: str) -> str:
    p = re.sub(r"\b(?:i|im|ive|i'm|i've|i'll|i'd)\b",  # "i've" -> "I've", "im" -> "I'm"
               lambda m: {"im": "I'm", "ive": "I've"}.get(m[0].lower(), "I" + m[0][1:]), p)
    p = re.sub(
        r"^(?:(?:so|well|oh|ok|okay|yeah|yes|and|but|anyway|btw|by the way|just so you know|"
        r"fyi|guess what|heads up|honestly|update|ugh|lol)\b[\s,!:.-]*)+", "", p, flags=re.I)
    m = _DROPPED_I.match(p)
    if m is not None:
        p = ("I'm " if m.group("be") is not None else "I've " if m.group("have") is not None
             else "I ") + p
    return p


def clauses(s: Sentence) -> list[str]:
    """The clauses of a statement, leads stripped; a clause without a subject takes the
    speaker's (``我换号了，新号码是…`` -> ``我的新号码是…``, ``traded in the civic`` -> ``I traded
    in the civic``)."""
    if has_han(s.text):
        parts = [p.strip() for p in _SPLIT_ZH.split(s.text) if p.strip()]
        first = bool(parts) and parts[0].lstrip("对了其实嗯哦啊").startswith("我")
        said: list[str] = []
        for p in parts:
            p = _ZH_LEAD.sub("", p)
            if not _ZH_SUBJECT.match(p) and not re.match(r"[他她它你这那]", p):
                if first and said and p.startswith("新"):
                    p = "我的" + p
                elif (first and said) or (_ZH_DROPPED.match(p) and not _ZH_REPLY.match(p)):
                    p = "我" + p
            said.append(p)
        return [p for p in said if p]
    parts = _SPLIT_EN.split(CORRECTION_EN.sub("", s.text))
    out: list[str] = []
    for i in range(0, len(parts), 2):
        p = parts[i].strip(" ,")
        if not p:
            continue
        joined = (i and parts[i - 1].strip() == "and" and out and re.match(r"(?:I|i|me)\b", p)
                  and (len(out[-1].split()) < 3 or (_RECIPROCAL.match(p) and HEDGE_EN.search(
                      BEEN_GOING.sub(" ", out[-1])))))
        if joined:  # "Emma and I broke up": one clause
            out[-1] = f"{out[-1]} and {p}"
        else:
            out.append(_en_clause(p))
    return out


def stated_clauses(s: Sentence) -> list[str]:
    """The clauses of a statement that state something: all of them, or, in a hedged
    sentence, those without a hedge of their own ("我和阿杰分手了，不想多说" states the first).
    A condition anywhere ("if", "如果") hedges the whole sentence."""
    parts = clauses(s)
    if not s.hedged:
        return parts
    if _CONDITION.search(s.text):
        return []
    return [c for c in parts if not (HEDGE_ZH.search(TELLING_YOU_ZH.sub("", c)) if has_han(c)
                                     else HEDGE_EN.search(BEEN_GOING.sub(" ", c)))]
