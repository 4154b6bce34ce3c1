"""Run the demo fleet: N concurrent simulated sessions, in threads or worker processes.

Each of the N *slots* runs one session after another, so the fleet keeps looking live: a session
ends (usually with `Session.stop()`), the slot pauses, and a new session starts. The k-th session of
slot j has index ``k * N + j``; its plan (scenario, prompt version, locale, every argument) is a
pure function of the seed and that index, so timing never changes what a session does.

Every worker (the main process with ``workers <= 1``, else each worker process) opens its own
engine, registers the demo's compensation handlers and runs `Engine.compensations.run` every
`compensation_interval` seconds, so a rollback done from the console or the CLI in another process
is compensated by the worker, as it would be in production.

On a store without sessions, `backfill` can first simulate some minutes of history on simulated
clocks (`Engine(clock=...)`), so the console's charts over time have data from the start.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import random
import signal
import string
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Literal

from engine import Engine, LoopDetected, resolve_url
from engine.demo.agent import Pace, SimAgent, Stopped, VirtualClock, warnings
from engine.demo.ledger import Ledger, default_path
from engine.demo.scenarios import COMPENSATIONS, SCENARIOS, plan_session, scenario_order
from engine.freeze import FreezeWindow, from_environment

log = logging.getLogger("rewind.demo")


# -- statistics -------------------------------------------------------------------------------
@dataclass
class ScenarioStats:
    """What one scenario did during a run."""

    sessions: int = 0
    """Sessions started."""
    finished: int = 0
    """Sessions whose script ran to its end (stopped or left idle)."""
    planned_loops: int = 0
    """Sessions planned to fall into the scenario's loop."""
    loops: int = 0
    """Loop verdicts raised to the agent (LoopDetected)."""
    rollbacks: int = 0
    """Automatic rollbacks done by the engine on those verdicts."""
    compensations: int = 0
    """Compensations that changed the simulated world (replays not counted)."""
    flagged: list[str] = field(default_factory=list)
    """Sessions with at least one loop verdict."""
    false_alarms: list[str] = field(default_factory=list)
    """Flagged sessions that were not planned to loop."""
    missed: list[str] = field(default_factory=list)
    """Sessions that ran their loop to the iteration cap without being flagged."""
    held: list[str] = field(default_factory=list)
    """Flagged sessions that waited for on-call (policy "flag") instead of being rolled back."""

    def merge(self, other: ScenarioStats) -> None:
        for name in ("sessions", "finished", "planned_loops", "loops", "rollbacks",
                     "compensations"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.flagged += other.flagged
        self.false_alarms += other.false_alarms
        self.missed += other.missed
        self.held += other.held


@dataclass
class DemoStats:
    """Counts per scenario for a demo run (merged over workers)."""

    scenarios: dict[str, ScenarioStats] = field(
        default_factory=lambda: {name: ScenarioStats() for name in SCENARIOS})
    compensation_calls: int = 0
    """Handler invocations, replays included."""
    errors: list[str] = field(default_factory=list)
    """Sessions that ended on an unexpected exception (with its text)."""
    warnings: list[str] = field(default_factory=list)
    """Optional engine parts (memory, token budgets) that failed and were switched off."""
    run: str = ""
    """Run tag, part of every session id."""
    elapsed: float = 0.0

    def __post_init__(self):
        self._lock = threading.Lock()

    def __getstate__(self):  # the lock stays behind when stats travel between processes
        state = dict(self.__dict__)
        state.pop("_lock", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __getitem__(self, scenario: str) -> ScenarioStats:
        return self.scenarios[scenario]

    def merge(self, other: DemoStats) -> None:
        with self._lock:
            for name, stats in other.scenarios.items():
                self.scenarios.setdefault(name, ScenarioStats()).merge(stats)
            self.compensation_calls += other.compensation_calls
            self.errors += other.errors
            self.warnings += [w for w in other.warnings if w not in self.warnings]

    def total(self, attribute: str) -> int:
        return sum(getattr(s, attribute) for s in self.scenarios.values())

    def table(self) -> str:
        """A plain-text table, one row per scenario."""
        head = ("SCENARIO", "SESSIONS", "LOOPS", "ROLLBACKS", "COMPENSATIONS", "FALSE ALARMS",
                "MISSED")
        rows: list[tuple[str, ...]] = [
                (name, str(s.sessions), str(s.loops), str(s.rollbacks), str(s.compensations),
                 str(len(s.false_alarms)), str(len(s.missed)))
                for name, s in sorted(self.scenarios.items())]
        rows.append(("total", *(str(self.total(a)) for a in
                                ("sessions", "loops", "rollbacks", "compensations")),
                     str(sum(len(s.false_alarms) for s in self.scenarios.values())),
                     str(sum(len(s.missed) for s in self.scenarios.values()))))
        widths = [max(len(r[i]) for r in (head, *rows)) for i in range(len(head))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))
                 for r in (head, *rows)]
        return "\n".join(lines)


# -- configuration ----------------------------------------------------------------------------
@dataclass(frozen=True)
class DemoConfig:
    url: str
    sessions: int = 12
    speed: float = 1.0
    seed: int = 0
    run: str = "demo"
    once: bool = False
    ledger: str = ":memory:"
    compensation_interval: float = 1.0
    max_sessions: int | None = None
    """Stop starting new sessions after this many per worker; None: no limit."""
    scenarios: tuple[str, ...] | None = None
    """Run only these scenarios; None: all."""
    memory: bool | None = None
    """Write and recall session memories: None when the engine has them, False never."""
    hold_share: float = 0.0
    """Share of looping sessions that run under `on_loop="flag"` and wait for on-call."""
    hold_s: float = 600.0
    """Seconds a held session waits for an operator before its user gives up."""
    progress_s: float = 0.0
    """Seconds between progress lines on stdout (0: none)."""
    freeze: FreezeWindow | None = None
    """The change freeze every worker's engine follows (its loop policy while in force)."""


def new_run_tag() -> str:
    """A short tag that keeps session ids of separate runs on one store apart."""
    alphabet = string.digits + string.ascii_lowercase
    n = int(time.time() * 1000) % 36**6
    tag = ""
    for _ in range(6):
        n, d = divmod(n, 36)
        tag = alphabet[d] + tag
    return tag


# -- compensations ----------------------------------------------------------------------------
def register_compensations(engine: Engine, ledger: Ledger, stats: DemoStats) -> None:
    """Register the handlers that undo the demo's side effects in `engine`.

    Each handler is idempotent by the engine's idempotency key through the ledger (see
    `engine.demo.ledger`), never through session state, which a rollback reverts.
    """

    def make(name: str):
        scenario = COMPENSATIONS[name]

        def handler(args: Any, idempotency_key: str) -> None:
            applied = ledger.reverse(name, args["ref"], idempotency_key)
            with stats._lock:
                stats.compensation_calls += 1
                if applied:
                    stats.scenarios[scenario].compensations += 1

        return handler

    for name in COMPENSATIONS:
        engine.compensations.register(name, make(name))


# -- one worker -------------------------------------------------------------------------------
def _run_session(engine: Engine, ledger: Ledger, cfg: DemoConfig, index: int, pace: Pace,
                 stats: DemoStats) -> None:
    plan = plan_session(cfg.seed, index, cfg.run, cfg.scenarios, cfg.hold_share)
    scenario = SCENARIOS[plan.scenario]
    own = ScenarioStats(sessions=1, planned_loops=int(plan.loop))
    session = engine.session(plan.session_id, meta=plan.meta,
                             on_loop="flag" if plan.hold else None)

    def on_loop(exc: LoopDetected) -> None:
        own.loops += 1
        if exc.rollback is not None:
            own.rollbacks += 1

    agent = SimAgent(session, random.Random(f"{plan.seed}:content"),
                     random.Random(f"{plan.seed}:timing"), pace, plan.locale,
                     snapshots=scenario.snapshots, window=scenario.window, on_loop=on_loop,
                     memory=cfg.memory, hold_s=cfg.hold_s)
    error = None
    try:
        scenario.script(agent, plan, ledger)
        own.finished = 1
        if plan.finish:
            agent.finish()
    except Stopped:
        pass
    except LoopDetected:
        # A loop the script did not expect: the engine already rolled back; the agent gives up.
        own.finished = 1
        agent.finish()
    except Exception as exc:  # noqa: BLE001 - one broken session must not stop the fleet
        error = f"{plan.session_id}: {type(exc).__name__}: {exc}"
        log.error("demo session %s failed:\n%s", plan.session_id, traceback.format_exc())
    if own.loops:
        own.flagged.append(plan.session_id)
        if plan.hold:
            own.held.append(plan.session_id)
        if not plan.loop:
            own.false_alarms.append(plan.session_id)
    elif plan.loop and own.finished:
        own.missed.append(plan.session_id)
    with stats._lock:
        stats.scenarios[plan.scenario].merge(own)
        if error:
            stats.errors.append(error)


def _run_slot(engine: Engine, ledger: Ledger, cfg: DemoConfig, slot: int, stop,
              stats: DemoStats, budget: _SessionBudget) -> None:
    jitter = random.Random(f"{cfg.seed}:slot:{slot}")
    pace = Pace(cfg.speed, stop)
    k = 0
    try:
        if cfg.speed > 0:  # stagger the start so sessions do not begin in lockstep
            pace.pause(jitter, jitter.uniform(0, 4))
        while not stop.is_set():
            if not budget.take():
                return
            _run_session(engine, ledger, cfg, k * cfg.sessions + slot, pace, stats)
            k += 1
            if cfg.once:
                return
            pace.pause(jitter, jitter.uniform(1, 4))
    except Stopped:
        return


class _SessionBudget:
    """Caps the number of sessions a worker starts (None: no cap)."""

    def __init__(self, limit: int | None):
        self.left = limit
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.left is None:
                return True
            if self.left <= 0:
                return False
            self.left -= 1
            return True


def run_worker(cfg: DemoConfig, slots: list[int], stop, duration: float = 0.0) -> DemoStats:
    """Run `slots` as threads in this process until they end, `stop` is set or `duration` passes.

    Returns:
        This worker's statistics.
    """
    stats = DemoStats(run=cfg.run)
    engine = Engine.open(cfg.url, freeze=cfg.freeze)
    ledger = Ledger(cfg.ledger)
    register_compensations(engine, ledger, stats)
    budget = _SessionBudget(cfg.max_sessions)
    done = threading.Event()

    def pump() -> None:
        while not done.wait(cfg.compensation_interval):
            try:
                engine.compensations.run()
            except Exception:  # noqa: BLE001 - keep pumping; the store may be busy
                log.exception("demo: running compensations failed")

    pump_thread = threading.Thread(target=pump, name="rewind-demo-compensations", daemon=True)
    pump_thread.start()
    threads = [threading.Thread(target=_run_slot, name=f"rewind-demo-slot-{slot}",
                                args=(engine, ledger, cfg, slot, stop, stats, budget),
                                daemon=True) for slot in slots]
    started = time.monotonic()
    next_progress = started + cfg.progress_s
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            if duration and time.monotonic() - started >= duration:
                stop.set()
            if cfg.progress_s and time.monotonic() >= next_progress:
                next_progress += cfg.progress_s
                print(progress_line(stats, engine), flush=True)
            for t in threads:
                t.join(timeout=0.1)
    finally:
        stop.set()
        for t in threads:
            t.join()
        done.set()
        pump_thread.join()
        engine.compensations.run()  # whatever the last rollbacks queued
        stats.warnings = warnings()
        stats.elapsed = time.monotonic() - started
        engine.close()
        ledger.close()
    return stats


def progress_line(stats: DemoStats, engine: Engine | None = None) -> str:
    """One line for the demo log: what this worker did so far, and what waits in the store."""
    with stats._lock:
        line = (f"{time.strftime('%H:%M:%S')} pid {os.getpid()}: "
                f"{stats.total('sessions')} sessions, {stats.total('loops')} loop verdicts, "
                f"{stats.total('rollbacks')} automatic rollbacks, "
                f"{sum(len(s.held) for s in stats.scenarios.values())} held for on-call, "
                f"{stats.compensation_calls} compensation calls, {len(stats.errors)} errors")
    if engine is not None:
        try:
            kpis = engine.fleet.stats()
            line += f"; store: {kpis.get('looping', 0)} looping now"
        except Exception:  # noqa: BLE001 - a progress line never stops the fleet
            pass
    return line


HISTORY_SPEED = 0.2
"""Steps per second per session in simulated history: a real agent's pace (model + tool time)."""


def backfill(cfg: DemoConfig, minutes: float, stop, stats: DemoStats) -> None:
    """Fill the last `minutes` of history with simulated sessions, on simulated clocks.

    Each slot gets its own engine whose clock (`Engine(clock=...)`) only moves with the sessions'
    simulated pauses, so the console's charts over time have data from the first moment. Session
    ids carry the run tag plus ``h``; plans come from a seed of their own.
    """
    until = time.time()
    if cfg.progress_s:
        print(f"{time.strftime('%H:%M:%S')} backfilling {minutes:g} minutes of history for "
              f"{cfg.sessions} sessions…", flush=True)
    # History skips session memory: it would cost minutes of embedding time before the live
    # fleet starts; the live sessions write and recall memories.
    cfg = DemoConfig(**{**cfg.__dict__, "run": f"{cfg.run}h", "seed": cfg.seed + 7919,
                        "speed": HISTORY_SPEED, "once": False, "memory": False})
    ledger = Ledger(cfg.ledger)
    try:
        for slot in range(cfg.sessions):
            jitter = random.Random(f"{cfg.seed}:backfill:{slot}")
            clock = VirtualClock(until - minutes * 60 + jitter.uniform(0, 90))
            pace = Pace(cfg.speed, stop, clock)
            engine = Engine.open(cfg.url, clock=clock, freeze=cfg.freeze)
            register_compensations(engine, ledger, stats)
            k = 0
            try:
                while clock.now < until and not stop.is_set():
                    _run_session(engine, ledger, cfg, k * cfg.sessions + slot, pace, stats)
                    k += 1
                    clock.advance(jitter.uniform(1, 4) / cfg.speed)
                engine.compensations.run()
            finally:
                engine.close()
            if cfg.progress_s:
                print(f"{time.strftime('%H:%M:%S')} history: slot {slot + 1} of "
                      f"{cfg.sessions} done", flush=True)
    finally:
        ledger.close()


def _worker_process(cfg: DemoConfig, slots: list[int], stop, results) -> None:
    """Entry point of a worker process: Ctrl-C belongs to the parent, SIGTERM stops this one."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    local = threading.Event()

    class _Either:  # stops on the shared event or on this process's own SIGTERM
        def is_set(self) -> bool:
            return local.is_set() or stop.is_set()

        def set(self) -> None:
            local.set()

        def wait(self, timeout: float) -> bool:
            end = time.monotonic() + timeout
            while not self.is_set():
                left = end - time.monotonic()
                if left <= 0:
                    return False
                local.wait(min(left, 0.05))
            return True

    signal.signal(signal.SIGTERM, lambda *_: local.set())
    logging.basicConfig(level=logging.WARNING, format="%(processName)s %(message)s")
    try:
        stats = run_worker(cfg, slots, _Either())
    except BaseException as exc:  # noqa: BLE001 - report, so the parent can tell
        stats = DemoStats(run=cfg.run)
        stats.errors.append(f"worker {os.getpid()}: {type(exc).__name__}: {exc}")
    results.put(stats)


# -- the run ----------------------------------------------------------------------------------
def run_demo(url: str | None = None, sessions: int = 12, speed: float = 1.0, seed: int = 0,
             workers: int = 1, duration: float = 0.0, stop_event=None, *, once: bool = False,
             run: str | None = None, ledger: str | None = None,
             compensation_interval: float = 1.0, max_sessions: int | None = None,
             backfill_minutes: float = 0.0, scenarios: list[str] | None = None,
             memory: bool | None = None, hold_share: float = 0.0, hold_s: float = 600.0,
             progress_s: float = 0.0,
             freeze: FreezeWindow | Literal["environment"] | None = "environment"
             ) -> DemoStats:
    """Run the demo fleet and return what it did.

    Args:
        url: store URL (None: $REWIND_STORE, else the embedded default).
        sessions: concurrent sessions (slots).
        speed: steps per second per session; 0 runs without pauses.
        seed: same seed, same sessions (scenarios, versions, locales, arguments).
        workers: 0 or 1 runs the slots as threads here; K > 1 spreads them over K processes.
        duration: seconds to run; 0 runs until `stop_event` is set (or every slot ends, with
            `once`).
        stop_event: set it to stop; sessions finish their current step first.
        once: each slot runs one session, then the run ends.
        run: tag in every session id (default: derived from the clock), so runs do not collide.
        ledger: path of the simulated outside world (default: beside a SQLite store file).
        compensation_interval: seconds between `run_compensations` calls in each worker.
        max_sessions: stop starting sessions after this many per worker.
        backfill_minutes: when the store holds no sessions yet, first fill this many minutes of
            simulated history (see `backfill`); a store that holds sessions is never reseeded.
        scenarios: run only these scenarios (names from `SCENARIOS`); None: all.
        memory: None writes and recalls session memories when the engine has them; False
            never does (faster load generation).
        hold_share: share (0–1) of looping sessions run under `on_loop="flag"`: they stay
            looping and wait up to `hold_s` seconds for an operator (meta `hold`), so the
            console always has something for on-call. 0: the engine's policy decides for every
            loop (rolled back, unless a freeze policy says otherwise).
        progress_s: print a progress line every this many seconds (0: none).
        freeze: the change freeze the sessions follow (`engine.freeze`): while the clock is in
            it, sessions without a policy of their own follow its loop policy; "environment"
            reads $REWIND_FREEZE_* as `Engine.open` does; None: no freeze.

    Raises:
        ValueError: bad arguments, or an in-memory store with worker processes.
        ConfigError: the freeze variables are malformed.
    """
    url = resolve_url(url)
    if sessions < 1:
        raise ValueError("sessions must be at least 1")
    if not 0 <= hold_share <= 1:
        raise ValueError("hold_share must be between 0 and 1")
    if duration < 0:
        raise ValueError("duration must not be negative")
    workers = max(1, int(workers))
    if workers > 1 and ":memory:" in url:
        raise ValueError("an in-memory store cannot be shared by worker processes; use a file "
                         "store (sqlite:///path) or Redis, or --workers 1")
    if freeze == "environment":
        freeze = from_environment()  # once, here: worker processes get the parsed window
    only = tuple(scenarios) if scenarios else None
    scenario_order(seed, only)  # unknown names fail here, before anything starts
    cfg = DemoConfig(url=url, sessions=sessions, speed=speed, seed=seed,
                     run=run or new_run_tag(), once=once,
                     ledger=ledger or default_path(url),
                     compensation_interval=compensation_interval, max_sessions=max_sessions,
                     scenarios=only, memory=memory, hold_share=hold_share, hold_s=hold_s,
                     progress_s=progress_s, freeze=freeze)
    with Engine.open(url, freeze=freeze) as engine:  # create the store, or fail early naming it
        empty = not engine.sessions(limit=1)
    started = time.monotonic()
    history = DemoStats(run=cfg.run)
    if backfill_minutes > 0 and empty:
        backfill(cfg, backfill_minutes,
                 stop_event if stop_event is not None else threading.Event(), history)
    if workers == 1:
        stop = stop_event if stop_event is not None else threading.Event()
        stats = run_worker(cfg, list(range(sessions)), stop, duration)
        stats.merge(history)
        stats.elapsed = time.monotonic() - started
        return stats

    ctx = multiprocessing.get_context("spawn")
    shared_stop = ctx.Event()
    results = ctx.Queue()
    plan = [list(range(w, sessions, workers)) for w in range(workers)]
    procs = [ctx.Process(target=_worker_process, args=(cfg, slots, shared_stop, results),
                         name=f"rewind-demo-worker-{w}", daemon=False)
             for w, slots in enumerate(plan) if slots]
    for p in procs:
        p.start()
    live_started = time.monotonic()
    stats = history
    pending = len(procs)
    try:
        while pending:
            if stop_event is not None and stop_event.is_set():
                shared_stop.set()
            if duration and time.monotonic() - live_started >= duration:
                shared_stop.set()
            try:
                stats.merge(results.get(timeout=0.1))
                pending -= 1
            except queue.Empty:
                if not any(p.is_alive() for p in procs) and results.empty():
                    break
    finally:
        shared_stop.set()
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():  # pragma: no cover - a wedged worker
                p.terminate()
                p.join()
    if pending:
        stats.errors.append(f"{pending} worker process(es) ended without reporting")
    stats.elapsed = time.monotonic() - started
    return stats
