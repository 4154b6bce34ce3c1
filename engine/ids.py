"""Session ids: what the engine accepts as an id, checked in one place.

An id is taken exactly as given: it is never trimmed or normalised, because an operator who
follows a link for ``"sess-1 "`` must land on that session and no other. What could make two
different ids look the same on a screen is refused instead: ids that are blank after trimming,
and ids holding control characters, invisible format characters (zero-width spaces and joiners,
word joiner, byte-order mark, soft hyphen, …), bidirectional overrides, isolates and marks, line
or paragraph separators, or lone surrogates.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from engine.errors import InvalidSessionId

MAX_ID_LENGTH = 200

_REFUSED_CATEGORIES = {
    "Cc": "control character",
    "Cs": "lone surrogate",
    "Cf": "invisible format character",  # zero-width, bidi controls, BOM, soft hyphen, tags
    "Zl": "line separator",
    "Zp": "paragraph separator",
}
_BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def _describe(ch: str) -> str:
    name = unicodedata.name(ch, "")
    kind = (
        "bidirectional control"
        if ord(ch) in _BIDI
        else _REFUSED_CATEGORIES[unicodedata.category(ch)]
    )
    return f"the {kind} U+{ord(ch):04X}" + (f" ({name})" if name else "")


def validate_session_id(sid: Any) -> str:
    """Return `sid` unchanged when it is a valid session id.

    Raises:
        InvalidSessionId: not a string, blank, longer than 200 characters, or holding control,
            zero-width, bidirectional or other invisible characters.
    """
    if not isinstance(sid, str):
        raise InvalidSessionId(f"a session id must be a string, not {type(sid).__name__}")
    if not sid.strip():
        raise InvalidSessionId(
            "a session id must not be empty"
            if not sid
            else f"a session id must not be only whitespace, got {sid!r}"
        )
    if len(sid) > MAX_ID_LENGTH:
        raise InvalidSessionId(
            f"a session id must be at most {MAX_ID_LENGTH} characters, this one has {len(sid)}"
        )
    if sid.isascii() and sid.isprintable():
        # the common id, checked at every read and write: among ASCII characters only the
        # controls are refused, and they are exactly the ones that are not printable
        return sid
    for i, ch in enumerate(sid):
        if unicodedata.category(ch) in _REFUSED_CATEGORIES:
            raise InvalidSessionId(
                f"a session id must be visible text; {sid!r} holds {_describe(ch)} at position "
                f"{i}, which would make it look like another id. Use letters, digits and "
                "punctuation only"
            )
    return sid
