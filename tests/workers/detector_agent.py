"""An agent process for the detector-configuration tests: opens the store as any agent does
(`Engine.open(url)`, so it reads $REWIND_CONFIG or ./rewind.toml), retries one failing call in a
new session until the detector flags it (policy flag), and prints one JSON line: the step count
at the flag and the detector settings the verdict recorded.

Usage: python detector_agent.py STORE_URL SESSION_ID
"""

from __future__ import annotations

import json
import sys

from engine import Engine


def main() -> int:
    url, sid = sys.argv[1], sys.argv[2]
    engine = Engine.open(url)
    s = engine.session(sid, on_loop="flag")
    s.holds_on_loops = False  # an agent that keeps stepping after its flag, as replay needs
    flagged_at = None
    for i in range(12):
        with s.step("image_crop", {"x": 1}) as call:
            call.fail("invalid slice")
        if s.info().status == "looping":
            flagged_at = i + 1
            break
    verdict = s.info().last_verdict or {}
    print(json.dumps({"flagged_at": flagged_at, "detector": verdict.get("detector")}))
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
