"""View model of "Why flagged": the engine's answer (`Engine.why_flagged`: the flagged step, what
each loop rule saw of the session run alone, the smallest change of one detector setting that
would not have flagged it) in on-call's words, and the `rewind replay --set` line that tries the
change on the whole fleet (pure, no Streamlit, no I/O).

The engine does the replays and the search; this module only words them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine import RuleReading, WhyFlagged

READING_COLUMNS = ["rule", "at this step", "looks for", "settings"]


def reading_verdict(reading: RuleReading, found: WhyFlagged) -> str:
    """One sentence on what the rule saw at the flagged step: fired here, also sees a loop
    here, saw one earlier, would flag later, sees none."""
    step, fired_rule = found.flag.step, found.flag.rule
    own = reading.alone
    if reading.rule == fired_rule:
        return f"flagged step {step}"
    if own is None:
        return "sees no loop in this session"
    if own.step < step:
        return (f"sees a loop earlier, at step {own.step} (the rules before it did not leave it "
                "the step, or it ran after the first flag)")
    if own.step == step:
        return (f"sees a loop at step {step} too (the rules run in order; the first that fires "
                "names the verdict)")
    return f"sees no loop yet at step {step}; alone it would flag step {own.step}"


def _shown(value: Any) -> str:
    if isinstance(value, (set, frozenset, list, tuple)):
        return ",".join(sorted(str(v) for v in value)) or "none"
    if isinstance(value, Mapping):
        return ",".join(f"{k}:{_shown(v)}" for k, v in sorted(value.items())) or "none"
    return str(value)


def settings_text(settings: Mapping[str, Any]) -> str:
    """`repeat_threshold=3, breaker_failures=5`; "none" for a rule without settings."""
    return ", ".join(f"{k}={_shown(v)}" for k, v in settings.items()) or "none"


def reading_rows(found: WhyFlagged) -> list[dict[str, str]]:
    """One row per rule, in the detector's order (`READING_COLUMNS`); foreign tool names may be
    in the settings: render via `plain`."""
    return [{"rule": r.rule, "at this step": reading_verdict(r, found), "looks for": r.looks_for,
             "settings": settings_text(r.settings)} for r in found.readings]


def change_sentence(found: WhyFlagged) -> str | None:
    """The smallest change in one plain sentence (foreign tool names included: render via
    `plain`); None when no single setting clears the step."""
    change = found.change
    if change is None:
        return None
    if change.field == "tool_exemptions":
        before = change.before or {}
        tools = sorted(t for t in change.after if set(before.get(t, ())) != set(change.after[t]))
        what = f"switching the rule off for {', '.join(tools)}"
    elif change.field == "disabled_rules":
        what = "switching the rule off for every tool"
    else:
        what = f"{change.field} {change.before} → {change.after}"
    then = ("the session would not be flagged at all" if change.flag is None else
            f"the first flag would move to step {change.flag.step} ({change.flag.rule})")
    return f"{what}: {then}"


def replay_command(found: WhyFlagged) -> str | None:
    """``rewind replay --set FIELD=VALUE`` trying the change on every session; None when the
    change is switching the rule off (or there is none)."""
    change = found.change
    if change is None or change.field in ("tool_exemptions", "disabled_rules"):
        return None
    return f"rewind replay --set {change.field}={change.after}"
