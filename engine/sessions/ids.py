"""Session ids: what the engine accepts as an id, checked in one place."""

from __future__ import annotations

import unicodedata
from typing import Any

from engine.errors import InvalidSessionId

MAX_ID_LENGTH = 200


def validate_session_id(sid: Any) -> str:
    """Return `sid` when it is a valid session id.

    Raises:
        InvalidSessionId: not a string, empty, longer than 200 characters, or holding control
            characters.
    """
    if not isinstance(sid, str):
        raise InvalidSessionId(f"a session id must be a string, not {type(sid).__name__}")
    if not sid:
        raise InvalidSessionId("a session id must not be empty")
    if len(sid) > MAX_ID_LENGTH:
        raise InvalidSessionId(
            f"a session id must be at most {MAX_ID_LENGTH} characters, this one has {len(sid)}"
        )
    for ch in sid:
        if unicodedata.category(ch) in ("Cc", "Cs"):
            raise InvalidSessionId(
                f"a session id must be printable; it holds the control character {ch!r}"
            )
    return sid
