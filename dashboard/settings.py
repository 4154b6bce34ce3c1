"""Console settings read from `.streamlit/secrets.toml` and the environment (pure functions).

Everything here takes the secrets as a plain mapping so it can be tested without Streamlit:

```toml
[rewind]
store = "sqlite:///.rewind/rewind.db"   # else $REWIND_STORE, else the engine's default
refresh_seconds = 5                     # fleet auto-refresh interval

[rewind.freeze]                         # or $REWIND_FREEZE_START / _END / _NAME
start = "2026-10-01T00:00:00+08:00"
end = "2026-10-08T00:00:00+08:00"
name = "National Day change freeze"
```
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

DEFAULT_STORE = "sqlite:///.rewind/rewind.db"
"""The engine's default store when neither secrets nor $REWIND_STORE name one."""
DEFAULT_REFRESH_S = 5.0
MIN_REFRESH_S = 1.0


class SettingsError(ValueError):
    """A console setting in secrets.toml or the environment is malformed."""


def section(secrets: Mapping[str, Any] | None, *path: str) -> dict:
    """The nested table `secrets[path[0]][path[1]]…` as a plain dict ({} when missing)."""
    node: Any = secrets or {}
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return {}
        node = node[key]
    return _plain(node) if isinstance(node, Mapping) else {}


def _plain(node: Any) -> Any:
    # st.secrets hands out AttrDict proxies; tests hand out dicts. Work on plain data only.
    if isinstance(node, Mapping):
        return {str(k): _plain(v) for k, v in node.items()}
    if isinstance(node, (list, tuple)):
        return [_plain(v) for v in node]
    return node


def store_url(secrets: Mapping[str, Any] | None,
              env: Mapping[str, str] | None = None) -> str | None:
    """The store URL: `[rewind] store`, else $REWIND_STORE, else None (the engine's default)."""
    env = os.environ if env is None else env
    url = section(secrets, "rewind").get("store")
    return url or env.get("REWIND_STORE") or None


def redact_url(url: str | None) -> str | None:
    """`url` with any password replaced by ***, safe to show."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def refresh_seconds(secrets: Mapping[str, Any] | None) -> float:
    """Fleet auto-refresh interval in seconds (at least one second)."""
    value = section(secrets, "rewind").get("refresh_seconds", DEFAULT_REFRESH_S)
    try:
        seconds = float(value)
    except (TypeError, ValueError) as exc:
        raise SettingsError(
            f"[rewind] refresh_seconds must be a number of seconds, not {value!r}"
        ) from exc
    return max(seconds, MIN_REFRESH_S)


@dataclass(frozen=True)
class FreezeWindow:
    """A change freeze: no deploys between `start` and `end`; on-call rolls back instead."""

    start: dt.datetime
    """Aware datetime the freeze begins."""
    end: dt.datetime
    """Aware datetime the freeze ends (exclusive)."""
    name: str = "Change freeze"
    """What the banner calls it."""

    def active(self, now: float) -> bool:
        """True while unix time `now` lies inside the window."""
        return self.start.timestamp() <= now < self.end.timestamp()

    def span(self) -> tuple[float, float]:
        """(start, end) as unix times."""
        return self.start.timestamp(), self.end.timestamp()


def parse_time(value: Any, what: str) -> dt.datetime:
    """An aware datetime from an ISO 8601 string, a TOML datetime or a unix time.

    A value without a time zone is taken as local time.

    Raises:
        SettingsError: the value is none of those.
    """
    if isinstance(value, dt.datetime):
        parsed = value
    elif isinstance(value, dt.date):
        parsed = dt.datetime.combine(value, dt.time())
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(float(value), tz=dt.UTC)
    elif isinstance(value, str) and value.strip():
        try:
            parsed = dt.datetime.fromisoformat(value.strip())
        except ValueError as exc:
            raise SettingsError(
                f"{what} must be an ISO 8601 time such as 2026-10-01T00:00:00+08:00, "
                f"not {value!r}"
            ) from exc
    else:
        raise SettingsError(f"{what} is missing or empty")
    return parsed if parsed.tzinfo else parsed.astimezone()


def freeze_window(
    secrets: Mapping[str, Any] | None, env: Mapping[str, str] | None = None
) -> FreezeWindow | None:
    """The configured freeze window; the environment overrides `[rewind.freeze]`.

    Raises:
        SettingsError: only one end is given, a time is malformed, or end is not after start.
    """
    env = os.environ if env is None else env
    conf = section(secrets, "rewind", "freeze")
    start = env.get("REWIND_FREEZE_START") or conf.get("start")
    end = env.get("REWIND_FREEZE_END") or conf.get("end")
    name = env.get("REWIND_FREEZE_NAME") or conf.get("name") or "Change freeze"
    if not start and not end:
        return None
    if not start or not end:
        raise SettingsError(
            "a freeze window needs both start and end ([rewind.freeze] in secrets.toml or "
            "REWIND_FREEZE_START and REWIND_FREEZE_END)"
        )
    window = FreezeWindow(parse_time(start, "freeze start"), parse_time(end, "freeze end"),
                          str(name))
    if window.end <= window.start:
        raise SettingsError(
            f"the freeze ends ({window.end.isoformat()}) before it starts "
            f"({window.start.isoformat()})"
        )
    return window
