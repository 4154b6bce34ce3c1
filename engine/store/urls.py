"""Store URLs made safe to print."""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit, urlunsplit

_SECRET_PARAM = re.compile(r"(^|&)([^=&]*password)=([^&]*)", re.IGNORECASE)
"""A query parameter holding a password: ``password=…`` (redis-py takes it like user:password@),
``sentinel_password=…``, ``ssl_password=…``."""


def redact(url: str) -> str:
    """The URL with every password (``user:password@`` and ``?password=…``) replaced by ***,
    safe to print or log."""
    parts = urlsplit(url)
    if parts.password is not None:
        netloc = parts.netloc.rsplit("@", 1)
        user = parts.username or ""
        parts = parts._replace(netloc=f"{user}:***@{netloc[-1]}")
    if parts.query and _SECRET_PARAM.search(parts.query):
        parts = parts._replace(query=_SECRET_PARAM.sub(r"\1\2=***", parts.query))
    return urlunsplit(parts) if parts != urlsplit(url) else url


def secrets(url: str) -> list[str]:
    """Every password in `url`, as written and percent-decoded, longest first (to scrub them
    from texts that might quote them, such as a driver's error message)."""
    parts = urlsplit(url)
    found = {parts.password or ""}
    found |= {m.group(3) for m in _SECRET_PARAM.finditer(parts.query)}
    found |= {unquote(s) for s in found}
    return sorted((s for s in found if s and s != "***"), key=len, reverse=True)
