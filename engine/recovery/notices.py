"""Recovery notices shown to the end user after a rollback."""

from __future__ import annotations

from engine.limits import Limits, check_text

TEMPLATES = {
    "en": (
        "Some earlier results in this conversation were off, so the context was reset to the "
        "last good point and a safe mode started. Please check the last answer before relying "
        "on it."
    ),
    "zh": (
        "之前的部分结果有误，对话上下文已重置到最近一个正常的状态，并已进入安全模式。"
        "请在使用前核对最新的回答。"
    ),
}

PAUSED_TEMPLATES = {
    "en": (
        "The assistant was repeating itself without getting anywhere, so it was stopped and "
        "someone is looking at this conversation now. Nothing you said was lost. Please check "
        "the last answer before relying on it."
    ),
    "zh": (
        "助手在重复同样的操作而没有进展，已被暂停，工作人员正在查看这段对话。"
        "您之前的内容都已保留。请在使用前核对最新的回答。"
    ),
}
"""Notices for a session that was not rolled back (flagged, or paused during a freeze): they
must not claim that anything was reset."""

NOTICE_FLAG = "rewind_notice"
"""Key set to True on notice messages, so runtimes and the console can tell them apart."""


def template_for(locale: str | None, rolled_back: bool = True) -> str:
    """The default notice for a locale ("zh", "zh-CN", "en-GB", …; English when unknown): the
    rollback notice, or, for a session that was not rolled back, one that says the agent was
    stopped and someone is looking (`PAUSED_TEMPLATES`) without claiming a reset."""
    lang = (locale or "en").replace("_", "-").split("-", 1)[0].lower()
    templates = TEMPLATES if rolled_back else PAUSED_TEMPLATES
    return templates.get(lang, templates["en"])


def notice_message(text: str) -> dict:
    """The assistant message that carries a notice in the live history."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("a notice needs non-empty text")
    return {"role": "assistant", "content": text, NOTICE_FLAG: True}


def checked_notice(limits: Limits, text: str) -> dict:
    """The notice message for `text` when it fits `limits.notice_chars`.

    Raises:
        ValueError: empty text. SizeLimitExceeded: too long.
    """
    message = notice_message(text)
    check_text(message["content"], limits.notice_chars, "the notice", "notice_chars")
    return message


NOTICE_GIST_CHARS = 60
"""Most characters of a notice's text an audit row shows (the whole text is in its detail)."""


def notice_gist(text: object, limit: int = NOTICE_GIST_CHARS) -> str:
    """A notice's text for an audit row: `notice: "…"`, plain text on one line.

    The text comes from agents and users: control and invisible characters are dropped, runs of
    whitespace (line breaks too) become one space, and it is cut to `limit` characters with an
    ellipsis. Callers still escape it for where it goes (Markdown, a terminal).
    """
    import unicodedata

    kept = "".join(" " if ch.isspace() else ch for ch in str(text)
                   if ch.isspace() or unicodedata.category(ch) not in ("Cc", "Cf", "Cs", "Co"))
    one_line = " ".join(kept.split())
    if len(one_line) > limit:
        one_line = one_line[: max(limit - 1, 0)].rstrip() + "…"
    return f'notice: "{one_line}"'
