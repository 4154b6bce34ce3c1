"""View models of the What-if page: the detector settings an operator may try, the sessions a
replay covers, and its result as a table and a summary (pure, no Streamlit, no I/O).

The page replays the fleet's own stored steps under other detector settings
(`Engine.replay`, which never writes) and shows, per session, the first flag now and under the
settings tried, with the operator's label. The work is bounded: sessions active in a time window,
at most `SESSION_CAP` of them, most recently active first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dashboard.views.common import session_link
from engine import RULES

SESSION_CAP = 200
"""Most sessions one replay takes (the most recently active in the window)."""
WINDOWS = {"last hour": 3600.0, "last 6 hours": 6 * 3600.0, "last 24 hours": 86400.0,
           "last 7 days": 7 * 86400.0}
"""Time windows a replay may cover: sessions active in it."""
DEFAULT_WINDOW = "last 24 hours"
RULE_IDS: tuple[str, ...] = RULES
"""The detector's rule ids, in the order they run."""


@dataclass(frozen=True)
class Setting:
    """One detector setting the page offers to change."""

    field: str
    """The `DetectorConfig` field."""
    label: str
    help: str
    kind: str
    """``int``, ``float`` (a share, 0 to 1), ``budget`` (a whole number, 0 for none), ``bool``
    (a switch) or ``rules`` (rule ids switched off)."""
    low: float = 1


SETTINGS: tuple[Setting, ...] = (
    Setting("repeat_threshold", "Same call repeated (times)", "exact_repeat flags at this "
            "occurrence of the same call with the same result.", "int", 2),
    Setting("user_repeat_threshold", "Same write again after a user turn (times)",
            "exact_repeat flags a successful write repeated as the agent's next call after a "
            "user turn at this occurrence (set it to the repeat count above to turn it off).",
            "int", 2),
    Setting("user_repeat_failures", "Same failure again after a user turn",
            "Stricter, for conversational agents: exact_repeat also flags a failing call retried "
            "as the agent's next call after a user turn, with the same error, at the occurrence "
            "above (it also flags a single retry the customer asked for).", "bool", 0),
    Setting("near_duplicate_threshold", "Near-identical failures", "near_duplicate flags at this "
            "many near-identical failing calls (arguments nudged, same failure).", "int", 2),
    Setting("recurrence_threshold", "Same failure within the window", "recurrence flags at this "
            "many identical failures of one call, whatever came in between.", "int", 2),
    Setting("cycle_repeats", "Cycle rounds", "cycle flags once a block of calls (ABAB…) has run "
            "this many times in a row and the next round begins.", "int", 2),
    Setting("breaker_failures", "Failures in a row of one tool", "circuit_breaker trips at this "
            "many consecutive failures of one tool.", "int", 2),
    Setting("idle_turns_threshold", "Empty or repeated agent turns", "idle_turns flags at this "
            "many empty or repeated agent turns in a row.", "int", 2),
    Setting("poll_budget", "Polls with changing results", "poll_budget flags when a call repeats "
            "this many times with changing results.", "int", 2),
    Setting("max_steps", "Step budget per task (0: none)", "step_budget stops a task after this "
            "many steps since the task began (a user message, a new run). A budget under 10 "
            "also lowers the repeat thresholds to half of it.", "budget", 0),
    Setting("near_text_similarity", "Text similarity for near-identical", "Strings at least this "
            "similar (0 to 1) count as a slight change for near_duplicate.", "float", 0),
    Setting("turn_similarity", "Turn similarity for repeats", "Two agent turns at least this "
            "similar (0 to 1) count as a repeat for idle_turns.", "float", 0),
    Setting("user_turn_similarity", "Turn similarity after the user spoke", "A turn that "
            "follows a user message repeats an earlier one only when at least this similar.",
            "float", 0),
    Setting("disabled_rules", "Rules switched off", "Rules that never fire, for every tool.",
            "rules", 0),
)
"""The settings that decide when a loop is flagged, in the order the page shows them."""


def current_settings(config: Any, declared: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The values of `SETTINGS` the detector runs now: a `DetectorConfig`'s, under the settings
    declared in the store (`Engine.fleet.detector_settings`, stored as typed: ``"5"``, ``"none"``,
    ``"a,b"``), as the page's inputs start (``max_steps`` None as 0, rule sets as sorted
    lists). A declared value this page cannot read keeps the configuration's."""
    out: dict[str, Any] = {}
    declared = declared or {}
    for s in SETTINGS:
        value = getattr(config, s.field)
        if s.field in declared:
            try:
                value = _declared_value(s.kind, declared[s.field])
            except (TypeError, ValueError):
                pass
        if s.kind == "budget":
            value = 0 if value is None else int(value)
        elif s.kind == "rules":
            value = sorted(value)
        elif s.kind == "bool":
            value = bool(value)
        out[s.field] = value
    return out


def _declared_value(kind: str, raw: Any) -> Any:
    if kind == "rules":
        parts = raw.split(",") if isinstance(raw, str) else list(raw)
        return sorted(str(p).strip() for p in parts if str(p).strip())
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "yes", "on", "1"):
            return True
        if text in ("false", "no", "off", "0"):
            return False
        raise ValueError(raw)
    if isinstance(raw, str):
        text = raw.strip().lower()
        if kind == "budget" and text in ("none", "null", ""):
            return None
        return float(text) if kind == "float" else int(text)
    if raw is None and kind == "budget":
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise TypeError(raw)
    return float(raw) if kind == "float" else int(raw)


def edits(current: Mapping[str, Any], chosen: Mapping[str, Any]) -> dict[str, Any]:
    """The settings `chosen` changes from `current`, as `DetectorConfig` values (a budget of 0 as
    None, rule lists as lists)."""
    out: dict[str, Any] = {}
    kinds = {s.field: s.kind for s in SETTINGS}
    for name, value in chosen.items():
        if name not in kinds or value == current.get(name):
            continue
        if kinds[name] == "rules":
            if sorted(value) == sorted(current.get(name) or []):
                continue
            value = sorted(value)
        elif kinds[name] == "budget":
            value = int(value) or None
        out[name] = value
    return out


def settings_text(changes: Mapping[str, Any]) -> str:
    """``repeat_threshold=5, max_steps=none`` (plain text), or "the current settings"."""
    if not changes:
        return "the current settings"
    parts = []
    for name, value in changes.items():
        if value is None:
            value = "none"
        elif isinstance(value, bool):  # as `rewind replay --set` takes it
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple, set, frozenset)):
            value = ",".join(sorted(value)) or "(none)"
        parts.append(f"{name}={value}")
    return ", ".join(parts)


# -- results ------------------------------------------------------------------------------------
CHANGES = {
    "newly_flagged": "newly flagged",
    "no_longer_flagged": "no longer flagged",
    "earlier": "flagged earlier",
    "later": "flagged later",
    "other_rule": "another rule",
    "same": "unchanged",
}
"""`SessionReplay.change` in words, in the order the table lists them."""
LABELS = {"loop": "loop", "not_loop": "not a loop"}
RESULT_COLUMNS = ["session", "link", "change", "before", "after", "moved", "label", "verdict",
                  "tenant", "scenario", "prompt_version", "steps", "last_activity"]


def flag_text(flag: Any) -> str:
    """A first flag as "step 12 · exact_repeat", or "not flagged"."""
    return "not flagged" if flag is None else f"step {flag.step} · {flag.rule}"


def verdict_check(label: str | None, flagged: bool) -> str:
    """How the settings tried agree with the operator's label: "right", "false flag", "missed",
    or "" without a label."""
    if label is None:
        return ""
    if label == "loop":
        return "right" if flagged else "missed"
    return "false flag" if flagged else "right"


def results_frame(results: Sequence[Any], infos: Mapping[str, Any]) -> pd.DataFrame:
    """One row per replayed session (`SessionReplay`), changes first (in `CHANGES` order), then
    the most recently active; `infos` maps a session id to its `SessionInfo` (for the facets)."""
    order = {c: n for n, c in enumerate(CHANGES)}
    rows = []
    for r in results:
        info = infos.get(r.session)
        meta = (info.meta if info is not None else None) or {}
        moved = ""  # no literal None in the table: "" when a side has no flag
        if r.before is not None and r.after is not None:
            moved = f"{r.after.step - r.before.step:+d}"
        rows.append({
            "session": r.session, "link": session_link(r.session),
            "change": CHANGES.get(r.change, r.change), "before": flag_text(r.before),
            "after": flag_text(r.after), "moved": moved,
            "label": LABELS.get(r.label or "", ""),
            "verdict": verdict_check(r.label, r.after is not None),
            "tenant": meta.get("tenant") or "", "scenario": meta.get("scenario") or "",
            "prompt_version": meta.get("prompt_version") or "",
            "steps": str(info.steps) if info is not None else "",
            "last_activity": info.updated_at if info is not None else 0.0,
            "_rank": order.get(r.change, len(order)),
        })
    frame = pd.DataFrame(rows, columns=[*RESULT_COLUMNS, "_rank"])
    frame = frame.sort_values(["_rank", "last_activity", "session"],
                              ascending=[True, False, True], kind="stable")
    return frame.drop(columns="_rank").reset_index(drop=True)


def rate_text(value: float | None) -> str:
    """A share as "0.93", or "n/a" when there was nothing to measure."""
    return "n/a" if value is None else f"{value:.2f}"


@dataclass(frozen=True)
class SummaryCard:
    label: str
    value: str
    help: str


def summary_cards(summary: Any) -> list[SummaryCard]:
    """The replay summary (`engine` `Summary`) as the cards over the table."""
    s = summary
    labelled = (f"Against {s.labelled} session{'s' if s.labelled != 1 else ''} operators "
                "labelled (loop or not).")
    return [
        SummaryCard("Newly flagged", f"{s.newly_flagged:,}",
                    "Not flagged with the current settings, flagged with these."),
        SummaryCard("No longer flagged", f"{s.no_longer_flagged:,}",
                    "Flagged with the current settings, not with these."),
        SummaryCard("Flagged earlier", f"{s.earlier:,}", "The first flag comes at an earlier "
                    "step."),
        SummaryCard("Flagged later", f"{s.later:,}", "The first flag comes at a later step."),
        SummaryCard("Another rule", f"{s.other_rule:,}", "The first flag comes at the same "
                    "step, named by another rule. The cards before this one and this one add up "
                    "to every session whose flag moved."),
        SummaryCard("Precision", f"{rate_text(s.precision_before)} → "
                    f"{rate_text(s.precision_after)}",
                    "Of the labelled sessions flagged, the share labelled a loop: now → with "
                    "these settings. " + labelled),
        SummaryCard("Recall", f"{rate_text(s.recall_before)} → {rate_text(s.recall_after)}",
                    "Of the sessions labelled a loop, the share flagged: now → with these "
                    "settings. " + labelled),
    ]


def scope_caption(count: int, window: str, capped: bool, where: Mapping[str, str]) -> str:
    """What a replay covered, in words (plain text)."""
    filters = ", ".join(f"{k}={v}" for k, v in where.items())
    text = (f"{count:,} session{'s' if count != 1 else ''} active in the {window}"
            + (f" matching {filters}" if filters else ""))
    if capped:
        text += (f": the {SESSION_CAP:,} most recently active (a replay takes at most "
                 f"{SESSION_CAP:,}; narrow the filter or the window for the others)")
    return text


def labelled_ids(results: Iterable[Any]) -> list[str]:
    """Sessions of a replay that carry an operator label."""
    return [r.session for r in results if r.label is not None]


# -- declaring settings for the whole fleet -----------------------------------------------------
def value_text(name: str, value: Any) -> str:
    """A setting's value as the page shows it: rule lists as ``a, b`` (``none``), no budget as
    ``none``, other values as they are (a declared value may be text, as the CLI stores it)."""
    if isinstance(value, (list, tuple, set, frozenset)):
        return ", ".join(sorted(str(v) for v in value)) or "none"
    kinds = {s.field: s.kind for s in SETTINGS}
    if value is None or (kinds.get(name) == "budget" and value == 0):
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


@dataclass(frozen=True)
class SettingChange:
    """One row of a declare or go-back dialog: a setting, what it is now, what it becomes."""

    field: str
    """The `DetectorConfig` field."""
    label: str
    """The page's name for it (the field itself for one the page does not offer)."""
    now: str
    """Its value now, as `value_text` shows it."""
    new: str
    """Its value after the change."""


OWN_CONFIG = "each process's own"
"""What a setting becomes once the store declares none: each process's detector factory and
``[rewind.detector]``."""


def declared_after(declared: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """The settings to declare so the fleet runs what a replay tried: the settings declared in
    the store now, with `changes` over them (`Engine.fleet.declare_detector` replaces the whole
    declaration, so the ones already declared must be passed again to stay)."""
    return {**declared, **changes}


def _in_page_order(fields: Mapping[str, Any]) -> list[str]:
    """`fields` in the page's `SETTINGS` order, then those the page does not offer, sorted."""
    order = [s.field for s in SETTINGS if s.field in fields]
    return order + sorted(set(fields) - set(order))


def declare_rows(current: Mapping[str, Any], changes: Mapping[str, Any]) -> list[SettingChange]:
    """What declaring `changes` changes, in `SETTINGS` order: now (`current`) → new."""
    labels = {s.field: s.label for s in SETTINGS}
    return [SettingChange(name, labels.get(name, name), value_text(name, current.get(name)),
                          value_text(name, changes[name])) for name in _in_page_order(changes)]


def default_rows(current: Mapping[str, Any], declared: Mapping[str, Any],
                 defaults: Mapping[str, Any]) -> list[SettingChange]:
    """What going back to the defaults changes: each declared setting, from what the detector
    runs now (`current`) to this console's own configuration (`defaults`; ``each process's
    own`` for a setting the page does not offer)."""
    labels = {s.field: s.label for s in SETTINGS}
    rows = []
    for name in _in_page_order(declared):
        now = current[name] if name in current else declared[name]
        new = value_text(name, defaults[name]) if name in defaults else OWN_CONFIG
        rows.append(SettingChange(name, labels.get(name, name), value_text(name, now), new))
    return rows


@dataclass(frozen=True)
class Declaration:
    """The detector settings declared in the store, and who declared them, when and why (the
    newest ``detector`` audit row)."""

    settings: dict[str, Any]
    """Declared now (`Engine.fleet.detector_settings`); empty: none, each process runs its own."""
    actor: str | None = None
    """Who made the last change (declared these, or went back to the defaults); None: no
    audit row says (purged by retention, say)."""
    at: float | None = None
    """When, unix seconds."""
    reason: str | None = None
    """Why, as the operator wrote it."""


def declaration(declared: Mapping[str, Any], events: Sequence[Any]) -> Declaration:
    """The `Declaration` from the declared settings and the newest ``detector`` audit events
    (`AuditEvent`, newest first)."""
    last = next((e for e in events if e.action == "detector"), None)
    if last is None:
        return Declaration(dict(declared))
    return Declaration(dict(declared), last.actor, last.at, last.reason)

