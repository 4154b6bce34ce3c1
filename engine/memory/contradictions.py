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


# --- lexicons --------------------------------------------------------------------------------

_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"

_NEGATION_EN = re.compile(
    r"\b(?:not|no|never|none|nobody|nothing|neither|nor|cannot|without|no longer)\b|n['’]t\b",
    re.IGNORECASE,
)
_NEGATION_ZH = re.compile(r"不|没有|没|未|非|无|别|勿")
# Negations that are idioms, not negated facts ("can't wait", "no worries", "没问题").
_NEGATION_IDIOMS = re.compile(
    r"\b(?:can['’]?t|cannot|couldn['’]t) (?:wait|believe|thank|agree|imagine|stop)\b"
    r"|\bno (?:worries|problem|doubt|way|matter|wonder)\b|\bnot (?:sure|bad|only|a problem)\b"
    r"|\bdon['’]t (?:worry|mention it|know)\b|\bnever mind\b|\bnever (?:too late|thought)\b"
    r"|没问题|没关系|不客气|不用谢|不错|别担心|不知道",
    re.IGNORECASE,
)

_INTERJECTION = re.compile(
    r"^(?:(?:oh no|hey|hi|hello|bye|wow|whoa|oh|ooh|ah|aw+|yeah|yes|yep|yup|yay|sure|ok|okay|haha+|"
    r"hah|lol|well|so|and|but|also|btw|by the way|omg|hmm+|um+|thanks|thank you|great|cool|"
    r"awesome|nice|congrats|congratulations|definitely|absolutely|totally|exactly|right|true|"
    r"indeed|of course|sounds good|good|anyway|actually|honestly|update|correction|note|sorry|"
    r"aha|ugh|phew|whew|gosh|man|dude|ha)\b"
    r"[\s,!.:;-]*)+",
    re.IGNORECASE,
)
_VOCATIVE = re.compile(r"^[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?,\s+")
_INTERJECTION_ZH = re.compile(
    r"^(?:嗨|你好|哈+|哇|嗯+|哦|啊|好的|好吧|谢谢|对|是的|没错|其实|更新|更正)[，,！!。\s]*"
)

_QUESTION_START = re.compile(
    r"^(?:what|who|whom|whose|where|when|why|how|which|do|does|did|are|is|was|were|have|has|"
    r"had|can|could|would|will|shall|should|may|might|any|anything|got)\b",
    re.IGNORECASE,
)
# Imperatives and wishes are not statements ("Keep going and don't give up!", "Take care").
_IMPERATIVE_EN = re.compile(
    r"^(?:don['’]t|do not|do|keep|take|go|stay|have|let['’]?s|let|be|make|enjoy|feel|hang|try|"
    r"check|see|get|give|tell|look|remember|never|talk|catch|say|come|good luck|best of luck|"
    r"congrats|hope|wish|sorry|please|thank|thanks|glad|happy|welcome|cheers|love|miss|bye|"
    r"sounds|looks|seems|nice|great|awesome|cool|wow|what|how)\b",
    re.IGNORECASE,
)
_QUESTION_ZH = re.compile(r"[吗呢么]$|什么|怎么|为什么|哪里|哪儿|几|多少|是否|有没有")

_HEDGE_EN = re.compile(
    r"\b(?:if|maybe|perhaps|might|would|could|should|hope|hoping|wish|wanna|want to|wants to|"
    r"plan to|planning|plans to|thinking (?:of|about)|considering|gonna|going to|will|dream|"
    r"dreaming|someday|one day|imagine|pretend|suppose|unless)\b|['’]d\b|['’]ll\b",
)  # matched against lower-cased text: IGNORECASE makes such alternations several times slower
_HEDGE_ZH = re.compile(
    r"如果|要是|假如|可能|也许|大概|想要|想去|想|打算|计划|希望|梦想|将来|以后|会不会|以前|曾经|过去|小时候|原来"
)

_UNRESOLVED_EN = re.compile(
    r"^(?:(?:it|that|this|there|these|those|they|he|she|which|what|who|everything|something|"
    r"nothing|anything|everyone|someone|life)\b(?:\s+(?:is|was|are|were|has|had|have|must|"
    r"looks|seems|sounds|feels|really|so|all|just|also)\b)?|(?:it|that|there|they|he|she|what|"
    r"who)['’](?:s|re|ve|ll|d)\b|you\b|you['’])",
    re.IGNORECASE,
)
_UNRESOLVED_ZH = re.compile(
    r"^(?:这是|那是|这就是|这些|那些|这样|那样|它|他|她|你|大家|一切|生活|人生|[这那](?![个位家次款]))"
)

# A plain copula ("is", "是") with a text value counts only for these attribute nouns (stems).
_ATTRIBUTE_NOUNS_EN = frozenset(
    """name nicknam address email phone number id password username account budget rate price
    cost fee salari wage limit quota target deadlin date time status plan tier version
    languag timezon currenc locat citi countri hometown destin birthday age job titl role
    employ compani manag owner team color colour size model brand car school major degre
    gpa score rank favorit favourit prefer diet allergi blood height weight capit dose
    password pin code server region endpoint url host port environ env mode setting default
    room floor seat flight gate hotel venu restaur schedul meet appoint order refund amount
    balanc total discount""".split()
)
_ATTRIBUTE_NOUNS_ZH = (
    "名字 姓名 昵称 地址 邮箱 电话 号码 手机 密码 账号 预算 汇率 价格 "
    "费用 工资 薪水 上限 额度 目标 截止 日期 时间 状态 计划 套餐 版本 "
    "语言 时区 货币 位置 城市 国家 家乡 目的地 生日 年龄 工作 职位 职业 "
    "公司 经理 负责人 团队 颜色 尺码 型号 品牌 学校 专业 学位 分数 排名 "
    "最喜欢 爱好 饮食 身高 体重 首都 剂量 服务器 区域 环境 模式 默认 房间 "
    "楼层 座位 航班 登机口 酒店 餐厅 会议 订单 退款 金额 余额 总额 折扣"
).split()
_EVALUATIVE_EN = re.compile(
    r"^(?:so|really|very|such|pretty|super|too|quite|truly|totally|absolutely|extremely|"
    r"incredibly|kinda|kind of|a bit|a little|just|all|the best|the worst|my everything|"
    r"everything|amazing|awesome|great|good|nice|cool|fun|beautiful|lovely|wonderful|fantastic|"
    r"incredible|inspiring|powerful|special|important|hard|tough|tiring|exhausting|exciting|"
    r"excited|happy|sad|glad|proud|grateful|thankful|lucky|blessed|stressful|crazy|wild|busy|"
    r"bad|terrible|awful|boring|interesting|cute|sweet|adorable|gorgeous|stunning|perfect|"
    r"fine|okay|ok|worth it|a blast|a lot|lots|huge|big|small|tiny|full|worth)\b",
    re.IGNORECASE,
)
_EVALUATIVE_ZH = re.compile(
    r"^(?:很|非常|真|太|挺|好|特别|超|相当|有点|比较|不错|棒|漂亮|开心|难过|辛苦|美|可爱|厉害)"
)
_EVENT_TIME = re.compile(
    r"\b(?:yesterday|today|tonight|this (?:morning|afternoon|evening|weekend|week)|last "
    r"(?:night|week|weekend|month|year|time|summer|winter|spring|fall|friday|saturday|sunday)|"
    r"ago|the other day|earlier|recently|just now)\b"
    r"|昨天|今天|今晚|上周|上个月|去年|前天|刚才|最近",
)  # lower-cased text
_NOW_WORDS = frozenset("anymor again still current actual 现在 目前 已经 了 再 还".split())
_FIRST_PERSON_EN = re.compile(r"\b(?:i|me|my|mine|myself|we|us|our|ours)\b|\bi['’]")  # lower
_FIRST_PERSON_ZH = re.compile(r"我")

_CLAUSE = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])|\n+")
_NOT_SPEAKERS = frozenset(
    "note update correction fyi reminder fact memo info news edit ps summary context important "
    "warning todo remember 注意 更新 更正 备注 提醒".split()
)
_SPEAKER = re.compile(
    rf"^\s*(?P<who>[A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*){{0,2}}|[{_HAN}]{{1,4}})\s*[:：]\s*(?P<rest>.+)$",
    re.DOTALL,
)

# --- typed claims ------------------------------------------------------------------------------

_KIN = (
    r"(?:sister|brother|mom|mum|dad|mother|father|son|daughter|wife|husband|partner|"
    r"friend|best friend|boyfriend|girlfriend|parents|family|cousin|aunt|uncle|grandma|"
    r"grandpa|grandmother|grandfather|kids|children|roommate|boss)"
)
_SUBJ_EN = (
    rf"(?P<subj>I|I['’]m|I am|we|we['’]re|we are|(?:[Mm]y|[Oo]ur) {_KIN}(?:\s+is|\s+are)?|"
    r"[A-Z][a-z]+(?:\s+is)?)"
)
_ADV_EN = (
    r"(?:(?:just|recently|finally|now|also|still|already|currently|actually|officially|really)\s+)*"
)
_NEG_EN = (
    r"(?P<neg>(?:do not|don['’]t|does not|doesn['’]t|did not|didn['’]t|no longer|never|not|"
    r"can['’]t|cannot|am not|['’]m not|is not|isn['’]t)\s+)?"
)
_PROPER = r"(?P<val>(?:the\s+)?[A-Z][\w'’.-]*(?:\s+(?:[A-Z][\w'’.-]*|of|de|la|del|upon))*)"

_RESIDENCE_EN = re.compile(
    rf"^{_SUBJ_EN}\s+{_ADV_EN}{_NEG_EN}{_ADV_EN}(?:live|lives|living|moved|move|relocated|reside|"
    rf"resides|residing|based|settled)\s+(?:back\s+)?(?:from\s+[A-Z][\w'’.-]*(?:\s+[A-Z][\w'’.-]*)*\s+)?"
    rf"(?:to|in|into)\s+{_PROPER}"
)
_WORK_EN = re.compile(
    rf"^{_SUBJ_EN}\s+{_ADV_EN}{_NEG_EN}{_ADV_EN}(?:work|works|working|(?:got|have|has|started|"
    rf"landed|accepted|took|quit|left) (?:a |an |my |the )?(?:new )?(?:job|position|role)|"
    rf"started working)\s+(?P<prep>as|at|for)\s+"
    rf"(?P<val>[^,;:!?]+?)(?=\s+(?:now|and|but|since|because|so|which|where|after|before|on|in|"
    rf"from|this|last|these|for|as|full|part)\b|[,;:!?.]|$)",
)
_AGE_EN = re.compile(
    rf"^(?:{_SUBJ_EN}\s+{_ADV_EN}(?:turned\s+|now\s+)?)(?P<val>\d{{1,3}})(?:\s+years?\s+old)?(?:\s+now)?$"
)
_RELATION_EN = re.compile(
    rf"^{_SUBJ_EN}\s+{_ADV_EN}{_NEG_EN}(?:got\s+|getting\s+|am\s+|are\s+|is\s+|['’]m\s+)?{_ADV_EN}"
    r"(?P<val>single|married|engaged|divorced|separated|widowed|dating someone|in a relationship)"
    r"(?![\w-])"
)
_PREF_EN = re.compile(
    rf"^{_SUBJ_EN}\s+{_ADV_EN}{_NEG_EN}{_ADV_EN}(?P<verb>like|likes|love|loves|enjoy|enjoys|adore|"
    r"adores|prefer|prefers|hate|hates|dislike|dislikes|detest|eat|eats|drink|drinks|"
    r"stand|stopped liking|stopped eating|stopped drinking|gave up)\s+(?P<val>.+)$",
)
_PREF_NEGATIVE = {
    "hate",
    "hates",
    "dislike",
    "dislikes",
    "detest",
    "stopped liking",
    "stopped eating",
    "stopped drinking",
    "gave up",
}
_PRONOUN_OBJECT = re.compile(
    r"^(?:it|that|this|them|those|these|you|him|her|us|me|what|how|when|to|the idea|the way|"
    r"the fact)\b",
    re.IGNORECASE,
)

_ADV_ZH = r"(?:现在|目前|已经|刚刚|刚|终于|也|还|今年|去年|上个月|上周|最近|前年|真的|其实)*"
_ZH_STOP = r"(?=[，,。！？!?；;、]|了|啦|的时候|以后|之后|$)"
_RESIDENCE_ZH = re.compile(
    rf"^(?P<subj>我们|我|[{_HAN}]{{2,3}}?){_ADV_ZH}(?P<neg>不再|不|没有|没)?"
    rf"(?:住在|住|搬到了|搬到|搬去了|搬去|搬家到|搬回了|搬回|定居在|定居)(?P<val>[^，,。！？!?；;、]+?){_ZH_STOP}"
)
_WORK_ZH = re.compile(
    rf"^(?P<subj>我们|我|[{_HAN}]{{2,3}}?){_ADV_ZH}(?P<neg>不再|不|没有|没)?"
    rf"(?:在|去了|去|进了|加入了|加入)(?P<val>[^，,。！？!?；;、]+?)(?:工作|上班|任职)"
)
_AGE_ZH = re.compile(rf"^(?P<subj>我们|我|[{_HAN}]{{2,3}}?){_ADV_ZH}(?P<val>\d{{1,3}})岁")
_RELATION_ZH = re.compile(
    rf"^(?P<subj>我|[{_HAN}]{{2,3}}?){_ADV_ZH}(?:还是)?(?P<neg>不再|不是|没有|没)?(?:是)?"
    r"(?P<val>单身|结婚|已婚|订婚|离婚|离异|恋爱|丧偶)"
)
_PREF_ZH = re.compile(
    rf"^(?P<subj>我们|我|[{_HAN}]{{2,3}}?){_ADV_ZH}(?:一直|很|非常|特别|最)*"
    r"(?P<neg>不再|不|没有|没)?(?:再|太|很|怎么|那么)?"
    r"(?P<verb>喜欢|热爱|爱吃|爱喝|爱|讨厌|吃|喝)(?P<val>[^，,。！？!?；;、]+)"
)

# --- attribute claims (generic) ----------------------------------------------------------------

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
_WEAK_EN = ["is", "are", "was", "were", "costs", "cost"]
# The first predicate after at least one character splits subject and value (a search, not a
# lazy ".+?" match: the same split, without trying every alternative at every length).
_PREDICATE_EN = re.compile(
    "|".join(rf"\b{re.escape(p)}\b" for p in _STRONG_EN + _WEAK_EN) + r"|=|:",
)  # matched against lower-cased text
_STRONG_ZH = [
    "定在",
    "改到",
    "推迟到",
    "提前到",
    "迁到",
    "换成了",
    "改成了",
    "固定为",
    "设置为",
    "设定为",
    "设为",
    "改为",
    "更改为",
    "调整为",
    "变为",
    "变成",
    "换成",
    "等于",
    "现在是",
    "已改成",
    "改成",
]
_WEAK_ZH = ["是", "为", "為"]
_PREDICATE_ZH = re.compile("|".join(re.escape(p) for p in _STRONG_ZH + _WEAK_ZH) + r"|＝|=|：|:")
_LEADING_STRONG = re.compile(
    r"^(?:now\s+)?(?:" + "|".join(re.escape(p) for p in _STRONG_EN) + r"|now)\b\s*",
    re.IGNORECASE,
)
_OWNER_EN = re.compile(
    r"^(?:(?P<mine>[Mm]y|[Oo]ur)|(?P<yours>[Yy]our)|(?P<third>[Hh]is|[Hh]er|[Tt]heir|[Ii]ts)|"
    r"(?P<name>[A-Z][a-z]+)['’]s|[Tt]he|[Aa]n?|[Tt]his|[Tt]hat)\s+",
)
_OWNER_ZH = re.compile(
    r"^(?:(?P<mine>我的|我们的|我)|(?P<yours>你的|您的)|(?P<third>他的|她的|他们的)|(?P<name>[\u4e00-\u9fff]{2,3})的)"
)
_BAD_SUBJECT_EN = re.compile(
    r"^(?:i|i['’]m|we|you|he|she|they|it|that|this|there|what|which|who|how|so|and|but|or|"
    r"everything|something|nothing|anything|life|here|now|today|one|all|both|some|most|"
    r"these|those)\b|\b(?:and|but|because|when|if|i|you|he|she|they|we|it)\b|[,!?]",
    re.IGNORECASE,
)
_BAD_SUBJECT_ZH = re.compile(
    r"^(?:[这那](?![个位家次款])|它|他|她|你|我们|大家|今天|明天|昨天|现在|生活|人生|一切|真的|就)|[，,！？]"
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
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])-?\d+(?:,\d{3})*(?:\.\d+)?")


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
    """Odd number of negation markers (idioms such as "can't wait" left out)."""
    text = _NEGATION_IDIOMS.sub(" ", text)
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


_HAN_CHAR = re.compile(f"[{_HAN}]")


def _has_han(text: str) -> bool:
    return not text.isascii() and _HAN_CHAR.search(text) is not None


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
        text = _NEGATION_EN.sub(" ", text)
        return frozenset(
            t for t in self._terms(text) if not _NEGATION_ZH.fullmatch(t) and t not in _NOW_WORDS
        )

    @staticmethod
    def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
        if not a and not b:
            return 0.0
        return len(a & b) / len(a | b)

    @staticmethod
    def _split_speaker(text: str) -> tuple[str | None, str]:
        match = _SPEAKER.match(text)
        if match is None:
            return None, text
        who, rest = match.group("who"), match.group("rest").strip()
        if who.lower() in _NOT_SPEAKERS:
            return None, rest
        short = len(rest) <= 40
        if _is_attribute_name(who) or (
            short and (_NUMBER.fullmatch(rest.replace(" ", "")) or _dates(rest)[0])
        ):
            return None, text  # "Budget: 500", "汇率：1.08": an attribute, not a speaker
        if len(rest.split()) < 2 and not _has_han(rest) and not re.search(r"[!?.]", rest):
            return None, text
        return who.lower(), rest

    def _clauses(self, text: str) -> tuple[str | None, list[_Clause]]:
        speaker, rest = self._split_speaker(text)
        out = []
        for raw in _CLAUSE.split(rest):
            raw = raw.strip()
            if not raw:
                continue
            question = raw.endswith(("?", "？"))
            body = raw.rstrip(".!?;。！？； ")
            previous = None
            while previous != body:
                previous = body
                body = _INTERJECTION.sub("", body)
                body = _INTERJECTION_ZH.sub("", body)
                body = _VOCATIVE.sub("", body)
            body = body.strip(" ,，-—")
            if not body:
                continue
            han = _has_han(body)
            lower = body.lower()
            if han:
                question = question or bool(_QUESTION_ZH.search(body))
                hedged = bool(_HEDGE_ZH.search(body))
                first = bool(_FIRST_PERSON_ZH.search(body))
                unresolved = bool(_UNRESOLVED_ZH.match(body))
            else:
                question = question or bool(_QUESTION_START.match(body))
                hedged = bool(_HEDGE_EN.search(lower))
                first = bool(_FIRST_PERSON_EN.search(lower))
                unresolved = bool(_UNRESOLVED_EN.match(body))
            if not han and _IMPERATIVE_EN.match(body):
                unresolved = True
            out.append(
                _Clause(
                    text=body,
                    owner=(speaker or "") if first else None,
                    question=question,
                    hedged=hedged,
                    event=bool(_EVENT_TIME.search(lower)),
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
            if clause.hedged and not _has_han(clause.text):
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
        if _has_han(text):
            for attribute, pattern in (
                ("residence", _RESIDENCE_ZH),
                ("employer", _WORK_ZH),
                ("age", _AGE_ZH),
                ("relationship", _RELATION_ZH),
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
            m = _PREF_ZH.match(text)
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
            ("residence", _RESIDENCE_EN),
            ("age", _AGE_EN),
            ("relationship", _RELATION_EN),
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
        m = _WORK_EN.match(text)
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
        m = _PREF_EN.match(text)
        if m:
            value = m.group("val").strip()
            verb = m.group("verb").lower()
            if verb == "stand" and not m.group("neg"):
                return None
            if _PRONOUN_OBJECT.match(value) or not self._terms(value):
                return None
            value = re.split(r"\s+(?:and|but|because|so|since|when|with|,)\s+", value)[0]
            negative = verb in _PREF_NEGATIVE or verb == "stand"
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
        han = _has_han(text)
        match = _PREDICATE_ZH.search(text, 1) if han else _PREDICATE_EN.search(text.lower(), 1)
        if match is None:
            return None
        subject = text[: match.start()].strip(" ,，")
        pred = match.group().lower()
        value = text[match.end() :].strip()
        strong = pred not in _WEAK_EN and pred not in _WEAK_ZH
        stripped = _LEADING_STRONG.sub("", value)
        if stripped != value:
            strong, value = True, stripped
        if not value or len(subject) > 80 or (not han and subject.count(" ") > 6):
            return None
        owner_re, bad = (_OWNER_ZH, _BAD_SUBJECT_ZH) if han else (_OWNER_EN, _BAD_SUBJECT_EN)
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
            if not (_numbers(value) or _dates(value)[0] or proper):
                return None
        if not strong and not han and len(value.split()) > 6:
            return None  # a description, not a value
        evaluative = _EVALUATIVE_ZH if han else _EVALUATIVE_EN
        if evaluative.match(value) and not (_numbers(value) or _dates(value)[0]):
            return None
        return _Claim(
            owner,
            "attr",
            subject,
            value,
            _negated(text),
            strong=strong,
            terms=terms,
            head=ordered[-1],
        )

    # -- comparing ----------------------------------------------------------------------------
    def keys(self, text: str) -> frozenset[str]:
        """The (owner, attribute) pairs a text makes claims on, as strings.

        Older memories sharing a key are worth checking even without a shared word.
        """
        _, claims = self._parse(_normalize(text))
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
        if _has_han(old) or _has_han(new):
            x, y = old.replace(" ", ""), new.replace(" ", "")
            return not (x in y or y in x)
        a, b = self._terms(old), self._terms(new)
        if not a or not b:
            return old.strip().lower() != new.strip().lower()
        return not (a <= b or b <= a)

    def _compare_values(self, old: _Claim, new: _Claim) -> tuple[str, str, str] | None:
        old_dates, old_rest = _dates(old.value)
        new_dates, new_rest = _dates(new.value)
        if old_dates and new_dates:
            if _dates_disagree(old_dates, new_dates):
                return "date", _fmt_date(old_dates[0]), _fmt_date(new_dates[0])
            return None
        old_numbers, new_numbers = _numbers(old_rest), _numbers(new_rest)
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
                if _negated(old.text) != _negated(new.text):
                    return Contradiction(
                        older_id="",
                        kind="negation",
                        reason=f"negation flipped: earlier '{old.text}', now '{new.text}'",
                    )
                if old.event or new.event:
                    continue
                old_dates, old_rest = _dates(old.text)
                new_dates, new_rest = _dates(new.text)
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
        if not new_text:
            return []
        new_terms = self._terms(new_text)
        new_keys = self.keys(new_text)
        scored = []
        for position, (older_id, old_text) in enumerate(existing):
            old_text = _normalize(old_text)
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
    if _has_han(attribute):
        return any(noun in attribute for noun in _ATTRIBUTE_NOUNS_ZH)
    return any(_stem(w) in _ATTRIBUTE_NOUNS_EN for w in re.findall(r"[a-z]+", attribute.lower()))


@functools.lru_cache(maxsize=4096)
def _stem(word: str) -> str:
    terms = default_tokenize(word)
    return terms[0] if terms else word
