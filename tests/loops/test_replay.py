"""Replay of stored steps under another detector configuration (engine/loops/replay.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import ConfigError
from engine.loops.detector import DetectorConfig
from engine.loops.normalize import result_digest
from engine.loops.replay import (
    Flag,
    SessionReplay,
    compare,
    detector_config,
    first_flag,
    parse_setting,
    smallest_change,
    summarize,
)
from engine.records import MessageRecord, StepRecord
from engine.types import StepStatus


def record(
    n: int,
    tool: str | None,
    args: object = None,
    *,
    error: str | None = None,
    result: object = None,
    text: str | None = None,
    status: StepStatus | None = None,
    branch: str | None = None,
) -> StepRecord:
    if status is None:
        status = StepStatus.ERROR if error else StepStatus.OK
    return StepRecord(
        n=n,
        tool=tool,
        args=args,
        fingerprint=f"fp{n}",
        status=status,
        error=error,
        result_digest=None if result is None else result_digest(result),
        result_preview=None,
        started_at=float(n),
        ended_at=None if status == StepStatus.RUNNING else float(n) + 0.5,
        side_effect=False,
        compensation=None,
        verdict=None,
        on_live_line=branch is None,
        branch=branch,
        text=text,
    )


def user(seq: int, text: str = "please try again") -> MessageRecord:
    return MessageRecord(seq, seq, {"role": "user", "content": text}, None, float(seq))


def failing(n: int, **kw: object) -> StepRecord:
    return record(n, "book", {"flight": "HAT1"}, error="Error: payment method not found", **kw)


def reading(n: int, page: int) -> StepRecord:
    return record(n, "read", {"page": page}, result=f"page {page}")


class TestFirstFlag:
    def test_the_third_identical_failure_is_flagged_by_its_step_number(self):
        records = [reading(1, 1), failing(2), failing(3), failing(4), reading(5, 2)]
        assert first_flag(records) == Flag(4, "exact_repeat")

    def test_another_configuration_flags_later_or_never(self):
        records = [failing(n) for n in range(1, 5)]
        assert first_flag(records, {"repeat_threshold": 4}) == Flag(4, "exact_repeat")
        assert first_flag(records, {"enabled": False}) is None

    def test_abandoned_branches_are_replayed_as_they_happened(self):
        records = [failing(1, branch="b1"), failing(2, branch="b1"), failing(3)]
        assert first_flag(records) == Flag(3, "exact_repeat")

    def test_running_and_refused_calls_are_not_judged(self):
        refused = record(3, "book", {"flight": "HAT1"}, error="ToolQuarantined: book is held")
        running = record(4, "book", {"flight": "HAT1"}, status=StepStatus.RUNNING)
        records = [failing(1), failing(2), refused, running, failing(5)]
        assert first_flag(records) == Flag(5, "exact_repeat")

    def test_the_refusal_prefix_is_the_quarantines(self):
        from engine.fleet.quarantine import REFUSAL_PREFIX

        assert REFUSAL_PREFIX == "ToolQuarantined: "

    def test_user_messages_between_answers_are_user_input(self):
        texts = ["Which date?", "How many bags are you bringing?", "Window or aisle seat?"]
        texts.append("Shall I book the morning flight for you now?")
        answers = [record(n, None, text=text) for n, text in enumerate(texts, 2)]
        talking = [reading(1, 1), *answers]
        assert first_flag(talking) == Flag(4, "idle_turns")
        conversation = [reading(1, 1)]
        for i, answer in enumerate(answers):
            conversation += [user(10 + i), answer]
        assert first_flag(conversation) is None

    def test_until_stops_at_a_step(self):
        records = [failing(n) for n in range(1, 5)]
        assert first_flag(records, until=2) is None
        assert first_flag(records, until=3) == Flag(3, "exact_repeat")


class TestConfig:
    def test_a_mapping_of_field_names_over_the_defaults(self):
        config = detector_config({"repeat_threshold": "5", "wait_tools": "sleep,poll"})
        assert config.repeat_threshold == 5 and config.wait_tools == {"sleep", "poll"}
        assert config.window == DetectorConfig().window

    def test_an_unknown_field_names_the_known_ones(self):
        with pytest.raises(ConfigError, match="repeat_threshold"):
            detector_config({"repeat_treshold": 5})

    def test_a_value_the_detector_refuses(self):
        with pytest.raises(ConfigError, match="repeat_threshold"):
            detector_config({"repeat_threshold": 1})

    @pytest.mark.parametrize(
        ("name", "text", "value"),
        [
            ("repeat_threshold", "4", 4),
            ("near_text_similarity", "0.7", 0.7),
            ("enabled", "off", False),
            ("max_steps", "none", None),
            ("max_steps", "800", 800),
            ("disabled_rules", "cycle, recurrence", frozenset({"cycle", "recurrence"})),
            ("tool_poll_budgets", "wait_ci:20,status:5", {"wait_ci": 20, "status": 5}),
            (
                "tool_exemptions",
                "wait_ci:exact_repeat+cycle",
                {"wait_ci": {"exact_repeat", "cycle"}},
            ),
        ],
    )
    def test_parse_setting(self, name, text, value):
        assert parse_setting(name, text) == value

    def test_text_a_field_cannot_take_says_what_it_takes(self):
        with pytest.raises(ConfigError, match="whole number"):
            parse_setting("repeat_threshold", "three")


class TestCompare:
    def sessions(self) -> dict[str, list]:
        return {
            "loop3": [failing(n) for n in range(1, 5)],
            "loop4": [failing(1), reading(2, 1), failing(3), failing(4), failing(5), failing(6)],
            "healthy": [reading(n, n) for n in range(1, 6)],
        }

    def test_a_stricter_threshold_moves_flags_later_and_clears_some(self):
        labels = {"loop3": "loop", "loop4": "loop", "healthy": "not_loop"}
        results, summary = compare(self.sessions(), {"repeat_threshold": 5}, labels=labels)
        by_session = {r.session: r for r in results}
        assert by_session["loop3"].before == Flag(3, "exact_repeat")
        assert by_session["loop3"].after is None
        assert by_session["loop3"].change == "no_longer_flagged"
        assert summary.no_longer_flagged >= 1 and summary.newly_flagged == 0
        assert summary.labelled == 3
        assert summary.precision_before == 1.0 and summary.recall_before == 1.0
        assert summary.recall_after is not None and summary.recall_after < 1.0

    def test_the_json_shape(self):
        results, summary = compare(self.sessions(), {"repeat_threshold": 4})
        data = json.loads(
            json.dumps({"sessions": [r.as_dict() for r in results], "summary": summary.as_dict()})
        )
        assert set(data["sessions"][0]) == {"session", "before", "after", "label"}
        assert data["sessions"][0]["before"] == {"step": 3, "rule": "exact_repeat"}
        assert {"newly_flagged", "no_longer_flagged", "earlier", "later"} <= set(data["summary"])

    def test_summary_counts_each_kind_of_move(self):
        flag = Flag
        results = [
            SessionReplay("a", None, flag(3, "cycle")),
            SessionReplay("b", flag(3, "cycle"), None),
            SessionReplay("c", flag(5, "cycle"), flag(3, "cycle")),
            SessionReplay("d", flag(3, "cycle"), flag(5, "cycle")),
            SessionReplay("e", flag(3, "cycle"), flag(3, "recurrence")),
            SessionReplay("f", None, None),
        ]
        summary = summarize(results)
        assert (summary.newly_flagged, summary.no_longer_flagged) == (1, 1)
        assert (summary.earlier, summary.later, summary.other_rule) == (1, 1, 1)
        assert summary.precision_before is None and summary.labelled == 0


class TestSmallestChange:
    def test_the_threshold_one_higher(self):
        records = [failing(n) for n in range(1, 5)]
        change = smallest_change(records, None, 3)
        assert change is not None
        assert (change.field, change.before, change.after) == ("repeat_threshold", 3, 4)
        assert change.flag == Flag(4, "exact_repeat")

    def test_a_step_that_was_not_flagged(self):
        records = [failing(n) for n in range(1, 5)]
        assert smallest_change(records, None, 2) is None

    def test_when_no_threshold_helps_the_rule_is_switched_off_for_the_tool(self):
        records = [record(n, None, text="") for n in range(1, 4)]
        change = smallest_change(records, {"idle_turns_threshold": 3}, 3, max_tries=0)
        assert change is not None and change.field == "disabled_rules"
        assert "idle_turns" in change.after


def _history(kinds: list[str]) -> list:
    """Records for a list of kinds: a user message ("user"), or the next step: a failure
    ("fail"), an empty turn ("turn"), a refused call ("refused"), a failure that starts a task
    ("task"), a read of state 1 or 2 ("read1", "read2")."""
    records: list = []
    n = 0
    for i, kind in enumerate(kinds):
        if kind == "user":
            records.append(user(1000 + i))
            continue
        n += 1
        if kind == "fail":
            records.append(failing(n))
        elif kind == "turn":
            records.append(record(n, None, text=""))
        elif kind == "refused":
            records.append(record(n, "book", {"flight": "HAT1"}, status=StepStatus.REFUSED))
        elif kind == "task":
            records.append(dataclasses.replace(failing(n), task=True))
        else:
            records.append(reading(n, int(kind[-1])))
    return records


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["fail", "read1", "read2", "turn", "user"]), max_size=30))
def test_replay_up_to_a_step_agrees_with_the_whole_replay(kinds):
    records = _history(kinds)
    n = sum(1 for kind in kinds if kind != "user")
    whole = first_flag(records)
    for k in range(n + 1):
        expected = whole if whole is not None and whole.step <= k else None
        assert first_flag(records, until=k) == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["fail", "read1", "read2", "turn", "user", "refused", "task"]),
                max_size=30),
       st.sampled_from([None, {"repeat_threshold": 4}, {"idle_turns_threshold": 2}]))
def test_a_replay_history_is_replayed_as_the_records_it_was_read_from(kinds, config):
    from engine.records import ReplayStep

    records = _history(kinds)
    history = [ReplayStep.of(r) if isinstance(r, StepRecord) else None for r in records]
    assert first_flag(history, config) == first_flag(records, config)
    assert compare({"s": history}, config) == compare({"s": records}, config)
