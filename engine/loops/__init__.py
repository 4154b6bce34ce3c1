"""Loop detection: canonical fingerprints, normalization of calls/results/errors, the loop rules
and the streaming `LoopDetector` that turns steps into verdicts with evidence.

Pure logic: nothing here does I/O or knows about stores or sessions.

- `detector`: `LoopDetector`, `DetectorConfig`, `Verdict`; its docstring explains every rule.
- `rules/`: one module per rule and `REGISTRY`, the order they run in.
- `window`: what the rules read: the recent steps, the progress count, the current step.
- `step`: `Step`, the input. `normalize` and `fingerprint`: what makes two calls "the same";
  `shell`: what a call does, read from its name or its shell command.
"""

from engine.loops.detector import LoopDetector, Step, Verdict

__all__ = ["LoopDetector", "Step", "Verdict"]
