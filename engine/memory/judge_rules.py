"""The rules judge's phrasings (`engine.memory.judges.RulesJudge`): the regular expressions that
read a first-person or owner-attributed statement of state, or of a change of state, in English
and Chinese (pure data: compiled once at import, no logic beyond building them).

Kept apart from the judge so that each file stays readable; the judge's module docstring says
which statements these cover and which they never read as a claim.
"""

from __future__ import annotations

import re

from engine.memory.surface import HAN

_LEAD_EN = re.compile(
    r"^(?:(?:so|well|oh|ok|okay|yeah|yes|yep|hey|hi|guess what|big news|great news|news|update|"
    r"correction|actually|anyway|btw|by the way|just so you know|fyi|also|and|but|now|finally|"
    r"honestly|frankly|to be honest|tbh|"
    r"as of (?:today|now)|these days|since then)\b[\s,!:.-]*)+",
    re.IGNORECASE,
)
_SUBJ = r"(?P<subj>I|[Ww]e|[A-Z][a-z]+)"
_ADV = r"(?:\s+(?:just|recently|finally|now|also|actually|officially|already|since|have|has|had))*"
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
_EN_SOURCES = [
    # (attribute, negated, changed, pattern)
    (
        "residence",
        False,
        True,
        rf"{_SUBJ}{_ADV}\s+(?:moved|relocated)(?:\s+(?:back|over|out|up|down|away))?\s+(?:to|into)\s+"
        rf"{_PLACE_OR_LOWER}",
    ),
    (
        "residence",
        False,
        False,
        rf"{_SUBJ}(?:'m|\s+am|\s+are|\s+is)?{_ADV}(?:\s+(?:currently|still))?\s+(?:live|lives|living|based|settled)\s+in\s+"
        rf"(?:(?:a|an|my|our)\s+(?:[a-z'-]+\s+){{0,3}}in\s+)?{_PLACE}",
    ),
    (
        "residence",
        True,
        True,
        rf"{_SUBJ}{_ADV}\s+(?:no longer live|moved (?:away )?(?:out of|away from|from))\s+{_PLACE}",
    ),
    (
        "employer",
        False,
        False,
        rf"{_SUBJ}{_ADV}(?:\s+(?:currently|still))?\s+(?:work|works|working)\s+(?:at|for)\s+{_ORG}",
    ),
    (
        "employer",
        False,
        True,
        rf"{_SUBJ}(?:'ve|\s+have|\s+has)?{_ADV}\s+(?:got|landed|accepted|took|started|began)\s+(?:a\s+|an\s+)?(?:new\s+)?(?:job|position|role)\s+(?:at|with)\s+{_ORG}",
    ),
    (
        "employer",
        False,
        True,
        rf"{_SUBJ}(?:'ve|\s+have|\s+has)?{_ADV}\s+(?:started working (?:at|for)|"
        r"been hired (?:at|by)|got hired (?:at|by)|joined)\s+"
        r"(?P<val>[A-Z][\w'&.-]*(?:\s+[A-Z][\w'&.-]*)*)",
    ),
    (
        "employer",
        True,
        True,
        rf"{_SUBJ}(?:'ve|\s+have|\s+has)?{_ADV}\s+(?:quit|left|lost)\s+(?:my|our|his|her)\s+job(?:\s+at\s+{_ORG})?",
    ),
    (
        "employer",
        True,
        True,
        rf"{_SUBJ}{_ADV}\s+(?:no longer work|don't work|do not work)\s+(?:at|for)\s+{_ORG}",
    ),
    (
        "employer",
        True,
        True,
        rf"{_SUBJ}(?:'ve|\s+have|\s+has)?(?:\s+been|\s+was|\s+got)\s+"
        rf"(?:laid off|fired|let go)(?:\s+(?:from|by)\s+{_ORG})?",
    ),
    (
        "job",
        False,
        False,
        rf"{_SUBJ}(?:'m|\s+am|\s+is)?{_ADV}\s+(?:working|employed|work|works)\s+as\s+(?:a|an)\s+(?P<val>[a-z]+(?:\s+(?!(?:at|for|in|with|on)\b)[a-z]+){{0,2}})",
    ),
    (
        "job",
        False,
        True,
        rf"{_SUBJ}(?:'ve|\s+have|\s+has)?{_ADV}(?:\s+been|\s+was|\s+got|\s+were)\s+promoted\s+to\s+"
        r"(?:a\s+|an\s+|the\s+)?(?P<val>[A-Za-z]+(?:\s+[A-Za-z]+){0,3})",
    ),
    (
        "job",
        False,
        True,
        rf"{_SUBJ}(?:'ve|\s+have|\s+has)?{_ADV}\s+(?:got|landed|accepted|took|started|began)\s+"
        r"(?:a\s+|an\s+)?(?:new\s+)?(?:job|position|role)\s+as\s+(?:a\s+|an\s+|the\s+)?"
        r"(?P<val>[A-Za-z]+(?:\s+[A-Za-z]+){0,3})",
    ),
]
_EN = [(a, n, c, re.compile(p)) for a, n, c, p in _EN_SOURCES]
_MY_ATTR = re.compile(
    rf"(?P<subj>my|our|[A-Z][a-z]+'s)\s+(?P<new>new\s+)?(?P<attr>{_PERSONAL})\s+(?:is|'s|are)"
    r"(?P<now>\s+now)?\s+(?P<val>.+)",
    re.IGNORECASE,
)
_MY_NEW = re.compile(
    r"(?P<subj>my|our)\s+new\s+(?P<attr>[a-z]+(?:\s+[a-z]+)?)\s+(?:is|'s|are)\s+"
    r"(?P<val>(?:[A-Z0-9@+]|the\s+[A-Z]).*)"
)
_CHANGED = re.compile(
    rf"(?P<subj>I|[Ww]e){_ADV}\s+(?:changed|switched|updated|moved)\s+(?:my|our)\s+"
    rf"(?P<attr>{_PERSONAL})\s+to\s+(?P<val>.+)"
    rf"|(?P<subj2>my|our)\s+(?P<attr2>{_PERSONAL})\s+(?:has\s+)?(?:changed|moved|switched)\s+to\s+(?P<val2>.+)",
    re.IGNORECASE,
)
_STOPPED = re.compile(
    rf"{_SUBJ}(?:'m|\s+am|\s+is|\s+are)?{_ADV}\s+(?:no longer|not\s+(?P<anymore1>.+?)\s+any\s*more|"
    r"(?:don't|do not|doesn't|does not|never)\s+(?P<anymore2>.+?)\s+any\s*more|"
    r"stopped(?!\s+(?:by|at|in|for|to|off|over)\b)|quit(?!\s+(?:my|our|his|her)\s+job)|gave up|"
    r"have given up|(?:'ve|have) stopped)(?:\s+(?P<val>.+))?",
)
_SWITCHED = re.compile(
    rf"{_SUBJ}(?:'ve|\s+have|\s+has)?{_ADV}\s+(?:switched|moved|changed|converted|gone)\s+"
    r"(?:over\s+)?from\s+(?P<old>.+?)\s+to\s+(?P<val>.+)"
)
# "I replaced my Honda with a Tesla", "I traded in my old bike for a gravel bike", "I upgraded
# from my iPhone 12 to a 15": the older thing is named, so an older memory that says the owner has
# or uses it is out of date.
_REPLACED = re.compile(
    rf"{_SUBJ}(?:'ve|\s+have|\s+has)?{_ADV}\s+(?:"
    r"(?:replaced|swapped|swapped\s+out|traded|traded\s+in|exchanged)\s+(?:my|our)\s+(?:old\s+)?"
    r"(?P<old>[\w'&.-]+(?:\s+[\w'&.-]+){0,3}?)\s+(?:for|with)\s+"
    r"|upgraded\s+(?:from\s+)?(?:my|our)\s+(?:old\s+)?(?P<old2>[\w'&.-]+(?:\s+[\w'&.-]+){0,3}?)"
    r"\s+to\s+)(?:a\s+|an\s+|the\s+|my\s+|our\s+)?(?:new\s+|brand\s+new\s+)?(?P<val>.+)"
)
# "I use Notion instead of Evernote now": said with a change word, the older habit is named.
_INSTEAD = re.compile(
    rf"{_SUBJ}{_ADV}\s+(?:use|drink|eat|take|drive|ride|play|read|watch|go\s+to|shop\s+at|cook\s+with|"
    r"listen\s+to)\s+(?P<val>[\w'&.-]+(?:\s+[\w'&.-]+){0,3}?)\s+instead\s+of\s+(?P<old>.+)"
)
_INSTEAD_MARK = re.compile(r"\b(?:now|these days|nowadays|switched|started|anymore)\b", re.I)
# "I've started running again", "I took up swimming": the reverse of an older "I don't …",
# "I stopped …" (`_DONT`, `_STOPPED`).
_STARTED = re.compile(
    rf"{_SUBJ}(?:'ve|\s+have|\s+has)?{_ADV}\s+(?:started|begun|began|taken\s+up|took\s+up|"
    r"picked\s+up|gotten\s+into|got\s+into|gone\s+back\s+to|went\s+back\s+to|returned\s+to)\s+"
    r"(?P<val>.+)"
)
_DONT = re.compile(
    rf"{_SUBJ}{_ADV}\s+(?:don't|do not|doesn't|does not|never|can't|cannot|didn't)\s+(?P<val>.+)"
)
# Where a thing is: "my bike is in the garage", "the painting hangs above the sofa", "I keep my
# passport in the desk drawer"; and where it was moved: "I moved my bike to the shed". A move
# meets only an older place of the same thing, never another of its attributes.
_AT = r"(?:in|on|at|above|under|below|beside|next\s+to|behind|over|inside|by|near)"
_OBJECT = (
    r"(?P<attr>(?!(?:it|this|that|them|me|you|him|her)\b)[a-z][\w'-]*(?:\s+[a-z][\w'-]*){0,2}?)"
)
_WHERE = re.compile(
    rf"^(?P<det>[Tt]he|[Mm]y|[Oo]ur)\s+{_OBJECT}\s+(?:is|are|hangs|hang|sits|sit|stays|stay|lives)(?:\s+(?:now|still))?"
    r"(?:\s+(?:hanging|sitting|stored|kept|displayed|mounted|parked))?\s+"
    rf"(?P<val>{_AT}\s+(?:the|my|our|a)\s+.+)"
    rf"|^(?P<subj2>I|[Ww]e){_ADV}\s+(?:keep|store|hung|hang|put|placed|park|parked)\s+"
    rf"(?P<det2>my|our|the)\s+{_OBJECT.replace('attr', 'attr2')}\s+"
    rf"(?P<val2>{_AT}\s+(?:the|my|our|a)\s+.+)"
)
_MOVED_OBJECT = re.compile(
    rf"^(?P<subj>I|[Ww]e)(?:'ve|\s+have)?{_ADV}\s+(?:moved|relocated|rehung|re-hung)\s+"
    rf"(?P<det>my|our|the)\s+{_OBJECT}\s+(?:(?:back|over|up|down)\s+)?"
    rf"(?P<val>(?:to|into|onto|{_AT})\s+(?:the|my|our|a)\s+.+)"
)
_PLACE_WORDS = re.compile(rf"^(?:to|into|onto|{_AT})\s+(?:the|my|our|a)\s+")
# A personal best: "my 5K personal best is 27:45" ... "I set a new personal record of 26:30 in the
# 5K". One record per event, and only when the event is named: two bests of unnamed things (a 5K
# and a bench press) never meet.
_RECORD = re.compile(
    r"\b(?:personal\s+(?:best|record)|PR|PB|best\s+time|"
    r"fastest\s+time|high\s+score)\b",
)
_RECORD_VALUE = re.compile(
    r"\b(?P<val>\d{1,2}(?::\d\d){1,2}|\d+(?:\.\d+)?\s*(?:minutes?|mins?|seconds?|secs?|hours?|hrs?|"
    r"kg|kilos?|lbs?|pounds|points|km|miles?)(?:,?\s+(?:and\s+)?\d+\s*(?:seconds?|secs?|minutes?))?)",
    re.I,
)
_EVENT = re.compile(
    r"\b(?P<event>\d+(?:\.\d+)?\s*(?:k|km|mi|mile|miles|m)\b|half[- ]marathon|marathon|triathlon|"
    r"ultra|century\s+ride|bench(?:\s+press)?|squat|deadlift|plank|mile|sudoku|crossword|bowling|"
    r"golf)",
    re.I,
)
_RECORD_OWNER = re.compile(
    r"(?:I|We)\b|(?:My|Our)\s+(?:[\w-]+\s+){0,2}?(?:personal|PR|PB|best|fastest|high)\b"
)
_RECORD_NEW = re.compile(
    r"\b(?:new|beat|broke|smashed|improved|lowered|bettered)\b.{0,30}?\b(?:personal|PR|PB|best|"
    r"fastest|high\s+score)\b|\bnow\b",
    re.I,
)
# "I changed my commute to 40 minutes", "I've set my alarm to 6 am": any attribute of the owner,
# not only the personal ones `_CHANGED` lists.
_CHANGED_ANY = re.compile(
    rf"(?P<subj>I|[Ww]e)(?:'ve|\s+have)?{_ADV}\s+(?:changed|switched|updated|moved|set|reset|"
    r"raised|lowered|increased|decreased|reduced|cut|bumped|upped)\s+(?:my|our)\s+"
    r"(?P<attr>(?!(?:mind|plans?|life|ways?|tune|focus|approach)\b)[a-z][\w-]*(?:\s+[a-z][\w-]*){0,2}?)"
    r"(?:\s+(?:up|down|back))?\s+to\s+(?P<val>.+)"
)

_ZH_STOP = r"(?=[，,。！？!?；;、\s]|了|啦|去|住|居住|生活|工作|上班|的时候|以后|之后|$)"
_ZH_ADV = r"(?:现在|目前|已经|刚刚|刚|终于|也|还|今年|去年|上个月|上周|最近|前不久|正式)*"
_ZH_SUBJ = rf"(?P<subj>我们|我|[{HAN}]{{2,3}}?)"
_ZH_SOURCES = [
    (
        "residence",
        False,
        True,
        rf"{_ZH_SUBJ}{_ZH_ADV}(?:搬到了?|搬家到了?|搬去了?|迁到了?|定居到了?)(?P<val>[{HAN}A-Za-z]{{2,12}}?){_ZH_STOP}",
    ),
    (
        "residence",
        False,
        False,
        rf"{_ZH_SUBJ}{_ZH_ADV}(?:住在|定居在|生活在)(?P<val>[{HAN}A-Za-z]{{2,12}}?){_ZH_STOP}",
    ),
    (
        "residence",
        True,
        True,
        rf"{_ZH_SUBJ}{_ZH_ADV}(?:不再住在|不住在|搬离了?|离开了?)(?P<val>[{HAN}A-Za-z]{{2,12}}?){_ZH_STOP}",
    ),
    (
        "employer",
        False,
        False,
        rf"{_ZH_SUBJ}{_ZH_ADV}在(?P<val>[{HAN}A-Za-z0-9]{{2,12}}?)(?:工作|上班|任职)",
    ),
    (
        "employer",
        False,
        True,
        rf"{_ZH_SUBJ}{_ZH_ADV}(?:跳槽到了?|跳槽去了?|入职了?|加入了?|去了)(?P<val>[{HAN}A-Za-z0-9]{{2,12}}?)(?:工作|上班|任职|{_ZH_STOP})",
    ),
    (
        "employer",
        True,
        True,
        rf"{_ZH_SUBJ}{_ZH_ADV}(?:辞职了?|离职了?|被裁员了?|被开除了?|失业了?)(?P<val>)",
    ),
    (
        "employer",
        True,
        True,
        rf"{_ZH_SUBJ}{_ZH_ADV}(?:不再在|不在)(?P<val>[{HAN}A-Za-z0-9]{{2,12}}?)(?:工作|上班)",
    ),
]
_ZH_SOURCES.append(
    (
        "job",
        False,
        True,
        rf"{_ZH_SUBJ}{_ZH_ADV}被?(?:升职|晋升|提拔|升)(?:为|成了?|到了?)(?P<val>[{HAN}A-Za-z]{{2,10}}?)(?:了|{_ZH_STOP})",
    )
)
_ZH = [(a, n, c, re.compile(p)) for a, n, c, p in _ZH_SOURCES]
_ZH_PERSONAL = (
    r"手机号码?|电话号码?|电话|号码|邮箱|电子邮件|地址|住址|名字|微信号?|生日|工作|职位|老板|公司|学校|专业|"
    r"车|密码|预算|工资|房租|男朋友|女朋友|对象|医生|城市|家乡"
)
_ZH_ATTR = re.compile(
    rf"(?P<subj>我的|我们的|[{HAN}]{{2,3}}的)(?P<new>新)?(?P<attr>{_ZH_PERSONAL}|(?<=新)[{HAN}]{{1,4}}?)"
    rf"(?:现在|已经)?(?:是|改成了?|换成了?|变成了?|改为|换为|更新为)(?P<val>[^，,。！？!?；;]{{1,40}})"
)
_ZH_BA = re.compile(
    rf"(?P<subj>我们|我){_ZH_ADV}把(?P<attr>{_ZH_PERSONAL})(?:改成了?|换成了?|改为|更新为)"
    r"(?P<val>[^，,。！？!?；;]{1,40})"
)
_ZH_STOPPED = re.compile(
    rf"(?P<subj>我们|我){_ZH_ADV}(?:不再|已经不|再也不|戒掉了?|戒了|戒|不)(?P<val>[{HAN}A-Za-z]{{1,10}}?)(?:了|$)"
)
_ZH_SWITCHED = re.compile(
    rf"(?P<subj>我们|我){_ZH_ADV}(?:从(?P<old>[^，,。]{{1,12}}?))?(?:改用|换成|换用|转用|改成|改喝|改吃|换到)了?"
    r"(?P<val>[^，,。！？!?；;]{1,20})"
)
# "我把旧电脑换成了MacBook": what is replaced is named (the personal attributes are `_ZH_BA`).
_ZH_REPLACED = re.compile(
    rf"(?P<subj>我们|我){_ZH_ADV}把(?:我的|我们的)?(?:旧的?)?(?P<old>[{HAN}A-Za-z0-9]{{1,8}}?)"
    r"(?:换成了?|替换成了?|升级成了?|升级到了?)(?:新的?)?(?P<val>[^，,。！？!?；;]{1,20})"
)
# "我又开始跑步了", "我最近开始喝咖啡了": the reverse of an older "我不…" / "我戒了…".
_ZH_STARTED = re.compile(
    rf"(?P<subj>我们|我){_ZH_ADV}(?:又|重新)?开始(?P<val>[{HAN}A-Za-z]{{1,10}}?)(?:了|$)"
)
_DET = r"(?P<subj>[Tt]he\s+|[Mm]y\s+|[Oo]ur\s+|[A-Z][a-z]+'s\s+|)"
_THING = (
    r"(?P<attr>(?!(?i:i|it|this|that|these|those|he|she|they|we|you|everything|everyone|"
    r"something|nothing|life|things|there|here|what|which|who)\b)"
    r"(?:[a-z][\w/'-]*|[A-Z][\w/-]*(?=\s+[a-z]))(?:\s+[a-z][\w/'-]*){0,3}?)"
)
_THING_CHANGED = re.compile(
    rf"^{_DET}{_THING}\s+(?:has\s+|have\s+|was\s+|were\s+|got\s+|has\s+been\s+|was\s+just\s+)?"
    r"(?:moved|changed|switched|updated|pushed|postponed|rescheduled|reset|raised|lowered|cut|"
    r"corrected|upgraded|downgraded|renamed|adjusted|extended|"
    r"increased|decreased|bumped|went(?=\s+(?:up|down)\b)|rose|dropped|fell|jumped)\s+"
    r"(?:back\s+|up\s+|down\s+)?"
    r"to\s+(?P<val>.+)"
    rf"|^{_DET.replace('subj', 'subj2')}{_THING.replace('attr', 'attr2')}"
    r"\s+(?:is|are)\s+now\s+(?P<val2>.+)"
)
_THING_IS = re.compile(
    rf"^{_DET}{_THING}\s+"
    r"(?:is|are|was|'s|will be|is set to|is scheduled for|is due)\s+(?P<val>.+)"
)
_EVALUATIVE = re.compile(
    r"(?:so|very|really|too|pretty|quite|super|a bit|kind of|great|good|bad|nice|awesome|amazing|"
    r"fine|ok|okay|beautiful|lovely|hard|tough|crazy|wild|fun|better|worse|over|done|gone|here|"
    r"there|back|full|empty|important|everything|all|what|how|like|going|getting|about)\b",
    re.IGNORECASE,
)
_AGE = re.compile(
    rf"{_SUBJ}(?:'m|\s+am|\s+is){_ADV}\s+(?P<val>\d{{1,3}})(?:\s+years?\s+old)?(?:\s+now)?$"
    rf"|(?P<subj2>I|[Ww]e|[A-Z][a-z]+){_ADV}\s+turned\s+(?P<val2>\d{{1,3}})\b"
)
_RELATION = re.compile(
    rf"{_SUBJ}(?:'m|\s+am|\s+are|\s+is){_ADV}(?:\s+(?:happily|still|officially))?\s+"
    r"(?P<val>single|married|engaged|divorced|widowed|dating|in a relationship|seeing someone)"
    rf"|(?P<subj2>I|[Ww]e|[A-Z][a-z]+)(?:'ve|\s+have|\s+has)?{_ADV}\s+"
    r"(?P<val2>got married|got engaged|got divorced|broke up|split up|separated)\b"
)
_RELATION_VALUE = {
    "got married": "married",
    "got engaged": "engaged",
    "got divorced": "divorced",
    "broke up": "single",
    "split up": "single",
    "separated": "single",
    "seeing someone": "dating",
    "in a relationship": "dating",
}
_ZH_THING = (
    rf"(?P<attr>(?:我的|我们的|我们(?=[{HAN}]{{2}}))?(?![我你他她它这那])"
    rf"[{HAN}A-Za-z0-9/+-]{{2,10}}?)"
)
_ZH_THING_CHANGED = re.compile(
    rf"{_ZH_THING}(?:现在|已经|已)?(?:改为|改成了?|改到了?|调整为|调整到|换成了?|推迟到了?|提前到了?|"
    rf"迁到了?|搬到了?|搬去了?|更新为|变成了?|升级为|升级到|降为|涨到了?|降到了?|现在是)(?P<val>[^，,。！？!?；;]{{1,30}})"
)
_ZH_THING_IS = re.compile(
    rf"{_ZH_THING}(?:是|为|定在|定为|设为|在)(?P<val>[^，,。！？!?；;]{{1,30}})"
)
_ZH_EVALUATIVE = re.compile(r"(?:很|非常|太|真|挺|特别|好|不错|什么|怎么|谁|哪)")
_PREF = re.compile(
    rf"{_SUBJ}{_ADV}(?:\s+(?:really|actually|still|totally|absolutely))?\s+"
    r"(?P<neg>don't|do not|doesn't|does not|no longer|can't|cannot)?\s*"
    r"(?P<verb>love|loves|like|likes|enjoy|enjoys|prefer|prefers|hate|hates|dislike|dislikes|"
    r"stand)\s+(?P<val>.+)"
)
_CHANGE_MARK = re.compile(
    r"\b(?:now|anymore|any more|no longer|these days|nowadays|again|changed my mind|"
    r"not anymore|since then|switched)\b",
    re.IGNORECASE,
)
_HAVE_COUNT = re.compile(
    rf"{_SUBJ}{_ADV}\s+(?:have|has|own|owns)\s+(?P<val>\d+|one|two|three|four|five|six|seven|"
    r"eight|nine|ten|no)\s+(?P<attr>[a-z]+)"
)
_NOT_ATTRIBUTE = frozenset(
    "i me you he him she her it we us they them so and but then that this what who which "
    "everyone someone somebody everybody".split()
)
_CUT_EN = re.compile(
    r"\s+(?:and|but|because|so|since|when|while|after|before|which|who|where|with|for|in|on|"
    r"during|"
    r"last|this|next|ago|now|recently|yesterday|today|at the moment)\b.*$|(?:,\s|;|:\s).*$"
)
