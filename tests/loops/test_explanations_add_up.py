"""Explanations that add up: "Why flagged" names the other rule that flags the step too (no
setting of the rule that fired can clear it alone), and the replay summaries, the What-if cards
and the CLI line, count every session whose flag moved, a change of rule included."""

from __future__ import annotations

import re

import pytest
from support.keep_stepping import keep_stepping  # noqa: F401 - used by the marker

from dashboard.views.session import why_flagged as why
from engine.cli.parser import main
from engine.fleet.queries import session_history
from engine.loops.replay import why_flagged

pytestmark = pytest.mark.usefixtures("keep_stepping")


def ping_pong(s) -> None:
    """An agent alternating two calls that fail the same way every time: A B A B A (a cycle,
    and the third identical failure of A)."""
    for k in range(5):
        tool = "get_order" if k % 2 == 0 else "get_customer"
        with s.step(tool, {"id": "A-1"}) as call:
            call.fail("HTTP 503: upstream unavailable")


def test_why_flagged_names_the_other_rule_that_fires_too(engine):
    s = engine.session("ping-pong", on_loop="flag")
    ping_pong(s)
    found = why_flagged("ping-pong", session_history(engine._runtime, "ping-pong"), None)
    assert found is not None and (found.flag.step, found.flag.rule) == (5, "exact_repeat")
    assert found.change is None  # raising the threshold or switching it off: the cycle fires
    assert [(f.rule, f.step) for f in found.also] == [("cycle", 5)]
    sentence = why.no_change_sentence(found)
    assert "cycle (alone it flags step 5) flags this session too" in sentence
    assert "no setting of exact_repeat alone clears it" in sentence


def test_without_another_rule_it_says_no_setting_of_the_rule_is_enough(engine):
    s = engine.session("alone", on_loop="flag")
    for _ in range(3):
        with s.step("image_crop", {"x": 10}) as call:
            call.fail("invalid slice")
    found = why_flagged("alone", session_history(engine._runtime, "alone"), None)
    assert found is not None and found.turns == {} and why.turns_sentence(found) is None
    lone = type(found)(found.session, found.flag, found.readings, None, {}, ())
    assert why.no_change_sentence(lone) == (
        "none found; no single setting of exact_repeat clears it")


def test_the_cli_replay_summary_counts_every_moved_session(tmp_path, capsys, open_engine):
    url = f"sqlite:///{tmp_path}/rewind.db"
    engine = open_engine(url, on_loop="flag")
    ping_pong(engine.session("ping-pong"))  # exact_repeat now; cycle once it is off
    crop = engine.session("crop")
    for _ in range(3):
        with crop.step("image_crop", {"x": 10}) as call:
            call.fail("invalid slice")
    assert main(["--store", url, "replay", "--set", "disabled_rules=exact_repeat"]) == 0
    out = capsys.readouterr().out
    line = out.strip().splitlines()[-1]
    counts = re.search(r"(\d+) changed: (\d+) newly flagged, (\d+) no longer flagged, (\d+) "
                       r"earlier, (\d+) later, (\d+) by another rule", line)
    assert counts is not None, line
    changed, *parts = (int(g) for g in counts.groups())
    assert changed == sum(parts) == 2 and int(counts.group(6)) == 2  # both: another rule
