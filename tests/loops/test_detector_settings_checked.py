"""Declared detector settings are checked before anything is written: every numeric field has a
range, and `overflow_pattern` cannot be a regular expression that backtracks catastrophically
(it is searched in every failing step's error, in every process on the store)."""

from __future__ import annotations

import pytest

from engine import ConfigError, LoopDetector, Step
from engine.loops.detector import DEFAULT_OVERFLOW_PATTERN, FIELD_RANGES, DetectorConfig
from engine.loops.patterns import MAX_QUANTIFIERS, UnsafePattern, check_pattern
from engine.loops.replay import checked_settings, detector_config

# -- the pattern checker (pure) -----------------------------------------------------------------


@pytest.mark.parametrize("pattern", [
    DEFAULT_OVERFLOW_PATTERN,
    r"context.*exceeded",
    r"(?:ab){2}",
    r"(a|b)*x",          # single characters: a character class to the parser
    r"\btoo (?:long|big)\b",
    r"(?=context)context",
    r"[a-z]+ limit",
])
def test_patterns_that_cannot_blow_up_are_accepted(pattern):
    assert check_pattern(pattern) == pattern


@pytest.mark.parametrize(("pattern", "why"), [
    (r"(a+)+$", "quantifier sits inside a repeated group"),
    (r"(a*b?)*c", "quantifier sits inside a repeated group"),
    (r"(?:x{2,}){3}", "quantifier sits inside a repeated group"),
    (r"(?:a?){30}a{30}", "quantifier sits inside a repeated group"),
    (r"(a|ab)*c", "repeated group holds alternatives"),
    (r"(\w+\s?)+$", "quantifier sits inside a repeated group"),
    (r"(a)\1", "back-reference"),
    (r"(a)?(?(1)b|c)", "back-reference or a conditional group"),
    (r"(?=(a+)+)", "quantifier sits inside a repeated group"),
    ("a?" * (MAX_QUANTIFIERS + 1), "quantifiers"),
    (r"(unclosed", "not a valid regular expression"),
    ("x" * 1001, "characters long"),
])
def test_patterns_that_can_backtrack_catastrophically_are_refused(pattern, why):
    with pytest.raises(UnsafePattern) as refused:
        check_pattern(pattern)
    assert "overflow_pattern" in str(refused.value) and why in str(refused.value)


def test_a_pattern_that_is_not_text_is_refused():
    with pytest.raises(UnsafePattern, match="text"):
        check_pattern(12)


def test_a_slow_polynomial_pattern_gives_up_on_one_text_instead_of_stalling():
    """``a.*b.*c`` passes the shape check but is cubic: on a long error the search stops at its
    time limit and the text is read as no overflow; the detector keeps answering."""
    detector = LoopDetector(overflow_pattern=r"a.*b.*c")
    verdict = detector.observe(Step(tool=None, ok=False, error="ab" * 10_000, text="…"))
    assert not verdict.looping


# -- value ranges ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("settings", "named"), [
    ({"window": 10**12}, "window must be a whole number from 4 to 10000"),
    ({"turn_similarity": -1}, "turn_similarity must be a number from 0 to 1"),
    ({"breaker_failures": True}, "breaker_failures"),
    ({"near_numeric_rel": float("nan")}, "near_numeric_rel must be a number from 0 to 1"),
    ({"poll_budget": 0}, "poll_budget must be a whole number from 1"),
    ({"tool_poll_budgets": {"ci": -5}}, "tool_poll_budgets['ci'] must be a whole number"),
    ({"tool_breaker_failures": {"x": 2.5}}, "tool_breaker_failures['x'] must be a whole number"),
    ({"max_steps": 0}, "max_steps must be a whole number from 1"),
    ({"enabled": 1}, "enabled"),
    ({"overflow_pattern": "(a+)+$"}, "overflow_pattern '(a+)+$' is refused"),
])
def test_out_of_range_settings_are_refused_naming_the_field_and_the_range(settings, named):
    with pytest.raises(ConfigError) as refused:
        detector_config(settings)
    assert named in str(refused.value)
    with pytest.raises(ConfigError) as refused:
        checked_settings(settings, "[rewind.detector] in rewind.toml")
    assert "[rewind.detector] in rewind.toml" in str(refused.value)
    field = next(iter(settings))
    assert field in str(refused.value)


def test_every_numeric_field_has_a_range_and_the_defaults_lie_within():
    import dataclasses
    import typing

    hints = typing.get_type_hints(DetectorConfig)
    numeric = {f.name for f in dataclasses.fields(DetectorConfig)
               if hints[f.name] in (int, float, int | None)}
    assert numeric == set(FIELD_RANGES)
    DetectorConfig()  # the defaults pass their own check
    assert detector_config({"max_steps": None}).max_steps is None


def test_a_refused_declaration_writes_nothing(store_url, open_engine):
    engine = open_engine(store_url)
    engine.fleet.declare_detector({"repeat_threshold": 4}, actor="alice", reason="fewer flags")
    before = len(engine.audit(action="detector"))
    for settings in ({"window": 10**12}, {"turn_similarity": -1}, {"breaker_failures": True},
                     {"overflow_pattern": "(a+)+$"}, {"repeat_threshold": 5, "window": 1}):
        with pytest.raises(ConfigError):
            engine.fleet.declare_detector(settings, actor="alice", reason="bad")
    engine._runtime.forget_declared_detector()
    assert engine.fleet.detector_settings() == {"repeat_threshold": 4}
    assert len(engine.audit(action="detector")) == before


def test_an_unsafe_pattern_already_in_the_store_is_ignored_not_obeyed(tmp_path, open_engine):
    """A declaration written by an older release: agents keep running on their own settings."""
    from engine.fleet.actions import DETECTOR_KEY, DETECTOR_NAMESPACE

    engine = open_engine(f"sqlite:///{tmp_path}/r.db")
    engine._runtime.store.fleet_doc_put(DETECTOR_NAMESPACE, {DETECTOR_KEY: {
        "settings": {"overflow_pattern": "(a+)+$"}, "actor": "old", "reason": "old", "at": 0}},
        0.0)
    engine._runtime.forget_declared_detector()
    detector, settings = engine._runtime.new_detector()
    assert settings == {} and detector.config.overflow_pattern == DEFAULT_OVERFLOW_PATTERN
