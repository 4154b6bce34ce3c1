"""Run the production detector over the peer suites (tests/loops/peers) and hold it to each case.

A case passes when the first looping verdict comes at the expected step or one step later (never
earlier), or never when no flag is expected. Cases the detector does not meet yet are xfail (not
strict) with the reason, in `KNOWN_FAILURES`; the detector's owner removes them as it improves.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from engine.loops.detector import LoopDetector

PEERS_DIR = Path(__file__).parent / "peers"


def _load_peers():
    """Import tests/loops/peers as a package by path (works whatever the test layout is)."""
    name = "rewind_peer_suites"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, PEERS_DIR / "__init__.py", submodule_search_locations=[str(PEERS_DIR)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


SUITES = _load_peers().SUITES

KNOWN_FAILURES: dict[str, str] = {}
"""``suite/case`` -> why the detector still misses it. Remove an entry once the case passes."""


def first_flag(steps) -> int | None:
    detector = LoopDetector()
    for i, step in enumerate(steps):
        if detector.observe(step).looping:
            return i
    return None


def _params():
    out = []
    for suite, cases in SUITES.items():
        for c in cases:
            key = f"{suite}/{c.name}"
            marks = (
                [pytest.mark.xfail(strict=False, reason=KNOWN_FAILURES[key])]
                if key in KNOWN_FAILURES
                else []
            )
            out.append(pytest.param(c, id=key, marks=marks))
    return out


def test_suites_are_well_formed():
    for suite, cases in SUITES.items():
        names = [c.name for c in cases]
        assert len(names) == len(set(names)), suite
        for c in cases:
            assert c.ref and c.steps
            if c.disagree:
                assert c.ours is None or 0 <= c.ours < len(c.steps), c.name


@pytest.mark.parametrize("peer_case", _params())
def test_peer_case(peer_case):
    got = first_flag(peer_case.steps)
    want = peer_case.expected
    where = f"{peer_case.ref}" + (
        f" (we disagree: {peer_case.disagree})" if peer_case.disagree else ""
    )
    if want is None:
        assert got is None, f"flagged at step {got}, expected no flag: {where}"
    else:
        assert got is not None, f"never flagged, expected step {want}: {where}"
        assert want <= got <= want + 1, f"flagged at step {got}, expected {want}: {where}"
