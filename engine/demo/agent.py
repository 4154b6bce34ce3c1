"""A simulated agent runtime around one Rewind session, used by the demo scenarios.

It drives the session exactly as an embedding runtime would, through the public API only: chat
messages in OpenAI format (``assistant`` with ``tool_calls``, then ``tool``), guarded steps, agent
turns, variables, snapshots, memories and context budgets. Scenario scripts call its verbs
(`user`, `tool`, `reply`, `remember`, `recall`) and never touch the store.

Every session uses session memory (unless the fleet runs with memory off) and records the token
breakdown of each step. The context of a step is built before the step from the live history, the
memories recalled for the latest user message and the system prompt, as the model would see it
when choosing the call. A memory or budget call that fails at run time is logged once per process
(`warnings()`) and the session goes on without it.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine import LoopDetected, LoopWaiting, Session

log = logging.getLogger("rewind.demo")


class Stopped(Exception):
    """The fleet is stopping: the session ends where it stands (after its current step)."""


class ToolError(Exception):
    """A simulated tool failed; its text becomes the step's error."""


@dataclass
class Pace:
    """How fast simulated sessions move, with jitter so the fleet does not march in step.

    `speed` is in steps per second per session; 0 or less means no pauses at all (tests,
    benchmarks). Pauses wait on `stop`, so a stopping fleet wakes up at once.
    """

    speed: float
    stop: Any
    """A threading.Event or multiprocessing.Event."""
    clock: VirtualClock | None = None
    """When set, time is simulated: pauses move this clock instead of waiting (backfill)."""

    def pause(self, rng: random.Random, weight: float = 1.0) -> None:
        """Wait about `weight` step intervals before the next action; raise Stopped if the fleet
        is stopping."""
        if self.stop.is_set():
            raise Stopped
        if self.speed <= 0:
            return
        delay = 0.7 * weight / self.speed * rng.uniform(0.5, 1.6)
        if self.clock is not None:
            self.clock.advance(delay)
        elif self.stop.wait(delay):
            raise Stopped

    def latency(self, rng: random.Random) -> None:
        """The tool's own run time, inside a step. Not interruptible: a step always finishes."""
        if self.speed > 0:
            delay = 0.3 / self.speed * rng.uniform(0.3, 1.8)
            if self.clock is not None:
                self.clock.advance(delay)
            else:
                time.sleep(delay)


class VirtualClock:
    """A clock for `Engine(clock=...)` that only moves when told to (simulated history).

    It never runs ahead of the wall clock: a simulated session that reaches the present ends at
    the present instead of writing timestamps from the future.
    """

    def __init__(self, start: float):
        self.now = start

    def __call__(self) -> float:
        return min(self.now, time.time())

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass(frozen=True)
class Outcome:
    """What a tool call returned."""

    ok: bool
    result: Any
    error: str | None
    step: int | None
    """The session's step number."""


# -- memory and budgets: failures are logged once, the session goes on -------------------------
_builders_lock = threading.Lock()
_warned: dict[str, str] = {}


def _warn_once(what: str, exc: BaseException) -> None:
    """Log a memory or budget failure once per process; `warnings()` lists them."""
    if what not in _warned:
        _warned[what] = f"{what} failed: {type(exc).__name__}: {exc}"
        log.warning("demo: %s; continuing without it", _warned[what])


def warnings() -> list[str]:
    """Memory and budget calls that failed in this process, one line each."""
    return list(_warned.values())


_builders: dict[int, Any] = {}


def context_builder(max_tokens: int):
    """One `ContextBuilder` per window size and process (token counts are cached inside)."""
    with _builders_lock:
        builder = _builders.get(max_tokens)
        if builder is None:
            from engine.budget.builder import ContextBuilder

            builder = _builders[max_tokens] = ContextBuilder(max_tokens=max_tokens, reserve=0.2)
        return builder


# -- the runtime ------------------------------------------------------------------------------
class SimAgent:
    """One simulated agent conversation on a Rewind session.

    Args:
        session: the session handle.
        rng: the session's random source for content and arguments (deterministic per seed).
        jitter: a separate random source for timing, so speed never changes what is said.
        pace: timing.
        locale: "en" or "zh…"; picks the language of every text.
        snapshots: "step" for a write-ahead snapshot before every guarded step (default), "turn"
            for one manual snapshot per user turn and none before steps, the way a runtime
            that treats a whole turn as its transaction would.
        window: context window (tokens) for the budget view.
        on_loop: called with each LoopDetected the engine raises, before it propagates.
        memory: False never uses session memory; None or True does.
        hold_s: under the flag policy (`engine.session(..., on_loop="flag")`) a flagged step
            raises `LoopWaiting`; the agent then holds for up to `hold_s` seconds of wall time,
            waiting for an operator to roll the session back or release it (see
            `hold_for_oncall`).
    """

    def __init__(self, session: Session, rng: random.Random, jitter: random.Random, pace: Pace,
                 locale: str, *, snapshots: str = "step", window: int = 8192,
                 on_loop: Callable[[LoopDetected], None] | None = None,
                 memory: bool | None = None, hold_s: float = 0.0):
        self.s = session
        self.hold_s = hold_s
        self.rng = rng
        self.jitter = jitter
        self.pace = pace
        self.zh = locale.lower().startswith("zh")
        self.snapshots = snapshots
        self.window = window
        self.on_loop = on_loop
        self.system = ""
        self.loops: list[LoopDetected] = []
        self.turn = 0
        self.late_steps = 0
        self._refs = 0
        self._recalled: list[str] = []
        self._memory_on = memory is not False

    # -- language ---------------------------------------------------------------------------
    def t(self, en: str, zh: str) -> str:
        """The text in the session's language."""
        return zh if self.zh else en

    def pick(self, en: list, zh: list):
        return self.rng.choice(zh if self.zh else en)

    def ref(self) -> str:
        """A fresh runtime-side reference for a side-effecting request (its idempotency key
        towards the outside world; unique within the session, also across rollbacks)."""
        self._refs += 1
        return f"{self.s.id}/r{self._refs}"

    # -- conversation -----------------------------------------------------------------------
    def start(self, system: str) -> None:
        """Write the system prompt as the first message."""
        self.system = system
        self.s.append_message("system", system)

    def user(self, en: str, zh: str, *, think: float = 2.5) -> str:
        """The user writes; in "turn" snapshot mode a snapshot marks the start of the turn."""
        self.pace.pause(self.jitter, think)
        text = self.t(en, zh)
        self.turn += 1
        self.s.append_message("user", text)
        if self.snapshots == "turn":
            short = text if len(text) <= 40 else text[:39] + "…"
            self.s.snapshot(label=f"turn {self.turn}: {short}")
        if self._memory_on:  # what the runtime packs into the next contexts (and an access)
            self._recalled = self.recall(text, text)
        return text

    def reply(self, en: str, zh: str) -> str:
        """An agent turn without a tool call (loop-checked), then the assistant message."""
        self.pace.pause(self.jitter, 1.0)
        text = self.t(en, zh)
        try:
            self.s.agent_turn(text, **self._context())
        except LoopWaiting as waiting:  # flag: the turn was said; the session waits for on-call
            self.s.append_message("assistant", text)
            self._flagged(waiting)
            self.hold_for_oncall()
            raise
        except LoopDetected as exc:
            self._flagged(exc)
            raise
        self.s.append_message("assistant", text)
        return text

    def tool(self, name: str, args: dict, run: Callable[[], Any], *,
             thought: tuple[str, str] | None = None, side_effect: bool = False,
             compensation: tuple[str, Any] | None = None) -> Outcome:
        """One guarded tool call: `run()` returns the result or raises ToolError.

        The assistant's tool-call message and the tool's answer are appended after the step, so
        the write-ahead snapshot of the next step holds the full exchange.

        Raises:
            LoopDetected: the engine flagged a loop (and, by default, already rolled back).
        """
        self.pace.pause(self.jitter, 1.0)
        snapshot = self.snapshots == "step"
        held: LoopWaiting | None = None
        try:
            with self.s.step(name, args, side_effect=side_effect, compensation=compensation,
                             snapshot=snapshot, **self._context()) as call:
                self.pace.latency(self.jitter)
                try:
                    result = run()
                except ToolError as exc:
                    call.fail(str(exc))
                    outcome = Outcome(False, None, str(exc), call.n)
                else:
                    call.ok(result)
                    outcome = Outcome(True, result, None, call.n)
        except LoopWaiting as waiting:  # flag: the call ran; the session waits for on-call
            held = waiting
        except LoopDetected as exc:
            self._flagged(exc)
            raise
        if call.late:  # an operator rolled the session back while the tool ran
            self.late_steps += 1
        call_id = f"call_{self.rng.getrandbits(40):010x}"
        content = (json.dumps(outcome.result, ensure_ascii=False) if outcome.ok
                   else f"Error: {outcome.error}")
        self.s.append_messages([
            {"role": "assistant", "content": self.t(*thought) if thought else "",
             "tool_calls": [{"id": call_id, "type": "function",
                             "function": {"name": name,
                                          "arguments": json.dumps(args, ensure_ascii=False)}}]},
            {"role": "tool", "tool_call_id": call_id, "name": name, "content": content},
        ])
        if held is not None:
            self._flagged(held)
            self.hold_for_oncall()
            raise held
        return outcome

    def repeat_until_flagged(self, attempt: Callable[[], Any], limit: int = 12
                             ) -> LoopDetected | None:
        """Repeat `attempt` the way a stuck agent does, until Rewind flags the loop.

        Returns:
            The LoopDetected (the session was rolled back), or None when `limit` attempts went
            by unflagged and the runtime's own iteration cap ends the attempt.
        """
        for _ in range(limit):
            try:
                attempt()
            except LoopDetected as exc:
                return exc
        return None

    def hold_for_oncall(self) -> None:
        """Wait for an operator after a flag under the flag policy, as a runtime that pages
        on-call would: return once someone rolled the session back, released or stopped it (its
        epoch moved or it is no longer looping); after `hold_s` seconds the user gives up and
        the session stops.

        Simulated history (a virtual clock) and runs without pauses cannot wait: the session is
        left looping where it stands.

        Raises:
            Stopped: the fleet is stopping, nobody came in time, or waiting is not possible.
        """
        if self.pace.clock is not None or self.pace.speed <= 0 or self.hold_s <= 0:
            raise Stopped
        epoch = self.s.info().epoch
        deadline = time.monotonic() + self.hold_s
        while time.monotonic() < deadline:
            if self.pace.stop.wait(1.0):
                raise Stopped
            info = self.s.info()
            if info.epoch != epoch or info.status != "looping":
                return
        self.s.stop()  # the user left; the session no longer waits for anyone
        raise Stopped

    def set_vars(self, **values: Any) -> None:
        self.s.set_vars(values)

    def finish(self) -> None:
        self.s.stop()

    # -- memory -----------------------------------------------------------------------------
    def remember(self, en: str, zh: str, importance: float = 0.5, key: str | None = None,
                 **meta: Any) -> str | None:
        """Store a memory (unless memory is off); returns its id. With ``key`` it is a fact the
        agent knows it stores (a rate, an address, a preference): a newer one with the same
        key replaces it, and the console says so."""
        if not self._memory_on:
            return None
        try:
            return self.s.memory.add(self.t(en, zh), importance=importance, key=key,
                                     meta={"turn": self.turn, **meta})
        except Exception as exc:  # noqa: BLE001 - the demo keeps running on a memory bug
            _warn_once("memory.add", exc)
            return None

    def recall(self, query_en: str, query_zh: str, k: int = 5) -> list[str]:
        """Recall memories, best first (none when memory is off)."""
        if not self._memory_on:
            return []
        try:
            hits = self.s.memory.recall(self.t(query_en, query_zh), k=k)
        except Exception as exc:  # noqa: BLE001
            _warn_once("memory.recall", exc)
            return []
        return [h.text for h in hits]

    # -- internals --------------------------------------------------------------------------
    def _flagged(self, exc: LoopDetected) -> None:
        self.loops.append(exc)
        if self.on_loop is not None:
            self.on_loop(exc)

    def _context(self) -> dict:
        """``{"context": ctx}`` with the context the model sees now, or ``{}`` when building it
        failed."""
        try:
            dialogue = [m for m in self.s.state().messages if m.get("role") != "system"]
            ctx = context_builder(self.window).build(
                system=self.system, memories=self._recalled, dialogue=dialogue)
        except Exception as exc:  # noqa: BLE001 - the demo keeps running without budgets
            _warn_once("building the context", exc)
            return {}
        return {"context": ctx}
