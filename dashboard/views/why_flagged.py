"""View model of "Why flagged": what each loop rule saw at the flagged step, and the smallest
change of one detector setting that would not have flagged it (pure, no Streamlit, no I/O).

The answers come from replaying the session's stored steps (`Engine.replay`, which writes
nothing) under configurations that differ in one thing: every rule but one switched off ("what
did this rule see?"), or one threshold of the rule that fired loosened a notch at a time ("by how
much?"). The page passes a `FirstFlag` callable that runs one replay; this module decides which
replays to run and says what they mean.

The search mirrors `smallest_change` in the engine's replay module, which the console cannot
import (it reaches the engine through its public names only); tests check that both give the same
answer on the same sessions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

RULE_SETTINGS: dict[str, tuple[str, ...]] = {
    "exact_repeat": ("repeat_threshold",),
    "circuit_breaker": ("breaker_failures", "repeat_threshold"),
    "near_duplicate": ("near_duplicate_threshold", "near_max_changed", "near_numeric_abs",
                       "near_numeric_rel", "near_text_similarity"),
    "cycle": ("cycle_min_period", "cycle_max_period", "cycle_repeats"),
    "recurrence": ("recurrence_threshold",),
    "context_overflow": ("overflow_threshold", "overflow_min_progress",
                         "overflow_run_threshold"),
    "idle_turns": ("idle_turns_threshold", "turn_similarity"),
    "repeated_content": ("content_chunk_size", "content_repeats"),
    "poll_budget": ("poll_budget",),
    "step_budget": ("max_steps",),
}
"""Every loop rule, in the order the detector runs them, with the numeric `DetectorConfig`
settings it reads (the rule's constructor parameters; a test keeps this in step with the engine's
rules)."""

RULE_LOOKS_FOR: dict[str, str] = {
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
"""What each rule looks for, in on-call's words."""

LOWER_IS_LOOSER = frozenset({"near_numeric_abs", "near_numeric_rel", "near_max_changed"})
"""Settings that loosen their rule when lowered (the others when raised)."""
SIMILARITY = frozenset({"near_text_similarity", "turn_similarity"})
"""Settings in (0, 1] that loosen their rule when raised toward 1."""
MAX_TRIES = 12
"""Nudges of one setting tried before giving up on it."""

Flag = tuple[int, str]
"""(step, rule) of a first flag."""
FirstFlag = Callable[[Mapping[str, Any]], Flag | None]
"""Replays the session with these setting changes (over the settings in force) and returns its
first flag, or None when nothing is flagged; raises ValueError for a value the detector refuses
(the engine's ConfigError is one)."""


@dataclass(frozen=True)
class RuleReading:
    """What one rule saw of the session, replayed with every other rule switched off."""

    rule: str
    looks_for: str
    settings: dict[str, Any]
    """The rule's numeric settings in force (name -> value)."""
    alone: Flag | None
    """Its first flag when it is the only rule on; None: it sees no loop in the session."""
    verdict: str
    """One sentence: fired here, also sees a loop here, would flag later, sees none."""
    fired: bool
    """It is the rule that flagged the step."""


def rule_readings(flag: Flag, alone: Mapping[str, Flag | None],
                  settings: Mapping[str, Any]) -> list[RuleReading]:
    """One reading per rule (in the detector's order) of the flagged step `flag` (step, rule),
    from `alone` (rule -> its first flag when it runs alone) and the settings in force."""
    step, fired_rule = flag
    out = []
    for rule, names in RULE_SETTINGS.items():
        own = alone.get(rule)
        fired = rule == fired_rule
        if fired:
            verdict = f"flagged step {step}"
        elif own is None:
            verdict = "sees no loop in this session"
        elif own[0] < step:
            verdict = (f"sees a loop earlier, at step {own[0]} (the rules before it did not "
                       "leave it the step, or it ran after the first flag)")
        elif own[0] == step:
            verdict = (f"sees a loop at step {step} too (the rules run in order; the first "
                       "that fires names the verdict)")
        else:
            verdict = f"sees no loop yet at step {step}; alone it would flag step {own[0]}"
        out.append(RuleReading(rule, RULE_LOOKS_FOR.get(rule, ""),
                               {n: settings.get(n) for n in names}, own, verdict, fired))
    return out


def only(rule: str, disabled: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The setting change that leaves `rule` the only one on."""
    return {"disabled_rules": sorted((set(RULE_SETTINGS) | disabled) - {rule})}


# -- the smallest change ------------------------------------------------------------------------
@dataclass(frozen=True)
class SmallestChange:
    """One setting changed so that the flagged step would not have been flagged."""

    field: str
    before: Any
    after: Any
    then: Flag | None
    """The session's first flag with the change (a later step, or None: never flagged)."""
    size: float
    """How big the change is relative to the setting (0.2 = 20 %); inf for switching the rule
    off for a tool or for every tool."""

    def sentence(self) -> str:
        """The change in one plain sentence (foreign tool names included: render via `plain`)."""
        if self.field == "tool_exemptions":
            tools = sorted(set(self.after) - {t for t in self.before
                                              if self.before[t] == self.after[t]})
            what = f"switching the rule off for {', '.join(tools)}"
        elif self.field == "disabled_rules":
            what = "switching the rule off for every tool"
        else:
            what = f"{self.field} {self.before} → {self.after}"
        then = ("the session would not be flagged at all" if self.then is None else
                f"the first flag would move to step {self.then[0]} ({self.then[1]})")
        return f"{what}: {then}"


def nudges(name: str, current: Any, integer: bool,
           max_tries: int = MAX_TRIES) -> list[tuple[Any, float]]:
    """Values of setting `name`, a notch at a time away from `current` in the loosening
    direction, with the size of each change: whole numbers one unit at a time, similarities
    toward 1, other numbers 10 % at a time."""
    out: list[tuple[Any, float]] = []
    for k in range(1, max_tries + 1):
        if integer:
            value: Any = current - k if name in LOWER_IS_LOOSER else current + k
            if value < 0:
                break
            out.append((value, k / max(abs(current), 1)))
        elif name in SIMILARITY:
            value = round(current + (1 - current) * k / max_tries, 4)
            out.append((value, (value - current) / max(current, 1e-9)))
        else:
            factor = 1 - 0.1 * k if name in LOWER_IS_LOOSER else 1 + 0.1 * k
            if factor <= 0:
                break
            out.append((round(current * factor, 6), abs(1 - factor)))
    return out


def smallest_change(flag: Flag, tool: str | None, settings: Mapping[str, Any],
                    first_flag: FirstFlag, *, exemptions: Mapping[str, Any] | None = None,
                    disabled: frozenset[str] = frozenset(),
                    max_tries: int = MAX_TRIES) -> SmallestChange | None:
    """The smallest change of one setting with which the detector would not flag step `flag`
    (nor any step before it): each numeric setting of the rule that fired, nudged a notch at a
    time (`nudges`), the smallest relative change winning; else the rule switched off for the
    step's `tool`; else switched off for every tool. None when nothing helps.

    Args:
        flag: (step, rule) of the session's first flag under the settings in force.
        tool: the tool of the flagged step (None for an agent turn).
        settings: the numeric settings in force (name -> value).
        first_flag: runs one replay with a change (see `FirstFlag`).
        exemptions: `tool_exemptions` in force; disabled: `disabled_rules` in force.
    """
    step, rule = flag

    def clears(change: Mapping[str, Any]) -> tuple[bool, Flag | None]:
        then = first_flag(change)
        return then is None or then[0] > step, then

    best: SmallestChange | None = None
    for name in RULE_SETTINGS.get(rule, ()):
        current = settings.get(name)
        if name == "max_steps" or not isinstance(current, (int, float)) or isinstance(current,
                                                                                       bool):
            continue
        for value, size in nudges(name, current, isinstance(current, int), max_tries):
            if best is not None and size >= best.size:
                break
            try:
                ok, then = clears({name: value})
            except ValueError:
                break  # the detector refuses the value: no looser setting this way
            if ok:
                best = SmallestChange(name, current, value, then, size)
                break
    if best is not None:
        return best
    candidates: list[tuple[str, Any, Any]] = []
    before_exempt = {t: sorted(r) for t, r in (exemptions or {}).items()}
    if tool is not None:
        after = {**before_exempt, tool: sorted({*before_exempt.get(tool, ()), rule})}
        candidates.append(("tool_exemptions", before_exempt, after))
    candidates.append(("disabled_rules", sorted(disabled), sorted(disabled | {rule})))
    for name, before, after in candidates:
        ok, then = clears({name: after})
        if ok:
            return SmallestChange(name, before, after, then, float("inf"))
    return None


def settings_text(settings: Mapping[str, Any]) -> str:
    """`repeat_threshold=3, breaker_failures=5`; "none" for a rule without numeric settings."""
    return ", ".join(f"{k}={v}" for k, v in settings.items()) or "none"
