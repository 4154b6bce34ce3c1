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
  signature of a failure (ids, times and echoed argument values masked), or just "done" for a
  successful side-effecting call (a second ticket with a fresh id is still the same ticket).
- *Progress*: a successful step whose state was not seen in the window. Polling with a moving
  percentage, the next page, a debugger step that lands somewhere new, a test run with fewer
  failures: all progress. Failures, agent turns, waiting (``sleep``) and repeats are not.

Rules, in the order they are checked on a step (the first that fires wins); each can be disabled
(`disabled_rules`) or switched off for one tool (`tool_exemptions`)
---------------------------------------------------------------------------------------------
- ``exact_repeat``: the same state 3 times (`repeat_threshold`) with no progress in between.
- ``circuit_breaker``: K consecutive failures of one tool (`breaker_failures`, per-tool
  overrides), whatever the arguments, with no success of it and no progress elsewhere between.
- ``near_duplicate``: 3 failures of one tool with the same error signature on the same target, or
  3 side-effecting successes on the same target, whose arguments differ only slightly (numbers
  nudged, strings reworded); no progress and no success of that tool in between. `details`
  carries the argument differences.
- ``cycle``: the last `cycle_repeats` × p tool calls repeat a block of period p (2…5) with
  identical outcomes (ABAB, ABCABC…); waiting tools are left out of the pattern.
- ``idle_turns``: 3 agent turns in a row without a tool call, each empty or (nearly) repeating
  another turn of the run (case, numbers and punctuation ignored).
- ``context_overflow``: 3 context-overflow / condensation episodes with fewer than
  `overflow_min_progress` progress steps between consecutive ones.
- ``poll_budget``: one call returned something new more than `poll_budget` times (per-tool
  overrides) while nothing else new was going on: it is polling something that never finishes.
- ``step_budget``: the session reached `max_steps` observed steps (remedy ``stop``).

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
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engine.loops.fingerprint import digest, fingerprint
from engine.loops.normalize import (
    DEFAULT_PROGRESS_KEYS,
    DEFAULT_TARGET_KEYS,
    DEFAULT_THOUGHT_KEYS,
    DEFAULT_VOLATILE_KEYS,
    Normalizer,
    error_signature,
    flatten,
    result_digest,
    turn_signature,
    values_close,
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
    "IDLE_TURNS",
    "CONTEXT_OVERFLOW",
    "CIRCUIT_BREAKER",
    "POLL_BUDGET",
    "STEP_BUDGET",
]

EXACT_REPEAT = "exact_repeat"
NEAR_DUPLICATE = "near_duplicate"
CYCLE = "cycle"
IDLE_TURNS = "idle_turns"
CONTEXT_OVERFLOW = "context_overflow"
CIRCUIT_BREAKER = "circuit_breaker"
POLL_BUDGET = "poll_budget"
STEP_BUDGET = "step_budget"
RULES: tuple[str, ...] = (
    EXACT_REPEAT,
    CIRCUIT_BREAKER,
    NEAR_DUPLICATE,
    CYCLE,
    IDLE_TURNS,
    CONTEXT_OVERFLOW,
    POLL_BUDGET,
    STEP_BUDGET,
)
"""Every rule id, in the order rules are checked on one step (the first that fires wins)."""

DEFAULT_OVERFLOW_PATTERN = (
    r"context[ _-]?(?:length|window)|maximum context|context_length_exceeded|too many tokens"
    r"|prompt is too long|token limit|exceeds? the (?:model'?s? )?(?:maximum|max) (?:context|input)"
)
"""Error texts that mean the model's context overflowed (matched case-insensitively)."""


@dataclass(frozen=True)
class Step:
    """One observed step: a tool call (`tool` set) or an agent message turn (`tool=None`)."""

    tool: str | None = None
    """Tool name; None for a plain agent message turn."""
    args: Any = None
    """Tool arguments (plain data)."""
    ok: bool = True
    """Whether the tool call succeeded."""
    error: str | None = None
    """Error text when the call failed."""
    result: Any = None
    """Tool result (or a digest of it); used to tell progress from repetition."""
    text: str | None = None
    """The agent's free text for a message turn; never part of the fingerprint."""
    side_effect: bool = False
    """The call changes the world (creates a ticket, sends mail…): repeating it is never progress,
    whatever it returns."""


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
    details: dict = field(default_factory=dict)
    """Rule-specific extras as plain JSON data (argument differences for near-duplicates, counts,
    the cycle's pattern, …)."""
    tool: str | None = None
    """The tool the loop is about (the first tool of a cycle); None for agent turns."""
    remedy: str | None = None
    """What the engine should do: ``rollback`` (to before `loop_start`) or ``stop`` (budget
    exhausted); None when healthy."""
    advice: str = ""
    """One sentence addressed to the agent, usable as a nudge before a hard rollback."""
    signature: str | None = None
    """Stable id of this loop (rule + what repeats), equal across re-flags of the same loop."""
    flag_count: int = 0
    """How many times this loop was flagged since the last reset (1 on the first detection)."""


HEALTHY = Verdict(looping=False)
"""The shared healthy verdict (do not mutate its `details`)."""


@dataclass(frozen=True)
class DetectorConfig:
    """Thresholds and switches of a `LoopDetector`; the defaults are the production settings.

    Set-valued fields accept any iterable of strings; mapping fields map a tool name to a value.
    """

    enabled: bool = True
    """Off switch: when False every step is healthy and nothing is tracked."""
    window: int = 64
    """Steps kept in memory; also the `horizon`, the furthest back a verdict may point."""
    repeat_threshold: int = 3
    """``exact_repeat`` fires at this occurrence of the same state."""
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
    """A cycle fires once its block has been seen this many times in a row."""
    idle_turns_threshold: int = 3
    """``idle_turns`` fires at this many empty or repeated turns in a row."""
    turn_similarity: float = 0.8
    """Two agent turns this similar (after dropping case, digits, punctuation) are a repeat."""
    overflow_threshold: int = 3
    """``context_overflow`` fires at this many overflow / condensation episodes."""
    overflow_min_progress: int = 3
    """Episodes separated by at least this many progress steps are not counted together."""
    overflow_pattern: str = DEFAULT_OVERFLOW_PATTERN
    """Regular expression (case-insensitive) that recognizes a context-overflow error."""
    condensation_tools: frozenset[str] = frozenset(
        {"condense", "condensation", "condense_context", "summarize_context", "compact_context"}
    )
    """Tools whose call is a context condensation (counted only by ``context_overflow``)."""
    thought_tools: frozenset[str] = frozenset({"think", "thought", "reflect"})
    """Tools that only record the agent's thinking; treated as agent turns, not as calls."""
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
    """Hard budget of observed steps per session (since the last reset); None: no budget."""
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
    target_keys: frozenset[str] = DEFAULT_TARGET_KEYS
    """Top-level argument keys naming what a call acts on (``*_id`` keys count too)."""

    def __post_init__(self) -> None:
        for name in _SET_FIELDS:
            value = getattr(self, name)
            if isinstance(value, str):
                raise TypeError(f"{name} takes a collection of names, not the string {value!r}")
            if not isinstance(value, frozenset):
                object.__setattr__(self, name, frozenset(value))
        exemptions = {tool: frozenset(rules) for tool, rules in self.tool_exemptions.items()}
        object.__setattr__(self, "tool_exemptions", exemptions)
        unknown = (self.disabled_rules | {r for rs in exemptions.values() for r in rs}) - set(RULES)
        if unknown:
            raise ValueError(f"unknown rule ids {sorted(unknown)}; known rules: {list(RULES)}")
        at_least_two = (
            "repeat_threshold",
            "near_duplicate_threshold",
            "cycle_min_period",
            "cycle_repeats",
            "idle_turns_threshold",
            "overflow_threshold",
        )
        for name in at_least_two:
            if getattr(self, name) < 2:
                raise ValueError(f"{name} must be at least 2, got {getattr(self, name)}")
        if self.cycle_max_period < self.cycle_min_period:
            raise ValueError("cycle_max_period must be >= cycle_min_period")
        if self.breaker_failures < 1 or self.poll_budget < 1:
            raise ValueError("breaker_failures and poll_budget must be positive")
        needed = (
            max(
                self.cycle_max_period * self.cycle_repeats,
                self.repeat_threshold,
                self.near_duplicate_threshold,
                self.idle_turns_threshold,
            )
            + 1
        )
        if self.window < needed:
            raise ValueError(f"window must be at least {needed} steps to hold the longest pattern")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError("max_steps must be positive or None")
        try:
            re.compile(self.overflow_pattern)
        except re.error as exc:
            raise ValueError(f"overflow_pattern is not a valid regular expression: {exc}") from None


_SET_FIELDS = (
    "condensation_tools",
    "thought_tools",
    "wait_tools",
    "exempt_tools",
    "disabled_rules",
    "volatile_keys",
    "progress_keys",
    "thought_keys",
    "target_keys",
)


@dataclass(slots=True)
class _Record:
    """One step as the window remembers it (turns and ignored steps only hold their place, so
    that the window spans the last `window` observed steps)."""

    index: int
    tool: str | None
    call: str | None = None
    state: tuple[str, str] | None = None


@dataclass(slots=True)
class _Attempt:
    """A member of a near-duplicate chain."""

    index: int
    leaves: dict[str, Any]
    progress: int


@dataclass(slots=True)
class _Streak:
    """Consecutive failures of one tool (circuit breaker)."""

    indexes: deque[int]
    errors: deque[str]
    progress: int


@dataclass(slots=True)
class _Episode:
    """A run of back-to-back overflow / condensation steps."""

    indexes: list[int]
    progress: int
    start: int
    """Where this episode's trouble began: the event, or the call whose output overflowed."""


@dataclass(slots=True)
class _Poll:
    """How often one call repeated while little else new happened (poll budget)."""

    count: int
    first: int
    last: int
    new_in_last_gap: bool


class LoopDetector:
    """Streaming loop detector: feed each step to `observe`, read the verdict.

    ``LoopDetector()`` uses the production defaults of `DetectorConfig`; pass a config and/or
    keyword overrides of its fields: ``LoopDetector(repeat_threshold=4, exempt_tools={"sleep"})``.

    Raises:
        TypeError: for a keyword that is not a `DetectorConfig` field.
        ValueError: for inconsistent thresholds or unknown rule ids.
    """

    def __init__(self, config: DetectorConfig | None = None, **overrides: Any) -> None:
        config = config or DetectorConfig()
        self.config: DetectorConfig = replace(config, **overrides) if overrides else config
        cfg = self.config
        self._normalizer = Normalizer(cfg.volatile_keys, cfg.progress_keys, cfg.thought_keys)
        self._overflow = re.compile(cfg.overflow_pattern, re.IGNORECASE)
        self._periods = range(cfg.cycle_min_period, cfg.cycle_max_period + 1)
        self._rules_off = cfg.disabled_rules
        self._signatures: dict[tuple[str, str | None], tuple[str, bool]] = {}
        self._shapes: dict[str, tuple[str, dict[str, Any]]] = {}
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
        return self._n

    def reset(self) -> None:
        """Forget every step: the next observed step gets index 0 (use after a rollback, then
        replay the live steps)."""
        window = self.config.window
        self._n = 0
        self._fence = -1
        self._progress = 0
        self._window: deque[_Record] = deque()
        self._state_seen: dict[tuple[str, str], int] = {}
        self._call_seen: dict[str, int] = {}
        # per state: (index, progress count right after it) of its last `repeat_threshold` steps
        self._hits: dict[tuple[str, str], list[tuple[int, int]]] = {}
        self._calls: deque[_Record] = deque(maxlen=window)
        self._chains: dict[tuple, deque[_Attempt]] = {}
        self._last_ok: dict[str, int] = {}
        self._streaks: dict[str, _Streak] = {}
        self._polls: dict[str, _Poll] = {}
        self._last_new_call = -1
        self._episodes: deque[_Episode] = deque(maxlen=self.config.overflow_threshold)
        self._previous_was_event = False
        self._last_call: int | None = None
        self._turns: deque[tuple[int, str]] = deque()
        self._turn_counts: dict[str, int] = {}
        self._flags: OrderedDict[str, tuple[int, int | None]] = OrderedDict()
        self._budget_flagged = False

    def observe(self, step: Step) -> Verdict:
        """Take in one step (in the order they happened) and say whether the session loops."""
        index = self._n
        self._n = index + 1
        cfg = self.config
        if not cfg.enabled:
            return HEALTHY
        tool = step.tool
        if tool is None or tool in cfg.thought_tools:
            verdict = self._observe_turn(index, step)
        elif tool in cfg.exempt_tools:
            self._push(_Record(index, tool))
            verdict = None
        elif tool in cfg.condensation_tools:
            self._push(_Record(index, tool))
            verdict = self._check_overflow(index, True, tool)
        else:
            verdict = self._observe_call(index, step, tool)
        if verdict is None and cfg.max_steps is not None and self._n >= cfg.max_steps:
            verdict = self._check_step_budget(index)
        return verdict or HEALTHY

    # -- bookkeeping --------------------------------------------------------------------------
    def _push(self, record: _Record) -> None:
        window = self._window
        if len(window) >= self.config.window:
            self._forget(window.popleft())
        window.append(record)

    def _forget(self, old: _Record) -> None:
        """Drop an evicted record from every window-sized structure."""
        if old.state is None:
            return
        left = self._state_seen[old.state] - 1
        if left:
            self._state_seen[old.state] = left
        else:
            del self._state_seen[old.state]
            self._hits.pop(old.state, None)
        left = self._call_seen[old.call] - 1
        if left:
            self._call_seen[old.call] = left
        else:
            del self._call_seen[old.call]
        oldest = old.index
        if len(self._chains) > 64:
            self._chains = {k: c for k, c in self._chains.items() if c and c[-1].index > oldest}
        if len(self._streaks) > 64:
            self._streaks = {k: s for k, s in self._streaks.items() if s.indexes[-1] > oldest}
        if len(self._last_ok) > 256:
            self._last_ok = {k: i for k, i in self._last_ok.items() if i > oldest}

    def _allowed(self, rule: str, tools: Iterable[str | None]) -> bool:
        if rule in self._rules_off:
            return False
        exemptions = self.config.tool_exemptions
        return not any(rule in exemptions.get(t, ()) for t in tools if t is not None)

    def _flag(
        self,
        index: int,
        rule: str,
        what: str,
        tool: str | None,
        evidence: Iterable[int],
        loop_start: int | None,
        explanation: str,
        advice: str,
        details: dict,
        remedy: str = "rollback",
    ) -> Verdict:
        """Build a looping verdict, fence off the evidence and remember the loop for re-flags."""
        oldest = index - self.config.window + 1
        signature = digest(f"{rule}\x00{what}")
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
        self._fence = index
        self._chains.clear()
        self._streaks.clear()
        self._polls.clear()
        self._episodes.clear()
        self._turns.clear()
        self._turn_counts.clear()
        return Verdict(
            looping=True,
            rule=rule,
            explanation=explanation,
            evidence=tuple(sorted({i for i in evidence if i >= oldest})),
            loop_start=loop_start,
            details=details,
            tool=tool,
            remedy=remedy,
            advice=advice,
            signature=signature,
            flag_count=count,
        )

    # -- agent turns --------------------------------------------------------------------------
    def _observe_turn(self, index: int, step: Step) -> Verdict | None:
        self._push(_Record(index, step.tool))
        if not step.ok and step.error and self._overflow.search(step.error):
            # The model call overflowed: the tool output read just before it is the cause.
            verdict = self._check_overflow(index, True, step.tool, cause=self._last_call)
            if verdict is not None:
                return verdict
        text = step.text
        if text is None and step.tool is not None and step.args is not None:
            args = step.args
            text = " ".join(str(v) for v in args.values()) if isinstance(args, dict) else str(args)
        return self._check_idle_turns(index, turn_signature(text))

    def _turn_key(self, signature: str) -> str:
        """The earlier turn of this run that `signature` repeats (nearly), else itself; only the
        last few distinct turns are compared, to keep chatty sessions cheap."""
        counts = self._turn_counts
        if signature in counts or not signature:
            return signature
        similarity = self.config.turn_similarity
        for earlier in list(counts)[-8:]:
            if earlier and values_close(earlier, signature, 0, 0, similarity):
                return earlier
        return signature

    def _check_idle_turns(self, index: int, signature: str) -> Verdict | None:
        turns, counts = self._turns, self._turn_counts
        signature = self._turn_key(signature)
        turns.append((index, signature))
        counts[signature] = counts.get(signature, 0) + 1
        if len(turns) > self.config.window:
            _, gone = turns.popleft()
            counts[gone] -= 1
            if not counts[gone]:
                del counts[gone]
        needed = self.config.idle_turns_threshold
        if len(turns) < needed or not self._allowed(IDLE_TURNS, ()):
            return None

        def idle(sig: str) -> bool:
            return sig == "" or counts[sig] >= 2

        if not all(idle(turns[-k][1]) for k in range(1, needed + 1)):
            return None
        run = [turns[-1]]
        for k in range(len(turns) - 2, -1, -1):
            if not idle(turns[k][1]):
                break
            run.append(turns[k])
        run.reverse()
        empty = sum(1 for _, sig in run if sig == "")
        what = "empty" if empty == len(run) else ("repeated" if not empty else "empty or repeated")
        return self._flag(
            index,
            IDLE_TURNS,
            "turns",
            None,
            (i for i, _ in run),
            run[0][0],
            f"The agent produced {len(run)} turns in a row without calling a tool that were all "
            f"{what}, so it is talking in circles instead of acting.",
            "Your last replies were empty or repeated; take a concrete next action or say what "
            "is blocking you.",
            {"turns": len(run), "empty": empty, "repeated": len(run) - empty},
        )

    # -- tool calls ---------------------------------------------------------------------------
    def _observe_call(self, index: int, step: Step, tool: str) -> Verdict | None:
        args = self._normalizer.args(step.args)
        call = fingerprint(tool, args)
        ok = step.ok
        overflow = False
        if ok:
            outcome = "done" if step.side_effect else result_digest(step.result, self._normalizer)
            signature = ""
        else:
            signature, overflow = self._error_signature(call, step, args)
            outcome = "!" + signature
        state = (call, outcome)
        record = _Record(index, tool, call, state)
        self._push(record)
        self._last_call = index
        if self._turns:  # a tool call ends a run of idle turns
            self._turns.clear()
            self._turn_counts.clear()
        waiting = tool in self.config.wait_tools
        if not waiting:
            self._calls.append(record)
        novel_call = call not in self._call_seen
        novel_state = state not in self._state_seen
        self._call_seen[call] = self._call_seen.get(call, 0) + 1
        self._state_seen[state] = self._state_seen.get(state, 0) + 1
        before = self._progress
        if ok and novel_state and not waiting:
            self._progress = before + 1
        hits = self._hits.get(state)
        if hits is None:
            hits = self._hits[state] = []
        hits.append((index, self._progress))
        if len(hits) > self.config.repeat_threshold:
            del hits[0]

        return (
            self._check_exact_repeat(index, step, tool, call, state, hits, signature)
            or self._check_breaker(index, ok, tool, signature, before)
            or self._check_near_duplicate(index, step, tool, call, args, signature, before)
            or self._check_cycle(index)
            or self._check_overflow(index, overflow, tool)
            or self._check_poll_budget(index, tool, call, novel_call, ok and novel_state)
        )

    def _error_signature(self, call: str, step: Step, args: Any) -> tuple[str, bool]:
        """`error_signature` of a failure and whether it is a context overflow, cached per
        (call, error text): loops repeat both."""
        key = (call, step.error)
        known = self._signatures.get(key)
        if known is None:
            if len(self._signatures) >= 256:
                self._signatures.clear()
            error = step.error or ""
            signature = error_signature(error, args, self._normalizer.volatile_values(step.args))
            known = self._signatures[key] = (signature, bool(self._overflow.search(error)))
        return known

    def _check_exact_repeat(
        self,
        index: int,
        step: Step,
        tool: str,
        call: str,
        state: tuple[str, str],
        hits: list[tuple[int, int]],
        signature: str,
    ) -> Verdict | None:
        needed = self.config.repeat_threshold
        if len(hits) < needed:
            return None
        first_index, progress_then = hits[0]
        if first_index <= self._fence or progress_then != self._progress:
            return None
        if not self._allowed(EXACT_REPEAT, (tool,)):
            return None
        evidence = [i for i, _ in hits]
        details: dict[str, Any] = {"count": needed, "fingerprint": call}
        if not step.ok:
            details["error"] = _clip(step.error or "", 200)
            explanation = (
                f"{tool} was called {needed} times with the same arguments and failed each "
                f"time with the same error ({_quote(step.error)}), with no progress in between."
            )
            advice = (
                f"{tool} keeps failing with {_quote(step.error)} for these exact arguments; "
                "do not retry it unchanged, try a different approach."
            )
        elif step.side_effect:
            details["side_effect"] = True
            explanation = (
                f"{tool} performed the same side effect {needed} times with the same arguments, "
                "so the agent is repeating an action that already happened."
            )
            advice = f"The {tool} action already succeeded; do not perform it again."
        else:
            explanation = (
                f"{tool} was called {needed} times with the same arguments and returned the same "
                "result each time, so the agent is repeating itself without making progress."
            )
            advice = (
                f"You already have the result of this {tool} call; use it instead of calling again."
            )
        return self._flag(
            index,
            EXACT_REPEAT,
            f"{state[0]}\x00{state[1]}",
            tool,
            evidence,
            evidence[0],
            explanation,
            advice,
            details,
        )

    def _target(self, args: Any) -> str:
        if not isinstance(args, dict):
            return ""
        keys = self.config.target_keys
        parts = [
            f"{key}={args[key]!r}" for key in sorted(args) if key in keys or key.endswith("_id")
        ]
        return ",".join(parts)

    def _shape(self, call: str, args: Any) -> tuple[str, dict[str, Any]]:
        """Target and flattened leaves of a call's arguments, cached per call fingerprint."""
        shape = self._shapes.get(call)
        if shape is None:
            if len(self._shapes) >= 256:
                self._shapes.clear()
            shape = self._shapes[call] = (self._target(args), flatten(args))
        return shape

    def _check_near_duplicate(
        self,
        index: int,
        step: Step,
        tool: str,
        call: str,
        args: Any,
        signature: str,
        before: int,
    ) -> Verdict | None:
        if step.ok and not step.side_effect:
            return None
        target, leaves = self._shape(call, args)
        key = (tool, step.ok, signature, target)
        chain = self._chains.get(key)
        if chain is None:
            chain = self._chains[key] = deque(maxlen=8)
        elif chain:
            last = chain[-1]
            broken = (
                last.progress != before
                or last.index <= self._fence
                or index - last.index >= self.config.window
                or (not step.ok and self._last_ok.get(tool, -1) > last.index)
            )
            if broken:
                chain.clear()
        chain.append(_Attempt(index, leaves, self._progress))
        cfg = self.config
        needed = cfg.near_duplicate_threshold
        if len(chain) < needed:
            return None
        near = self._near_group(chain, step.ok)
        if len(near) < needed or not self._allowed(NEAR_DUPLICATE, (tool,)):
            return None
        diffs = _differences([a.leaves for a in near])
        if not diffs:  # nothing varied: an exact repeat, judged by its own threshold
            return None
        changed = ", ".join(sorted(diffs)[:4])
        details = {
            "count": len(near),
            "target": target,
            "arg_diffs": diffs,
            "error_signature": signature if not step.ok else None,
        }
        if step.ok:
            explanation = (
                f"{tool} performed nearly the same side effect {len(near)} times on the same "
                f"target, changing only {changed}, so the action is being repeated."
            )
            advice = (
                f"The {tool} action already succeeded; a reworded repeat is a duplicate, do not "
                "perform it again."
            )
        else:
            explanation = (
                f"{tool} failed {len(near)} times with the same error ({_quote(step.error)}) on "
                f"the same target while the agent only nudged its arguments ({changed} changed)."
            )
            advice = (
                f"Small changes to the {tool} arguments keep failing with the same error; step "
                "back and change the approach."
            )
        return self._flag(
            index,
            NEAR_DUPLICATE,
            f"{tool}\x00{step.ok}\x00{signature}\x00{target}",
            tool,
            [a.index for a in near],
            near[0].index,
            explanation,
            advice,
            details,
        )

    def _near_group(self, chain: deque[_Attempt], side_effect: bool) -> list[_Attempt]:
        """The attempts linked to the newest one by a path of near-duplicate pairs, oldest
        first (``#submit`` ~ ``button#submit`` ~ ``#submit-button``)."""
        group = [chain[-1]]
        rest = list(chain)[:-1]
        frontier = [chain[-1]]
        while frontier and rest:
            current = frontier.pop()
            linked = [a for a in rest if self._near(a.leaves, current.leaves, side_effect)]
            if linked:
                rest = [a for a in rest if a not in linked]
                group.extend(linked)
                frontier.extend(linked)
        return sorted(group, key=lambda a: a.index)

    def _near(self, a: dict[str, Any], b: dict[str, Any], side_effect: bool) -> bool:
        cfg = self.config
        changed = 0
        for path in a.keys() | b.keys():
            x, y = a.get(path, _MISSING), b.get(path, _MISSING)
            if x == y:
                continue
            changed += 1
            if changed > cfg.near_max_changed or x is _MISSING or y is _MISSING:
                return False
            if side_effect and not (isinstance(x, str) and isinstance(y, str)):
                return False  # a different number in a side effect is a different entity
            if not values_close(
                x, y, cfg.near_numeric_abs, cfg.near_numeric_rel, cfg.near_text_similarity
            ):
                return False
        return True

    def _check_cycle(self, index: int) -> Verdict | None:
        calls = self._calls
        size = len(calls)
        repeats = self.config.cycle_repeats
        for period in self._periods:
            needed = period * repeats
            if size < needed:
                return None
            if calls[-1].state != calls[-1 - period].state:
                continue
            if calls[size - needed].index <= self._fence:
                continue
            if any(
                calls[size - 1 - k].state != calls[size - 1 - k - period].state
                for k in range(1, needed - period)
            ):
                continue
            block = [calls[size - period + k] for k in range(period)]
            if len({r.state for r in block}) == 1:
                continue
            start = size - needed
            while (
                start > 0
                and calls[start - 1].index > self._fence
                and calls[start - 1].state == calls[start - 1 + period].state
            ):
                start -= 1
            tools = [r.tool for r in block]
            if not self._allowed(CYCLE, tools):
                continue
            first = calls[start]
            pattern = [calls[start + k].tool for k in range(period)]
            seen = (size - start) / period
            arrow = " → ".join(str(t) for t in pattern)
            rotation = min(
                "|".join(f"{r.state[0]}:{r.state[1]}" for r in block[k:] + block[:k])
                for k in range(period)
            )
            return self._flag(
                index,
                CYCLE,
                rotation,
                pattern[0],
                (calls[k].index for k in range(start, size)),
                first.index,
                f"The agent is going round the same {period} steps ({arrow}) with identical "
                f"results; the cycle has now run {_times(seen)} without progress.",
                f"You are repeating the sequence {arrow} and getting the same results; do "
                "something different.",
                {"period": period, "repeats": round(seen, 2), "pattern": pattern},
            )
        return None

    def _check_overflow(
        self, index: int, event: bool, tool: str | None, cause: int | None = None
    ) -> Verdict | None:
        previous_was_event = self._previous_was_event
        self._previous_was_event = event
        if not event:
            return None
        episodes = self._episodes
        if previous_was_event and episodes and episodes[-1].indexes[-1] > self._fence:
            episodes[-1].indexes.append(index)
            episodes[-1].progress = self._progress
            return None
        cfg = self.config
        if episodes:
            last = episodes[-1]
            if (
                self._progress - last.progress >= cfg.overflow_min_progress
                or last.indexes[0] <= self._fence
                or index - last.indexes[0] >= cfg.window
            ):
                episodes.clear()
        start = cause if cause is not None and cause > self._fence else index
        episodes.append(_Episode([index], self._progress, start))
        if len(episodes) < cfg.overflow_threshold or not self._allowed(CONTEXT_OVERFLOW, (tool,)):
            return None
        evidence = [i for e in episodes for i in e.indexes]
        return self._flag(
            index,
            CONTEXT_OVERFLOW,
            "context",
            tool,
            evidence,
            episodes[0].start,
            f"The context overflowed or was condensed {len(episodes)} times with almost no new "
            f"work in between (fewer than {cfg.overflow_min_progress} new steps each time), so "
            "the agent keeps refilling its context with the same material.",
            "Your context keeps overflowing while redoing the same work; read less at once and "
            "keep only what you need.",
            {"episodes": len(episodes), "min_progress": cfg.overflow_min_progress},
        )

    def _check_breaker(
        self, index: int, ok: bool, tool: str, signature: str, before: int
    ) -> Verdict | None:
        if ok:
            self._streaks.pop(tool, None)
            self._last_ok[tool] = index
            return None
        cfg = self.config
        limit = cfg.tool_breaker_failures.get(tool, cfg.breaker_failures)
        streak = self._streaks.get(tool)
        if streak is None or streak.progress != before or streak.indexes[0] <= self._fence:
            streak = self._streaks[tool] = _Streak(deque(maxlen=limit), deque(maxlen=limit), 0)
        streak.indexes.append(index)
        streak.errors.append(signature)
        streak.progress = self._progress
        if len(streak.indexes) < limit or not self._allowed(CIRCUIT_BREAKER, (tool,)):
            return None
        distinct = list(dict.fromkeys(streak.errors))
        return self._flag(
            index,
            CIRCUIT_BREAKER,
            tool,
            tool,
            streak.indexes,
            streak.indexes[0],
            f"{tool} failed {limit} times in a row ({len(distinct)} different error"
            f"{'s' if len(distinct) != 1 else ''}) with no success and no progress in between, "
            "so the tool looks broken and calls to it should stop.",
            f"{tool} is failing every time right now; stop calling it and continue without it "
            "or report the problem.",
            {"failures": limit, "errors": [_clip(e, 120) for e in distinct[:3]]},
        )

    def _check_poll_budget(
        self, index: int, tool: str, call: str, novel_call: bool, progressed: bool
    ) -> Verdict | None:
        """Count the polls of one call that returned something new, while nothing else new
        keeps happening.

        The count of a call starts over when it is new, or when two gaps in a row between its
        occurrences held a new call: a first ``sleep`` between polls does not end the polling,
        an edit before every test run does.
        """
        polls = self._polls
        if novel_call:
            self._last_new_call = index
            if len(polls) > 2 * self.config.window:
                oldest = index - self.config.window
                self._polls = polls = {c: p for c, p in polls.items() if p.last > oldest}
        poll = polls.get(call)
        if poll is None or novel_call or poll.first <= self._fence:
            poll = polls[call] = _Poll(1, index, index, False)
        else:
            new_in_gap = self._last_new_call > poll.last
            if new_in_gap and poll.new_in_last_gap:
                poll.count, poll.first = 0, index
            poll.new_in_last_gap = new_in_gap
            poll.last = index
            poll.count += progressed
        cfg = self.config
        budget = cfg.tool_poll_budgets.get(tool, cfg.poll_budget)
        if poll.count <= budget or not self._allowed(POLL_BUDGET, (tool,)):
            return None
        evidence = [r.index for r in self._calls if r.call == call and r.index >= poll.first]
        return self._flag(
            index,
            POLL_BUDGET,
            call,
            tool,
            evidence,
            poll.first,
            f"{tool} returned something new {poll.count} times for the same arguments, more "
            f"than its poll budget of {budget}, and the thing it waits for never finishes.",
            f"You have polled {tool} {poll.count} times; stop polling and report the status.",
            {"polls": poll.count, "budget": budget},
        )

    def _check_step_budget(self, index: int) -> Verdict | None:
        if self._budget_flagged or not self._allowed(STEP_BUDGET, ()):
            return None
        self._budget_flagged = True
        budget = self.config.max_steps
        return self._flag(
            index,
            STEP_BUDGET,
            "budget",
            None,
            (index,),
            None,
            f"The session used up its hard budget of {budget} steps, so it must stop here.",
            "You have used all the steps allowed for this task; stop and summarize.",
            {"steps": self._n, "budget": budget},
            remedy="stop",
        )


_MISSING = object()


def _differences(attempts: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Argument paths whose values differ across attempts, with each attempt's value."""
    paths: dict[str, None] = {}
    for leaves in attempts:
        paths.update(dict.fromkeys(leaves))
    out = {}
    for path in paths:
        values = [leaves.get(path) for leaves in attempts]
        if any(v != values[0] for v in values[1:]):
            out[path or "(value)"] = [_clip(v, 80) if isinstance(v, str) else v for v in values]
    return out


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _quote(error: str | None) -> str:
    return f'"{_clip(error or "no error text", 80)}"'


def _times(n: float) -> str:
    whole = int(n)
    return f"{whole} times" if n == whole else f"{n:.1f} times"
