"""The rules judge: first-person and owner-attributed changes of state, in English and Chinese
(pure code; the default `ContradictionJudge`).

It reads what someone states about themselves (``I``/``my``/``我``: the speaker, or the user when a
memory has no speaker), about a named owner (``Priya's address is …``) or about a thing in
particular (``the deadline moved to Friday``), in the prose statements `engine.memory.surface`
finds (never questions, quotes, code or other formats; a plan, wish or report states nothing). A
newer memory replaces an older one only when it says the state changed and the older one states
the old value; recall on free text is a model judge's job (`engine.memory.endpoint`). Four parts
(clauses in `engine.memory.clauses`, counts in `engine.memory.counts`, claims and ends here):

1. **Clauses**: each statement clause by clause, with a dropped subject put back (``traded in the
   civic``, ``钢琴放弃了``); a sentence that opens as a correction (``sorry, I got that wrong``,
   ``更正一下``) states a change.
2. **Claims** (owner, attribute, value): where someone lives (``I moved to Denver``,
   ``我搬到了上海``), where and as what they work (``I now work at``, ``I quit my job``, ``I was
   promoted to``, ``我跳槽到``, ``升职为``), age and relationship status, personal attributes
   (``my new number is``, ``I changed my email to``, ``我的手机号改成``), an attribute of a thing
   (``the standup moved to 10am``, ``汇率现在是``), habits that stopped (``I no longer``, ``I don't
   … anymore``, ``我不再``). A value that refines the older one (``Boston, MA``) is no change.
3. **Ends**: what the owner had or did is over (``I sold my Focus``, ``Emma and I broke up``,
   ``the trip got cancelled``, ``我把卡罗拉卖了``, ``日语放弃了``); the older memory must be a
   first-person statement naming it (for things sold or given away: one they had).
4. **Counts** the owner keeps, said again with a new value and a word that says it is current
   (``I've completed 4 projects`` … ``I just finished my 5th project``, ``我现在已经读了5本书``).

Each has negatives in the tests (questions, quoted text, other people, plans, negations such as
``I haven't moved``). `RulesJudge.keys` names what a text claims, so `SessionMemory` asks about the
same owner's older memories of the same subject even when they share no word.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from engine.memory.clauses import clauses, corrected, has_han, stated_clauses
from engine.memory.counts import Tally, restated, tallies
from engine.memory.judges import NO, Judgement, _Cache
from engine.memory.surface import HAN, Sentence, statements
from engine.memory.tokenize import tokenize

__all__ = ["RulesJudge", "subject_keys"]

# == 2. claims ==================================================================================

_LEAD_EN = re.compile(
    r"^(?:(?:so|well|oh|ok|okay|yeah|yes|yep|hey|hi|guess what|big news|great news|news|update|"
    r"correction|actually|anyway|btw|by the way|just so you know|fyi|also|and|but|now|finally|"
    r"honestly|frankly|to be honest|tbh|as of (?:today|now)|these days|since then)\b[\s,!:.-]*)+",
    re.IGNORECASE,
)
_SUBJ = r"(?P<subj>I|[Ww]e|[A-Z][a-z]+)"
_ADV = r"(?:\s+(?:just|recently|finally|now|also|actually|officially|already|since|have|has|had))*"
_HAVE = r"(?:'ve|\s+have|\s+has)?"
_PLACE = r"(?P<val>(?:the\s+)?[A-Z][\w'.-]*(?:\s+(?:[A-Z][\w'.-]*|(?:of|de|la|upon)\b))*)"
# A place as chat writes it, lower case too ("we moved up to denver in august"): one word, then
# the end of the clause or a word that starts what follows.
_PLACE_OR_LOWER = (
    r"(?P<val>(?:the\s+)?[A-Z][\w'.-]*(?:\s+(?:[A-Z][\w'.-]*|(?:of|de|la|upon)\b))*"
    r"|(?!(?:the|a|an|my|our|his|her|their|work|school|bed|tears|action)\b)[a-z]{3,}"
    r"(?=\s+(?:in|last|this|on|two|three|a\s+few|for|after|because|since|and|with|from)\b|[,.!;]|$))"
)
_ORG = (
    r"(?P<val>(?:a|an|the|my)?\s*[\w'&.-]+"
    r"(?:\s+(?!(?:as|in|for|since|and|but|because|with|on)\b)[\w'&.-]+){0,3})"
)
_TITLE = r"(?:a\s+|an\s+|the\s+)?(?P<val>[A-Za-z]+(?:\s+[A-Za-z]+){0,3})"
_PERSONAL = (
    r"(?:(?:phone|mobile|cell|work|home)\s+)?(?:number|phone)|e-?mail(?:\s+address)?|address|"
    r"username|handle|(?:last\s+|first\s+|nick)?name|surname|birthday|job(?:\s+title)?|title|"
    r"role|position|employer|company|boss|manager|school|major|partner|boyfriend|girlfriend|"
    r"husband|wife|car|doctor|dentist|therapist|diet|favou?rite\s+[a-z]+(?:\s+[a-z]+)?|password|"
    r"budget|salary|rent|pronouns|team|city|hometown|zip\s+code|time\s*zone|landlord|coach"
)
_PAST_EN = re.compile(
    r"\b(?:when (?:i|we) (?:was|were)|as a (?:kid|child|teen)|growing up|back then|"
    r"(?<!getting )(?<!get )(?<!got )(?<!be )(?<!am )used to|"
    r"in (?:19|20)\d\d|years? later|at the time|before that)\b",
    re.IGNORECASE,
)
# (attribute, negated, said as a change, pattern); the first that matches is the clause's claim
_EN = [(a, n, c, re.compile(p)) for a, n, c, p in [
    ("residence", False, True, rf"{_SUBJ}{_ADV}\s+(?:moved|relocated)(?:\s+(?:back|over|out|up|"
     rf"down|away))?\s+(?:to|into)\s+{_PLACE_OR_LOWER}"),
    ("residence", False, False, rf"{_SUBJ}(?:'m|\s+am|\s+are|\s+is)?{_ADV}(?:\s+(?:currently|"
     r"still))?\s+(?:live|lives|living|based|settled)\s+in\s+(?:(?:a|an|my|our)\s+(?:[a-z'-]+"
     rf"\s+){{0,3}}in\s+)?{_PLACE}"),
    ("residence", True, True, rf"{_SUBJ}{_ADV}\s+(?:no longer live|moved (?:away )?(?:out of|"
     rf"away from|from))\s+{_PLACE}"),
    ("employer", False, False, rf"{_SUBJ}{_ADV}(?:\s+(?:currently|still))?\s+(?:work|works|"
     rf"working)\s+(?:at|for)\s+{_ORG}"),
    ("employer", False, True, rf"{_SUBJ}{_HAVE}{_ADV}\s+(?:got|landed|accepted|took|started|"
     rf"began)\s+(?:a\s+|an\s+)?(?:new\s+)?(?:job|position|role)\s+(?:at|with)\s+{_ORG}"),
    ("employer", False, True, rf"{_SUBJ}{_HAVE}{_ADV}\s+(?:started working (?:at|for)|been hired "
     r"(?:at|by)|got hired (?:at|by)|joined)\s+(?P<val>[A-Z][\w'&.-]*(?:\s+[A-Z][\w'&.-]*)*)"),
    ("employer", True, True, rf"{_SUBJ}{_HAVE}{_ADV}\s+(?:quit|left|lost)\s+(?:my|our|his|her)\s+"
     rf"job(?:\s+at\s+{_ORG})?"),
    ("employer", True, True, rf"{_SUBJ}{_ADV}\s+(?:no longer work|don't work|do not work)\s+"
     rf"(?:at|for)\s+{_ORG}"),
    ("employer", True, True, rf"{_SUBJ}{_HAVE}(?:\s+been|\s+was|\s+got)\s+(?:laid off|fired|"
     rf"let go)(?:\s+(?:from|by)\s+{_ORG})?"),
    ("job", False, False, rf"{_SUBJ}(?:'m|\s+am|\s+is)?{_ADV}\s+(?:working|employed|work|works)"
     r"\s+as\s+(?:a|an)\s+(?P<val>[a-z]+(?:\s+(?!(?:at|for|in|with|on)\b)[a-z]+){0,2})"),
    ("job", False, True, rf"{_SUBJ}{_HAVE}{_ADV}(?:\s+been|\s+was|\s+got|\s+were)\s+promoted\s+"
     rf"to\s+{_TITLE}"),
    ("job", False, True, rf"{_SUBJ}{_HAVE}{_ADV}\s+(?:got|landed|accepted|took|started|began)\s+"
     rf"(?:a\s+|an\s+)?(?:new\s+)?(?:job|position|role)\s+as\s+{_TITLE}"),
]]
# "my number is …", "Priya's new email is …", "my new dentist is Dr. Lee"
_MY_ATTR = re.compile(
    rf"(?P<subj>my|our|[A-Z][a-z]+'s)\s+(?P<new>new\s+)?(?P<attr>{_PERSONAL})\s+(?:is|'s|are)"
    r"(?P<now>\s+now)?\s+(?P<val>.+)"
    r"|(?P<subj2>my|our)\s+(?P<new2>new)\s+(?P<attr2>[a-z]+(?:\s+[a-z]+)?)\s+(?:is|'s|are)\s+"
    r"(?P<val2>(?-i:[A-Z0-9@+]|the\s+[A-Z]).*)",
    re.IGNORECASE,
)
# "I changed my email to …", "I've set my alarm to 6 am", "my number has changed to …" (not
# "moved": "I moved my painting to the hallway" says where a thing is, not what it is)
_CHANGED = re.compile(
    rf"(?P<subj>I|[Ww]e){_HAVE}{_ADV}\s+(?:changed|switched|updated|set|reset|raised|"
    r"lowered|increased|decreased|reduced|cut|bumped|upped)\s+(?:my|our)\s+(?P<attr>(?!(?:mind|"
    r"plans?|life|ways?|tune|focus|approach)\b)[a-z][\w-]*(?:\s+[a-z][\w-]*)"
    r"{0,2}?)(?:\s+(?:up|down|back))?\s+to\s+(?P<val>.+)"
    rf"|(?P<subj2>my|our)\s+(?P<attr2>{_PERSONAL})\s+(?:has\s+)?(?:changed|moved|switched)\s+to\s+"
    r"(?P<val2>.+)",
    re.IGNORECASE,
)
_AGE = re.compile(
    rf"{_SUBJ}(?:'m|\s+am|\s+is){_ADV}\s+(?P<val>\d{{1,3}})(?:\s+years?\s+old)?(?:\s+now)?$"
    rf"|(?P<subj2>I|[Ww]e|[A-Z][a-z]+){_ADV}\s+turned\s+(?P<val2>\d{{1,3}})\b"
)
_RELATION = re.compile(
    rf"{_SUBJ}(?:'m|\s+am|\s+are|\s+is){_ADV}(?:\s+(?:happily|still|officially))?\s+"
    r"(?P<val>single|married|engaged|divorced|widowed|dating|in a relationship|seeing someone)"
    rf"|(?P<subj2>I|[Ww]e|[A-Z][a-z]+){_HAVE}{_ADV}\s+"
    r"(?P<val2>got married|got engaged|got divorced|broke up|split up|separated)\b"
)
_RELATION_VALUE = {"got married": "married", "got engaged": "engaged", "got divorced": "divorced",
                   "broke up": "single", "split up": "single", "separated": "single",
                   "seeing someone": "dating", "in a relationship": "dating"}
# Habits that stopped: "I no longer …", "I don't … anymore", "I quit …".
_STOPPED = re.compile(
    rf"{_SUBJ}(?:'m|\s+am|\s+is|\s+are)?{_ADV}\s+(?:no longer|not\s+(?P<anymore1>.+?)\s+any\s*more|"
    r"(?:don't|do not|doesn't|does not|never)\s+(?P<anymore2>.+?)\s+any\s*more|"
    r"stopped(?!\s+(?:by|at|in|for|to|off|over)\b)|quit(?!\s+(?:my|our|his|her)\s+job)|gave up|"
    r"have given up|(?:'ve|have) stopped)(?:\s+(?P<val>.+))?",
)
# An attribute of a thing, said as changed ("the standup moved to 10am", "the rate is now 1.10")
# or as it is ("the deadline is Friday": only ever the older side of a change).
_DET = r"(?P<subj>[Tt]he\s+|[Mm]y\s+|[Oo]ur\s+|[A-Z][a-z]+'s\s+|)"
_THING = (
    r"(?P<attr>(?!(?i:i|it|this|that|these|those|he|she|they|we|you|everything|everyone|"
    r"something|nothing|life|things|there|here|what|which|who)\b)"
    r"(?:[a-z][\w/'-]*|[A-Z][\w/-]*(?=\s+[a-z]))(?:\s+[a-z][\w/'-]*){0,3}?)"
)
_THING_CHANGED = re.compile(
    rf"^{_DET}{_THING}\s+(?:has\s+|have\s+|was\s+|were\s+|got\s+|has\s+been\s+|was\s+just\s+)?"
    r"(?:moved|changed|switched|updated|pushed|postponed|rescheduled|reset|raised|lowered|cut|"
    r"corrected|upgraded|downgraded|renamed|adjusted|extended|increased|decreased|bumped|"
    r"went(?=\s+(?:up|down)\b)|rose|dropped|fell|jumped)\s+(?:back\s+|up\s+|down\s+)?to\s+(?P<val>.+)"
    rf"|^{_DET.replace('subj', 'subj2')}{_THING.replace('attr', 'attr2')}\s+(?:is|are)\s+now\s+"
    r"(?P<val2>.+)"
)
_THING_IS = re.compile(
    rf"^{_DET}{_THING}\s+(?:is|are|was|'s|will be|is set to|is scheduled for|is due)\s+(?P<val>.+)"
)
_EVALUATIVE = re.compile(
    r"(?:so|very|really|too|pretty|quite|super|a bit|kind of|great|good|bad|nice|awesome|amazing|"
    r"fine|ok|okay|beautiful|lovely|hard|tough|crazy|wild|fun|better|worse|over|done|gone|here|"
    r"there|back|full|empty|important|everything|all|what|how|like|going|getting|about)\b",
    re.IGNORECASE,
)
_NOT_ATTRIBUTE = frozenset(
    "i me you he him she her it we us they them so and but then that this what who which "
    "everyone someone somebody everybody".split()
)
_CUT_EN = re.compile(
    r"\s+(?:and|but|because|so|since|when|while|after|before|which|who|where|with|for|in|on|"
    r"during|last|this|next|ago|now|recently|yesterday|today|at the moment)\b.*$|(?:,\s|;|:\s).*$"
)

_ZH_STOP = r"(?=[，,。！？!?；;、\s]|了|啦|去|住|居住|生活|工作|上班|的时候|以后|之后|$)"
_ZH_ADV = r"(?:现在|目前|已经|刚刚|刚|终于|也|还|今年|去年|上个月|上周|最近|前不久|正式)*"
_ZH_SUBJ = rf"(?P<subj>我们|我|[{HAN}]{{2,3}}?)"
_ZH_PLACE = rf"(?P<val>[{HAN}A-Za-z]{{2,12}}?){_ZH_STOP}"
_ZH_ORG = rf"(?P<val>[{HAN}A-Za-z0-9]{{2,12}}?)"
_ZH = [(a, n, c, re.compile(rf"{_ZH_SUBJ}{_ZH_ADV}{p}")) for a, n, c, p in [
    ("residence", False, True, rf"(?:搬到了?|搬家到了?|搬去了?|迁到了?|定居到了?){_ZH_PLACE}"),
    ("residence", False, False, rf"(?:住在|定居在|生活在){_ZH_PLACE}"),
    ("residence", True, True, rf"(?:不再住在|不住在|搬离了?|离开了?){_ZH_PLACE}"),
    ("employer", False, False, rf"在{_ZH_ORG}(?:工作|上班|任职)"),
    ("employer", False, True, rf"(?:跳槽到了?|跳槽去了?|入职了?|加入了?|去了){_ZH_ORG}"
     rf"(?:工作|上班|任职|{_ZH_STOP})"),
    ("employer", True, True, r"(?:辞职了?|离职了?|被裁员了?|被开除了?|失业了?)(?P<val>)"),
    ("employer", True, True, rf"(?:不再在|不在){_ZH_ORG}(?:工作|上班)"),
    ("job", False, True, rf"被?(?:升职|晋升|提拔|升)(?:为|成了?|到了?)"
     rf"(?P<val>[{HAN}A-Za-z]{{2,10}}?)(?:了|{_ZH_STOP})"),
]]
_ZH_PERSONAL = (
    r"手机号码?|电话号码?|电话|号码|邮箱|电子邮件|地址|住址|名字|微信号?|生日|工作|职位|老板|公司|学校|专业|"
    r"车|密码|预算|工资|房租|男朋友|女朋友|对象|医生|城市|家乡"
)
_ZH_ATTR = re.compile(
    rf"(?P<subj>我的|我们的|[{HAN}]{{2,3}}的)(?P<new>新)?(?P<attr>{_ZH_PERSONAL}|(?<=新)[{HAN}]{{1,4}}?)"
    rf"(?:现在|已经)?(?:是|改成了?|换成了?|变成了?|改为|换为|更新为)(?P<val>[^，,。！？!?；;]{{1,40}})"
    rf"|(?P<subj2>我们|我){_ZH_ADV}把(?P<attr2>{_ZH_PERSONAL})(?:改成了?|换成了?|改为|更新为)"
    r"(?P<val2>[^，,。！？!?；;]{1,40})"
)
_ZH_STOPPED = re.compile(
    rf"(?P<subj>我们|我){_ZH_ADV}(?:不再|已经不|再也不|戒掉了?|戒了|戒|不)(?P<val>[{HAN}A-Za-z]{{1,10}}?)(?:了|$)"
)
_ZH_THING = (
    rf"(?P<attr>(?:我的|我们的|我们(?=[{HAN}]{{2}}))?(?![我你他她它这那])"
    rf"[{HAN}A-Za-z0-9/+-]{{2,10}}?)"
)
_ZH_THING_CHANGED = re.compile(
    rf"{_ZH_THING}(?:现在|已经|已)?(?:改为|改成了?|改到了?|调整为|调整到|换成了?|推迟到了?|提前到了?|"
    rf"迁到了?|搬到了?|搬去了?|更新为|变成了?|升级为|升级到|降为|涨到了?|降到了?|现在是)(?P<val>[^，,。！？!?；;]{{1,30}})"
)
_ZH_THING_IS = re.compile(
    rf"{_ZH_THING}(?:是|为|定在|定为|设为|在)(?P<val>[^，,。！？!?；;]{{1,30}})")
_ZH_EVALUATIVE = re.compile(r"(?:很|非常|太|真|挺|特别|好|不错|什么|怎么|谁|哪)")
_ZH_BARE_VERB = re.compile(r"喜欢|知道|认识|是|想|要|会|能|行|对|记得|清楚|懂|明白|确定|在意|介意")


@dataclass(frozen=True)
class _Claim:
    owner: str
    attribute: str
    """``residence``, ``employer``, ``job``, ``age``, ``relationship``, ``my:<attr>``,
    ``the:<attr>``, or ``do``: a habit that stopped."""
    value: str
    negated: bool
    changed: bool
    """Said as a change (``moved to``, ``new``, ``no longer``): higher confidence."""


def _owner(subject: str, speaker: str) -> str:
    s = subject.lower().strip().removesuffix("'s")
    if s in {"i", "we", "my", "our", "我", "我们", "我的", "我们的", "i'm"}:
        return speaker
    if s in {"the", ""}:
        return "*"  # nobody in particular ("the deadline"): meets any owner
    return s.removesuffix("的").removesuffix("'")


def _clean(value: str) -> str:
    return _CUT_EN.sub("", value.strip()).strip(" .!,'\"").strip()


def _group(m: re.Match[str], name: str) -> str:
    """A group of a pattern with two alternatives (``val`` or ``val2``)."""
    return m.group(name) or m.groupdict().get(name + "2") or ""


def _en_claims(clause: str, speaker: str) -> list[_Claim]:
    text = re.sub(r"^[A-Z][a-z]+,\s+", "", _LEAD_EN.sub("", clause))  # "Mel, I moved …"
    if text.startswith("i "):
        text = "I" + text[1:]
    out: list[_Claim] = []

    def claim(subj: str, attribute: str, value: str, negated: bool = False,
              changed: bool = False) -> None:
        out.append(_Claim(_owner(subj, speaker), attribute, value.lower(), negated, changed))

    for attribute, negated, changed, pattern in _EN:
        m = pattern.match(text)
        if m is None:
            continue
        value = _clean(m.group("val") or "")
        if (attribute == "employer" and negated) or (value and value.lower() not in _NOWHERE):
            claim(m.group("subj"), attribute, value, negated, changed)
            break
    m = _MY_ATTR.match(text)
    value = _clean(_group(m, "val")) if m else ""
    if m and value and not re.match(r"(?:so|very|really|too|pretty|quite|super|a bit|kind of)\b",
                                    value):
        changed = bool(m.group("new") or m.group("new2") or m.group("now"))
        claim(_group(m, "subj"), f"my:{_attr(_group(m, 'attr'))}", value, changed=changed)
    for pattern, attribute in ((_AGE, "age"), (_RELATION, "relationship")):
        m = pattern.match(text)
        if m is not None:
            raw = _group(m, "val").lower()
            changed = bool(m.group("val2")) or bool(re.search(r"\b(?:now|again)\b", text))
            claim(_group(m, "subj"), attribute, _RELATION_VALUE.get(raw, raw), changed=changed)
    m = _THING_CHANGED.match(text) or (None if out else _THING_IS.match(text))
    if m is not None and not _NOT_ATTRIBUTE.intersection(_group(m, "attr").lower().split()):
        value = _clean(_group(m, "val"))  # not "so you moved to Paris": a person, no attribute
        if value and not _EVALUATIVE.match(value) and len(value.split()) <= 6:
            claim(_group(m, "subj"), f"the:{_attr(_group(m, 'attr'))}", value,
                  changed=m.re is _THING_CHANGED)
    m = _CHANGED.match(text)
    value = _clean(_group(m, "val")) if m else ""
    if m and value and not _EVALUATIVE.match(value):
        claim(_group(m, "subj"), f"my:{_attr(_group(m, 'attr'))}", value, changed=True)
    m = _STOPPED.match(text)
    value = _clean(m.group("anymore1") or m.group("anymore2") or m.group("val") or "") if m else ""
    if m and value:
        claim(m.group("subj"), "do", value, negated=True, changed=True)
    return out


_NOWHERE = frozenset({"it", "this", "that", "home", "there", "here"})


def _zh_claims(clause: str, speaker: str) -> list[_Claim]:
    text = re.sub(r"^(?:对了|其实|告诉你|好消息|更新一下|顺便说一下|现在|嗯|哦|啊)[，,！!\s]*", "",
                  clause)
    out: list[_Claim] = []
    for attribute, negated, changed, pattern in _ZH:
        m = pattern.match(text)
        if m is not None and ((m.group("val") or "").strip() or negated):
            out.append(_Claim(_owner(m.group("subj"), speaker), attribute,
                              (m.group("val") or "").strip(), negated, changed))
            break
    m = _ZH_ATTR.match(text)
    if m is not None:
        changed = bool(m.group("new")) or bool(re.search("改|换|变|更新", m.group()))
        out.append(_Claim(_owner(_group(m, "subj"), speaker), f"my:{_attr(_group(m, 'attr'))}",
                          _group(m, "val").strip(), False, changed))
    if not out or all(c.owner != speaker for c in out):  # "公司搬到亦庄了": a thing moved
        m = _ZH_THING_CHANGED.match(text) or _ZH_THING_IS.match(text)
        if m is not None and not _ZH_EVALUATIVE.match(m.group("val")):
            attr = re.sub("^(?:我们的|我的|我们|我)", "", m.group("attr")) or m.group("attr")
            owner = speaker if m.group("attr").startswith("我") else "*"
            out.append(_Claim(owner, f"the:{_attr(attr)}", m.group("val").strip(), False,
                              m.re is _ZH_THING_CHANGED))
    m = _ZH_STOPPED.match(text)
    if m is not None and not out and not _ZH_BARE_VERB.fullmatch(m.group("val")) and (
            "也" not in text[:4]):  # not "我也不喜欢", "我不知道": an answer, no habit that stopped
        # "我不看书了" says it changed; "我不喜欢看书" how it is
        if re.search("不再|已经不|再也不|戒", m.group()) or m.group().endswith("了"):
            out.append(_Claim(_owner(m.group("subj"), speaker), "do", m.group("val"), True, True))
    return out


def _attr(label: str) -> str:
    """One name per attribute (``phone number``, ``number``, ``cell`` -> ``phone``)."""
    label = re.sub(r"\s+", " ", label.lower()).replace("favourite", "favorite")
    if re.fullmatch(r"(?:(?:phone|mobile|cell|work|home) )?(?:number|phone)|"
                    r"手机号码?|电话号码?|电话|号码", label):
        return "phone"
    if re.fullmatch(r"e-?mail(?: address)?", label):
        return "email"
    found = re.fullmatch(r"(?P<head>[a-z]+) (?:with|for|of|at) (?:the |my |our )?(?P<mod>[a-z]+)",
                         label)
    if found:  # "the meeting with the contractor" is "the contractor meeting"
        label = f"{found.group('mod')} {found.group('head')}"
    return "job" if label in {"job title", "职位", "职务"} else label


# == 3. ends ====================================================================================

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
_POSSESSIVE_END = frozenset("sold,sold off,got rid of,gave away,given away,donated,scrapped,"
                            "returned,traded in,traded,rehomed,rehome".split(","))
_GENERIC_TARGET = re.compile(
    r"\s+(?:account|membership|subscription|thing|plan|plans|life|stuff|streak|habit|trip)$")
# Targets that name nothing in particular: "it", "my job", "all my work", "everything".
_VAGUE = re.compile(
    r"(?:(?:all|some|most)\s+(?:of\s+)?(?:my|our|the)?\s*)?(?:it|that|this|them|there|here|me|you|"
    r"job|work|thing|things|stuff|everything|something|anything|one|time|way|track|touch|mind|"
    r"hope|faith|count|sleep|weight|interest|patience|control|money)"
    r"|(?:by|for|over|in|up|out|on)\b.*"
)
_LIGHT_VERB = re.compile(r"^(?:doing|using|at|on|in|with|going to|into|having|being|eating|"
                         r"drinking)\s+")
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
_NEGATION_EN = re.compile(
    r"\b(?:not|never|no|don't|doesn't|didn't|won't|can't|isn't|aren't)\b|n't\b", re.I
)
_ZH_NEGATION = re.compile(r"不|没|别")
# An event, not a state: "I sold a bike at the fair last week".
_EVENT_EN = re.compile(
    r"\b(?:yesterday|last (?:night|week|weekend|month|year|time|summer|winter|spring|fall)|ago|"
    r"the other day|this morning|tonight|when i was|(?<!getting )(?<!get )(?<!got )used to|"
    r"back then|once)\b",
    re.IGNORECASE,
)
_MINE = re.compile(r"\b(?:i|me|my|we|us|our)\b|我", re.IGNORECASE)
_EN_LEAD = re.compile(
    r"^(?:(?:so|well|oh|ok|okay|yeah|yes|and|but|now|these days|nowadays|anyway|also|btw|"
    r"by the way|just so you know|fyi|guess what|finally|honestly|since then)\b[\s,!:.-]*)+",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class _End:
    owner: str
    verb: str  # "sold" …, "off" (a plan called off), "gone", "over", "broke up", "left", "卖"
    value: str


def _ends(clause: str, owner: str) -> list[_End]:
    """What a clause says is over for its owner."""
    if has_han(clause):
        m = _ZH_END.match(clause)
        if m is None:
            return []
        value = next(v for k, v in m.groupdict().items() if k.startswith("val") and v)
        return [_End(owner, "卖" if m.group("val") or m.group("val5") else "end", value)]
    text = _EN_LEAD.sub("", clause)
    out = []
    for pattern in (_END_EN, _OFF_EN):
        m = pattern.match(text)
        if m is None:
            continue
        groups = m.groupdict()
        value = _target(next((v for k, v in groups.items() if k.startswith("val") and v), ""))
        verb = ("off" if pattern is _OFF_EN else "gone" if groups.get("gone")
                else "over" if groups.get("val7") else "broke up" if groups.get("val3")
                else "left" if groups.get("val4") or groups.get("val5")
                else (groups.get("verb") or "gave away").lower())
        if value and not _VAGUE.fullmatch(value):
            out.append(_End(owner, verb, value))
    return out


def _target(value: str) -> str:
    """What ended, without determiners, light verbs, generic nouns and what follows it
    (``the civic this weekend`` -> ``civic``, ``doing keto`` -> ``keto``, ``the chase account``
    -> ``chase``)."""
    value = value.strip(" .!,").lower()
    value = re.sub(r"^(?:my|our|the|his|her|their|a|an)\s+", "", value)
    value = _LIGHT_VERB.sub("", value)
    value = re.sub(r"^(?:my|our|the|a|an)\s+", "", value)
    value = re.split(r"\s+(?:and|because|since|after|so|last|this|in|at|for|to|two|a few|"
                     r"yesterday|today|anymore|any more|now|finally|already|lol)\b|[,.!?;:(]",
                     value)[0]
    previous = None
    while previous != value:
        previous, value = value, _GENERIC_TARGET.sub("", value)
    return value.strip()


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
        if has_han(c):
            if not _ZH_NEGATION.search(c) and not re.search(r"昨天|上周|去年|那次|以前", c):
                out.append(c)
        elif plans or not _EVENT_EN.search(c):
            out.append(c)  # a negation is looked for before what ended (`_negated_before`)
    return out


def _negated_before(clause: str, target: str) -> bool:
    """A negation before the target's first word (``…ThinkPad X220, don't judge`` is not)."""
    if has_han(clause):
        return bool(_ZH_NEGATION.search(clause))
    first = target.split()[0] if target.split() else ""
    at = clause.lower().find(first) if first else -1
    return bool(_NEGATION_EN.search(clause[: at if at >= 0 else len(clause)]))


def _zh_contains(clause: str, target: str) -> bool:
    """A Chinese target in a clause; a verb and its object (``跑外卖``) also by the object."""
    if _contains(clause, target):
        return True
    return len(target) >= 3 and target[1:] in clause.replace(" ", "")


def _ended(old: list[Sentence], ends: list[_End]) -> Judgement:
    """An older first-person statement naming what a newer end says is over."""
    for f in ends:
        plans = f.verb in {"off", "broke up", "end"}  # a plan called off; a couple split
        for s in old:
            found = [c for c in _state_clauses(s, f.owner, plans)
                     if (_zh_contains(c, f.value) if has_han(f.value) else _contains(c, f.value))
                     and not _negated_before(c, f.value)]
            if not found:
                continue
            if f.verb in _POSSESSIVE_END | {"卖"} and not _POSSESSED.search(s.text):
                continue  # "I want a bike like Sam's" / "I sold my bike": not one they had
            return Judgement(True, 0.8, f"{_who(f.owner)} no longer: '{f.value}'", "negation")
    return NO


def _grams(text: str, n: int) -> set[str]:
    """Han character n-grams (segmentation aside: ``一包烟`` and ``戒烟`` share ``烟``)."""
    han = re.sub(f"[^{HAN}]", "", text)
    return {han[i : i + n] for i in range(len(han) - n + 1)}




# == the judge ==================================================================================


class RulesJudge:
    """The default judge: conservative rules for stated changes (see the module)."""

    name = "rules"

    def __init__(self, cache_size: int = 20_000) -> None:
        self._read: dict[str, tuple[list[_Claim], list[Sentence], list[_End], list[Tally]]] = {}
        self._size = cache_size
        self._cache = _Cache(cache_size)

    def read(self, text: str) -> tuple[list[_Claim], list[Sentence], list[_End], list[Tally]]:
        """The claims, prose statements, ends and counts of a text (cached)."""
        found = self._read.get(text)
        if found is not None:
            return found
        sentences = statements(text)
        claims: list[_Claim] = []
        ends: list[_End] = []
        for s in sentences:
            said: list[_Claim] = []
            for clause in stated_clauses(s):  # "Priya left, my new manager is Daniel"
                if has_han(clause):
                    said += _zh_claims(clause, s.owner)
                elif not _PAST_EN.search(clause):
                    said += _en_claims(clause, s.owner)
                ends += _ends(clause, s.owner)
            if corrected(s):  # "sorry, I got that wrong, my birthday is March 13th"
                said = [replace(c, changed=True) for c in said]
            claims += said
        if len(self._read) > self._size:
            self._read.clear()
        found = self._read[text] = (claims, sentences, ends, tallies(text))
        return found

    def keys(self, text: str) -> frozenset[str]:
        """``owner|attribute`` pairs the text claims: older memories sharing one are candidates
        even without a shared word (``I live in Berlin`` / ``I moved to Paris``, ``一包烟`` /
        ``戒烟``)."""
        claims, sentences, ends, counts = self.read(text)
        keys = {f"{c.owner}|{c.attribute}" for c in claims if c.attribute != "do"}
        # a count meets the same noun's, and "down to 188" any count ("tally:*")
        keys |= {f"{t.owner}|tally:{noun}" for t in counts for noun in (t.noun, "*")}
        keys |= {f"{f.owner}|zh:{g}" for f in ends if has_han(f.value)
                 for g in _grams(f.value, 1 if len(f.value) == 1 else 2)}
        for s in sentences:  # a Chinese state an end may name, segmented otherwise
            if has_han(s.text) and any(not _negated_before(c, "")
                                       for c in _state_clauses(s, s.owner)):
                keys |= {f"{s.owner}|zh:{g}" for n in (1, 2) for g in _grams(s.text, n)}
        return frozenset(keys)

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
        old_claims, old_sentences, _, old_counts = self.read(old_text)
        new_claims, _, new_ends, new_counts = self.read(new_text)
        found = _claimed(old_claims, old_sentences, new_claims, new_text)
        if not found.contradicts:
            found = _ended(old_sentences, new_ends)
        hit = None if found.contradicts else restated(old_counts, new_counts)
        if hit is not None:
            was, now = (", ".join(f"{v:g}" for v in sorted(t.values)) for t in hit)
            found = Judgement(True, 0.8, f"{_who(hit[1].owner)} {hit[1].noun} count now {now} "
                              f"(was {was})")
        return found


def _claimed(old_claims: list[_Claim], old_sentences: list[Sentence], new_claims: list[_Claim],
             new_text: str) -> Judgement:
    """A claim of the newer memory that changes or ends one of the older memory."""
    for new in new_claims:
        for old in old_claims:
            if _base(old.attribute) != _base(new.attribute) or new.attribute == "do" or old.negated:
                continue
            if old.owner != new.owner and not (
                    new.attribute.startswith(("the:", "my:")) and "*" in (old.owner, new.owner)):
                continue
            if new.negated:
                if not new.value or _overlaps(old.value, new.value):
                    shown = f" {old.value}" if old.value else ""
                    return Judgement(True, 0.85, f"{_who(new.owner)} no longer: "
                                     f"{new.attribute}{shown}", "negation")
                continue
            if not new.changed and _restates(old.value, new_text):
                continue  # "I moved to Lisbon" / "I live in Alfama, the old part of lisbon"
            promoted = new.changed and _base(new.attribute) == "job"
            if _overlaps(old.value, new.value) and not (promoted and old.value != new.value):
                continue  # "Boston" / "Boston, MA"; but "engineer" -> "senior engineer" is new
            if new.attribute.startswith("the:") and not new.changed:
                continue  # "the X is A" then "the X is B": two descriptions, not a change
            label = new.attribute.removeprefix("my:").removeprefix("the:")
            return Judgement(True, 0.9 if new.changed else 0.75,
                             f"{_who(new.owner)} {label} changed: '{old.value}' -> '{new.value}'")
        if new.attribute == "do":  # "I stopped X": an older first-person "I X"
            for s in old_sentences:
                if (s.owner == new.owner and not s.hedged and not _negated(s.text)
                        and _first_person(s.text, new.owner) and _contains(s.text, new.value)):
                    return Judgement(True, 0.85, f"{_who(new.owner)} stopped: was '{new.value}'",
                                     "negation")
    return NO


def _base(attribute: str) -> str:
    """``my:budget`` and ``the:budget`` name one attribute."""
    return attribute.removeprefix("my:").removeprefix("the:")


def _restates(value: str, text: str) -> bool:
    """The newer text names the older value itself, not as what was left (``… of lisbon``, but
    not ``moved from Lisbon``): a refinement, not a change."""
    if not value or len(value) < 3:
        return False
    found = re.search(rf"(?<![\w])(?P<before>\w+\s+)?{re.escape(value)}(?![\w])", text.lower())
    return found is not None and (found.group("before") or "").strip() not in {
        "from", "left", "leaving", "quit", "was", "not", "从", "离开"}


def _who(owner: str) -> str:
    return {"": "the user", "*": "the"}.get(owner, owner.title())


def _terms(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


# A value said as one token with a digit or an @ (an email, a phone number, a handle): two of
# them are the same value only when they are equal.
_EXACT = re.compile(r"(?=\S*[@\d])[\w.+@-]*[@\d][\w.+@-]*")
# Measure words and degree words: "一家很小的公司" and "一家小公司" are one value.
_ZH_PLAIN = re.compile(r"[一这那每][家个所间位台辆]|很|非常|特别|挺|的")


def _overlaps(a: str, b: str) -> bool:
    """Same value, or one refines the other (``Boston`` / ``Boston, MA``)."""
    if has_han(a + b):
        x, y = _ZH_PLAIN.sub("", a.replace(" ", "")), _ZH_PLAIN.sub("", b.replace(" ", ""))
        return bool(x) and bool(y) and (x in y or y in x)
    if _EXACT.fullmatch(a.strip()) or _EXACT.fullmatch(b.strip()):
        return a.strip(" .").lower() == b.strip(" .").lower()  # an email, a number, an id
    ta, tb = _terms(a), _terms(b)
    if not ta or not tb:
        return a.strip().lower() == b.strip().lower()
    return ta <= tb or tb <= ta


def _contains(sentence: str, phrase: str) -> bool:
    if has_han(phrase):
        return phrase.replace(" ", "") in sentence.replace(" ", "")
    need = _terms(phrase)
    return bool(need) and need <= _terms(sentence)


def _negated(text: str) -> bool:
    return bool(re.search(r"\b(?:not|never|no longer|don't|doesn't|didn't|won't|can't)\b|n't\b",
                          text, re.I) or _ZH_NEGATION.search(text))


def _first_person(text: str, owner: str) -> bool:
    return (bool(re.search(r"\b(?:i|i'm|i've|we|my|our)\b", text, re.I)) or "我" in text
            or (bool(owner) and owner in text.lower()))


_READER: RulesJudge | None = None


def subject_keys(text: str) -> frozenset[str]:
    """``owner|attribute`` pairs a text states a value of, as the rules judge reads them: the
    subject keys `SessionMemory` uses for a judge that has no ``keys`` of its own."""
    global _READER
    if _READER is None:
        _READER = RulesJudge()
    return _READER.keys(text)
