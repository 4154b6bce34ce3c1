"""A stand-in agent process for the multi-process and crash tests.

Usage: python agent.py STORE_URL SESSION_ID STEPS [--rollback-every K]
Prints "ACK <n> <content>" (flushed) after each acknowledged step and message, so the parent knows
exactly what the store confirmed before any kill.
"""

from __future__ import annotations

import os
import random
import sys

from engine import Engine, LoopDetected


def main() -> int:
    url, sid, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rollback_every = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    rng = random.Random(sid)
    engine = Engine.open(url)
    s = engine.session(sid, meta={"scenario": "stress"})
    for i in range(steps):
        try:
            with s.step("tool", {"i": i, "pid": rng.random()}) as call:
                call.ok({"i": i})
        except LoopDetected:
            pass
        content = f"{sid}-{os.getpid()}-msg-{i}"
        s.append_message("tool", content)
        print(f"ACK {call.n} {content}", flush=True)
        if rollback_every and i % rollback_every == rollback_every - 1:
            target = s.suggested_target()
            if target:
                s.rollback(to=target, actor="agent", reason="self-check", notice=False)
                print(f"ROLLBACK {target}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
