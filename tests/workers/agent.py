"""A stand-in agent process for the multi-process and crash tests.

Usage: python agent.py STORE_URL SESSION_ID STEPS [--rollback-every K] [--stop-file PATH]
Prints "ACK <n> <content>" (flushed) after each acknowledged step and message, so the parent knows
exactly what the store confirmed before any kill. With --stop-file, it goes on past STEPS until
PATH exists (at most 100 times STEPS), so a test's own pace, not the machine's, decides how long
it runs.
"""

from __future__ import annotations

import os
import random
import sys

from engine import Engine, LoopDetected


def main() -> int:
    url, sid, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    options = dict(zip(sys.argv[4::2], sys.argv[5::2], strict=True))
    rollback_every = int(options.get("--rollback-every", 0))
    stop_file = options.get("--stop-file")
    rng = random.Random(sid)
    engine = Engine.open(url)
    s = engine.session(sid, meta={"scenario": "stress"})
    for i in range(steps * 100 if stop_file else steps):
        if stop_file and i >= steps and os.path.exists(stop_file):
            break
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
