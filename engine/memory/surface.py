"""What a memory's text says, apart from its surface format (pure code).

Who wrote it: speaker prefixes in any case or script (``Caroline: …``, ``caroline: …``,
``小明：…``), the speakers of a query written as chat turns, and a name found in text (retrieval
and the memory's owner checks use them). What is prose in it: chat turns and agent notes come
wrapped in captions and attachments (``[shares image: a photo of …]``), quoted text, JSON, tool
output, code, tables and logs. None of that is a statement by the speaker, so `statements` skips it
and hands the rules judge (`engine.memory.rules`) only prose sentences, each with its owner: the
speaker when there is one, "" otherwise. Questions and one-word replies (``Yeah``, ``Scrambled``)
are dropped too, and a plan, wish, hypothetical or report is marked as hedged.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = [
    "Sentence", "mentions", "normalize", "prose_lines", "query_speakers", "split_speaker",
    "statements",
]

HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# A speaker is one to three name-like words before a colon. An ASCII colon needs a space after it
# ("12:30", "http://", "a:b" are not speakers); a full-width colon does not (小明：你好).
_NAME = r"[^\W\d_][\w.'’-]{0,30}"
SPEAKER = re.compile(
    rf"^\s*(?P<who>{_NAME}(?:[ \t]{_NAME}){{0,2}})\s*(?::[ \t]+|:(?=[{HAN}])|：\s*)(?P<rest>.+)$",
    re.DOTALL,
)


def normalize(text: str) -> str:
    """NFKC, no zero-width characters, curly apostrophes made straight."""
    text = unicodedata.normalize("NFKC", text)
    return re.sub(r"[\u200b-\u200f\ufeff]", "", text).replace("’", "'").replace("‘", "'")


def split_speaker(text: str) -> tuple[str | None, str]:
    """``("caroline", "I moved")`` for ``"Caroline: I moved"``; ``(None, text)`` without a prefix.

    Any case and script: ``caroline: …``, ``小明：…``, ``Dr. Lee: …``.
    """
    m = SPEAKER.match(text)
    if m is None:
        return None, text
    return m.group("who").strip().lower(), m.group("rest")


_WHO = rf"{_NAME}(?:[ \t]{_NAME}){{0,2}}"
# A turn starts a line with "Name:" or anywhere after a space with "<Name>:" / "[Name]:" (turns
# joined on one line); the colon rules are those of SPEAKER.
_COLON = r"\s*(?::[ \t]*(?=\S)|：)"
_TURN = re.compile(
    rf"(?:^|(?<=\s))(?:<(?P<angle>{_WHO})>|\[(?P<square>{_WHO})\]){_COLON}"
    rf"|(?:^|(?<=\n))[ \t]*(?P<plain>{_WHO})(?=\s*(?::[ \t]+|:(?=[{HAN}])|：))"
)
ROLES = frozenset(
    "assistant user system human ai bot model tool agent me you 助手 用户 系统 机器人".split()
)
"""Speaker tags that name a role, not a person."""


def query_speakers(text: str) -> list[str]:
    """The people a text is written by when it is chat turns: the names of its turns' speakers
    (lower case, roles such as ``Assistant`` or ``user`` left out), in order of first turn;
    ``[]`` unless the text starts with a turn.

    ``"<Bart>: 我今天… <Assistant>: 哇…"`` and ``"Bart: hi\nAssistant: hello"`` give ``["bart"]``;
    ``"Note: the rate is fixed"`` gives ``["note"]``, a question with no prefix ``[]``.
    """
    text = unicodedata.normalize("NFKC", text)
    found = list(_TURN.finditer(text))
    if not found or text[: found[0].start()].strip():
        return []
    names: dict[str, None] = {}
    for m in found:
        who = (m.group("angle") or m.group("square") or m.group("plain")).strip().lower()
        if who not in ROLES:
            names[who] = None
    return list(names)


def mentions(name: str) -> re.Pattern[str]:
    """A pattern that finds a person's name in text: as a whole word (any case; Han characters
    next to it end the word: ``Bart在学校``) for a name in another script, anywhere for a name
    in Han script."""
    escaped = re.escape(name)
    if re.search(rf"[{HAN}]", name):
        return re.compile(escaped)
    edge = rf"[^\W_{HAN}]"  # a letter or digit of another script than Han continues the word
    return re.compile(rf"(?<!{edge}){escaped}(?!{edge})", re.IGNORECASE)


# Bracketed and angle-bracketed spans are captions, attachments, markup or stage directions.
WRAPPERS = re.compile(r"\[[^\[\]]{0,2000}\]|<[^<>]{0,500}>|\([^()]{0,300}\)|【[^【】]{0,500}】")
URL = re.compile(r"\b(?:https?|ftp|file)://\S+|\bwww\.\S+", re.IGNORECASE)
QUOTED = re.compile(
    r"\"[^\"\n]{0,500}\"|“[^”\n]{0,500}”|「[^」\n]{0,500}」|『[^』\n]{0,500}』|‘[^’\n]{0,500}’"
    r"|`[^`\n]{0,500}`|(?<![\w])'[^'\n]{2,300}'(?![\w])"
)
FENCE = re.compile(r"```.*?(?:```|$)|~~~.*?(?:~~~|$)", re.DOTALL)
# Lines that are machine output, not prose: JSON, code, tables, logs, quotes, stack traces.
MACHINE_LINE = re.compile(
    r"^\s*(?:[{}\[\]]|[|+]|>|#|//|/\*|\$\s|>>>|\.\.\.\s|[-=_*]{3,}|@@|[A-Za-z_][\w.]*\s*=[^=]"
    r"|(?:def|class|import|from|return|function|const|let|var|if|for|while|try|except|raise|"
    r"SELECT|INSERT|UPDATE|DELETE|CREATE)\b[^.!?。！？]*$"
    r"|Traceback|File \"|at [\w.$]+\(|\d{4}-\d\d-\d\d[T ]\d\d:\d\d|\d\d:\d\d:\d\d|"
    r"\[?(?:TRACE|DEBUG|INFO|NOTICE|WARN|WARNING|ERROR|FATAL|CRITICAL)\b)"
)
CODE_MARKS = re.compile(r"[{};]\s*$|=>|->|::|\(\)|\w\(\S*\)|\w\.\w+\(|==|!=|&&|\|\||\w/\w+/\w")
# "Dr. Patel", "Mr. Kim": a title's full stop ends no sentence
SENTENCE = re.compile(
    r"(?<=[.!?;])(?<![DM]r\.)(?<!Mrs\.)(?<!Ms\.)(?<!St\.)(?<!Prof\.)\s+|(?<=[。！？；])|\n+"
)
QUESTION_EN = re.compile(
    r"^(?:what|who|whom|whose|where|when|why|how|which|do|does|did|are|is|am|was|were|have|has|"
    r"had|can|could|would|will|shall|should|may|might|isn['’]t|aren['’]t|don['’]t|didn['’]t)\b",
    re.IGNORECASE,
)
QUESTION_ZH = re.compile(r"[吗呢么嘛]$|什么|怎么|为什么|哪里|哪儿|多少|是否|有没有|是不是")
HEDGE_EN = re.compile(
    r"\b(?:if|unless|maybe|perhaps|might|would|could|should|hope|wish|suppose|imagine|pretend|"
    r"thinking (?:of|about)|considering|planning|plan to|want to|wanna|going to|gonna|will|"
    r"someday|one day|dream|said|says|told|tell|asked|thinks?|thought|believes?|"
    r"assum(?:e|es|ed|ing)|rumou?r(?:s|ed)?|suspects?|suspected)\b|['’](?:d|ll)\b",
    re.IGNORECASE,
)
HEDGE_ZH = re.compile(
    r"如果|要是|假如|可能|也许|大概|想要|想|打算|计划|希望|梦想|将来|以后|说|告诉|问"
)
# The speaker telling the listener ("跟你说一下，我搬到深圳了") reports nobody else's words; "been
# going to the YMCA" is a habit, not a plan.
TELLING_YOU_ZH = re.compile(r"(?:跟|和|给)(?:你|您)说(?:一下|一声)?|告诉(?:你|您)|说一声")
BEEN_GOING = re.compile(r"\bbeen going to\b", re.IGNORECASE)


@dataclass(frozen=True)
class Sentence:
    """One prose statement of a memory."""

    owner: str
    """Who ``I``/``my``/``我`` refers to: the speaker (lower case), or "" without a speaker."""
    text: str
    hedged: bool
    """A plan, wish, hypothetical or reported speech (never a current state)."""


def _unwrap(text: str) -> str:
    """The text without captions, attachments, markup, URLs and code fences."""
    text = URL.sub(" ", FENCE.sub("\n", text))
    previous = None
    while previous != text:  # nested brackets
        previous, text = text, WRAPPERS.sub(" ", text)
    return text


def machine_line(line: str) -> bool:
    """Whether a line is machine output (JSON, code, a table row, a log line), not prose."""
    if MACHINE_LINE.match(line):
        return True
    if len(CODE_MARKS.findall(line)) >= 1 and not re.search(f"[{HAN}]", line):
        words = re.findall(r"[A-Za-z]+", line)
        return len(words) < 4 or bool(re.search(r"[{};]\s*$|=>|==", line))
    return line.count("|") >= 2 or line.count("\t") >= 2


def prose_lines(text: str, quotes: bool = False) -> tuple[str, list[str]]:
    """The owner and the prose lines of a memory (quoted text blanked unless ``quotes``); none
    when it is mostly machine output."""
    text = normalize(text)
    if machine_line(text.split("\n", 1)[0]):
        return "", []  # "ERROR: …", "2024-05-01 12:00 INFO …": a log line, not a speaker
    speaker, rest = split_speaker(text)
    rest = _unwrap(rest) if quotes else QUOTED.sub(" ", _unwrap(rest))
    lines = [line for line in rest.split("\n") if line.strip()]
    if 2 * sum(map(machine_line, lines)) > len(lines):
        return "", []  # mostly machine output: the prose lines in it are its captions
    return speaker or "", [line for line in lines if not machine_line(line)]


def statements(text: str) -> list[Sentence]:
    """The prose statements of a memory, in order (questions, quotes and replies left out)."""
    owner, lines = prose_lines(text)
    out = []
    for line in lines:
        for raw in SENTENCE.split(line):
            raw = raw.strip(" \t,;:-—")
            if not raw or raw.endswith(("?", "？")):
                continue
            body = raw.rstrip(".!。！~ ")
            if re.search(f"[{HAN}]", body):
                if len(re.findall(f"[{HAN}]", body)) < 3 or QUESTION_ZH.search(body):
                    continue
                hedged = bool(HEDGE_ZH.search(TELLING_YOU_ZH.sub("", body)))
            else:
                if len(body.split()) < 2 or QUESTION_EN.match(body):
                    continue
                hedged = bool(HEDGE_EN.search(BEEN_GOING.sub(" ", body)))
            out.append(Sentence(owner=owner, text=body, hedged=hedged))
    return out
