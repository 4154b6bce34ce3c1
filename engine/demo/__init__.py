"""`rewind demo`: a live, realistic fleet of simulated agent sessions on any store.

The simulator drives sessions only through the public engine API, as an embedding runtime would:
scenarios modelled on real incidents (see `engine.demo.scenarios`) fall into loops, get flagged
and rolled back, with compensations for their side effects; healthy scenarios run alongside as
hard negatives. The same simulator is the load generator for benchmarks (`run_demo`).

Programmatic use::

    from engine.demo import run_demo
    stats = run_demo("sqlite:///demo.db", sessions=8, speed=0, seed=1, duration=5)
    print(stats.table())
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from engine import freeze as freeze_mod
from engine import redact_url
from engine.demo.fleet import DemoStats, ScenarioStats, run_demo
from engine.demo.ledger import Ledger
from engine.demo.scenarios import HEALTHY, LOOPING, SCENARIOS, Plan, plan_session
from engine.freeze import FreezeWindow

__all__ = ["HEALTHY", "LOOPING", "SCENARIOS", "DemoStats", "Ledger", "Plan", "ScenarioStats",
           "add_arguments", "configured_freeze", "main", "plan_session", "run_demo"]

SECRETS = Path(".streamlit") / "secrets.toml"
"""Where the console's settings live, relative to the directory it runs in."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the demo's options to the `rewind demo` sub-parser."""
    parser.add_argument("--sessions", type=int, default=12, metavar="N",
                        help="concurrent sessions (default 12)")
    parser.add_argument("--speed", type=float, default=1.0, metavar="STEPS_PER_S",
                        help="steps per second per session, with jitter; 0 = no pauses "
                             "(default 1)")
    parser.add_argument("--seed", type=int, default=0,
                        help="same seed, same scenarios, prompt versions and arguments")
    parser.add_argument("--workers", type=int, default=1, metavar="K",
                        help="0 or 1: threads in this process; K > 1: K worker processes")
    parser.add_argument("--duration", type=float, default=0.0, metavar="SECONDS",
                        help="stop after SECONDS (default 0: until Ctrl-C)")
    parser.add_argument("--once", action="store_true",
                        help="each slot runs one session, then the demo exits")
    parser.add_argument("--run-id", default=None, metavar="TAG",
                        help="tag in every session id (default: derived from the clock)")
    parser.add_argument("--ledger", default=None, metavar="PATH",
                        help="file of the simulated outside world (points, stock, tickets); "
                             "default: beside a SQLite store, else .rewind/demo-ledger.db")
    parser.add_argument("--backfill", type=float, default=20.0, metavar="MINUTES",
                        help="on a store without sessions, first simulate MINUTES of history so "
                             "charts over time have data (default 20; 0: off); a store that "
                             "holds sessions is never reseeded")
    parser.add_argument("--scenario", action="append", dest="scenarios", metavar="NAME",
                        choices=sorted(SCENARIOS),
                        help="run only this scenario (repeatable; default: all, see --list)")
    parser.add_argument("--no-memory", action="store_true",
                        help="do not write or recall session memories (faster load generation)")
    parser.add_argument("--hold", type=float, default=0.3, metavar="SHARE",
                        help="share of looping sessions that run under the flag policy and wait "
                             "for on-call instead of being rolled back (default 0.3; 0: none)")
    parser.add_argument("--hold-minutes", type=float, default=10.0, metavar="MINUTES",
                        help="how long a held session waits for an operator before its user "
                             "gives up (default 10)")
    parser.add_argument("--progress", type=float, default=30.0, metavar="SECONDS",
                        help="seconds between progress lines (default 30; 0: none)")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")


def configured_freeze(env: Mapping[str, str] | None = None) -> FreezeWindow | None:
    """The change freeze the console shows: `[rewind.freeze]` of `.streamlit/secrets.toml` in
    the working directory, else in the project (where `rewind dashboard` runs the console), each
    key overridden by $REWIND_FREEZE_*. Read in the demo's process, as the console reads it in
    its own.

    Raises:
        ConfigError: the setting is malformed (the message names it).
    """
    project = Path(__file__).resolve().parents[2]
    paths = [Path.cwd() / SECRETS, project / SECRETS]
    return freeze_mod.configured(paths, env)


def freeze_line(window: FreezeWindow) -> str:
    """The freeze in one line for the demo's log: name, span, what happens to loops."""
    policy = window.on_loop or "the engine's default"
    now = "in force now" if window.active(time.time()) else "not in force now"
    return (f"{window.name}, {window.start.isoformat()} to {window.end.isoformat()} ({now}); "
            f"loop policy during it: {policy}")


def main(args: argparse.Namespace) -> int:
    """`rewind demo`: run until the duration passes or Ctrl-C/SIGTERM, then print a summary.

    Returns:
        0 on a clean stop, 1 when sessions ended on unexpected errors.
    """
    if getattr(args, "list", False):
        for name, scenario in SCENARIOS.items():
            versions = ", ".join(f"{v.name}{' (faulty)' if v.faulty else ''}"
                                 for v in scenario.versions)
            print(f"{name:18} {scenario.title}  [{versions}]")
        return 0
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    stop = threading.Event()
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        try:
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
        except ValueError:  # not the main thread: the caller owns the signals
            pass

    store = getattr(args, "store", None)
    freeze = configured_freeze()
    print(f"rewind demo: {args.sessions} sessions at {args.speed:g} steps/s"
          f"{f' on {redact_url(store)}' if store else ''}, seed {args.seed}"
          f"{f', {args.workers} workers' if args.workers > 1 else ''}; "
          f"{'Ctrl-C stops' if not args.duration else f'{args.duration:g} s'}", flush=True)
    if freeze is not None:
        print(f"freeze: {freeze_line(freeze)}", flush=True)
    try:
        stats = run_demo(store, sessions=args.sessions, speed=args.speed, seed=args.seed,
                         workers=args.workers, duration=args.duration, stop_event=stop,
                         once=args.once, run=args.run_id, ledger=args.ledger,
                         backfill_minutes=args.backfill, scenarios=args.scenarios,
                         memory=False if args.no_memory else None,
                         hold_share=args.hold, hold_s=args.hold_minutes * 60,
                         progress_s=args.progress, freeze=freeze)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    print(f"\nrun {stats.run}: {stats.elapsed:.1f} s\n{stats.table()}")
    for warning in stats.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for error in stats.errors[:10]:
        print(f"error: {error}", file=sys.stderr)
    return 1 if stats.errors else 0
