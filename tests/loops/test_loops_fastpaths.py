"""The loop detector's shortcuts give what the long way gives: a mask skipped only where the
patterns cannot match, a stored digest fed back digested as the normalizer would, the JSON text
of the kept encoder the one `json` writes."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.loops import fingerprint as fp
from engine.loops import normalize as nz
from engine.loops.detector import LoopDetector, Step
from engine.loops.fingerprint import normalized_digest
from engine.loops.normalize import Normalizer, mask_volatile, result_digest

# texts made of what the masks look for: digits, hex, units, colons, slashes, dashes, spaces
MASKABLE = st.lists(
    st.sampled_from([*"0123456789abcdefxABCDEFTZmnsuµc:/-. \t_", "tmp", "var", "0x", "sec"]),
    max_size=40,
).map("".join)


@settings(max_examples=600, deadline=None)
@given(st.one_of(MASKABLE, st.text(max_size=40)), st.booleans())
@example("took 12 ms", False)
@example("took 1.5\tseconds", False)
@example("at 10:00:01", False)
@example("2024-01-01T10:00Z", False)
@example("in /tmp/run-3 now", False)
@example("object at 0x1f", True)
@example("req deadbeef01 failed", True)
@example("id 123e4567-e89b-12d3-a456-426614174000", True)
@example("5µs", False)
def test_mask_volatile_is_the_full_substitution(text, ids):
    pattern = nz._TIMES_AND_IDS if ids else nz._TIMES
    assert mask_volatile(text, ids=ids) == pattern.sub(nz._placeholder, text)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789abcdef", min_size=1, max_size=64))
@example("0123456789abcdef")
@example("12")
def test_a_digest_fed_back_is_digested_as_the_normalizer_would(text):
    normalizer = Normalizer()
    assert result_digest(text, normalizer) == normalized_digest(normalizer.result(text))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(JSON_VALUES)
@example({"b": 1, "a": [1.5, True, None, "é\n"]})
@example("plain")
def test_the_kept_encoder_writes_the_json_module_text(value):
    plain = json.JSONEncoder(
        sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    try:
        expected = plain.encode(value)
    except (TypeError, ValueError) as exc:
        with pytest.raises(type(exc)):
            fp._ENCODE(value)
    else:
        assert fp._ENCODE(value) == expected


def test_a_value_that_holds_itself_is_refused_as_before():
    cyclic: dict = {}
    cyclic["self"] = cyclic
    with pytest.raises(ValueError, match="contains itself"):
        normalized_digest(cyclic)


def test_a_session_fed_digests_gets_the_verdicts_of_one_fed_results():
    """The engine feeds the detector stored digests; the digests digest as the results do, so
    both detectors agree step for step (repeats, polls with new answers, failures)."""
    results = [{"state": "running", "n": i % 3} for i in range(40)]
    live, stored = LoopDetector(), LoopDetector()
    for i, result in enumerate(results):
        tool = "job_status" if i % 4 else "fetch"
        args = {"job": "j-1"} if i % 4 else {"url": f"u{i % 2}"}
        a = live.observe(Step(tool=tool, args=args, result=result))
        b = stored.observe(Step(tool=tool, args=args, result=result_digest(result)))
        assert (a.looping, a.rule, a.evidence) == (b.looping, b.rule, b.evidence)
