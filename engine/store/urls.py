"""Store URLs: which one a process opens, and made safe to print."""

from __future__ import annotations

import os
import re
from urllib.parse import unquote, urlsplit, urlunsplit

_SECRET_PARAM = re.compile(r"(^|&)([^=&]*password|pass|pwd)=([^&]*)", re.IGNORECASE)
"""A query parameter holding a password: ``password=…`` (redis-py takes it like user:password@),
``sentinel_password=…``, ``ssl_password=…``, ``pass=…``, ``pwd=…``."""
_NESTED_USERINFO = re.compile(r"(://[^/@:&]*):[^@/&]*@")
"""The password of a URL nested in the query (``?fallback=redis://u:pw@…``)."""

DEFAULT_URL = "sqlite:///.rewind/rewind.db"
"""The embedded store `Engine.open()` opens when given no URL and $REWIND_STORE is unset."""


def resolve(url: str | None = None) -> str:
    """The store URL `Engine.open(url)` opens: `url`, else $REWIND_STORE, else the embedded
    default (``sqlite:///.rewind/rewind.db``). Not redacted: it is the one to open."""
    return url or os.environ.get("REWIND_STORE") or DEFAULT_URL


def redact(url: str) -> str:
    """The URL with every password replaced by ***, safe to print or log: the password of the
    user part, password query parameters, and user parts of URLs nested in the query (such as
    ``?fallback=…``). A URL too malformed to parse keeps only its scheme."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url.split(":", 1)[0] + "://***" if "://" in url else "***"
    if password is not None:
        netloc = parts.netloc.rsplit("@", 1)
        user = parts.username or ""
        parts = parts._replace(netloc=f"{user}:***@{netloc[-1]}")
    if parts.query:
        query = _SECRET_PARAM.sub(r"\1\2=***", parts.query)
        parts = parts._replace(query=_NESTED_USERINFO.sub(r"\1:***@", query))
    return urlunsplit(parts) if parts != urlsplit(url) else url


def secrets(url: str) -> list[str]:
    """Every password in `url`, as written and percent-decoded, longest first (to scrub them
    from texts that might quote them, such as a driver's error message)."""
    parts = urlsplit(url)
    found = {parts.password or ""}
    found |= {m.group(3) for m in _SECRET_PARAM.finditer(parts.query)}
    found |= {unquote(s) for s in found}
    return sorted((s for s in found if s and s != "***"), key=len, reverse=True)


def absolute_url(url: str, base: str | None = None) -> str:
    """`url` with a relative SQLite path made absolute against `base` (None: this process's
    folder). A process that hands its store to another one started elsewhere (`rewind
    dashboard` runs Streamlit in the checkout's folder) passes this, so both read the file the
    user named from where they stood. Other schemes, ``:memory:`` and absolute paths are
    returned unchanged; the query string is kept."""
    if not url.lower().startswith("sqlite:"):
        return url
    from engine.store.sqlite.tx import path_from_url

    path = path_from_url(url)
    if not path or path == ":memory:" or os.path.isabs(path):
        return url
    full = os.path.normpath(os.path.join(base or os.getcwd(), path))
    query = urlsplit(url).query
    return f"sqlite:///{full}" + (f"?{query}" if query else "")


def store_name(url: str) -> str:
    """The store as people check it: a SQLite file by its absolute path (against this process's
    folder), others by their URL with the password masked and the query left out (options such
    as ``fallback=`` may hold a secret and say nothing an operator needs)."""
    if url.lower().startswith("sqlite:"):
        from engine.store.sqlite.tx import path_from_url

        path = path_from_url(url)
        return path if path in ("", ":memory:") else os.path.abspath(path)
    return re.split(r"[?#]", redact(url), maxsplit=1)[0]
