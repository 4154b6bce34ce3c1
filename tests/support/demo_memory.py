"""Run one demo scenario, with session memory on, on an engine the test opened (a hashing
embedder: no MiniLM to load), the way the demo fleet runs each session."""

from __future__ import annotations

import random
import threading

from engine import Engine, LoopDetected
from engine.demo import SCENARIOS, Ledger, plan_session
from engine.demo.agent import Pace, SimAgent


def run_scenario(engine: Engine, name: str, index: int = 0, seed: int = 5) -> str:
    """Run session `index` of a run of scenario `name` alone; returns its session id."""
    plan = plan_session(seed, index, "mem", (name,))
    session = engine.session(plan.session_id, meta=plan.meta)
    scenario = SCENARIOS[plan.scenario]
    agent = SimAgent(session, random.Random(f"{plan.seed}:content"),
                     random.Random(f"{plan.seed}:timing"), Pace(0, threading.Event()),
                     plan.locale, snapshots=scenario.snapshots, window=scenario.window)
    try:
        scenario.script(agent, plan, Ledger(":memory:"))
    except LoopDetected:  # rolled back by the engine; the agent gives up, as in the fleet
        pass
    return plan.session_id
