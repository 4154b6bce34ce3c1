"""Plain states and their changes, as people say them: the rules judge's second reader (pure code).

`engine.memory.judge_rules` reads named attributes (where someone lives, works, their number …).
People also state a change of any habit or possession in a few general shapes, and this module
reads those, for `engine.memory.judges.RulesJudge`:

- **the same frame, said as current**: ``I drive a Focus`` … ``I drive a Kia now``, ``I go to the
  gym on Mondays`` … ``these days I go to the gym every weekday``, ``我用安卓手机`` …
  ``我现在用苹果手机了``. Both are first-person present statements with the same verb; the newer one
  carries a word that says it is the state now (``now``, ``these days``, ``nowadays``,
  ``currently``, ``现在``, ``如今``, ``目前``), and neither object contains the other's words
  (``the gym on Mondays`` / ``the gym on Mondays and Fridays`` is a refinement, not a change).
  ``also``, ``too``, ``as well``, ``another``, ``还``, ``也`` say an addition: never a change.
- **an end**: ``I sold my Focus``, ``I got rid of my Samsung``, ``we gave Max away``, ``I dropped
  out of law``, ``I cut out coffee``, ``Emma and I broke up``, ``I left Barclays``, ``我把卡罗拉卖
  了``, ``我和小美分手了``. The older memory must be a first-person present statement naming what
  ended (for things sold or given away: one the owner has, drives, uses …).
- **a switch to a thing of the same kind**: ``I switched to Apple Music`` against ``I use Spotify
  for music``, ``I moved to the day shift`` against ``I'm on the night shift``, ``I changed
  dentists`` against ``my dentist is Dr. Patel``: the head noun of what was switched to is in the
  older first-person statement, with another word before it. ``… instead of X`` names the older
  habit outright (``I bike to work now instead of taking the bus``).
- **a new number or address**: ``I got a new phone number: 0499 123 456`` against an older
  first-person sentence with another phone number (or email address).

Each sentence is read clause by clause (``Priya left, my new manager is Daniel``; Chinese clauses
without a subject take the sentence's ``我``). Only prose statements reach it
(`engine.memory.surface`): questions, quotes, plans, hypotheticals and other people's statements
(``my sister sold her car``) claim nothing; a clause with a negation or in the past with a date
(``I sold a bike at the fair last week`` is an event) is no state.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.memory.surface import BEEN_GOING, HAN, HEDGE_EN, HEDGE_ZH, TELLING_YOU_ZH, Sentence
from engine.memory.tokenize import tokenize

__all__ = [
    "Frame",
    "clauses",
    "corrected",
    "frame_keys",
    "frames",
    "judge_frames",
    "stated_clauses",
]

# -- clauses -----------------------------------------------------------------------------------

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
    r"i was wrong|i misspoke|i meant|i mean)\b[\s,!:.-]*)+",
    re.IGNORECASE,
)
_SPLIT_ZH = re.compile(rf"[，,；;、]|(?<=[{HAN}])\s+(?=[{HAN}])|然后|而且|但是|不过|所以")
_ZH_LEAD = re.compile(
    r"^(?:对了|其实|告诉你|跟你说一下|跟你说|和你说一下|说一声|好消息|更新一下|更正一下|更正|说错了|不对|"
    r"顺便说一下|嗯|哦|啊)+"
)
_ZH_SUBJECT = re.compile(rf"^(?:我们|我|咱们|[{HAN}]{{2,3}}(?:的|和|跟))")


# A clause that starts with its verb says what the speaker did (``traded in the civic``,
# ``not doing keto anymore``, ``down to 188``): chat drops the "I".
_DROPPED_I = re.compile(
    r"^(?=(?:traded|dropped|cancell?ed|switched|upgraded|downgraded|moved|migrated|sold|quit|got|"
    r"lost|stopped|started|left|joined|converted|changed|gave|deleted|closed|bought|ditched|"
    r"dumped|replaced|swapped|rehomed|retired|adopted|finally|just|recently|officially|"
    r"no longer|relocated|transferred|broke up|split up|unsubscribed|given up|gave up)\b)"
    r"|^(?P<be>(?=(?:not|no longer|down to|up to|back to|using|doing|living|working|based)\b))"
    r"|^(?P<have>(?=been\b))",
    re.IGNORECASE,
)
# A short reply to a question ("不喜欢", "不认识", "没有啊") answers it: no statement of its own.
_ZH_REPLY = re.compile(
    rf"^(?:[{HAN}]{{0,3}}|(?:不|没|没有)(?:太|怎么|很)?(?:喜欢|认识|知道|是|想|要|会|能|行|对|用|错|好|记得|清楚|去|有)"
    r"[啊呀哦吧呢的了!！。.~]*)$"
)
_ZH_DROPPED = re.compile(r"^(?:不再?|没再|已经|现在|改|换|搬|跳槽|辞|离开|戒|刚|从|开始|又)")


_CONDITION = re.compile(
    r"\b(?:if|unless|in case|whenever|as soon as)\b|如果|要是|假如|万一|的话", re.I
)


def stated_clauses(s: Sentence) -> list[str]:
    """The clauses of a statement that state something: all of them, or, in a hedged
    sentence, those without a hedge of their own ("我和阿杰分手了，不想多说" states the first).
    A condition anywhere ("if", "如果") hedges the whole sentence."""
    parts = clauses(s)
    if not s.hedged:
        return parts
    if _CONDITION.search(s.text):
        return []
    out = []
    for c in parts:
        if _zh(c):
            if not HEDGE_ZH.search(TELLING_YOU_ZH.sub("", c)):
                out.append(c)
        elif not HEDGE_EN.search(BEEN_GOING.sub(" ", c)):
            out.append(c)
    return out


def corrected(s: Sentence) -> bool:
    """Whether the statement opens as a correction or an update (``sorry, I got that wrong``,
    ``actually``, ``更正一下``): what it states replaces what was said."""
    if re.search(f"[{HAN}]", s.text):
        return bool(re.match(r"(?:更正|说错了|不对|纠正)", s.text))
    return bool(CORRECTION_EN.match(s.text))


def _en_clause(p: str) -> str:
    p = re.sub(r"\b(?:i|im|ive|i'm|i've|i'll|i'd)\b", _capital_i, p)
    p = re.sub(
        r"^(?:(?:so|well|oh|ok|okay|yeah|yes|and|but|anyway|btw|by the way|just so you know|"
        r"fyi|guess what|heads up|honestly|update|ugh|lol)\b[\s,!:.-]*)+",
        "",
        p,
        flags=re.I,
    )
    m = _DROPPED_I.match(p)
    if m is not None:
        p = (
            "I'm "
            if m.group("be") is not None
            else "I've "
            if m.group("have") is not None
            else "I "
        ) + p
    return p


# A predicate that needs two people ("… sam and I broke up"): the "I" after "and" is the second
# half of one subject, so the clause keeps the hedge of what comes before it ("people keep
# assuming sam and I broke up" reports a belief, it states no break-up).
_RECIPROCAL = re.compile(
    r"(?:I|i)\s+(?:(?:finally|just|officially|recently)\s+)?(?:broke up|split(?: up)?|separated|"
    r"divorced|got (?:married|engaged|divorced|back together)|are (?:dating|together|engaged|"
    r"married|done|over|through)|have been (?:dating|together|married)|moved in together|met|"
    r"ended (?:it|things)|called it quits)\b"
)


def _capital_i(m: re.Match[str]) -> str:
    word = m.group().lower()
    return {"i": "I", "im": "I'm", "ive": "I've"}.get(word, "I" + word[1:])


def clauses(s: Sentence) -> list[str]:
    """The clauses of a statement, leads stripped; a clause without a subject takes the
    speaker's (``我换号了，新号码是…`` -> ``我的新号码是…``, ``traded in the civic`` -> ``I traded
    in the civic``)."""
    if re.search(f"[{HAN}]", s.text):
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
    text = CORRECTION_EN.sub("", s.text)
    parts = _SPLIT_EN.split(text)
    out: list[str] = []
    for i in range(0, len(parts), 2):
        p = parts[i].strip(" ,")
        if not p:
            continue
        joined = (
            i
            and parts[i - 1].strip() == "and"
            and out
            and (
                len(out[-1].split()) < 3
                or (_RECIPROCAL.match(p) and HEDGE_EN.search(BEEN_GOING.sub(" ", out[-1])))
            )
            and re.match(r"(?:I|i|me)\b", p)
        )
        if joined:  # "Emma and I broke up": one clause
            out[-1] = f"{out[-1]} and {p}"
        else:
            out.append(_en_clause(p))
    return out


# -- frames ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Frame:
    owner: str
    kind: str
    """``state`` (I <verb> <object>), ``end`` (what stopped or went), ``switch`` (a thing of
    the same kind switched to), ``instead`` (an older habit named), ``contact`` (a new number)."""
    verb: str
    value: str
    marked: bool = False
    """Said as the state now (``now``, ``these days``, ``现在`` …)."""


_VERBS = (
    "use drive ride take drink eat go commute bike cycle walk shop bank see attend study play "
    "listen watch read wear follow support speak run swim train sleep weigh earn make pay rent "
    "teach coach volunteer subscribe stream cook smoke vape lift practice practise carry own have "
    "keep belong host manage lead fly order buy get visit record write sing date live"
).split()


def _forms(verb: str) -> dict[str, str]:
    stem = verb[:-1] if verb.endswith("e") and not verb.endswith("ee") else verb
    out = {verb: verb, verb + "s": verb, stem + "ing": verb, verb + "ing": verb}
    if re.fullmatch(r"[a-z]*[^aeiou][aeiou][bdgmnpt]", verb):
        out[verb + verb[-1] + "ing"] = verb  # running, swimming, shopping
    if verb.endswith(("sh", "ch", "o", "s")):
        out[verb + "es"] = verb
    return out


# "I'm on Pacific time", "we're on the family plan": one head noun, one slot
_BE_EN = re.compile(
    r"^(?:I'm|I am|we're|we are)(?:\s+(?:now|still|currently|usually))?\s+(?P<prep>on)\s+"
    r"(?:the\s+|a\s+|an\s+|my\s+|our\s+)?(?P<val>[a-z][\w-]*\s+[a-z][\w-]*)\b",
    re.IGNORECASE,
)
_LEMMA = {"has": "have", "having": "have", "goes": "go", "studies": "study", "studying": "study"}
for _v in _VERBS:
    for _form, _lemma in _forms(_v).items():
        _LEMMA.setdefault(_form, _lemma)
_VERB_FORMS = "(?P<verb>" + "|".join(sorted(_LEMMA, key=len, reverse=True)) + ")"
_ADVERBS = (
    r"(?:now|just|still|currently|only|mostly|usually|always|actually|really|mainly|basically|"
    r"generally|normally|typically|these days|nowadays|also|pretty much)"
)
_STATE_EN = re.compile(
    rf"^(?P<subj>I|We|we)(?:'m|\s+am|\s+are|'re)?(?:\s+{_ADVERBS})*\s+{_VERB_FORMS}\b"
    r"(?P<prep>\s+(?:to|at|with|for|by|on|in|into|from))?\s+(?P<val>.+)$"
)
_MARK_EN = re.compile(
    r"\b(?:now|these days|nowadays|currently|lately|from now on|instead|as of (?:this|last) "
    r"(?:week|month|year))\b",
    re.IGNORECASE,
)
# "right now", "just now", "for six years now", "now that …": a moment, a duration, a condition.
_NOT_MARK_EN = re.compile(
    r"\b(?:right now|just now|by now|until now|up (?:un)?til now|now that|"
    r"for (?:\w+\s+){1,3}now)\b",
    re.IGNORECASE,
)
_ADDITION_EN = re.compile(
    r"\b(?:also|too|as well|another|additional|extra|more|both|either|other|in addition|plus)\b",
    re.IGNORECASE,
)
_PAST_EN = re.compile(
    r"\b(?:yesterday|last (?:night|week|weekend|month|year|time|summer|winter|spring|fall)|ago|"
    r"the other day|this morning|tonight|when i was|(?<!getting )(?<!get )(?<!got )used to|"
    r"back then|once)\b",
    re.IGNORECASE,
)
_NEGATION_EN = re.compile(
    r"\b(?:not|never|no|don't|doesn't|didn't|won't|can't|isn't|aren't)\b|n't\b", re.I
)

_END_EN = re.compile(
    r"^(?P<subj>I|We|we)(?:'ve|\s+have|\s+had\s+to|\s+finally|\s+just|\s+recently|\s+actually|"
    r"\s+officially)*\s+"
    r"(?P<verb>sold|sold off|got rid of|gave away|given away|donated|scrapped|returned|traded in|"
    r"traded|rehomed|rehome|ditched|dumped|cancell?ed|dropped out of|dropped|cut out|"
    # "lost" ends a client or a contract; "I lost my job", "lost all my work" end nothing named
    r"lost(?=\s+(?:the|my|our)\s+[\w'-]+(?:\s+[\w'-]+)?\s+(?:account|client|contract|sponsorship|lease)\b)|"
    r"cut back on|gave up|given up|quit|stopped|left|unsubscribed from|deleted|closed|"
    r"uninstalled|moved out of|broke up with|split up with|divorced|ended things with|"
    r"retired from)\s+"
    r"(?P<val>.+?)(?:\s+(?:away|for good|completely|entirely|altogether))?$"
    r"|^(?P<subj2>I|We|we)(?:'ve|\s+have|\s+had\s+to|\s+finally|\s+just)*\s+"
    r"(?:gave|give|sold|handed)\s+(?P<val2>[A-Z][\w'-]*|(?:my|our|the)\s+[\w'-]+(?:\s+[\w'-]+)?)"
    r"\s+(?:away\b|(?:away\s+)?to\s+(?:my|our|a|an|the|his|her|their|some)\b)"
    r"|^(?P<val3>[A-Za-z][a-z]+)\s+and\s+(?P<subj3>I|me)\s+(?:broke up|split up|split|separated|"
    r"got divorced|divorced)\b"
    r"|^(?:I'm|I am|we're|we are)\s+(?:not|no longer)\s+(?P<val4>.+?)\s+any\s*more\b"
    r"|^(?:my|our)\s+last\s+day\s+(?:at|with)\s+(?P<val5>.+?)\s+(?:was|is)\b"
    r"|^(?:the|my|our)\s+(?P<val6>[\w'-]+(?:\s+[\w'-]+){0,2}?)\s+(?:finally\s+|just\s+|officially\s+)?"
    r"(?P<gone>died|broke|broke down|is gone|'s gone|is dead|got stolen|was stolen|passed away|"
    r"is over|'s over|got totaled|was totaled)\b"
    r"|^(?P<val7>[\w'-]+(?:\s+[\w'-]+){0,2}?)\s+(?:is|'s)\s+(?:mostly\s+)?"
    r"(?:gone|dead to me|over)\b"
)
# Plans called off: "the conference got cancelled", "peru's off", "no berlin for me this year".
_OFF_EN = re.compile(
    r"^(?:the\s+|our\s+|my\s+)?(?P<val>[\w'-]+(?:\s+[\w'-]+){0,2}?)\s+(?:got\s+|was\s+|has\s+been\s+|is\s+)?"
    r"(?:cancell?ed|called off|postponed indefinitely)\b"
    r"|^(?:the\s+|our\s+|my\s+)?(?P<val2>[\w'-]+(?:\s+[\w'-]+){0,2}?)(?:\s+is|'s)\s+"
    r"(?:off|not happening)\b"
    r"|^(?:I\s+|we\s+|We\s+)(?:cancell?ed|called off)\s+(?:the|our|my)\s+"
    r"(?P<val3>[\w'-]+(?:\s+[\w'-]+){0,2}?)"
    r"(?:\s+thing|\s+trip|\s+plans?)?\b"
    r"|^no\s+(?:more\s+)?(?P<val4>[\w'-]+(?:\s+[\w'-]+)?)\s+for\s+(?:me|us)\b",
    re.IGNORECASE,
)
_POSSESSIVE_END = frozenset(
    "sold,sold off,got rid of,gave away,given away,donated,scrapped,returned,traded in,traded,"
    "rehomed,rehome".split(",")
)
_GENERIC_TARGET = re.compile(
    r"\s+(?:account|membership|subscription|thing|plan|plans|life|stuff|streak|habit|trip)$"
)
# Targets that name nothing in particular: "it", "my job", "all my work", "everything".
_VAGUE = re.compile(
    r"(?:(?:all|some|most)\s+(?:of\s+)?(?:my|our|the)?\s*)?(?:it|that|this|them|there|here|me|you|"
    r"job|work|thing|things|stuff|everything|something|anything|one|time|way|track|touch|mind|"
    r"hope|faith|count|sleep|weight|interest|patience|control|money)"
    r"|(?:by|for|over|in|up|out|on)\b.*"
)
_LIGHT_VERB = re.compile(
    r"^(?:doing|using|at|on|in|with|going to|into|having|being|eating|drinking)\s+"
)
_SWITCH_EN = re.compile(
    r"^(?P<subj>I|We|we)(?:'ve|\s+have|\s+finally|\s+just|\s+recently|\s+actually)*\s+"
    # not "went to" (a visit) nor "moved to" (where one lives: `judge_rules`)
    r"(?:switched|changed|transferred|converted|swapped|moved\s+over)\s+(?:over\s+|back\s+)?"
    r"(?:to|into)\s+(?:a\s+|an\s+|the\s+)?(?P<val>[\w'&.-]+(?:\s+[\w'&.-]+){0,3}?)"
    r"(?=$|\s+(?:now|instead|because|since|and|but|so|last|this|a\s+few|recently|two|three|a\s+month|"
    r"a\s+week|in|at|for|after|when)\b)"
    r"|^(?P<subj2>I|We|we)(?:'ve|\s+have|\s+finally|\s+just)*\s+"
    r"(?:changed|switched|swapped|moved)\s+(?P<plural>[a-z]+s)\b"
)
# Something got against an older "I don't own a car": "so I caved and bought a car", "我买车了".
_GOT_EN = re.compile(
    r"^(?:I|We|we)(?:'ve|\s+have|\s+finally|\s+just|\s+recently|\s+actually)*\s+"
    r"(?:bought|got|adopted|purchased|leased|got\s+ourselves|got\s+myself)\s+"
    r"(?:a|an|my\s+first|our\s+first|a\s+new|a\s+used)\s+(?:new\s+|used\s+|little\s+)?(?P<val>[a-z][\w-]*)\b"
)
_NOT_OWNED_EN = re.compile(
    r"\b(?:don't|do not|never|didn't)\s+(?:have|own|keep|drive)\s+(?:a|an|any)\s+"
    r"(?P<val>[a-z][\w-]*)"
    r"|\b(?:have|own)\s+no\s+(?P<val2>[a-z][\w-]*)",
    re.I,
)
_GOT_ZH = re.compile(
    rf"^(?:我们|我)(?:终于|刚|刚刚|已经|最近)*(?:买了|养了|领养了|租了)(?:一[辆只台条个套])?(?P<val>[{HAN}]{{1,4}}?)(?:了|$)"
)
_NOT_OWNED_ZH = re.compile(
    rf"(?:我们|我)(?:家)?(?:没有|没)(?:养|买|开)?(?P<val>[{HAN}]{{1,4}}?)(?:[，,。]|$)"
)
_INSTEAD_EN = re.compile(r"\binstead\s+of\s+(?P<old>.+)$", re.IGNORECASE)
_CONTACT_NEW = re.compile(
    r"\bnew\s+(?:(?:phone|mobile|cell|work)\s+)?(?:number|phone|e-?mail(?:\s+address)?)\b"
    r"|\b(?:number|e-?mail)\s+(?:is\s+now|changed)\b|新(?:的)?(?:手机)?号码?|新(?:的)?邮箱|换号|换了?手机号",
    re.IGNORECASE,
)
# "my dad's new number", "我爸的新号码": someone else's number
_THEIRS = re.compile(
    rf"(?:\b(?!(?:my|our)\b)[A-Za-z]+'s|\b(?:his|her|their|your))\s*$|(?<!我)(?<!我们)[{HAN}]{{1,3}}的\s*$"
)
# "use rebecca.lowry@icloud.com from now on", "reach me at 0499 … going forward": the contact to
# use from now on. Not "text me on whatsapp instead" (while abroad) or "for now": a stand-in.
_FROM_NOW_ON = re.compile(r"\b(?:from now on|going forward|moving forward|from here on(?: out)?)\b",
                          re.IGNORECASE)
_CONTACT_VERB = re.compile(
    r"\b(?:use|reach me|text me|call me|email me|e-mail me|message me|contact me|"
    r"send (?:\w+ )?to)\b",
    re.IGNORECASE,
)
_STAND_IN = re.compile(r"\b(?:for now|till|until|while|this week|for the time being|temporarily)\b",
                       re.IGNORECASE)


def _contact_from_now(clause: str) -> re.Match[str] | None:
    """The contact verb of a clause that gives the contact to use from now on, or None."""
    if _zh(clause) or not _FROM_NOW_ON.search(clause) or _STAND_IN.search(clause):
        return None
    return _CONTACT_VERB.search(clause)


# "my dad got a new number", "she changed her email", "我爸换号了": the number is another person's
_OTHER_SUBJECT = re.compile(
    r"\b(?:(?:my|our)\s+(?:(?:step|grand|ex)-?)?(?:dad|father|mom|mum|mother|parents?|brother|"
    r"sister|bro|sis|wife|husband|partner|boyfriend|girlfriend|bf|gf|fianc[ée]e?|son|daughter|"
    r"kids?|child(?:ren)?|baby|friend|buddy|boss|manager|coworker|co-worker|colleague|roommate|"
    r"flatmate|neighbou?r|landlord|landlady|aunt|uncle|cousin|grandma|grandpa|niece|nephew|"
    r"in-laws?|teacher|doctor|dentist|lawyer|client|team|company)s?|he|she|they)\b"
    r"|(?:我|我们)(?:的)?(?:爸爸?|妈妈?|父亲|母亲|爸妈|父母|哥哥?|姐姐?|弟弟?|妹妹?|老公|老婆|丈夫|"
    r"妻子|爱人|男朋友|女朋友|对象|儿子|女儿|孩子|朋友|同事|老板|领导|室友|邻居|房东|爷爷|奶奶|外公|"
    r"外婆|老师|客户)|[他她]们?",
    re.IGNORECASE,
)
_PHONE = re.compile(r"(?<![\w@.])\+?\d[\d ()-]{5,}\d(?![\w@])")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_MINE = re.compile(r"\b(?:i|me|my|we|us|our)\b|我", re.IGNORECASE)

_ZH_MARK = re.compile(r"现在|如今|目前|这阵子|这段时间|最近|已经|改|换")
_ZH_ADDITION = re.compile(r"还|也|另外|又|再")
_ZH_STATE = re.compile(
    rf"^(?P<subj>我们|我)(?:现在|如今|目前|最近|已经|平时|每天|一般|都|主要|只)*"
    r"(?P<verb>用|开|骑|喝|吃|坐|穿|玩|听|看|读|学|养|抽|练|住在)(?:着|上了|了)?"
    rf"(?P<val>[{HAN}A-Za-z0-9 ]{{1,16}}?)(?:了|啦)?$"
)
_ZH_END = re.compile(
    rf"^(?P<subj>我们|我)(?:已经|刚刚|刚|终于|上个月|上周|去年)*(?:"
    rf"把(?:我的|我们的)?(?:那辆|那台|那只|那个)?(?:旧的?)?(?P<val>[{HAN}A-Za-z0-9]{{1,8}}?)"
    r"(?:给)?(?:卖了|卖掉了|送人了|送走了|送给了?[^，,。]{0,6}|扔了|扔掉了|处理掉了|退了|退掉了|转手了)"
    rf"|(?:和|跟)(?P<val2>[{HAN}A-Za-z]{{1,4}}?)(?:分手了|分开了|离婚了)"
    rf"|(?:退出了?|离开了?|辞去了?|搬出了?)(?P<val3>[{HAN}A-Za-z0-9]{{2,10}}?)(?:了|$)"
    rf"|戒(?:掉了?)?(?P<val4>[{HAN}]{{1,4}}?)(?:了|$)"
    rf"|(?:现在|已经)?(?:不再|不|没再)(?P<val7>[{HAN}A-Za-z]{{2,8}}?)了$)"
    # said object first: "单反在闲鱼卖掉了", "日语放弃了", "茶基本不喝了", "王总调走了"
    rf"|^(?:我的|我们的|我们|我)?(?P<val5>[{HAN}A-Za-z0-9]{{1,6}}?)(?:在[{HAN}]{{1,6}}?)?(?:已经|早就|基本|也)?"
    r"(?:卖掉了|卖了|送人了|扔了|扔掉了|退掉了|转手了)"
    rf"|^(?:我的|我们的|我们|我)?(?P<val6>[{HAN}A-Za-z0-9]{{1,6}}?)(?:已经|早就|基本|也)?"
    r"(?:放弃了|不学了|不玩了|不喝了|不吃了|不用了|不去了|不做了|不干了|不抽了|戒了|停了|调走了|离职了|退休了)"
)
_ZH_NEGATION = re.compile(r"不|没|别")
# "开了八年才换", "用了三年": the verb's object is a length of time, so the clause tells how long a
# past state lasted, not what the state is now.
_ZH_SPAN = re.compile(
    r"^(?:[\d零一二两三四五六七八九十百几半]+|好几|十几|几十)(?:个)?(?:年|个月|月|周|星期|礼拜|天|小时)"
)


def _zh(clause: str) -> bool:
    return bool(re.search(f"[{HAN}]", clause))


def _marked(clause: str) -> bool:
    if _zh(clause):
        return bool(_ZH_MARK.search(clause))
    return bool(_MARK_EN.search(_NOT_MARK_EN.sub(" ", clause)))


def _trim(value: str) -> str:
    value = re.sub(
        r"\b(?:now|these days|nowadays|currently|lately|instead)\b", " ", value, flags=re.I
    )
    value = re.sub(r"\s+instead\s+of\s+.*$", "", value, flags=re.I)
    return re.sub(r"\s+", " ", value).strip(" .!,'\"")


def frames(s: Sentence) -> list[Frame]:
    """The frames of one prose statement (none when it is hedged: plans, wishes, reports)."""
    out: list[Frame] = []
    for clause in stated_clauses(s):
        out += _zh_frames(clause, s.owner) if _zh(clause) else _en_frames(clause, s.owner)
        shape = _renumbered(clause)
        if shape is not None:
            out.append(Frame(s.owner, "renumbered", shape[0], shape[1], _marked(clause)))
        for kind, pattern in (("contact", _PHONE), ("contact", _EMAIL)):
            new = _CONTACT_NEW.search(clause) or _contact_from_now(clause)
            if (
                new
                and not _THEIRS.search(clause[: new.start()])
                and not _OTHER_SUBJECT.search(clause[: new.start()])
            ):
                for m in pattern.finditer(clause):
                    out.append(Frame(s.owner, kind, pattern.pattern[:6], _digits(m.group()), True))
    return out


_ZH_NUMERAL = re.compile(r"[\d.,]+|[零一二两三四五六七八九十百千万]+")
_EN_NUMERAL = re.compile(
    r"\$?\d[\d.,]*k?|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|twelve)\b", re.I
)
_NOW_WORDS_ZH = re.compile(r"^(?:我们|我)|现在|目前|如今|已经|了$|了(?=[，,。]|$)")
_NOW_WORDS_EN = re.compile(r"\b(?:now|these days|nowadays|currently)\b", re.I)


def _renumbered(clause: str) -> tuple[str, str] | None:
    """``(shape, numbers)`` of a first-person clause that carries a number: the clause with its
    numbers blanked and its "now" words left out (``我每个月给爸妈转两千`` and ``现在每个月给
    爸妈转三千了`` share a shape: the same statement with another number)."""
    if _zh(clause):
        if not clause.startswith("我"):
            return None
        body = _NOW_WORDS_ZH.sub("", clause)
        found = _ZH_NUMERAL.findall(body)
        shape = _ZH_NUMERAL.sub("#", body)
        if not found or len(re.sub(f"[^{HAN}]", "", shape)) < 4:
            return None
        return shape, " ".join(found)
    if not re.match(r"(?:I|We|we|My|my|Our|our)\b", clause) or _NEGATION_EN.search(clause):
        return None
    body = _NOW_WORDS_EN.sub(" ", clause)
    found = _EN_NUMERAL.findall(body)
    terms = tokenize(_EN_NUMERAL.sub(" ", body))
    if not found or len(terms) < 3:
        return None
    return " ".join(terms), " ".join(x.lower() for x in found)


def _digits(value: str) -> str:
    return value.lower() if "@" in value else re.sub(r"\D", "", value)


def _en_frames(clause: str, owner: str) -> list[Frame]:
    out: list[Frame] = []
    text = re.sub(
        r"^(?:(?:so|well|oh|ok|okay|yeah|yes|and|but|now|these days|nowadays|anyway|also|btw|"
        r"by the way|just so you know|fyi|guess what|finally|honestly|since then)\b[\s,!:.-]*)+",
        "",
        clause,
        flags=re.I,
    )
    marked = _marked(clause)
    for pattern in (_END_EN, _OFF_EN):
        m = pattern.match(text)
        if m is None:
            continue
        groups = m.groupdict()
        value = next((v for k, v in groups.items() if k.startswith("val") and v), "")
        if pattern is _OFF_EN:
            verb = "off"
        elif groups.get("gone"):
            verb = "gone"  # "the x220 died": a thing they had
        elif groups.get("val7"):
            verb = "over"  # "java is mostly gone", "bus life is over"
        elif groups.get("val3"):
            verb = "broke up"
        elif groups.get("val4") or groups.get("val5"):
            verb = "left"  # "not at target anymore", "my last day at deloitte was friday"
        else:
            verb = (groups.get("verb") or "gave away").lower()
        value = _target(value)
        if value and not _VAGUE.fullmatch(value):
            out.append(Frame(owner, "end", verb, value))
    m = _SWITCH_EN.match(text)
    if m is not None:
        value = (m.group("val") or m.group("plural") or "").lower()
        if value:  # "I switched to Apple Music", "I changed dentists"
            verb = "kind" if m.group("plural") else "switch"
            out.append(Frame(owner, "switch", verb, _singular(value)))
            purpose = re.search(
                r"\bfor\s+(?:my\s+|our\s+|the\s+|all\s+(?:my\s+)?)?(?P<p>[a-z]{3,})\b",
                text[m.end() :],
            )
            if purpose and m.group("val"):  # "switched to Pocket Casts for podcasts"
                out.append(
                    Frame(owner, "switch", "for " + purpose.group("p"), m.group("val").lower())
                )
    m = _GOT_EN.match(text)
    if m is not None:
        out.append(Frame(owner, "got", "got", _singular(m.group("val").lower())))
    if marked:
        found = _INSTEAD_EN.search(text)
        if found is not None and not _NEGATION_EN.search(text[: found.start()]):
            out.append(Frame(owner, "instead", "instead", _trim(found.group("old")).lower()))
    m = _BE_EN.match(text)
    if m is not None and not _NEGATION_EN.search(text) and not _PAST_EN.search(text):
        value = _target(m.group("val"))
        if len(value.split()) >= 2:  # a kind and its head: "pacific time", "night shift"
            out.append(
                Frame(
                    owner,
                    "state",
                    "be " + m.group("prep").lower() + " " + value.split()[-1],
                    value,
                    marked,
                )
            )
    m = _STATE_EN.match(text)
    if m is not None and not _NEGATION_EN.search(text) and not _PAST_EN.search(text):
        verb = _LEMMA[m.group("verb").lower()] + (m.group("prep") or "").lower()
        value = _trim(m.group("val"))
        if value and not re.match(r"(?:it|that|this|them|you|to|a lot|so|very|really)\b", value):
            additive = bool(_ADDITION_EN.search(text))
            out.append(Frame(owner, "state", verb, value.lower(), marked and not additive))
    return out


def _zh_frames(clause: str, owner: str) -> list[Frame]:
    out: list[Frame] = []
    m = _ZH_END.match(clause)
    if m is not None:
        value = next(v for k, v in m.groupdict().items() if k.startswith("val") and v)
        verb = "卖" if m.group("val") or m.group("val5") else "end"
        out.append(Frame(owner, "end", verb, value))
    m = _GOT_ZH.match(clause)
    if m is not None:
        out.append(Frame(owner, "got", "got", m.group("val")))
    m = _ZH_STATE.match(clause)
    if m is not None and not _ZH_NEGATION.search(clause) and not _ZH_SPAN.match(m.group("val")):
        marked = _marked(clause) and not _ZH_ADDITION.search(clause)
        out.append(Frame(owner, "state", m.group("verb"), m.group("val").strip(), marked))
    return out


def _target(value: str) -> str:
    """What ended, without determiners, light verbs, generic nouns and what follows it
    (``the civic this weekend`` -> ``civic``, ``doing keto`` -> ``keto``, ``the chase account``
    -> ``chase``)."""
    value = value.strip(" .!,").lower()
    value = re.sub(r"^(?:my|our|the|his|her|their|a|an)\s+", "", value)
    value = _LIGHT_VERB.sub("", value)
    value = re.sub(r"^(?:my|our|the|a|an)\s+", "", value)
    value = re.split(
        r"\s+(?:and|because|since|after|so|last|this|in|at|for|to|two|a few|yesterday|today|"
        r"anymore|any more|now|finally|already|lol)\b|[,.!?;:(]",
        value,
    )[0]
    previous = None
    while previous != value:
        previous, value = value, _GENERIC_TARGET.sub("", value)
    return value.strip()


def _singular(word: str) -> str:
    return word[:-1] if word.endswith("s") and not word.endswith("ss") and len(word) > 3 else word


# -- judging ------------------------------------------------------------------------------------


def _terms(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


def _contains(sentence: str, phrase: str) -> bool:
    if _zh(phrase):
        return phrase.replace(" ", "") in sentence.replace(" ", "")
    need = _terms(phrase)
    return bool(need) and need <= _terms(sentence)


def _disjoint(a: str, b: str) -> bool:
    """Neither value is within the other (``the gym on Mondays`` / ``… and Fridays`` are not)."""
    if _zh(a + b):
        x, y = a.replace(" ", ""), b.replace(" ", "")
        return bool(x) and bool(y) and x not in y and y not in x
    ta, tb = _terms(a), _terms(b)
    return bool(ta) and bool(tb) and not (ta <= tb or tb <= ta)


_POSSESSED = re.compile(
    r"\b(?:my|our|i\s+(?:have|own|drive|ride|use|got|keep|run|rent)|i've\s+got|i'm\s+(?:using|driving)|"
    r"we\s+(?:have|own|use|got|keep|rent)|we've\s+got)\b|我的|我们的|我(?:们)?(?:还|也|都)?(?:有|用|开|骑|养|买了|租)",
    re.IGNORECASE,
)


def _state_clauses(s: Sentence, owner: str, plans: bool = False) -> list[str]:
    """The clauses of a first-person statement of the owner that are no event, negation or
    (unless ``plans``) plan: what a newer change can end."""
    if s.owner != owner or (s.hedged and not plans) or not _MINE.search(s.text):
        return []
    out = []
    for c in clauses(s):
        if _zh(c):
            if not _ZH_NEGATION.search(c) and not re.search(r"昨天|上周|去年|那次|以前", c):
                out.append(c)
        elif plans or not _PAST_EN.search(c):
            out.append(c)  # a negation is looked for before what ended (`_negated_before`)
    return out


def _negated_before(clause: str, target: str) -> bool:
    """A negation before the target's first word (``…ThinkPad X220, don't judge`` is not)."""
    if _zh(clause):
        return bool(_ZH_NEGATION.search(clause))
    first = target.split()[0] if target.split() else ""
    at = clause.lower().find(first) if first else -1
    return bool(_NEGATION_EN.search(clause[: at if at >= 0 else len(clause)]))


def _state_sentence(s: Sentence, owner: str) -> bool:
    return any(not _negated_before(c, "") for c in _state_clauses(s, owner))


def _zh_contains(clause: str, target: str) -> bool:
    """A Chinese target in a clause; a verb and its object (``跑外卖``) also by the object."""
    if _contains(clause, target):
        return True
    return len(target) >= 3 and target[1:] in clause.replace(" ", "")


def judge_frames(
    old: list[Sentence], new_frames: list[Frame], old_frames: list[Frame]
) -> tuple[str, str] | None:
    """``(kind, reason)`` when a frame of the newer memory ends or changes a state the older one
    states; None otherwise."""
    for f in new_frames:
        if f.kind == "renumbered" and f.marked:  # "now" another number
            for o in old_frames:
                if o.kind == "renumbered" and o.owner == f.owner and o.verb == f.verb:
                    if o.value != f.value:
                        return "update", f"{_who(f.owner)}: now {f.value} (was {o.value})"
        if f.kind == "state" and f.marked:
            for o in old_frames:
                if o.kind == "state" and o.owner == f.owner and o.verb == f.verb:
                    if _disjoint(o.value, f.value) and _one_slot(f.verb, o.value, f.value):
                        return (
                            "update",
                            f"{_who(f.owner)} {f.verb} now '{f.value}' (was '{o.value}')",
                        )
        if f.kind == "contact":
            for s in old:  # "my number is … if the form needs it": stated, whatever the "if"
                # "send things to bex@…": the owner's contact, given as an instruction
                if not _state_clauses(s, f.owner, plans=True) and not (
                    s.owner == f.owner and _CONTACT_VERB.match(s.text)
                ):
                    continue
                pattern = _EMAIL if "@" in f.value else _PHONE
                numbers = {_digits(m.group()) for m in pattern.finditer(s.text)}
                if numbers and f.value not in numbers:
                    return "update", f"{_who(f.owner)} has a new number or address: {f.value}"
        if f.kind in {"end", "instead"}:
            plans = f.verb in {"off", "broke up", "end"}  # a plan called off; a couple split
            for s in old:
                found = [
                    c
                    for c in _state_clauses(s, f.owner, plans)
                    if (_zh_contains(c, f.value) if _zh(f.value) else _contains(c, f.value))
                    and not _negated_before(c, f.value)
                ]
                if not found:
                    continue
                if (
                    f.kind == "end"
                    and f.verb in _POSSESSIVE_END | {"卖"}
                    and not _POSSESSED.search(s.text)
                ):
                    continue  # "I want a bike like Sam's" / "I sold my bike": not one they had
                said = "no longer" if f.kind == "end" else "instead of"
                return "negation", f"{_who(f.owner)} {said}: '{f.value}'"
        if f.kind == "got":  # "I don't own a car" / "bought a car"
            for s in old:
                if s.owner != f.owner or s.hedged or not _MINE.search(s.text):
                    continue
                pattern = _NOT_OWNED_ZH if _zh(f.value) else _NOT_OWNED_EN
                for m in pattern.finditer(s.text):
                    had = m.group("val") or m.groupdict().get("val2") or ""
                    same = had == f.value if _zh(f.value) else _singular(had.lower()) == f.value
                    if same:
                        return "negation", f"{_who(f.owner)} has a {f.value} now (was: none)"
        if f.kind == "switch":
            head = f.value.split()[-1]
            for s in old:
                if not _state_sentence(s, f.owner):
                    continue
                if f.verb != "kind" and _contains(s.text, f.value):
                    continue  # "I use the night bus" / "I switched to the night bus": the same
                if f.verb.startswith("for "):
                    if _contains(s.text, f.verb[4:]):
                        return "update", f"{_who(f.owner)} switched to '{f.value}' for {f.verb[4:]}"
                    continue
                words = [w.lower() for w in re.findall(r"[\w'-]+", s.text)]
                heads = {_singular(w) for w in words}
                if _singular(head) in heads:
                    return "update", f"{_who(f.owner)} switched to '{f.value}'"
    return None


def frame_keys(owner: str, new_frames: list[Frame], sentences: list[Sentence]) -> set[str]:
    """Keys that bring an older statement to a newer change that shares no word with it: a
    Chinese end of what it names, which word segmentation splits differently (``一包烟`` /
    ``戒烟``), and a new number or address (``reach me at 0412 …`` / ``my new number is …``)."""
    out = {
        f"{owner}|zh:{gram}"
        for f in new_frames
        if f.kind == "end" and _zh(f.value)
        for gram in _grams(f.value, 1 if len(f.value) == 1 else 2)
    }
    out |= {f"{f.owner}|contact" for f in new_frames if f.kind == "contact"}
    if any(_PHONE.search(s.text) or _EMAIL.search(s.text) for s in sentences):
        out.add(f"{owner}|contact")
    for s in sentences:
        if not _state_sentence(s, s.owner):
            continue
        if _zh(s.text):
            out |= {f"{s.owner}|zh:{g}" for n in (1, 2) for g in _grams(s.text, n)}
        if _PHONE.search(s.text) or _EMAIL.search(s.text):
            out.add(f"{s.owner}|contact")
    return out


def _grams(text: str, n: int) -> set[str]:
    """Han character n-grams (segmentation aside: ``一包烟`` and ``戒烟`` share ``烟``)."""
    han = re.sub(f"[^{HAN}]", "", text)
    return {han[i : i + n] for i in range(len(han) - n + 1)}


# Verbs that name one slot whatever their object: "I drive a Focus" / "I drive a Kia now". Other
# verbs ("go to", "play", "eat") do many things at once: their objects must share a word that is
# no count unit ("the gym on Mondays" / "the gym every weekday"; not "yoga 2 times a week" / "the
# gym 3 times a week").
_ONE_SLOT = frozenset(
    "use drive ride commute bike cycle bank subscribe smoke vape live rent weigh sleep earn pay "
    "attend study follow support belong 用 开 骑 住在 抽".split()
)
_UNITS = frozenset(
    "time week day month year hour minut second onc twice everi per a km mile kg lb pound".split()
)


def _one_slot(verb: str, old: str, new: str) -> bool:
    if verb.split()[0] in _ONE_SLOT or verb.startswith("be "):
        return True
    if _zh(old + new):
        return bool(_grams(old, 1) & _grams(new, 1))
    shared = {t for t in _terms(old) & _terms(new) if t not in _UNITS and not t[:1].isdigit()}
    return bool(shared)


def _who(owner: str) -> str:
    return owner.title() if owner else "the user"
