"""Score the loop detector (production defaults) on the labeled trace corpus in tests/traces.

Per trace, the detector's first looping verdict is compared with the human labels:

- looping trace, flagged at an index in [loop_start, flag_at + 1]: true positive;
- looping trace, flagged before loop_start (the loop had not begun): false positive;
- looping trace, not flagged, or flagged after flag_at + 1: false negative (too late to count);
- healthy trace, flagged anywhere: false positive.

Detection latency is (first flag index − flag_at) over the true positives: negative means the
detector spoke up before the reader would have, never before the loop began.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass

import pytest
from traces import CORPUS

from engine.loops.detector import LoopDetector, Verdict


@dataclass
class Outcome:
    """What the detector did on one trace."""

    trace: object
    index: int | None
    verdict: Verdict | None
    verdicts: list[Verdict]

    @property
    def kind(self) -> str:
        t = self.trace
        if not t.looping:
            return "fp" if self.index is not None else "tn"
        if self.index is None or self.index > t.flag_at + 1:
            return "fn"
        return "fp" if self.index < t.loop_start else "tp"


def run(trace) -> Outcome:
    detector = LoopDetector()
    verdicts = [detector.observe(step) for step in trace.steps]
    index = next((i for i, v in enumerate(verdicts) if v.looping), None)
    return Outcome(trace, index, verdicts[index] if index is not None else None, verdicts)


OUTCOMES = {t.name: run(t) for t in CORPUS}


def _known(traces):
    """Trace names as parameters; traces with a documented limitation are strict xfails."""
    return [
        pytest.param(t.name, marks=pytest.mark.xfail(reason=t.known_limitation, strict=True))
        if t.known_limitation
        else t.name
        for t in traces
    ]


def test_corpus_is_big_and_balanced():
    names = [t.name for t in CORPUS]
    assert len(names) == len(set(names)), "trace names must be unique"
    healthy = [t for t in CORPUS if not t.looping]
    assert len(CORPUS) >= 60
    assert len(healthy) * 3 >= len(CORPUS), "at least a third must be healthy hard negatives"
    for t in CORPUS:
        assert t.story and len(t.steps) >= 3
        if t.looping:
            assert 0 <= t.loop_start <= t.flag_at < len(t.steps)


@pytest.mark.parametrize("name", _known(t for t in CORPUS if t.looping))
def test_loop_is_flagged_in_time(name):
    out = OUTCOMES[name]
    t = out.trace
    assert out.index is not None, f"{name}: never flagged ({t.story})"
    assert out.index >= t.loop_start, f"{name}: flagged at {out.index}, before the loop began"
    assert out.index <= t.flag_at + 1, (
        f"{name}: flagged at {out.index}, more than one step after the human ({t.flag_at})"
    )
    v = out.verdict
    # the rollback target may sit one step before the reader's start (a cycle that began with
    # the step before it), never inside healthy work further back, never after the flag
    assert t.loop_start - 1 <= v.loop_start <= out.index, (
        f"{name}: loop_start {v.loop_start}, labeled {t.loop_start}"
    )
    assert out.index in v.evidence and min(v.evidence) >= v.loop_start


@pytest.mark.parametrize("name", _known(t for t in CORPUS if not t.looping))
def test_healthy_trace_is_never_flagged(name):
    out = OUTCOMES[name]
    assert out.index is None, (
        f"{name}: false alarm at step {out.index}: {out.verdict.rule}: {out.verdict.explanation}"
    )


def test_no_loop_is_reflagged_on_consecutive_steps():
    for out in OUTCOMES.values():
        looping = [i for i, v in enumerate(out.verdicts) if v.looping]
        gaps = [b - a for a, b in zip(looping, looping[1:], strict=False)]
        assert all(gap > 1 for gap in gaps), out.trace.name


def test_corpus_scores(capsys):
    kinds = Counter(out.kind for out in OUTCOMES.values())
    tp, fp, fn = kinds["tp"], kinds["fp"], kinds["fn"]
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    latencies = [out.index - out.trace.flag_at for out in OUTCOMES.values() if out.kind == "tp"]
    start_exact = sum(
        1
        for out in OUTCOMES.values()
        if out.kind == "tp" and out.verdict.loop_start == out.trace.loop_start
    )
    rules = Counter(out.verdict.rule for out in OUTCOMES.values() if out.kind == "tp")
    looping = sum(1 for t in CORPUS if t.looping)
    lines = [
        "",
        f"loop-detector corpus: {len(CORPUS)} traces ({looping} looping, "
        f"{len(CORPUS) - looping} healthy)",
        f"  precision {precision:.3f}   recall {recall:.3f}   (tp {tp}, fp {fp}, fn {fn}, "
        f"tn {kinds['tn']})",
        f"  latency vs human flag (steps): mean {statistics.mean(latencies):+.2f}, "
        f"median {statistics.median(latencies):+.0f}, max {max(latencies):+d}, "
        f"distribution {dict(sorted(Counter(latencies).items()))}",
        f"  loop_start equal to the label: {start_exact}/{tp}",
        "  first rule per loop: " + ", ".join(f"{r} {n}" for r, n in rules.most_common()),
    ]
    for out in OUTCOMES.values():
        if out.kind in ("fp", "fn"):
            where = "never" if out.index is None else f"at step {out.index}"
            lines.append(
                f"  {out.kind.upper()} {out.trace.name}: flagged {where}"
                + (
                    f" (known limitation: {out.trace.known_limitation})"
                    if out.trace.known_limitation
                    else ""
                )
            )
    with capsys.disabled():
        print("\n".join(lines))
    assert precision >= 0.97
    assert recall >= 0.95
    assert max(latencies) <= 1
