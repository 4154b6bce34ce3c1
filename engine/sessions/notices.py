"""Kept for code that imported it from here: notices live in `engine.recovery.notices`."""

from engine.recovery.notices import NOTICE_FLAG, TEMPLATES, notice_message, template_for

__all__ = ["NOTICE_FLAG", "TEMPLATES", "notice_message", "template_for"]
