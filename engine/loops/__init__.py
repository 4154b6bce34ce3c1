"""Loop detection: canonical fingerprints, normalization of calls/results/errors, the loop rules
and the streaming `LoopDetector` that turns steps into verdicts with evidence.

Pure logic: nothing here does I/O or knows about stores or sessions.
"""

from engine.loops.detector import LoopDetector, Step, Verdict

__all__ = ["LoopDetector", "Step", "Verdict"]
