"""Console settings read from `.streamlit/secrets.toml` and the environment (pure functions).

Everything here takes the secrets as a plain mapping so it can be tested without Streamlit:

```toml
[rewind]
store = "sqlite:///.rewind/rewind.db"   # else $REWIND_STORE, else the engine's default
refresh_seconds = 5                     # fleet auto-refresh interval

[rewind.freeze]             # or $REWIND_FREEZE_START / _END / _NAME / _ON_LOOP (engine.freeze)
start = "2026-10-01T00:00:00+08:00"
end = "2026-10-08T00:00:00+08:00"
name = "National Day change freeze"
on_loop = "flag"            # loop policy during the freeze; absent: the engine's default
```
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from dashboard.views import plain
from engine import POLICY_SHORT, ConfigError, FreezeWindow, policy_sentence
from engine import freeze_window as read_freeze_window

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
    """The store URL: the one named on `rewind dashboard --store` ($REWIND_CONSOLE_STORE),
    else `[rewind] store`, else $REWIND_STORE, else None (the engine's default). `rewind
    dashboard` passes both variables as absolute URLs, resolved against the folder it was
    started from; a relative `[rewind] store` is read from the console's own folder."""
    env = os.environ if env is None else env
    named = env.get("REWIND_CONSOLE_STORE")
    if named:
        return named
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


def freeze_window(
    secrets: Mapping[str, Any] | None, env: Mapping[str, str] | None = None
) -> FreezeWindow | None:
    """The configured freeze window: `[rewind.freeze]`, each key overridden by its environment
    variable. Parsed by the engine (`engine.freeze_window`), so the console, the demo and
    the agents read one configuration the same way.

    Raises:
        SettingsError: only one end is given, a time or the policy is malformed, or end is not
            after start.
    """
    try:
        return read_freeze_window(section(secrets, "rewind", "freeze"), env)
    except ConfigError as exc:
        raise SettingsError(str(exc)) from exc


def freeze_banner(window: FreezeWindow, exempt: int | None = None) -> str:
    """The banner text while `window` is in force: until when, what happens to loops (under
    "flag": that a flagged session waits for an operator), and, when the freeze sets a policy
    and `exempt` is known, how many sessions are exempt from it (``freeze_exempt=True``: they
    keep their own loop policy).

    Markdown with the name escaped: the name is configuration text, shown as plain text.
    """
    until = f"{window.end:%a %d %b %H:%M %Z}".strip()
    head = f"**{plain(window.name)}** until {until}: no deploys."
    text = f"{head} {plain(policy_sentence(window))}"
    if window.on_loop is not None and exempt is not None:
        text += " " + exempt_sentence(exempt)
    return text


def exempt_sentence(exempt: int) -> str:
    """How many sessions the freeze's loop policy does not govern (Markdown)."""
    if exempt == 0:
        return "No session is exempt from it: its loop policy applies to every session."
    which = "1 session is" if exempt == 1 else f"{exempt:,} sessions are"
    return (f"**{which} exempt from it** (opened with `freeze_exempt=True`) and "
            f"{'keeps its' if exempt == 1 else 'keep their'} own loop policy.")


def freeze_caption(window: FreezeWindow) -> str:
    """What the shaded band on the loop charts is: the freeze, its span, its loop policy."""
    span = f"{window.start:%d %b %H:%M} to {window.end:%d %b %H:%M %Z}".strip()
    policy = POLICY_SHORT[window.on_loop]
    return f"Shaded: {plain(window.name)}, {plain(span)}" + (
        f" ({plain(policy)} by the freeze policy)" if policy else "")
