"""Change freezes: a window in which nobody may deploy, and the loop policy that applies in it.

Vocabulary:

- A **freeze window** (`FreezeWindow`) has a start and an end (aware datetimes; the end is
  exclusive), a name people see ("National Day change freeze") and, optionally, the loop policy
  (`engine.types.LoopPolicy`) sessions follow while it lasts. During a freeze nobody can ship a
  fix, so an operator may prefer loops to be flagged and paged (``on_loop = "flag"``) rather
  than rolled back without a person looking.
- The **policy in effect** for a session at the moment a loop is detected (`resolve`) is, in
  this order:

  1. the freeze's policy, when the engine's clock lies inside the window and the window sets
     one, for every session that was not exempted from the freeze
     (``engine.session(sid, freeze_exempt=True)``): a declared freeze is the truth for the
     whole fleet, so a policy written into an agent's code cannot quietly escape it;
  2. the policy given for that session handle (``engine.session(sid, on_loop=...)``);
  3. the engine's default (``Engine(on_loop=...)``, "rollback" unless told otherwise).

  Under ``flag`` a flagged session waits for on-call (`engine.recovery.oncall`); a hard step
  budget stops a session under every policy.

  The choice (`PolicyChoice`) says which policy and why; it is stored with the loop verdict
  (``policy``, ``policy_reason``) so an operator can see why a session was not rolled back.

Configuration, read the same way by agents, the demo, the CLI and the console:

```toml
[rewind.freeze]                 # .streamlit/secrets.toml (the console, `rewind demo`)
start = "2026-10-01T00:00:00+08:00"
end = "2026-10-08T00:00:00+08:00"
name = "National Day change freeze"
on_loop = "flag"                # rollback | nudge_then_rollback | flag | off; absent: no change
```

or the environment, which overrides the table key by key: ``REWIND_FREEZE_START``,
``REWIND_FREEZE_END``, ``REWIND_FREEZE_NAME``, ``REWIND_FREEZE_ON_LOOP``. `Engine.open` reads the
environment when it is not handed a window (``freeze=None`` turns that off).
"""

from __future__ import annotations

import datetime as dt
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from engine.errors import ConfigError
from engine.types import LOOP_POLICIES, LoopPolicy

__all__ = [
    "DEFAULT_NAME", "ENV_END", "ENV_NAME", "ENV_ON_LOOP", "ENV_START", "MAX_NAME_CHARS",
    "POLICY_SENTENCES", "POLICY_SHORT", "FreezeWindow", "PolicyChoice", "PolicySource",
    "configured", "freeze_window", "from_environment", "parse_time", "policy_sentence",
    "read_table", "resolve", "STORE_KEY", "STORE_NAMESPACE", "from_document", "to_document",
]

ENV_START = "REWIND_FREEZE_START"
ENV_END = "REWIND_FREEZE_END"
ENV_NAME = "REWIND_FREEZE_NAME"
ENV_ON_LOOP = "REWIND_FREEZE_ON_LOOP"
DEFAULT_NAME = "Change freeze"
MAX_NAME_CHARS = 200
"""Longest freeze name kept; it is shown in banners and stored with verdicts."""

PolicySource = Literal["session", "freeze", "engine"]
"""Where the policy in effect came from: the session handle, the freeze window, the engine."""


@dataclass(frozen=True)
class FreezeWindow:
    """A change freeze: no deploys between `start` and `end`."""

    start: dt.datetime
    """Aware datetime the freeze begins."""
    end: dt.datetime
    """Aware datetime the freeze ends (exclusive)."""
    name: str = DEFAULT_NAME
    """What banners and verdicts call it."""
    on_loop: LoopPolicy | None = None
    """Loop policy of every session not exempted from the freeze while it lasts; None: each
    session's own policy, else the engine's default, applies during the freeze too."""

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise ConfigError("the freeze start and end must carry a time zone")
        if self.end <= self.start:
            raise ConfigError(
                f"the freeze ends ({self.end.isoformat()}) at or before it starts "
                f"({self.start.isoformat()}); set an end after the start"
            )
        if self.on_loop is not None and self.on_loop not in LOOP_POLICIES:
            raise ConfigError(_bad_policy(self.on_loop, "the freeze on_loop"))

    def active(self, now: float) -> bool:
        """True while unix time `now` lies inside the window."""
        return self.start.timestamp() <= now < self.end.timestamp()

    def span(self) -> tuple[float, float]:
        """(start, end) as unix times."""
        return self.start.timestamp(), self.end.timestamp()


@dataclass(frozen=True)
class PolicyChoice:
    """The loop policy in effect for a session at one moment, and why."""

    policy: LoopPolicy
    """What the session does when the detector flags a loop."""
    source: PolicySource
    """Where the policy came from (see the module docstring for the order)."""
    freeze: FreezeWindow | None = None
    """The freeze in force at that moment (also when its policy did not decide)."""
    exempt: bool = False
    """The session was exempted from the freeze (``freeze_exempt=True``)."""

    @property
    def reason(self) -> str:
        """Why this policy: "set for this session", "freeze: <name>", "engine default", or
        with "exempt from freeze: <name>" added for an exempted session inside a freeze."""
        if self.exempt and self.freeze is not None and self.source != "freeze":
            why = "set for this session" if self.source == "session" else "engine default"
            return f"{why}; exempt from freeze: {self.freeze.name}"
        if self.source == "session":
            return "set for this session"
        if self.source == "freeze" and self.freeze is not None:
            return f"freeze: {self.freeze.name}"
        return "engine default"

    def __str__(self) -> str:
        return f"policy {self.policy} ({self.reason})"


def resolve(explicit: LoopPolicy | None, freeze: FreezeWindow | None, default: LoopPolicy,
            now: float, exempt: bool = False) -> PolicyChoice:
    """The policy in effect at unix time `now`: the freeze's while `now` lies inside it and
    the session is not `exempt`, else the session's `explicit` one, else the engine's
    `default`."""
    inside = freeze if freeze is not None and freeze.active(now) else None
    if inside is not None and inside.on_loop is not None and not exempt:
        return PolicyChoice(inside.on_loop, "freeze", inside)
    if explicit is not None:
        return PolicyChoice(explicit, "session", inside, exempt=exempt and inside is not None)
    return PolicyChoice(default, "engine", inside, exempt=exempt and inside is not None)


POLICY_SENTENCES: dict[LoopPolicy | None, str] = {
    "flag": "Loops are flagged for on-call, not rolled back automatically (freeze policy): a "
            "flagged session waits until an operator rolls it back, releases or stops it.",
    "rollback": "Loops are rolled back automatically (freeze policy); tell their users, fixes "
                "ship after the freeze.",
    "nudge_then_rollback": "Looping agents are nudged once, then rolled back automatically "
                           "(freeze policy); fixes ship after the freeze.",
    "off": "Loop detection is off (freeze policy): nothing is flagged or rolled back "
           "automatically.",
    None: "Roll looping sessions back and tell their users; fixes ship after the freeze.",
}
"""What happens to loops during a freeze, per freeze policy (None: the freeze sets none), in
words for banners. It applies to every session but those exempted from the freeze."""


POLICY_SHORT: dict[LoopPolicy | None, str] = {
    "flag": "loops flagged, not rolled back",
    "rollback": "loops rolled back",
    "nudge_then_rollback": "loops nudged, then rolled back",
    "off": "loop detection off",
    None: "",
}
"""The same in a few words, for chart legends and captions ("" when the freeze sets none)."""


def policy_sentence(window: FreezeWindow) -> str:
    """One sentence saying what happens to loops while `window` is in force (plain text)."""
    return POLICY_SENTENCES[window.on_loop]


# -- configuration ------------------------------------------------------------------------------
def parse_time(value: Any, what: str) -> dt.datetime:
    """An aware datetime from an ISO 8601 string, a TOML datetime or date, or a unix time.

    A value without a time zone is taken as local time.

    Raises:
        ConfigError: the value is none of those.
    """
    if isinstance(value, dt.datetime):
        parsed = value
    elif isinstance(value, dt.date):
        parsed = dt.datetime.combine(value, dt.time())
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return dt.datetime.fromtimestamp(float(value), tz=dt.UTC)
        except (OverflowError, OSError, ValueError) as exc:
            raise ConfigError(f"{what} is not a usable unix time: {value!r}") from exc
    elif isinstance(value, str) and value.strip():
        try:
            parsed = dt.datetime.fromisoformat(value.strip())
        except ValueError as exc:
            raise ConfigError(
                f"{what} must be an ISO 8601 time such as 2026-10-01T00:00:00+08:00, "
                f"not {value[:80]!r}"
            ) from exc
    else:
        raise ConfigError(f"{what} is missing or empty")
    return parsed if parsed.tzinfo else parsed.astimezone()


def _bad_policy(value: Any, what: str) -> str:
    shown = value[:80] if isinstance(value, str) else value
    return f"{what} must be one of {', '.join(LOOP_POLICIES)}, not {shown!r}"


def _policy(value: Any, what: str) -> LoopPolicy | None:
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    text = value.strip() if isinstance(value, str) else value
    for policy in LOOP_POLICIES:
        if text == policy:
            return policy
    raise ConfigError(_bad_policy(value, what))


def freeze_window(conf: Mapping[str, Any] | None = None,
                  env: Mapping[str, str] | None = None) -> FreezeWindow | None:
    """The configured freeze: the `[rewind.freeze]` table `conf`, each key overridden by its
    environment variable (`env`, default `os.environ`).

    Returns:
        The window, or None when neither a start nor an end is configured.

    Raises:
        ConfigError: only one end is given, a time or the policy is malformed, the end is not
            after the start, or a policy is set without a window. The message names the setting.
    """
    env = os.environ if env is None else env
    conf = conf or {}
    if not isinstance(conf, Mapping):
        raise ConfigError(f"[rewind.freeze] must be a table, not {type(conf).__name__}")
    start = env.get(ENV_START) or conf.get("start")
    end = env.get(ENV_END) or conf.get("end")
    raw_name = env.get(ENV_NAME) or conf.get("name") or DEFAULT_NAME
    raw_policy = env.get(ENV_ON_LOOP) or conf.get("on_loop")
    from_env = bool(env.get(ENV_ON_LOOP))
    policy = _policy(raw_policy, f"${ENV_ON_LOOP}" if from_env else "[rewind.freeze] on_loop")
    if not start and not end:
        if policy is not None:
            raise ConfigError(
                f"a freeze loop policy ({policy}) is set but no freeze window: give start and "
                f"end ([rewind.freeze] or ${ENV_START} and ${ENV_END})"
            )
        return None
    if not start or not end:
        raise ConfigError(
            f"a freeze window needs both start and end ([rewind.freeze] in secrets.toml or "
            f"${ENV_START} and ${ENV_END}); only the {'start' if start else 'end'} is set"
        )
    what = "$" + ENV_START if env.get(ENV_START) else "[rewind.freeze] start"
    start_at = parse_time(start, what)
    what = "$" + ENV_END if env.get(ENV_END) else "[rewind.freeze] end"
    end_at = parse_time(end, what)
    name = " ".join(str(raw_name).split())[:MAX_NAME_CHARS] or DEFAULT_NAME
    return FreezeWindow(start_at, end_at, name, policy)


def declared_window(start: Any, end: Any, name: str | None = None,
                    on_loop: Any = None) -> FreezeWindow:
    """The window an operator declares (`Engine.fleet.declare_freeze`, `rewind freeze --start …`),
    each value named as the declaring call gives it: a bad start is "the freeze's start", not
    the `[rewind.freeze] start` of a configuration file the operator never wrote.

    Raises:
        ConfigError: a missing or malformed time or policy, or an end not after the start.
    """
    if start is None or end is None or (isinstance(start, str) and not start.strip()) or (
            isinstance(end, str) and not end.strip()):
        raise ConfigError("a freeze needs a start and an end")
    if name is not None and not isinstance(name, str):
        raise ConfigError(f"the freeze's name must be a string, not {type(name).__name__}")
    return FreezeWindow(
        parse_time(start, "the freeze's start"),
        parse_time(end, "the freeze's end"),
        " ".join((name or "").split())[:MAX_NAME_CHARS] or DEFAULT_NAME,
        _policy(on_loop, "the freeze's on_loop"),
    )


def from_environment(env: Mapping[str, str] | None = None) -> FreezeWindow | None:
    """The freeze configured by $REWIND_FREEZE_START / _END / _NAME / _ON_LOOP alone.

    Raises:
        ConfigError: as `freeze_window`.
    """
    return freeze_window(None, env)


def configured(paths: Iterable[str | Path] = (),
               env: Mapping[str, str] | None = None) -> FreezeWindow | None:
    """The freeze as the console sees it: `[rewind.freeze]` of the first file of `paths` that
    exists (a `.streamlit/secrets.toml`), each key overridden by the environment.

    Raises:
        ConfigError: as `freeze_window`, or the file is not valid TOML.
    """
    for path in paths:
        if Path(path).is_file():
            return freeze_window(read_table(path), env)
    return freeze_window(None, env)


def read_table(path: str | Path) -> dict[str, Any]:
    """The `[rewind.freeze]` table of the TOML file at `path` ({} when the file or the table
    is missing). Only that table is kept; the rest of the file (accounts, secrets) is dropped.

    Raises:
        ConfigError: the file is not valid TOML.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    table = doc.get("rewind", {})
    table = table.get("freeze", {}) if isinstance(table, dict) else {}
    return dict(table) if isinstance(table, dict) else {}


# -- the fleet's freeze, as stored -------------------------------------------------------------
STORE_NAMESPACE = "freeze"
"""Fleet document namespace of the declared freeze (one key, `STORE_KEY`)."""
STORE_KEY = "current"


def to_document(window: FreezeWindow, actor: str, reason: str, at: float) -> dict[str, Any]:
    """`window` as the fleet document every process on the store reads (plain JSON)."""
    return {"start": window.start.isoformat(), "end": window.end.isoformat(),
            "name": window.name, "on_loop": window.on_loop, "actor": actor, "reason": reason,
            "at": at}


def from_document(doc: Any) -> FreezeWindow | None:
    """The window a stored fleet document declares; None for no document or one that cannot
    be read (written by a newer release, say): a broken document must not stop agents."""
    if not isinstance(doc, Mapping):
        return None
    try:
        return FreezeWindow(parse_time(doc.get("start"), "the stored freeze start"),
                            parse_time(doc.get("end"), "the stored freeze end"),
                            str(doc.get("name") or DEFAULT_NAME)[:MAX_NAME_CHARS],
                            _policy(doc.get("on_loop"), "the stored freeze on_loop"))
    except ConfigError:
        return None
