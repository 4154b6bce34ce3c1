"""Replay: re-run a session's stored steps through a detector built from another configuration,
and compare the verdicts across sessions (pure code: no store, no I/O).

An operator during a freeze asks "would a stricter or looser rule have caught this sooner, or not
flagged it?" and "how often is this detector wrong on our fleet?". The store gives each session's
step records (every branch, in time order); this module answers from them:

- `first_flag(records, config)`: the first step the detector built from `config` flags, and the
  rule; the records are fed as they happened (abandoned branches included), and the user's
  messages, when given, are fed as user input.
- `compare(sessions, config, before=..., labels=...)`: per session the first flag before and after,
  the operator's label, and a `Summary` (newly flagged, no longer flagged, earlier, later,
  precision and recall against the labels).
- `smallest_change(records, config, step)`: the smallest change of one setting that would not
  have flagged that step ("why flagged, and by how much").
- `why_flagged(session, records, config)`: the flagged step and rule, what each rule saw of the
  session run alone with its settings in force, and the smallest change (`WhyFlagged`).
- `detector_config(value)` and `parse_setting(field, text)`: a `DetectorConfig` from a mapping of
  its field names (``{"repeat_threshold": 5}``) or from ``FIELD=VALUE`` text (a CLI's ``--set``).

The engine wires this to the store (``engine.replay(config, where=...)``); nothing here writes.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from engine.errors import ConfigError
from engine.loops.detector import DetectorConfig, LoopDetector
from engine.loops.rules import REGISTRY
from engine.loops.step import Step
from engine.records import MessageRecord, ReplayStep, StepRecord
from engine.types import StepStatus, is_refused

__all__ = [
    "Flag",
    "Replay",
    "SessionReplay",
    "Summary",
    "SettingChange",
    "Label",
    "checked_settings",
    "detector_config",
    "parse_setting",
    "step_of",
    "first_flag",
    "compare",
    "summarize",
    "smallest_change",
    "LOOKS_FOR",
    "RuleReading",
    "WhyFlagged",
    "why_flagged",
]

Label = Literal["loop", "not_loop"]
"""An operator's answer to "was this a loop?"."""

@dataclass(frozen=True)
class Flag:
    """Where a detector first flagged a session."""

    step: int
    """Session step number (`StepRecord.n`) of the flagged step."""
    rule: str
    """Rule id that fired (``exact_repeat``…)."""

    def as_dict(self) -> dict[str, Any]:
        """``{"step": ..., "rule": ...}`` (the JSON form)."""
        return {"step": self.step, "rule": self.rule}


@dataclass(frozen=True)
class SessionReplay:
    """One session under two configurations."""

    session: str
    before: Flag | None
    """First flag under the `before` configuration; None: never flagged."""
    after: Flag | None
    """First flag under the configuration being tried; None: never flagged."""
    label: Label | None = None
    """The operator's label, if any."""

    @property
    def change(self) -> str:
        """``newly_flagged``, ``no_longer_flagged``, ``earlier``, ``later``, ``other_rule`` or
        ``same``."""
        before, after = self.before, self.after
        if before is None and after is None:
            return "same"
        if before is None:
            return "newly_flagged"
        if after is None:
            return "no_longer_flagged"
        if after.step < before.step:
            return "earlier"
        if after.step > before.step:
            return "later"
        return "same" if after.rule == before.rule else "other_rule"

    def as_dict(self) -> dict[str, Any]:
        """``{"session", "before", "after", "label"}`` with flags as dicts or None."""
        return {
            "session": self.session,
            "before": None if self.before is None else self.before.as_dict(),
            "after": None if self.after is None else self.after.as_dict(),
            "label": self.label,
        }


@dataclass(frozen=True)
class Summary:
    """How the verdicts moved across sessions, and how they agree with the labels."""

    sessions: int
    newly_flagged: int
    no_longer_flagged: int
    earlier: int
    later: int
    other_rule: int
    labelled: int
    """Sessions with a label."""
    precision_before: float | None
    """Of the labelled sessions flagged before, the share labelled ``loop`` (None: none flagged)."""
    recall_before: float | None
    """Of the sessions labelled ``loop``, the share flagged before (None: none labelled loop)."""
    precision_after: float | None
    recall_after: float | None

    def as_dict(self) -> dict[str, Any]:
        """The summary as plain JSON data."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Replay:
    """What `Engine.replay` returns: every matching session, and the summary."""

    sessions: list[SessionReplay]
    summary: Summary

    def as_dict(self) -> dict[str, Any]:
        """``{"sessions": [{"session", "before", "after", "label"}], "summary": {...}}``."""
        return {"sessions": [r.as_dict() for r in self.sessions],
                "summary": self.summary.as_dict()}


@dataclass(frozen=True)
class SettingChange:
    """One setting changed, and what it does to a flagged step."""

    field: str
    """The `DetectorConfig` field."""
    before: Any
    after: Any
    flag: Flag | None
    """The first flag with the change (None: never flagged, or later than the session's end)."""
    size: float = 0.0
    """How big the change is, relative to the setting (0.2 = 20 %); inf for switching a rule
    off for a tool or for every tool."""

    def as_dict(self) -> dict[str, Any]:
        """The change as plain JSON data."""

        def plain(value: Any) -> Any:
            if isinstance(value, frozenset):
                return sorted(value)
            if isinstance(value, Mapping):
                return {k: plain(v) for k, v in value.items()}
            return value

        return {
            "field": self.field,
            "before": plain(self.before),
            "after": plain(self.after),
            "flag": None if self.flag is None else self.flag.as_dict(),
        }


# -- configuration ------------------------------------------------------------------------------
_FIELDS = {f.name: f for f in dataclasses.fields(DetectorConfig)}
_HINTS = typing.get_type_hints(DetectorConfig)


def detector_config(
    value: DetectorConfig | Mapping[str, Any] | None = None, base: DetectorConfig | None = None
) -> DetectorConfig:
    """A `DetectorConfig` from a config, or from a mapping of its field names applied over `base`
    (default: the production defaults). String values are parsed as `parse_setting` does.

    Raises:
        ConfigError: an unknown field, or a value the field does not accept.
    """
    if isinstance(value, DetectorConfig):
        return value
    base = base or DetectorConfig()
    if not value:
        return base
    changes = {}
    for name, raw in value.items():
        if name not in _FIELDS:
            raise ConfigError(
                f"{name!r} is not a detector setting; settings are: {', '.join(sorted(_FIELDS))}"
            )
        changes[name] = parse_setting(name, raw) if isinstance(raw, str) else raw
    try:
        return replace(base, **changes)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"detector settings {sorted(changes)} refused: {exc}") from None


def checked_settings(settings: Any, where: str) -> dict[str, Any]:
    """`settings` (`DetectorConfig` field -> value, as a TOML table or JSON gives it: numbers,
    booleans, lists of names, tables of tool -> value; or text as `parse_setting` reads it)
    checked field by field and as a whole, returned as plain JSON data (what a verdict records).

    Args:
        settings: the mapping to check.
        where: where it comes from, for the messages (``"[rewind.detector] in rewind.toml"``).

    Raises:
        ConfigError: not a table, an unknown field, a value of the wrong kind, or values the
            detector refuses together; the message names `where`, the field and the value.
    """
    if not isinstance(settings, Mapping):
        raise ConfigError(f"{where} must be a table of detector settings, not "
                          f"{type(settings).__name__}")
    clean: dict[str, Any] = {}
    for name, value in settings.items():
        shown = _shown(value)
        if name not in _FIELDS:
            raise ConfigError(
                f"{where}: {name!s:.80} = {shown} is not a detector setting; settings are: "
                f"{', '.join(sorted(_FIELDS))}")
        try:
            clean[name] = _plain(_HINTS[name], parse_setting(name, value)
                                 if isinstance(value, str) else value)
        except (ConfigError, TypeError, ValueError):
            raise ConfigError(
                f"{where}: {name} = {shown}: {_describe_toml(_HINTS[name])} expected (for "
                f"example {name} = {_example_toml(_HINTS[name])})") from None
    try:
        replace(DetectorConfig(), **clean)
    except (TypeError, ValueError) as exc:
        listed = ", ".join(f"{k} = {_shown(v)}" for k, v in clean.items())
        raise ConfigError(f"{where}: the detector refuses {listed}: {exc}") from None
    return clean


def _describe_toml(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is frozenset:
        return "a list of names"
    if origin is Mapping:
        return "a table of tool = value"
    return _describe(hint)


def _example_toml(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin is frozenset:
        return '["sleep", "wait"]'
    if origin is Mapping:
        inner = typing.get_args(hint)[1]
        return '{ wait_ci = ["exact_repeat"] }' if typing.get_origin(inner) else "{ wait_ci = 20 }"
    return _example(hint)


def _shown(value: Any) -> str:
    """A value as a message shows it (bounded: it may come from anywhere)."""
    text = repr(sorted(value) if isinstance(value, (set, frozenset)) else value)
    return text if len(text) <= 80 else text[:77] + "..."


def _plain(hint: Any, value: Any) -> Any:
    """`value` as JSON data, checked against field type `hint`.

    Raises:
        ValueError: the value is not of that kind.
    """
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        if value is None:
            return None
        return _plain(next(a for a in typing.get_args(hint) if a is not type(None)), value)
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif origin is frozenset:
        if isinstance(value, (list, tuple, set, frozenset)) and all(
                isinstance(v, str) for v in value):
            return sorted(value)
    elif origin is Mapping:
        if isinstance(value, Mapping) and all(isinstance(k, str) for k in value):
            value_type = typing.get_args(hint)[1]
            return {k: _plain(value_type, v) for k, v in value.items()}
    raise ValueError(value)


def parse_setting(name: str, text: str) -> Any:
    """The value of `DetectorConfig` field `name` written as text: ``5``, ``0.7``, ``true``,
    ``none`` (for an optional number), ``a,b,c`` (a set of names; empty for none), or
    ``tool:5,other:8`` / ``tool:rule+rule`` for per-tool mappings. A ``NAME=VALUE`` pair is split
    by the caller.

    Raises:
        ConfigError: an unknown field or text the field cannot take.
    """
    if name not in _FIELDS:
        raise ConfigError(
            f"{name!r} is not a detector setting; settings are: {', '.join(sorted(_FIELDS))}"
        )
    hint = _HINTS[name]
    text = text.strip()
    try:
        return _parse(hint, text)
    except ValueError:
        raise ConfigError(
            f"{name}={text!r}: {_describe(hint)} expected (for example {name}={_example(hint)})"
        ) from None


def _parse(hint: Any, text: str) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (types.UnionType, typing.Union):
        if text.lower() in ("none", "null", ""):
            return None
        return _parse(next(a for a in args if a is not type(None)), text)
    if hint is bool:
        lowered = text.lower()
        if lowered in ("true", "yes", "on", "1"):
            return True
        if lowered in ("false", "no", "off", "0"):
            return False
        raise ValueError(text)
    if hint is int:
        return int(text)
    if hint is float:
        return float(text)
    if hint is str:
        return text
    if origin is frozenset:
        return frozenset(p.strip() for p in text.split(",") if p.strip())
    if origin is Mapping:
        value_type = args[1]
        out: dict[str, Any] = {}
        for part in (p.strip() for p in text.split(",") if p.strip()):
            tool, sep, raw = part.partition(":")
            if not sep or not tool.strip():
                raise ValueError(part)
            if typing.get_origin(value_type) is frozenset:
                out[tool.strip()] = frozenset(r.strip() for r in raw.split("+") if r.strip())
            else:
                out[tool.strip()] = _parse(value_type, raw.strip())
        return out
    raise ValueError(text)


def _describe(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        inner = next(a for a in typing.get_args(hint) if a is not type(None))
        return f"{_describe(inner)} or none"
    if origin is frozenset:
        return "a comma-separated list of names"
    if origin is Mapping:
        return "a comma-separated list of tool:value"
    return {bool: "true or false", int: "a whole number", float: "a number"}.get(hint, "text")


def _example(hint: Any) -> str:
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        return "500"
    if origin is frozenset:
        return "sleep,wait"
    if origin is Mapping:
        return "wait_ci:20"
    return {bool: "false", int: "5", float: "0.8"}.get(hint, "text")


# -- replaying one session ----------------------------------------------------------------------
def step_of(record: StepRecord) -> Step:
    """The detector's view of a stored step: what the live detector was given (the stored result
    digest stands for the result; digests of equal results are equal)."""
    return Step(
        tool=record.tool,
        args=record.args,
        ok=record.status == StepStatus.OK,
        error=record.error,
        result=record.result_digest,
        text=record.text,
        side_effect=record.side_effect,
        turn=record.turn,
    )


def _judged(record: StepRecord) -> bool:
    """Whether the live detector saw this step: it finished, and nothing refused it."""
    return record.status != StepStatus.RUNNING and not is_refused(record.status, record.error)


_TASK = "task"
"""What `_stream` yields where the agent's runtime began a task (`StepRecord.task`)."""


def _stream(
    records: Iterable[StepRecord | MessageRecord], until: int | None = None
) -> Iterable[StepRecord | str | None]:
    """The steps the detector judges, with None where the user spoke and `_TASK` where the
    runtime began a task, up to step `until`."""
    for record in records:
        if isinstance(record, MessageRecord):
            if record.message.get("role") == "user":
                yield None
            continue
        if until is not None and record.n > until:
            return
        if record.task:
            yield _TASK
        if _judged(record):
            yield record


def first_flag(
    records: Iterable[StepRecord | MessageRecord],
    config: DetectorConfig | Mapping[str, Any] | None = None,
    *,
    until: int | None = None,
) -> Flag | None:
    """The first step a detector built from `config` flags in a session's records.

    Args:
        records: the session's step records, every branch, in the order they happened; the
            user's messages (`MessageRecord`, role ``user``) may be interleaved where they came,
            and are fed as user input. Running steps and calls a quarantine refused are skipped,
            as the live detector skipped them.
        config: a `DetectorConfig`, or a mapping of its field names (over the defaults).
        until: stop after this step number (None: the whole session).

    Returns:
        The first flag (step number and rule), or None when nothing is flagged.

    Raises:
        ConfigError: for settings the detector refuses.
    """
    return _first_flag(records, LoopDetector(detector_config(config)), until)


def _first_flag(
    records: Iterable[StepRecord | MessageRecord | ReplayStep | None],
    detector: LoopDetector,
    until: int | None = None,
) -> Flag | None:
    """`first_flag` through `detector`, reset first (see `_first_flags`)."""
    return _first_flags(records, (detector,), until)[0]


def _first_flags(
    records: Iterable[StepRecord | MessageRecord | ReplayStep | None],
    detectors: Sequence[LoopDetector],
    until: int | None = None,
) -> list[Flag | None]:
    """The first flag of each detector (reset first) over the same records, in one pass: each
    step's `Step` is built once for all of them. A fleet's replay builds one detector per
    configuration, not one per session (building one cost a third of a 10-step session's
    replay; `reset` forgets every step, and what it keeps are memos of pure functions).
    `records` may also be a `ReplayHistory` (a store's `replay_histories`): `ReplayStep`s, and
    None where the user spoke."""
    flags: list[Flag | None] = [None] * len(detectors)
    for detector in detectors:
        detector.reset()
    # (index, observe, user_input, new_task) of the detectors that have not flagged yet
    active = [(i, d.observe, d.user_input, d.new_task) for i, d in enumerate(detectors)]
    running, ok = StepStatus.RUNNING, StepStatus.OK
    # one pass without helpers: a fleet's replay is millions of steps
    for record in records:
        if type(record) is ReplayStep:
            n, tool, args, status, error, digest, text, side_effect, turn, task, _ = record
        elif isinstance(record, StepRecord):
            n, tool, args, status, error = (
                record.n, record.tool, record.args, record.status, record.error)
            digest, text, side_effect, turn, task = (
                record.result_digest, record.text, record.side_effect, record.turn,
                record.task)
        else:
            if record is None or (isinstance(record, MessageRecord)
                                  and record.message.get("role") == "user"):
                for _, _, user_input, new_task in active:
                    user_input()
                    new_task()
            continue
        if until is not None and n > until:
            break
        if task:  # the runtime began a task here (`Session.new_task`)
            for _, _, _, new_task in active:
                new_task()
        if status == running or (status != ok and is_refused(status, error)):
            continue  # `_judged`, without a call for the common ok step
        step = Step(tool, args, status == ok, error, digest, text, side_effect, turn)
        flagged = False
        for entry in active:
            verdict = entry[1](step)
            if verdict.looping:
                flags[entry[0]] = Flag(n, verdict.rule or "")
                flagged = True
        if flagged:
            active = [entry for entry in active if flags[entry[0]] is None]
            if not active:
                break
    return flags


# -- comparing sessions -------------------------------------------------------------------------
def compare(
    sessions: Mapping[str, Sequence[StepRecord | MessageRecord | ReplayStep | None]]
    | Iterable[tuple[str, Sequence[StepRecord | MessageRecord | ReplayStep | None]]],
    config: DetectorConfig | Mapping[str, Any] | None,
    *,
    before: DetectorConfig | Mapping[str, Any] | None = None,
    labels: Mapping[str, Label] | None = None,
) -> tuple[list[SessionReplay], Summary]:
    """Replay every session under `before` (default: the production defaults) and under
    `config`, and summarize how the verdicts moved.

    Args:
        sessions: session id -> its records (see `first_flag`; or a `ReplayHistory`), or
            (session id, records) pairs: an iterable is consumed once, one session at a time,
            so a store's sessions can be read, replayed and dropped in turn rather than held
            all at once.
        config: the configuration to try.
        before: the configuration to compare with.
        labels: session id -> ``loop`` / ``not_loop`` (the operators' labels).

    Returns:
        One `SessionReplay` per session (in the order given) and the `Summary`.

    Raises:
        ConfigError: for settings the detector refuses.
    """
    after_config, before_config = detector_config(config), detector_config(before)
    labels = labels or {}
    results = []
    pairs = sessions.items() if isinstance(sessions, Mapping) else sessions
    same = after_config == before_config
    detector_before = LoopDetector(before_config)
    detector_after = detector_before if same else LoopDetector(after_config)
    detectors = (detector_before,) if same else (detector_before, detector_after)
    for session, records in pairs:
        flags = _first_flags(records, detectors)
        flag_before, flag_after = flags[0], flags[-1]
        results.append(SessionReplay(session, flag_before, flag_after, labels.get(session)))
    return results, summarize(results)


def summarize(results: Iterable[SessionReplay]) -> Summary:
    """Count how the verdicts moved, and precision and recall against the labels (a session
    counts as flagged when it was flagged at all; ``loop`` labels are the positives)."""
    results = list(results)
    changes = [r.change for r in results]
    labelled = [r for r in results if r.label is not None]

    def rates(flagged: list[bool], loops: list[bool]) -> tuple[float | None, float | None]:
        hits = sum(f and lp for f, lp in zip(flagged, loops, strict=True))
        flags, positives = sum(flagged), sum(loops)
        return (hits / flags if flags else None, hits / positives if positives else None)

    loops = [r.label == "loop" for r in labelled]
    p_before, r_before = rates([r.before is not None for r in labelled], loops)
    p_after, r_after = rates([r.after is not None for r in labelled], loops)
    return Summary(
        sessions=len(results),
        newly_flagged=changes.count("newly_flagged"),
        no_longer_flagged=changes.count("no_longer_flagged"),
        earlier=changes.count("earlier"),
        later=changes.count("later"),
        other_rule=changes.count("other_rule"),
        labelled=len(labelled),
        precision_before=p_before,
        recall_before=r_before,
        precision_after=p_after,
        recall_after=r_after,
    )


# -- why flagged: the smallest change -----------------------------------------------------------
_LOWER_IS_LOOSER = frozenset({"near_numeric_abs", "near_numeric_rel", "near_max_changed"})
"""Numeric settings that loosen the rule when lowered (the others when raised)."""
_SIMILARITY = frozenset({"near_text_similarity", "turn_similarity", "user_turn_similarity"})
"""Settings in (0, 1] that loosen the rule when raised toward 1."""
_DETECTOR_ONLY = frozenset({"window"})
"""Numeric settings that are not tried: the window also bounds every other rule."""


def _numeric(name: str, current: Any) -> type | None:
    """`int` or `float` when the setting `name` is a number that can be nudged (an optional one,
    such as `max_steps`, only while it is set); None otherwise."""
    hint = _HINTS[name]
    if hint in (int, float):
        return hint
    if typing.get_args(hint) == (int, type(None)) and isinstance(current, int):
        return int
    return None


def smallest_change(
    records: Sequence[StepRecord | MessageRecord],
    config: DetectorConfig | Mapping[str, Any] | None,
    step: int,
    *,
    max_tries: int = 12,
    later: Sequence[StepRecord | MessageRecord] | None = None,
) -> SettingChange | None:
    """The smallest change of one setting with which the detector would not have flagged
    `step`, without flagging an earlier step instead: the thresholds of the rule that fired,
    nudged one unit at a time (tolerances 10 % at a time, similarities toward 1), the smallest
    relative change winning; else that rule switched off for the step's tool; else switched off.

    Args:
        records: the session's records (see `first_flag`).
        config: the configuration that flagged `step`.
        step: the flagged step number (the first flag of the session, or a later one).
        max_tries: how many nudges of one setting to try before giving up on it.
        later: the records the change's first flag is looked for in (default `records`): "Why
            flagged" checks the change on the flagged task through the step, and looks for
            the flag it moves to from that task's start to the session's end.

    Returns:
        The change, with the first flag of the session under it (None: never flagged); None when
        `config` did not flag `step` in the first place.

    Raises:
        ConfigError: for settings the detector refuses.
    """
    base = detector_config(config)
    earlier, rule_id = _run_to(records, base, step)
    if rule_id is None:
        return None
    rule = next(r for r in REGISTRY if r.id == rule_id)
    best: SettingChange | None = None
    for name in rule.settings:
        if name in _DETECTOR_ONLY or _numeric(name, getattr(base, name)) is None:
            continue
        found = _nudge(records, base, name, step, earlier, max_tries, later)
        if found is not None and (best is None or found.size < best.size):
            best = found
    if best is not None:
        return best
    candidates: list[tuple[str, Any]] = []
    tool = _tool_at(records, step)
    if tool is not None:
        exemptions = dict(base.tool_exemptions)
        exemptions[tool] = exemptions.get(tool, frozenset()) | {rule.id}
        candidates.append(("tool_exemptions", exemptions))
    candidates.append(("disabled_rules", base.disabled_rules | {rule.id}))
    for name, value in candidates:
        changed = replace(base, **{name: value})
        if _run_to(records, changed, step) == (earlier, None):
            return SettingChange(name, getattr(base, name), value,
                                 first_flag(records if later is None else later, changed),
                                 float("inf"))
    return None


def _nudge(
    records: Sequence[StepRecord | MessageRecord],
    base: DetectorConfig,
    name: str,
    step: int,
    earlier: Flag | None,
    max_tries: int,
    later: Sequence[StepRecord | MessageRecord] | None = None,
) -> SettingChange | None:
    """The first value of `name`, stepping away from the current one in the loosening
    direction, with which `step` is not flagged and the flags before it stay as they were."""
    current = getattr(base, name)
    for k in range(1, max_tries + 1):
        if _numeric(name, current) is int:
            value: Any = current - k if name in _LOWER_IS_LOOSER else current + k
            if value < 0:
                return None
            size = k / max(abs(current), 1)
        elif name in _SIMILARITY:
            value = round(current + (1 - current) * k / max_tries, 4)
            size = (value - current) / max(current, 1e-9)
        else:
            factor = 1 - 0.1 * k if name in _LOWER_IS_LOOSER else 1 + 0.1 * k
            if factor <= 0:
                return None
            value = round(current * factor, 6)
            size = abs(1 - factor)
        try:
            changed = replace(base, **{name: value})
        except ValueError:
            return None  # the detector refuses the value: no looser setting this way
        if _run_to(records, changed, step) == (earlier, None):
            return SettingChange(name, current, value,
                                 first_flag(records if later is None else later, changed), size)
    return None


def _run_to(
    records: Sequence[StepRecord | MessageRecord], config: DetectorConfig, step: int
) -> tuple[Flag | None, str | None]:
    """Replay up to `step`: the first flag before it, and the rule that flags `step` (None:
    healthy there)."""
    detector = LoopDetector(config)
    first: Flag | None = None
    for record in _stream(records, step):
        if record is None:  # the user spoke: a new task, as `_first_flag` and the session see it
            detector.user_input()
            detector.new_task()
            continue
        if isinstance(record, str):  # `_TASK`: the runtime began one (`Session.new_task`)
            detector.new_task()
            continue
        verdict = detector.observe(step_of(record))
        if record.n == step:
            return first, verdict.rule if verdict.looping else None
        if verdict.looping and first is None:
            first = Flag(record.n, verdict.rule or "")
    return first, None


def _tool_at(records: Sequence[StepRecord | MessageRecord], step: int) -> str | None:
    for record in records:
        if isinstance(record, StepRecord) and record.n == step:
            return record.tool
    return None


# -- why flagged: every rule's reading ----------------------------------------------------------
LOOKS_FOR: dict[str, str] = {
    "exact_repeat": "the same call with the same outcome, with no progress in between",
    "circuit_breaker": "failures of one tool in a row, whatever the arguments",
    "near_duplicate": "failing calls of one tool whose arguments differ only slightly",
    "cycle": "a block of calls repeating with identical outcomes (ABAB…)",
    "recurrence": "one call failing the same way again and again, whatever came in between",
    "context_overflow": "context-overflow or condensation episodes without progress",
    "idle_turns": "agent turns in a row without a tool call, empty or repeating",
    "repeated_content": "one passage coming back many times in one message",
    "poll_budget": "one call polled many times while nothing else moved",
    "step_budget": "more steps in one task than its budget",
}
"""What each rule looks for, in on-call's words (a rule missing here is described by the first
line of its docstring)."""


@dataclass(frozen=True)
class RuleReading:
    """What one rule saw of a session, replayed with every other rule switched off."""

    rule: str
    """Rule id (``exact_repeat``…)."""
    looks_for: str
    """What the rule looks for, in one phrase."""
    settings: dict[str, Any]
    """The rule's settings in force (its `settings` fields -> value)."""
    alone: Flag | None
    """Its first flag when it is the only rule on; None: it sees no loop in the session."""


@dataclass(frozen=True)
class WhyFlagged:
    """Why a session was flagged: the flag, what each rule saw, and by how much a setting would
    have to move not to flag it (`Engine.fleet.why_flagged`)."""

    session: str
    flag: Flag
    """The flagged step and the rule that fired there."""
    readings: tuple[RuleReading, ...]
    """One per rule, in the order the detector runs them (`REGISTRY`)."""
    change: SettingChange | None
    """The smallest change of one setting that would not have flagged the step (see
    `smallest_change`); None when no single setting clears it."""
    detector: dict[str, Any]
    """The settings replayed, over the detector factory's config (as a verdict records them;
    ``{}``: the factory's own)."""
    also: tuple[Flag, ...] = ()
    """The other rules that, alone, flag the session at the flagged step or before it: while
    one of them fires too, no setting of the rule that fired clears the step by itself."""
    turns: dict[int, str] = dataclasses.field(default_factory=dict)
    """The model response (`StepRecord.turn`) of each step the detector could see at the flag
    (its window), for the steps whose runtime said: calls of one turn are one attempt."""


def _starts_task(record: StepRecord | MessageRecord) -> bool:
    """Whether a task begins at `record`: a user message, or a step the runtime marked."""
    if isinstance(record, MessageRecord):
        return record.message.get("role") == "user"
    return bool(record.task)


def flagged_task(
    records: Sequence[StepRecord | MessageRecord], config: DetectorConfig, flag: Flag
) -> tuple[int, int]:
    """Which records "Why flagged" replays, as ``records[start:end]``: from the start of the
    task `flag.step` belongs to (a user message, or a step the runtime marked `task`) through
    that step.

    The detector keeps loop evidence across tasks (a retry in the next task is the same loop),
    so the flag may rest on steps of earlier tasks: while the records from the task's start do
    not flag `flag.step` with `flag.rule`, earlier tasks are added back (one, then two more,
    four more…), up to the whole history.
    """
    upto = next((i for i, r in enumerate(records)
                 if isinstance(r, StepRecord) and r.n == flag.step), None)
    if upto is None:
        return 0, len(records)
    starts = [i for i in range(upto + 1) if _starts_task(records[i])]
    back = 1
    while back <= len(starts):
        if _run_to(records[starts[-back]: upto + 1], config, flag.step)[1] == flag.rule:
            return starts[-back], upto + 1
        back *= 2
    return 0, upto + 1


def _looks_for(rule: type[Any]) -> str:
    known = LOOKS_FOR.get(rule.id)
    if known:
        return known
    lines = (rule.__doc__ or "").strip().splitlines()
    return lines[0] if lines else ""


def why_flagged(
    session: str,
    records: Sequence[StepRecord | MessageRecord],
    config: DetectorConfig | Mapping[str, Any] | None,
    *,
    step: int | None = None,
    detector: Mapping[str, Any] | None = None,
    max_tries: int = 12,
) -> WhyFlagged | None:
    """Why `config` flags the session: its first flag (or `step`), each rule of `REGISTRY` run
    alone through the flagged step (every other rule switched off, the rest of `config` kept)
    with its settings in force,
    and the smallest change of one setting that would not have flagged the step
    (`smallest_change`). About 10 + a few dozen replays, of the flagged task only
    (`flagged_task`: from where it began through the flagged step), not of the whole session:
    an OpenTelemetry session of 200,000 steps took 88 s replayed whole.

    Args:
        session: the session id (carried into the result).
        records: the session's records (see `first_flag`).
        config: the configuration that flagged it.
        step: a flagged step to explain (None: the session's first flag).
        detector: the settings `config` was built from, as recorded (carried into the result).
        max_tries: see `smallest_change`.

    Returns:
        The answer; None when `config` flags nothing (or does not flag `step`).

    Raises:
        ConfigError: for settings the detector refuses.
    """
    base = detector_config(config)
    if step is None:
        flag = first_flag(records, base)
        if flag is None:
            return None
    else:
        rule_id = _run_to(records, base, step)[1]
        if rule_id is None:
            return None
        flag = Flag(step, rule_id)
    start, end = flagged_task(records, base, flag)
    later, records = records[start:], records[start:end]
    ids = frozenset(r.id for r in REGISTRY)
    readings = tuple(
        RuleReading(
            rule.id,
            _looks_for(rule),
            {name: getattr(base, name) for name in rule.settings},
            first_flag(records, replace(base, disabled_rules=(ids | base.disabled_rules)
                                        - {rule.id})),
        )
        for rule in REGISTRY
    )
    change = smallest_change(records, base, flag.step, max_tries=max_tries, later=later)
    also = tuple(
        r.alone for r in readings
        if r.rule != flag.rule and r.alone is not None and r.alone.step <= flag.step
    )
    window = [r for r in records if isinstance(r, StepRecord) and r.n <= flag.step]
    turns = {r.n: r.turn for r in window[-base.window :] if r.turn is not None}
    return WhyFlagged(session, flag, readings, change, dict(detector or {}), also, turns)
