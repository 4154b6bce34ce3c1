"""Loop detection over a stream of tool calls and agent turns (pure code, no I/O).

Feed every step to `LoopDetector.observe`; it returns a `Verdict` that is healthy, or names the rule
that fired, explains it in one sentence, lists the evidence steps and says where the loop began.

Vocabulary
----------
- *Index*: 0-based position of a step in observation order since the last `reset()`.
- *Call fingerprint*: `engine.loops.fingerprint.fingerprint` of the tool name and the normalized
  arguments (`engine.loops.normalize`): volatile keys, retry counters and free-text thoughts
  dropped, whitespace and paths normalized. The agent's own text is never part of it.
- *State*: call fingerprint plus outcome: the normalized result digest of a success, the error
  signature of a failure (its informative lines, with ids, times, counters and echoed argument
  values masked), or just "done" for a successful write: a side effect, a tool named after a
  write (``edit_file``, ``cancel_reservation``, ``update_order``…; never one whose name starts
  with a read verb, ``get_refund_status``), a shell command that writes (``sed -i``, ``>>``…),
  with the revision its result reports if any (``revision``, ``version``…). A second ticket
  with a fresh id is still the same ticket (the id of the conversation it went to is kept); the
  same edit is the same edit however long the file it grows, and the same cancellation however
  long the record it returns grows.
- *An answer "no"*: a shell call whose error is a bare exit status 1, nothing printed, from a
  program whose status 1 means no match, a difference or a false condition (``grep``, ``rg``,
  ``git grep``, ``diff``, ``test``: `engine.loops.shell.answers_no`) is read as a success with
  an empty answer: searching for a word that is not there is exploring, not a failing tool (the
  same search three times is still a repeat).
- *Waiting*: a call of a wait tool (``sleep``…) or a shell command starting with ``sleep``.
- *Progress*: a successful step whose state was not seen in the window. Polling with a moving
  percentage, the next page, a debugger step that lands somewhere new, a test run with fewer
  failures: all progress. Failures, agent turns, waiting and repeats are not. A write to a
  named target (its ``path``, ``reservation_id``… arguments) is progress for that target only:
  the first write of b.md does not make the third identical write of a.md new (``exact_repeat``);
  a write naming no target (``git add -A``) counts for every repetition.
- *Turn*: the model response that issued a call (`Step.turn`: an LLM response id, the
  AIMessage holding the tool calls, a parent span). Calls of one turn are one *attempt*: a
  batch of different guesses that all fail is one failed try, not several failures in a row
  (``circuit_breaker``, ``near_duplicate`` count turns; ``exact_repeat`` and ``recurrence``
  count one call issued twice in a turn once); the same failed batch sent again is a repeat.
  A step without a turn is an attempt of its own.
- *Rejected answer*: an agent turn without a tool call that the runtime or harness answered
  with a rejection (`Step.error` on a ``tool=None`` step that is no context overflow: "not a
  valid call", "locations not precise"). It is a failed attempt, never progress.
- *User turn*: the user speaking (`LoopDetector.user_input`, or a call of a user tool such as
  tau-bench's ``respond``, whose result is the user's reply). It is never progress by itself: a
  user turn counts only through what the agent does next, so the same failing call retried
  between "please try again" turns is still a loop; it only tells ``idle_turns`` that the
  agent's messages answer someone.
- *Action*: what the agent does, as timing counts it: a tool call, a condensation, a turn a
  harness answered or, in a run without a user, any turn. A chat message to the user (a call
  of a user tool, or an accepted message turn once the user has spoken) is talk, not an action.

Rules, in the order they are checked on a step (the first that fires wins, and the rules after
it do not see that step); each can be disabled (`disabled_rules`) or switched off for one tool
(`tool_exemptions`)
-----------------------------------------------------------------------------------------------
- ``exact_repeat``: the same state 3 times (`repeat_threshold`) with no progress in between,
  unless the agent waited before every repeat (polling with back-off: see ``poll_budget``);
  a successful write twice (`user_repeat_threshold`) when the repeat is the agent's next call
  after a user turn (the same cancellation made again after the customer's reply: the action
  already happened, so the second is a duplicate side effect, a second refund); with
  `user_repeat_failures` (off by default), a failing call retried that way twice too; a
  batch (a turn of 2+ calls that all failed) sent again as the next turn, the same calls
  failing the same way, no progress and no user turn since: at once, the agent changed nothing.
- ``circuit_breaker``: K consecutive failures of one tool (`breaker_failures`, per-tool
  overrides), whatever the arguments, with no success of it and no progress elsewhere between;
  or `repeat_threshold` failures of one call back to back (no other action in between: chat
  with the user is no action, so on a conversational run the third identical failed call is
  the evidence, whatever the customer said between), whatever the errors say, unless the error
  moved to another line of the code.
- ``near_duplicate``: 3 failures of one tool with the same error signature on the same target, or
  3 side-effecting successes on the same target, whose arguments differ only slightly (numbers
  nudged, strings reworded, an optional argument left out or given an empty value; for a
  failure, any other value of an argument the error rejects by name without quoting the value:
  ``unexpected keyword argument 'address'``); no progress and no success of that tool in
  between. `details` carries the argument differences.
- ``cycle``: the last `cycle_repeats` × p + 1 tool calls repeat a block of period p (2…5) with
  identical outcomes: two rounds and the head of the third (ABABA, ABCABCA…); waiting calls are
  left out of the pattern. Two rounds alone (ABAB) are ordinary work.
- ``recurrence``: one call failing the same way, or one identical write, 5 times
  (`recurrence_threshold`) within the window, whatever came in between ("fix attempts" do not
  make the same failure new); successful reads never count.
- ``context_overflow``: 3 context-overflow / condensation episodes with fewer than
  `overflow_min_progress` progress steps between consecutive ones (one new step is enough
  after a planned condensation that failed nothing, as is a turn in which the runtime says it
  trims the context), or 10 events back to back
  (`overflow_run_threshold`).
- ``idle_turns``: 3 agent turns in a row without a tool call, each empty or (nearly) repeating
  another turn of the run (case, numbers and punctuation ignored); or, once the run has called
  tools, 3 message turns in a row without a tool call, whatever they say. A read between the
  turns that returns a state already in the window does not end the run (it is no progress).
  Checked first on a turn: 3 rejected answers in a row with the same kind of rejection (one
  error signature), no progress and no accepted answer between, tools called or not (failed
  calls between and the harness's answer as a user message do not end the run). It runs in
  this place because a rejected answer is a turn: an overflow (``context_overflow``, before
  it) is not a rejection, and a chanting message (``repeated_content``) is judged apart.
- ``repeated_content``: one agent message in which a passage of 50 characters
  (`content_chunk_size`) comes back 10 times (`content_repeats`), close together: the model is
  "chanting". Code blocks and tables are left out, and so is a message the runtime or harness
  rejected (a turn with an error): one refused message is left to the count of rejected answers.
- ``poll_budget``: one call returned something new, or was repeated after a wait, more than
  `poll_budget` times (per-tool overrides) while nothing else new was going on: it is polling
  something that never finishes.
- ``step_budget``: the current task reached `max_steps` observed steps (remedy ``stop``); a
  task begins with a user message, a new run or graph invocation, or an idle gap
  (`LoopDetector.new_task`), so a long healthy session is never stopped for being long.

Short budgets: where the task's budget `max_steps` is small, the repeat thresholds
(``exact_repeat``, ``near_duplicate``, ``circuit_breaker``, ``recurrence``, ``idle_turns``)
are at most half of it, never below 2 (`budget_scaled`): with a budget of 6 actions, the third
reworded failing search trips the circuit breaker; a loop that uses half the budget is flagged
before the budget ends. At the default budget (500) nothing changes.

Limitation: a tool whose output hides the state it moves through (a debugger printing only the
current line while stepping through a program loop) looks exactly like a cycle; make it return
the state, or exempt it from ``cycle`` and ``exact_repeat``.

After a flag
------------
A verdict fences off everything observed so far: the next verdict needs fresh evidence after the
flagged step (for an exact repeat, three more identical calls), so a loop that goes on is flagged
again every few steps, not on every step. A re-flag of the same loop (same `signature`) keeps the
original `loop_start` and counts up `flag_count`, which lets the engine nudge first and roll back
on the second flag. `reset()` forgets everything; the engine calls it after a rollback and replays
the live steps. Memory is bounded by `window` (the `horizon`), never by the session length, and
no verdict reaches further back than the horizon.

Where the code is
-----------------
This module reads each step once (normalization, fingerprint, state, progress) into the
`engine.loops.window.Window` and an `Observation`, then runs the rules of
`engine.loops.rules.REGISTRY` in order, and turns the first `Finding` into a `Verdict`. Each rule
is one class in `engine/loops/rules/`, with its settings, state, explanation and advice.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import regex

from engine.loops.fingerprint import digest, fingerprint_normalized
from engine.loops.normalize import (
    DEFAULT_CODE_KEYS,
    DEFAULT_PROGRESS_KEYS,
    DEFAULT_QUERY_KEYS,
    DEFAULT_TARGET_KEYS,
    DEFAULT_THOUGHT_KEYS,
    DEFAULT_VOLATILE_KEYS,
    Normalizer,
    answers_no,
    classify_call,
    error_signature,
    result_digest,
    result_version,
)
from engine.loops.patterns import UnsafePattern, check_pattern
from engine.loops.rules import (
    CIRCUIT_BREAKER,
    CONTEXT_OVERFLOW,
    CYCLE,
    EXACT_REPEAT,
    IDLE_TURNS,
    NEAR_DUPLICATE,
    POLL_BUDGET,
    RECURRENCE,
    REGISTRY,
    REPEATED_CONTENT,
    RULES,
    STEP_BUDGET,
    Finding,
    Remedy,
    Rule,
)
from engine.loops.step import Step
from engine.loops.window import (
    CALL,
    CONDENSATION,
    EXEMPT,
    TURN,
    Kind,
    Observation,
    Record,
    Window,
)

__all__ = [
    "Step",
    "Verdict",
    "DetectorConfig",
    "LoopDetector",
    "HEALTHY",
    "RULES",
    "EXACT_REPEAT",
    "NEAR_DUPLICATE",
    "CYCLE",
    "RECURRENCE",
    "REPEATED_CONTENT",
    "IDLE_TURNS",
    "CONTEXT_OVERFLOW",
    "CIRCUIT_BREAKER",
    "POLL_BUDGET",
    "STEP_BUDGET",
]

DEFAULT_OVERFLOW_PATTERN = (
    r"context[ _-]?(?:length|window)|maximum context|context_length_exceeded|too many tokens"
    r"|prompt is too long|token limit|exceeds? the (?:model'?s? )?(?:maximum|max) (?:context|input)"
)
"""Error texts that mean the model's context overflowed (matched case-insensitively)."""

DEFAULT_USER_TOOLS = frozenset(
    {
        "respond",
        "reply",
        "respond_to_user",
        "reply_to_user",
        "message_user",
        "send_message_to_user",
        "ask_user",
        "talk_to_user",
    }
)
"""Tools whose call is the agent speaking to the user and whose result is the user's reply."""

_CONDENSING = re.compile(r"\b(?:trimm|condens|summari[sz]|truncat|compact)", re.IGNORECASE)
"""A context event that says the runtime is shrinking the context to fit ("Trimming prompt to
meet context window limitations"): a planned condensation, not a failed model call."""


@dataclass(frozen=True)
class Verdict:
    """What the detector concluded after observing one step."""

    looping: bool
    """True when the session is in a loop."""
    rule: str | None = None
    """Rule id that fired (one of `RULES`, e.g. ``exact_repeat``), None when healthy."""
    explanation: str = ""
    """One sentence an on-call engineer understands."""
    evidence: tuple[int, ...] = ()
    """Indexes (0-based, in observation order) of the steps that make the case."""
    loop_start: int | None = None
    """Index of the step where the loop began; roll back to the snapshot before it. None when
    there is nothing to roll back to (``step_budget``)."""
    details: dict[str, Any] = field(default_factory=dict)
    """Rule-specific extras as plain JSON data (argument differences for near-duplicates, counts,
    the cycle's pattern, …)."""
    tool: str | None = None
    """The tool the loop is about (the first tool of a cycle); None for agent turns."""
    remedy: Remedy | None = None
    """What the engine should do: ``rollback`` (to before `loop_start`) or ``stop`` (budget
    exhausted); None when healthy."""
    advice: str = ""
    """One sentence addressed to the agent, usable as a nudge before a hard rollback."""
    signature: str | None = None
    """Stable id of this loop (rule + what repeats), equal across re-flags of the same loop."""
    flag_count: int = 0
    """How many times this loop was flagged since the last reset (1 on the first detection)."""


_USER = "user"
"""How `LoopDetector` reads a call of a user tool (a message turn, then the user's reply)."""

HEALTHY = Verdict(looping=False)
"""The shared healthy verdict (do not mutate its `details`)."""


@dataclass(frozen=True)
class DetectorConfig:
    """Thresholds and switches of a `LoopDetector`; the defaults are the production settings.

    Set-valued fields accept any iterable of strings; mapping fields map a tool name to a value.
    Each rule reads the fields named by its constructor's parameters (`Rule.settings`) and
    validates them; the others belong to the detector itself.

    Raises:
        TypeError: for a string where a collection of names is expected.
        ValueError: for inconsistent thresholds, unknown rule ids or a broken regular expression.
    """

    enabled: bool = True
    """Off switch: when False every step is healthy and nothing is tracked."""
    window: int = 64
    """Steps kept in memory; also the `horizon`, the furthest back a verdict may point."""
    repeat_threshold: int = 3
    """``exact_repeat`` fires at this occurrence of the same state."""
    user_repeat_threshold: int = 2
    """``exact_repeat`` fires at this occurrence of one successful write when each repeat was
    the agent's next call after the user spoke (nothing but talk between, no progress): the
    action already happened and the user's turn did not change what the agent does next. At
    `repeat_threshold` or above it adds nothing: set it there for an agent whose users ask for
    the same action again on purpose ("add one more of the same mug")."""
    user_repeat_failures: bool = False
    """Stricter, for conversational agents: ``exact_repeat`` also flags a *failing* call at
    `user_repeat_threshold` when each retry was the agent's next call after the user spoke and
    failed with the same error (the customer's turn did not change what the agent does). Off by
    default: it catches a retry loop at its second attempt, but also flags the single retry a
    customer asks for ("please try again with that card"); on tau2-bench's runs it moved flags
    to within 3 actions (tool calls, not chat messages) of the loop's start for 13 of 14 tuned
    loops instead of 12 (held-out: 12 of 15 either way), and flagged 2 of 96 tuned healthy
    runs (``bench/detector.py`` prints both settings)."""
    near_duplicate_threshold: int = 3
    """``near_duplicate`` fires at this many near-identical failures (or side effects)."""
    near_max_changed: int = 4
    """At most this many argument leaves may differ for two calls to count as near-duplicates."""
    near_numeric_abs: float = 16.0
    """Numbers within this absolute distance count as a slight change."""
    near_numeric_rel: float = 0.25
    """Numbers within this fraction of the larger one count as a slight change."""
    near_text_similarity: float = 0.6
    """Strings at least this similar (difflib ratio) count as a slight change."""
    cycle_min_period: int = 2
    """Shortest cycle looked for (period 1 is ``exact_repeat``)."""
    cycle_max_period: int = 5
    """Longest cycle looked for."""
    cycle_repeats: int = 2
    """A cycle fires once its block has run this many times in a row and the next round has
    begun (2: ABAB, then A)."""
    recurrence_threshold: int = 5
    """``recurrence`` fires at this many identical failures (or identical writes) of one call
    within the window, whatever came in between."""
    idle_turns_threshold: int = 3
    """``idle_turns`` fires at this many empty or repeated turns in a row."""
    turn_similarity: float = 0.8
    """Two agent turns this similar (after dropping case, digits, punctuation) are a repeat."""
    user_turn_similarity: float = 0.95
    """A turn that follows a user message repeats an earlier one only when this similar: an
    agent rewording a refusal to a customer who keeps asking is not stuck (at least
    `turn_similarity`)."""
    content_chunk_size: int = 50
    """``repeated_content`` compares passages of this many characters of one message."""
    content_repeats: int = 10
    """``repeated_content`` fires when one passage comes back this many times in a message."""
    overflow_threshold: int = 3
    """``context_overflow`` fires at this many overflow / condensation episodes."""
    overflow_min_progress: int = 3
    """Episodes separated by at least this many progress steps are not counted together (one
    is enough after an episode that was only a planned condensation)."""
    overflow_run_threshold: int = 10
    """``context_overflow`` also fires at this many overflow / condensation events back to
    back, with nothing else in between."""
    overflow_pattern: str = DEFAULT_OVERFLOW_PATTERN
    """Regular expression (case-insensitive) that recognizes a context-overflow error."""
    condensation_tools: frozenset[str] = frozenset(
        {"condense", "condensation", "condense_context", "summarize_context", "compact_context"}
    )
    """Tools whose call is a context condensation (counted only by ``context_overflow``)."""
    thought_tools: frozenset[str] = frozenset({"think", "thought", "reflect"})
    """Tools that only record the agent's thinking; treated as agent turns, not as calls."""
    user_tools: frozenset[str] = DEFAULT_USER_TOOLS
    """Tools through which the agent talks to the user (tau-bench's ``respond``…): a call is an
    agent message turn followed by the user's reply (`LoopDetector.user_input`), never
    progress by itself: a user turn is progress only when it changes what the agent does next,
    so the same failing call retried between "please try again" turns is still a loop."""
    wait_tools: frozenset[str] = frozenset({"sleep", "wait", "wait_for", "pause"})
    """Tools that only let time pass: never progress and never part of a ``cycle`` pattern
    (poll, sleep, poll, sleep is judged on the polls: three identical answers, not two)."""
    breaker_failures: int = 5
    """``circuit_breaker`` trips at this many consecutive failures of one tool."""
    tool_breaker_failures: Mapping[str, int] = field(default_factory=dict)
    """Per-tool override of `breaker_failures`."""
    poll_budget: int = 40
    """A call may repeat this many times with changing results before ``poll_budget`` fires."""
    tool_poll_budgets: Mapping[str, int] = field(default_factory=dict)
    """Per-tool override of `poll_budget` (e.g. a CI status tool that may poll for an hour)."""
    max_steps: int | None = 500
    """Hard budget of observed steps per task (since the task began: a user message, a new run
    or graph invocation, an idle gap; `LoopDetector.new_task`); None: no budget. A small budget
    lowers the repeat thresholds to half of it (at least 2; `budget_scaled`), so that a loop
    using half the budget is flagged before the budget ends."""
    exempt_tools: frozenset[str] = frozenset()
    """Tools ignored by every rule except the step budget (their steps are transparent)."""
    tool_exemptions: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """Per-tool rule ids that must not fire on that tool, e.g. ``{"wait_ci": {"exact_repeat"}}``."""
    disabled_rules: frozenset[str] = frozenset()
    """Rule ids switched off for every tool."""
    volatile_keys: frozenset[str] = DEFAULT_VOLATILE_KEYS
    """Argument and result keys dropped before fingerprinting (ids, timestamps, nonces…)."""
    progress_keys: frozenset[str] = DEFAULT_PROGRESS_KEYS
    """Argument keys counting the agent's own retries (attempt, retry…), dropped from arguments."""
    thought_keys: frozenset[str] = DEFAULT_THOUGHT_KEYS
    """Argument keys holding free-text thoughts, dropped from arguments."""
    code_keys: frozenset[str] = DEFAULT_CODE_KEYS
    """Argument keys whose strings carry code (edits, patches, scripts): whitespace in them is
    kept, so an indent and its undo are different calls."""
    query_keys: frozenset[str] = DEFAULT_QUERY_KEYS
    """Argument keys holding a search query, compared as a set of lower-cased words."""
    target_keys: frozenset[str] = DEFAULT_TARGET_KEYS
    """Top-level argument keys naming what a call acts on (``*_id`` keys count too)."""

    def __post_init__(self) -> None:
        for name in _SET_FIELDS:
            value = getattr(self, name)
            if isinstance(value, str):
                raise TypeError(f"{name} takes a collection of names, not the string {value!r}")
            if not isinstance(value, frozenset):
                object.__setattr__(self, name, frozenset(value))
        for name, (kind, low, high) in FIELD_RANGES.items():
            _check_range(name, getattr(self, name), kind, low, high)
        for name, per_tool in (("tool_breaker_failures", "breaker_failures"),
                               ("tool_poll_budgets", "poll_budget")):
            kind, low, high = FIELD_RANGES[per_tool]
            for tool, value in dict(getattr(self, name)).items():
                _check_range(f"{name}[{tool!r}]", value, kind, low, high)
        for name in ("enabled", "user_repeat_failures"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be true or false, not {getattr(self, name)!r}")
        exemptions = {tool: frozenset(rules) for tool, rules in self.tool_exemptions.items()}
        object.__setattr__(self, "tool_exemptions", exemptions)
        unknown = (self.disabled_rules | {r for rs in exemptions.values() for r in rs}) - set(RULES)
        if unknown:
            raise ValueError(f"unknown rule ids {sorted(unknown)}; known rules: {list(RULES)}")
        needed = max(rule.span for rule in _build_rules(self, REGISTRY)) + 1  # validates them
        if self.window < needed:
            raise ValueError(f"window must be at least {needed} steps to hold the longest pattern")
        try:
            check_pattern(self.overflow_pattern, "overflow_pattern")
            regex.compile(self.overflow_pattern, regex.IGNORECASE | regex.VERSION0)
        except UnsafePattern as exc:
            raise ValueError(str(exc)) from None
        except regex.error as exc:
            raise ValueError(f"overflow_pattern is not a valid regular expression: {exc}") from None


FIELD_RANGES: dict[str, tuple[type, float, float]] = {
    "window": (int, 4, 10_000),
    "repeat_threshold": (int, 2, 10_000),
    "user_repeat_threshold": (int, 2, 10_000),
    "near_duplicate_threshold": (int, 2, 10_000),
    "near_max_changed": (int, 0, 10_000),
    "near_numeric_abs": (float, 0.0, 1e12),
    "near_numeric_rel": (float, 0.0, 1.0),
    "near_text_similarity": (float, 0.0, 1.0),
    "cycle_min_period": (int, 2, 1_000),
    "cycle_max_period": (int, 2, 1_000),
    "cycle_repeats": (int, 2, 1_000),
    "recurrence_threshold": (int, 2, 10_000),
    "idle_turns_threshold": (int, 2, 10_000),
    "turn_similarity": (float, 0.0, 1.0),
    "user_turn_similarity": (float, 0.0, 1.0),
    "content_chunk_size": (int, 8, 100_000),
    "content_repeats": (int, 3, 100_000),
    "overflow_threshold": (int, 2, 10_000),
    "overflow_min_progress": (int, 0, 10_000),
    "overflow_run_threshold": (int, 2, 10_000),
    "breaker_failures": (int, 1, 1_000_000),
    "poll_budget": (int, 1, 1_000_000),
    "max_steps": (int, 1, 100_000_000),
}
"""The kind and the allowed range (inclusive) of each numeric `DetectorConfig` field, checked by
every config: a declared setting reaches every process on the store, so `window=10**12` (memory)
or `turn_similarity=-1` (every turn a repeat) is refused, not obeyed. `max_steps` may also be
None; the per-tool overrides take their field's range."""


def _check_range(name: str, value: Any, kind: type, low: float, high: float) -> None:
    """Refuse `value` for `name` unless it is a `kind` (a whole number for int; booleans are
    not numbers here) within [low, high]."""
    if name == "max_steps" and value is None:
        return
    whole = "a whole number" if kind is int else "a number"
    shown = f"{int(low)} to {int(high)}" if kind is int else f"{low:g} to {high:g}"
    allowed = (int,) if kind is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, allowed):
        raise TypeError(f"{name} must be {whole} from {shown}, not {value!r}")
    if not low <= value <= high:  # also refuses nan
        raise ValueError(f"{name} must be {whole} from {shown}, not {value!r}")


_SET_FIELDS = (
    "condensation_tools",
    "thought_tools",
    "user_tools",
    "wait_tools",
    "exempt_tools",
    "disabled_rules",
    "volatile_keys",
    "progress_keys",
    "thought_keys",
    "code_keys",
    "query_keys",
    "target_keys",
)


BUDGET_SCALED = (
    "repeat_threshold",
    "near_duplicate_threshold",
    "breaker_failures",
    "recurrence_threshold",
    "idle_turns_threshold",
)
"""The repeat thresholds a small step budget lowers (`budget_scaled`)."""


def budget_scaled(config: DetectorConfig) -> dict[str, Any]:
    """The repeat thresholds a small `max_steps` lowers: each of `BUDGET_SCALED` (and every
    per-tool `tool_breaker_failures`) is at most half the budget, and never below 2, so a
    loop that uses half the budget is flagged before the budget ends (a budget of 6 actions:
    the circuit breaker trips at the 3rd failure, not the 5th). A budget of 10 or more changes
    nothing at the default thresholds."""
    budget = config.max_steps
    if budget is None:
        return {}
    cap = max(2, budget // 2)
    out: dict[str, Any] = {
        name: cap for name in BUDGET_SCALED if getattr(config, name) > cap
    }
    if any(v > cap for v in config.tool_breaker_failures.values()):
        out["tool_breaker_failures"] = {
            t: min(v, cap) for t, v in config.tool_breaker_failures.items()
        }
    return out


OVERFLOW_SEARCH_S = 0.05
"""Time limit of one search of `overflow_pattern` in an error text. The pattern cannot backtrack
exponentially (`engine.loops.patterns`), but a polynomial one such as ``a.*b.*c`` could still
take minutes on a 20,000-character error; past the limit the text is read as no overflow. The
default pattern takes about a millisecond on such a text."""


class _TimedSearch:
    """Case-insensitive search of a pattern in error texts, within `OVERFLOW_SEARCH_S`.

    Why the `regex` package: `re` has no time limit; `regex` reads `re`'s syntax (its VERSION0)
    and stops a search that runs too long.
    """

    def __init__(self, pattern: str) -> None:
        self._pattern = regex.compile(pattern, regex.IGNORECASE | regex.VERSION0)

    def __call__(self, text: str) -> bool:
        try:
            return self._pattern.search(text, timeout=OVERFLOW_SEARCH_S) is not None
        except TimeoutError:
            return False


def _build_rules(config: DetectorConfig, registry: Iterable[type[Rule]]) -> list[Rule]:
    """A fresh instance of each rule class, given its settings from `config` and its per-tool
    exemptions.

    Raises:
        ValueError: for a setting a rule refuses.
    """
    scaled = budget_scaled(config)
    rules = []
    for cls in registry:
        rule = cls(**{name: scaled.get(name, getattr(config, name)) for name in cls.settings})
        exempt = frozenset(t for t, ids in config.tool_exemptions.items() if cls.id in ids)
        if exempt:
            rule.exempt = exempt
        rules.append(rule)
    return rules


class LoopDetector:
    """Streaming loop detector: feed each step to `observe`, read the verdict.

    ``LoopDetector()`` uses the production defaults of `DetectorConfig`; pass a config and/or
    keyword overrides of its fields: ``LoopDetector(repeat_threshold=4, exempt_tools={"sleep"})``.
    `rules` replaces the rule classes (default `engine.loops.rules.REGISTRY`, in the order they
    run), e.g. ``rules=(*REGISTRY, MyRule)`` to add one of your own.

    Raises:
        TypeError: for a keyword that is not a `DetectorConfig` field.
        ValueError: for inconsistent thresholds or unknown rule ids.
    """

    def __init__(
        self,
        config: DetectorConfig | None = None,
        *,
        rules: Iterable[type[Rule]] = REGISTRY,
        **overrides: Any,
    ) -> None:
        config = config or DetectorConfig()
        self.config: DetectorConfig = replace(config, **overrides) if overrides else config
        cfg = self.config
        self._normalizer = Normalizer(
            cfg.volatile_keys, cfg.progress_keys, cfg.thought_keys, cfg.code_keys, cfg.query_keys
        )
        self._overflow = _TimedSearch(cfg.overflow_pattern)
        self._signatures: dict[tuple[str, str | None], tuple[str, bool, bool]] = {}
        self._wait_tools = cfg.wait_tools
        # tools read otherwise than as a call, in order of precedence (the first set wins)
        self._special: dict[str, str] = {}
        for tools, kind in (
            (cfg.condensation_tools, CONDENSATION),
            (cfg.exempt_tools, EXEMPT),
            (cfg.thought_tools, TURN),
            (cfg.user_tools, _USER),
        ):
            self._special.update(dict.fromkeys(tools, kind))
        # A switched-off rule is never built: its state could not change any other verdict.
        enabled = tuple(r for r in rules if r.id not in cfg.disabled_rules)
        self._rules = _build_rules(cfg, enabled)
        self._by_kind: dict[Kind, tuple[Rule, ...]] = {
            kind: tuple(r for r in self._rules if kind in r.kinds)
            for kind in (CALL, TURN, CONDENSATION, EXEMPT)
        }
        self._window = Window(cfg.window)
        self._obs = Observation()
        self.reset()

    # -- public -------------------------------------------------------------------------------
    @property
    def horizon(self) -> int:
        """How many recent steps a verdict may reach back over (evidence and loop_start)."""
        return self.config.window

    @property
    def enabled(self) -> bool:
        """Whether the detector looks at steps at all."""
        return self.config.enabled

    @property
    def repeat_threshold(self) -> int:
        """Occurrence of the same state at which ``exact_repeat`` fires."""
        return self.config.repeat_threshold

    @property
    def steps_observed(self) -> int:
        """Steps observed since the last reset (the index the next step gets)."""
        return self._window.n

    def reset(self) -> None:
        """Forget every step: the next observed step gets index 0 (use after a rollback, then
        replay the live steps)."""
        self._window.clear()
        for rule in self._rules:
            rule.reset()
        self._flags: OrderedDict[str, tuple[int, int | None]] = OrderedDict()

    def user_input(self) -> None:
        """Tell the rules the user spoke (a user message joined the dialogue): message turns
        that answer the user are not an agent talking instead of acting."""
        self._window.last_user = self._window.n
        for rule in self._rules:
            rule.user_input()

    def new_task(self) -> None:
        """A new task starts with the next step (a user message, a new run or graph
        invocation, a client back after an idle gap): per-task budgets begin again
        (``step_budget``); loop evidence is kept, a retry across tasks is the same loop."""
        for rule in self._rules:
            rule.new_task(self._window.n)

    def observe(self, step: Step) -> Verdict:
        """Take in one step (in the order they happened) and say whether the session loops."""
        window = self._window
        index = window.n
        window.n = index + 1
        cfg = self.config
        if not cfg.enabled:
            return HEALTHY
        tool = step.tool
        if tool is None:
            obs = self._read_other(index, step, TURN)
        else:
            special = self._special.get(tool)
            if special is None:
                obs = self._read_call(index, step, tool)
            elif special is _USER:
                return self._talk(index, step)
            else:
                obs = self._read_other(index, step, special)  # type: ignore[arg-type]
        for rule in self._by_kind[obs.kind]:
            finding = rule.check(obs, window)
            if finding is not None:
                return self._flag(index, rule, finding)
        return HEALTHY

    def _talk(self, index: int, step: Step) -> Verdict:
        """A call of a user tool: the agent's message turn, then the user's reply."""
        obs = self._read_other(index, step, TURN, chat=True)
        verdict = HEALTHY
        for rule in self._by_kind[TURN]:
            finding = rule.check(obs, self._window)
            if finding is not None:
                verdict = self._flag(index, rule, finding)
                break
        self.user_input()
        return verdict

    # -- reading a step -----------------------------------------------------------------------
    def _read_other(self, index: int, step: Step, kind: Kind, chat: bool = False) -> Observation:
        """An agent turn, or a call of a condensation or exempt tool: it only holds its place
        in the window; a condensation, or a model turn that overflowed, is an overflow event.
        A chat message to the user (`chat`: a call of a user tool; or a message turn that
        nothing rejected, once the user has spoken) is no action of the agent."""
        window = self._window
        record = Record(index, step.tool)
        window.push(record)
        prev_action = window.last_action
        if not (chat or (step.tool is None and step.ok and window.last_user >= 0)):
            window.last_action = index
        if kind == CONDENSATION:
            overflow, cause = True, None
        elif kind == TURN and not step.ok and step.error and self._overflow(step.error):
            # The model call overflowed: the tool output read just before it is the cause.
            overflow, cause = True, window.last_call
            if _CONDENSING.search(step.error):
                # the runtime says it trims the context to fit: a planned condensation, not a
                # failure, and no turn the agent spoke
                kind = CONDENSATION
        else:
            overflow, cause = False, None
        obs = self._obs
        obs.index, obs.step, obs.kind, obs.tool, obs.record = index, step, kind, step.tool, record
        obs.args, obs.call, obs.state, obs.signature, obs.ok = None, "", None, "", step.ok
        obs.novel_call = obs.novel_state = obs.write = obs.waits = False
        obs.progress_before, obs.overflow, obs.cause = window.progress, overflow, cause
        obs.prev_action = prev_action
        return obs

    def _read_call(self, index: int, step: Step, tool: str) -> Observation:
        """A tool call: normalized arguments, fingerprint, state, novelty and progress."""
        window = self._window
        args = self._normalizer.args(step.args)
        call = fingerprint_normalized(tool, args)
        ok = step.ok
        overflow = False
        if tool in self._wait_tools:
            write, waiting = step.side_effect, True
        else:
            write, waiting = classify_call(tool, step.args)
            write = write or step.side_effect
        signature = ""
        if not ok:
            signature, overflow, no = self._error_signature(call, step, args)
            if no:  # ``grep`` found nothing: an answer (empty), not a failure
                step = replace(step, ok=True, error=None, result=step.error)
                ok, signature, overflow = True, "", False
                outcome = "no"
            else:
                outcome = "!" + signature
        elif write:
            version = result_version(step.result) if type(step.result) is dict else ""
            outcome = f"done {version}" if version else "done"
        else:
            outcome = result_digest(step.result, self._normalizer)
        state = (call, outcome)
        record = Record(index, tool, call, state)
        window.push(record)
        window.last_call = index
        prev_action, window.last_action = window.last_action, index
        if waiting:
            window.last_wait = index
        else:
            window.calls.append(record)
        call_seen, state_seen = window.call_seen, window.state_seen
        novel_call = call not in call_seen
        novel_state = state not in state_seen
        call_seen[call] = call_seen.get(call, 0) + 1
        state_seen[state] = state_seen.get(state, 0) + 1
        before = window.progress
        mark: Any = before
        if ok:
            if novel_state and not waiting:
                mark = window.progress = before + 1
            if write:
                target = self._write_target(args)
                if target:
                    if novel_state and not waiting:
                        window.note_target_progress(target, index)
                    mark = (mark - window.targeted, window.target_progress.get(target, -1))
            window.last_ok[tool] = index
        obs = self._obs
        obs.index, obs.step, obs.kind, obs.tool, obs.record = index, step, CALL, tool, record
        obs.args, obs.call, obs.state, obs.signature, obs.ok = args, call, state, signature, ok
        obs.novel_call, obs.novel_state = novel_call, novel_state
        obs.progress_before, obs.overflow, obs.cause = before, overflow, None
        obs.write, obs.waits, obs.progress_mark = write, waiting, mark
        obs.prev_action = prev_action
        return obs

    def _write_target(self, args: Any) -> str:
        """What a write acts on, named by its arguments (the values of the `target_keys` and
        ``*_id`` keys); "" when the arguments name none (a shell command, ``git add -A``): its
        progress then counts for every repetition."""
        if type(args) is not dict:
            return ""
        keys = self.config.target_keys
        parts = [f"{k}={v!r}" for k, v in args.items() if k in keys or k[-3:] == "_id"]
        if len(parts) > 1:
            parts.sort()
        return ",".join(parts)

    def _error_signature(self, call: str, step: Step, args: Any) -> tuple[str, bool, bool]:
        """`error_signature` of a failure, whether it is a context overflow, and whether it
        only answered "no" (`answers_no`: a search that found nothing), cached per (call, error
        text): loops repeat both."""
        key = (call, step.error)
        known = self._signatures.get(key)
        if known is None:
            if len(self._signatures) >= 256:
                self._signatures.clear()
            error = step.error or ""
            signature = error_signature(error, args, self._normalizer.volatile_values(step.args))
            known = self._signatures[key] = (
                signature,
                self._overflow(error),
                answers_no(step.args, step.error),
            )
        return known

    # -- after a rule fired -------------------------------------------------------------------
    def _flag(self, index: int, rule: Rule, finding: Finding) -> Verdict:
        """Build a looping verdict, fence off the evidence and remember the loop for re-flags."""
        oldest = index - self._window.size + 1
        signature = digest(f"{rule.id}\x00{finding.what}")
        loop_start = finding.loop_start
        count = 1
        known = self._flags.pop(signature, None)
        if known is not None:
            count = known[0] + 1
            if loop_start is not None and known[1] is not None:
                loop_start = min(loop_start, known[1])
        if loop_start is not None:
            loop_start = max(loop_start, oldest)
        self._flags[signature] = (count, loop_start)
        if len(self._flags) > 32:
            self._flags.popitem(last=False)
        evidence = tuple(sorted({i for i in finding.evidence if i >= oldest}))
        self._window.fence = index
        for each in self._rules:
            each.after_flag()
        return Verdict(
            looping=True,
            rule=rule.id,
            explanation=finding.explanation,
            evidence=evidence,
            loop_start=loop_start,
            details=finding.details,
            tool=finding.tool,
            remedy=finding.remedy,
            advice=finding.advice,
            signature=signature,
            flag_count=count,
        )
