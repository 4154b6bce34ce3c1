"""Lexicons and patterns of the contradiction checker: negations, greetings, questions, hedges,
speaker prefixes, typed claims (residence, work, age, relation, preference) and generic
attribute claims in English and Chinese, with the date and number readers they use."""

from __future__ import annotations

import re
import unicodedata

# --- lexicons --------------------------------------------------------------------------------

HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"

NEGATION_EN = re.compile(
    r"\b(?:not|no|never|none|nobody|nothing|neither|nor|cannot|without|no longer)\b|n['’]t\b",
    re.IGNORECASE,
)
NEGATION_ZH = re.compile(r"不|没有|没|未|非|无|别|勿")
# Negations that are idioms, not negated facts ("can't wait", "no worries", "没问题").
NEGATION_IDIOMS = re.compile(
    r"\b(?:can['’]?t|cannot|couldn['’]t) (?:wait|believe|thank|agree|imagine|stop)\b"
    r"|\bno (?:worries|problem|doubt|way|matter|wonder)\b|\bnot (?:sure|bad|only|a problem)\b"
    r"|\bdon['’]t (?:worry|mention it|know)\b|\bnever mind\b|\bnever (?:too late|thought)\b"
    r"|没问题|没关系|不客气|不用谢|不错|别担心|不知道",
    re.IGNORECASE,
)

INTERJECTION = re.compile(
    r"^(?:(?:oh no|hey|hi|hello|bye|wow|whoa|oh|ooh|ah|aw+|yeah|yes|yep|yup|yay|sure|ok|okay|haha+|"
    r"hah|lol|well|so|and|but|also|btw|by the way|omg|hmm+|um+|thanks|thank you|great|cool|"
    r"awesome|nice|congrats|congratulations|definitely|absolutely|totally|exactly|right|true|"
    r"indeed|of course|sounds good|good|anyway|actually|honestly|update|correction|note|sorry|"
    r"aha|ugh|phew|whew|gosh|man|dude|ha)\b"
    r"[\s,!.:;-]*)+",
    re.IGNORECASE,
)
VOCATIVE = re.compile(r"^[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?,\s+")
INTERJECTION_ZH = re.compile(
    r"^(?:嗨|你好|哈+|哇|嗯+|哦|啊|好的|好吧|谢谢|对|是的|没错|其实|更新|更正)[，,！!。\s]*"
)

QUESTION_START = re.compile(
    r"^(?:what|who|whom|whose|where|when|why|how|which|do|does|did|are|is|was|were|have|has|"
    r"had|can|could|would|will|shall|should|may|might|any|anything|got)\b",
    re.IGNORECASE,
)
# Imperatives and wishes are not statements ("Keep going and don't give up!", "Take care").
IMPERATIVE_EN = re.compile(
    r"^(?:don['’]t|do not|do|keep|take|go|stay|have|let['’]?s|let|be|make|enjoy|feel|hang|try|"
    r"check|see|get|give|tell|look|remember|never|talk|catch|say|come|good luck|best of luck|"
    r"congrats|hope|wish|sorry|please|thank|thanks|glad|happy|welcome|cheers|love|miss|bye|"
    r"sounds|looks|seems|nice|great|awesome|cool|wow|what|how)\b",
    re.IGNORECASE,
)
QUESTION_ZH = re.compile(r"[吗呢么]$|什么|怎么|为什么|哪里|哪儿|几|多少|是否|有没有")

HEDGE_EN = re.compile(
    r"\b(?:if|maybe|perhaps|might|would|could|should|hope|hoping|wish|wanna|want to|wants to|"
    r"plan to|planning|plans to|thinking (?:of|about)|considering|gonna|going to|will|dream|"
    r"dreaming|someday|one day|imagine|pretend|suppose|unless)\b|['’]d\b|['’]ll\b",
)  # matched against lower-cased text: IGNORECASE makes such alternations several times slower
HEDGE_ZH = re.compile(
    r"如果|要是|假如|可能|也许|大概|想要|想去|想|打算|计划|希望|梦想|将来|以后|会不会|以前|曾经|过去|小时候|原来"
)

UNRESOLVED_EN = re.compile(
    r"^(?:(?:it|that|this|there|these|those|they|he|she|which|what|who|everything|something|"
    r"nothing|anything|everyone|someone|life)\b(?:\s+(?:is|was|are|were|has|had|have|must|"
    r"looks|seems|sounds|feels|really|so|all|just|also)\b)?|(?:it|that|there|they|he|she|what|"
    r"who)['’](?:s|re|ve|ll|d)\b|you\b|you['’])",
    re.IGNORECASE,
)
UNRESOLVED_ZH = re.compile(
    r"^(?:这是|那是|这就是|这些|那些|这样|那样|它|他|她|你|大家|一切|生活|人生|[这那](?![个位家次款]))"
)

# A plain copula ("is", "是") with a text value counts only for these attribute nouns (stems).
ATTRIBUTE_NOUNS_EN = frozenset(
    """name nicknam address email phone number id password username account budget rate price
    cost fee salari wage limit quota target deadlin date time status plan tier version
    languag timezon currenc locat citi countri hometown destin birthday age job titl role
    employ compani manag owner team color colour size model brand car school major degre
    gpa score rank favorit favourit prefer diet allergi blood height weight capit dose
    password pin code server region endpoint url host port environ env mode setting default
    room floor seat flight gate hotel venu restaur schedul meet appoint order refund amount
    balanc total discount""".split()
)
ATTRIBUTE_NOUNS_ZH = (
    "名字 姓名 昵称 地址 邮箱 电话 号码 手机 密码 账号 预算 汇率 价格 "
    "费用 工资 薪水 上限 额度 目标 截止 日期 时间 状态 计划 套餐 版本 "
    "语言 时区 货币 位置 城市 国家 家乡 目的地 生日 年龄 工作 职位 职业 "
    "公司 经理 负责人 团队 颜色 尺码 型号 品牌 学校 专业 学位 分数 排名 "
    "最喜欢 爱好 饮食 身高 体重 首都 剂量 服务器 区域 环境 模式 默认 房间 "
    "楼层 座位 航班 登机口 酒店 餐厅 会议 订单 退款 金额 余额 总额 折扣"
).split()
EVALUATIVE_EN = re.compile(
    r"^(?:so|really|very|such|pretty|super|too|quite|truly|totally|absolutely|extremely|"
    r"incredibly|kinda|kind of|a bit|a little|just|all|the best|the worst|my everything|"
    r"everything|amazing|awesome|great|good|nice|cool|fun|beautiful|lovely|wonderful|fantastic|"
    r"incredible|inspiring|powerful|special|important|hard|tough|tiring|exhausting|exciting|"
    r"excited|happy|sad|glad|proud|grateful|thankful|lucky|blessed|stressful|crazy|wild|busy|"
    r"bad|terrible|awful|boring|interesting|cute|sweet|adorable|gorgeous|stunning|perfect|"
    r"fine|okay|ok|worth it|a blast|a lot|lots|huge|big|small|tiny|full|worth)\b",
    re.IGNORECASE,
)
EVALUATIVE_ZH = re.compile(
    r"^(?:很|非常|真|太|挺|好|特别|超|相当|有点|比较|不错|棒|漂亮|开心|难过|辛苦|美|可爱|厉害)"
)
EVENT_TIME = re.compile(
    r"\b(?:yesterday|today|tonight|this (?:morning|afternoon|evening|weekend|week)|last "
    r"(?:night|week|weekend|month|year|time|summer|winter|spring|fall|friday|saturday|sunday)|"
    r"ago|the other day|earlier|recently|just now)\b"
    r"|昨天|今天|今晚|上周|上个月|去年|前天|刚才|最近",
)  # lower-cased text
NOW_WORDS = frozenset("anymor again still current actual 现在 目前 已经 了 再 还".split())
FIRST_PERSON_EN = re.compile(r"\b(?:i|me|my|mine|myself|we|us|our|ours)\b|\bi['’]")  # lower
FIRST_PERSON_ZH = re.compile(r"我")

CLAUSE = re.compile(r"(?<=[.!?;])\s+|(?<=[。！？；])|\n+")
NOT_SPEAKERS = frozenset(
    "note update correction fyi reminder fact memo info news edit ps summary context important "
    "warning todo remember 注意 更新 更正 备注 提醒".split()
)
SPEAKER = re.compile(
    rf"^\s*(?P<who>[A-Z][\w'.-]*(?:\s+[A-Z][\w'.-]*){{0,2}}|[{HAN}]{{1,4}})\s*[:：]\s*(?P<rest>.+)$",
    re.DOTALL,
)

# --- typed claims ------------------------------------------------------------------------------

KIN = (
    r"(?:sister|brother|mom|mum|dad|mother|father|son|daughter|wife|husband|partner|"
    r"friend|best friend|boyfriend|girlfriend|parents|family|cousin|aunt|uncle|grandma|"
    r"grandpa|grandmother|grandfather|kids|children|roommate|boss)"
)
SUBJ_EN = (
    rf"(?P<subj>I|I['’]m|I am|we|we['’]re|we are|(?:[Mm]y|[Oo]ur) {KIN}(?:\s+is|\s+are)?|"
    r"[A-Z][a-z]+(?:\s+is)?)"
)
ADV_EN = (
    r"(?:(?:just|recently|finally|now|also|still|already|currently|actually|officially|really)\s+)*"
)
NEG_EN = (
    r"(?P<neg>(?:do not|don['’]t|does not|doesn['’]t|did not|didn['’]t|no longer|never|not|"
    r"can['’]t|cannot|am not|['’]m not|is not|isn['’]t)\s+)?"
)
PROPER = r"(?P<val>(?:the\s+)?[A-Z][\w'’.-]*(?:\s+(?:[A-Z][\w'’.-]*|of|de|la|del|upon))*)"

RESIDENCE_EN = re.compile(
    rf"^{SUBJ_EN}\s+{ADV_EN}{NEG_EN}{ADV_EN}(?:live|lives|living|moved|move|relocated|reside|"
    rf"resides|residing|based|settled)\s+(?:back\s+)?(?:from\s+[A-Z][\w'’.-]*(?:\s+[A-Z][\w'’.-]*)*\s+)?"
    rf"(?:to|in|into)\s+{PROPER}"
)
WORK_EN = re.compile(
    rf"^{SUBJ_EN}\s+{ADV_EN}{NEG_EN}{ADV_EN}(?:work|works|working|(?:got|have|has|started|"
    rf"landed|accepted|took|quit|left) (?:a |an |my |the )?(?:new )?(?:job|position|role)|"
    rf"started working)\s+(?P<prep>as|at|for)\s+"
    rf"(?P<val>[^,;:!?]+?)(?=\s+(?:now|and|but|since|because|so|which|where|after|before|on|in|"
    rf"from|this|last|these|for|as|full|part)\b|[,;:!?.]|$)",
)
AGE_EN = re.compile(
    rf"^(?:{SUBJ_EN}\s+{ADV_EN}(?:turned\s+|now\s+)?)(?P<val>\d{{1,3}})(?:\s+years?\s+old)?(?:\s+now)?$"
)
RELATION_EN = re.compile(
    rf"^{SUBJ_EN}\s+{ADV_EN}{NEG_EN}(?:got\s+|getting\s+|am\s+|are\s+|is\s+|['’]m\s+)?{ADV_EN}"
    r"(?P<val>single|married|engaged|divorced|separated|widowed|dating someone|in a relationship)"
    r"(?![\w-])"
)
PREF_EN = re.compile(
    rf"^{SUBJ_EN}\s+{ADV_EN}{NEG_EN}{ADV_EN}(?P<verb>like|likes|love|loves|enjoy|enjoys|adore|"
    r"adores|prefer|prefers|hate|hates|dislike|dislikes|detest|eat|eats|drink|drinks|"
    r"stand|stopped liking|stopped eating|stopped drinking|gave up)\s+(?P<val>.+)$",
)
PREF_NEGATIVE = {
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
PRONOUN_OBJECT = re.compile(
    r"^(?:it|that|this|them|those|these|you|him|her|us|me|what|how|when|to|the idea|the way|"
    r"the fact)\b",
    re.IGNORECASE,
)

ADV_ZH = r"(?:现在|目前|已经|刚刚|刚|终于|也|还|今年|去年|上个月|上周|最近|前年|真的|其实)*"
ZH_STOP = r"(?=[，,。！？!?；;、]|了|啦|的时候|以后|之后|$)"
RESIDENCE_ZH = re.compile(
    rf"^(?P<subj>我们|我|[{HAN}]{{2,3}}?){ADV_ZH}(?P<neg>不再|不|没有|没)?"
    rf"(?:住在|住|搬到了|搬到|搬去了|搬去|搬家到|搬回了|搬回|定居在|定居)(?P<val>[^，,。！？!?；;、]+?){ZH_STOP}"
)
WORK_ZH = re.compile(
    rf"^(?P<subj>我们|我|[{HAN}]{{2,3}}?){ADV_ZH}(?P<neg>不再|不|没有|没)?"
    rf"(?:在|去了|去|进了|加入了|加入)(?P<val>[^，,。！？!?；;、]+?)(?:工作|上班|任职)"
)
AGE_ZH = re.compile(rf"^(?P<subj>我们|我|[{HAN}]{{2,3}}?){ADV_ZH}(?P<val>\d{{1,3}})岁")
RELATION_ZH = re.compile(
    rf"^(?P<subj>我|[{HAN}]{{2,3}}?){ADV_ZH}(?:还是)?(?P<neg>不再|不是|没有|没)?(?:是)?"
    r"(?P<val>单身|结婚|已婚|订婚|离婚|离异|恋爱|丧偶)"
)
PREF_ZH = re.compile(
    rf"^(?P<subj>我们|我|[{HAN}]{{2,3}}?){ADV_ZH}(?:一直|很|非常|特别|最)*"
    r"(?P<neg>不再|不|没有|没)?(?:再|太|很|怎么|那么)?"
    r"(?P<verb>喜欢|热爱|爱吃|爱喝|爱|讨厌|吃|喝)(?P<val>[^，,。！？!?；;、]+)"
)

# --- attribute claims (generic) ----------------------------------------------------------------

STRONG_EN = [
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
WEAK_EN = ["is", "are", "was", "were", "costs", "cost"]
# The first predicate after at least one character splits subject and value (a search, not a
# lazy ".+?" match: the same split, without trying every alternative at every length).
PREDICATE_EN = re.compile(
    "|".join(rf"\b{re.escape(p)}\b" for p in STRONG_EN + WEAK_EN) + r"|=|:",
)  # matched against lower-cased text
STRONG_ZH = [
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
WEAK_ZH = ["是", "为", "為"]
PREDICATE_ZH = re.compile("|".join(re.escape(p) for p in STRONG_ZH + WEAK_ZH) + r"|＝|=|：|:")
LEADING_STRONG = re.compile(
    r"^(?:now\s+)?(?:" + "|".join(re.escape(p) for p in STRONG_EN) + r"|now)\b\s*",
    re.IGNORECASE,
)
OWNER_EN = re.compile(
    r"^(?:(?P<mine>[Mm]y|[Oo]ur)|(?P<yours>[Yy]our)|(?P<third>[Hh]is|[Hh]er|[Tt]heir|[Ii]ts)|"
    r"(?P<name>[A-Z][a-z]+)['’]s|[Tt]he|[Aa]n?|[Tt]his|[Tt]hat)\s+",
)
OWNER_ZH = re.compile(
    r"^(?:(?P<mine>我的|我们的|我)|(?P<yours>你的|您的)|(?P<third>他的|她的|他们的)|(?P<name>[\u4e00-\u9fff]{2,3})的)"
)
BAD_SUBJECT_EN = re.compile(
    r"^(?:i|i['’]m|we|you|he|she|they|it|that|this|there|what|which|who|how|so|and|but|or|"
    r"everything|something|nothing|anything|life|here|now|today|one|all|both|some|most|"
    r"these|those)\b|\b(?:and|but|because|when|if|i|you|he|she|they|we|it)\b|[,!?]",
    re.IGNORECASE,
)
BAD_SUBJECT_ZH = re.compile(
    r"^(?:[这那](?![个位家次款])|它|他|她|你|我们|大家|今天|明天|昨天|现在|生活|人生|一切|真的|就)|[，,！？]"
)

MONTHS = {
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
MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
DATE_PATTERNS = [
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"), ("y", "m", "d")),
    (re.compile(r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]"), ("y", "m", "d")),
    (re.compile(r"(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]"), ("m", "d")),
    (
        re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({MONTH})\.?,?(?:\s+(\d{{4}}))?\b", re.I),
        ("d", "mon", "y"),
    ),
    (
        re.compile(rf"\b({MONTH})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?(?:,?\s+(\d{{4}}))?\b", re.I),
        ("mon", "d", "y"),
    ),
]
NUMBER = re.compile(r"(?<![A-Za-z0-9_.])-?\d+(?:,\d{3})*(?:\.\d+)?")


def normalize(text: str) -> str:
    return unicodedata.normalize("NFKC", text).strip()


def dates(text: str) -> tuple[list[tuple[int | None, int, int]], str]:
    """Dates found in text as ``(year or None, month, day)``, and the text with them blanked."""
    found: list[tuple[int, tuple[int | None, int, int]]] = []
    blanked = text
    for pattern, fields in DATE_PATTERNS:
        for match in pattern.finditer(blanked):
            values = dict(zip(fields, match.groups(), strict=True))
            try:
                month = MONTHS[values["mon"].lower()] if "mon" in values else int(values["m"])
                day = int(values["d"])
                year = int(values["y"]) if values.get("y") else None
            except (KeyError, ValueError):
                continue
            if 1 <= month <= 12 and 1 <= day <= 31:
                found.append((match.start(), (year, month, day)))
        blanked = pattern.sub(lambda m: " " * len(m.group()), blanked)
    found.sort()
    return [d for _, d in found], blanked


def numbers(text: str) -> list[tuple[float, str]]:
    """Numbers in text as ``(value, as written)``; ``1.10`` equals ``1.1``, ``2,000`` is 2000."""
    out = []
    for match in NUMBER.finditer(text):
        try:
            out.append((float(match.group().replace(",", "")), match.group()))
        except ValueError:
            continue
    return out


def negated(text: str) -> bool:
    """Odd number of negation markers (idioms such as "can't wait" left out)."""
    text = NEGATION_IDIOMS.sub(" ", text)
    count = len(NEGATION_EN.findall(text)) + len(NEGATION_ZH.findall(text))
    return count % 2 == 1


def fmt_date(d: tuple[int | None, int, int]) -> str:
    year, month, day = d
    return f"{year:04d}-{month:02d}-{day:02d}" if year else f"{month:02d}-{day:02d}"


def dates_disagree(a: list, b: list) -> bool:
    """True when the first dates of both sides differ in a component both specify."""
    (ya, ma, da), (yb, mb, db) = a[0], b[0]
    if (ma, da) != (mb, db):
        return True
    return ya is not None and yb is not None and ya != yb


HAN_CHAR = re.compile(f"[{HAN}]")


def has_han(text: str) -> bool:
    return not text.isascii() and HAN_CHAR.search(text) is not None
