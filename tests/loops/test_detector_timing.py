"""How soon after a loop starts the detector flags it: a write the agent makes
again right after the user spoke is flagged at the second, and the cases that must keep the
ordinary threshold (failures retried once on request, writes back to back, another call or a
wait between, another target)."""

from __future__ import annotations

import pytest

from engine.loops.detector import EXACT_REPEAT, DetectorConfig, LoopDetector, Step

USER = "user"
"""In a stream: the user spoke here (not a step)."""


def cancel(reservation: str = "3RK2T9", history: int = 1) -> Step:
    """A cancellation whose returned record grows with each refund (it is still "done")."""
    return Step(
        tool="cancel_reservation",
        args={"reservation_id": reservation},
        result={
            "reservation_id": reservation,
            "status": "cancelled",
            "payment_history": [{"payment_id": "gift_card_1", "amount": -280}] * history,
        },
    )


def say(text: str) -> Step:
    return Step(tool=None, text=text)


def respond(text: str, reply: str) -> Step:
    return Step(tool="respond", args={"content": text}, result=reply)


def flags(steps: list[Step | str], detector: LoopDetector | None = None):
    """(index, verdict) of every looping verdict; USER is a user message, not a step."""
    detector = detector or LoopDetector()
    out = []
    index = 0
    for item in steps:
        if item == USER:
            detector.user_input()
            continue
        assert isinstance(item, Step)
        verdict = detector.observe(item)
        if verdict.looping:
            out.append((index, verdict))
        index += 1
    return out


def first(steps: list[Step | str], detector: LoopDetector | None = None) -> int | None:
    found = flags(steps, detector)
    return found[0][0] if found else None


class TestWriteAgainAfterTheUserSpoke:
    def test_the_same_cancellation_after_a_user_turn_is_flagged_at_the_second(self):
        steps: list[Step | str] = [
            cancel(),
            say("Your reservation is cancelled and the refund is on its way."),
            USER,
            say("Let me check that refund again."),
            USER,
            cancel(history=2),
        ]
        (index, verdict), *_ = flags(steps)
        assert index == 3
        assert verdict.rule == EXACT_REPEAT
        assert verdict.loop_start == 0 and verdict.evidence == (0, 3)
        assert verdict.details["after_user_turn"] is True and verdict.details["count"] == 2
        assert "right after the user spoke" in verdict.explanation

    def test_the_respond_form_is_the_same(self):
        steps: list[Step | str] = [
            cancel(),
            respond("It is cancelled.", "I wanted the refund on my card."),
            cancel(history=2),
        ]
        assert first(steps) == 2

    def test_an_identical_write_answering_a_plain_message_turn_is_flagged(self):
        steps: list[Step | str] = [cancel(), USER, cancel(history=2)]
        assert first(steps) == 1

    def test_writes_back_to_back_keep_the_ordinary_threshold(self):
        steps: list[Step | str] = [cancel(), cancel(history=2), say("Done."), cancel(history=3)]
        assert first(steps) == 3  # the third, as before

    def test_back_to_back_then_after_a_user_turn(self):
        # the second is back to back (not counted sooner); the third answers the user and is
        # the third occurrence anyway
        steps: list[Step | str] = [cancel(), cancel(history=2), USER, cancel(history=3)]
        assert first(steps) == 2


class TestWhatStaysHealthy:
    def test_a_failing_call_retried_once_when_the_customer_asks_is_no_loop_yet(self):
        booking = Step(
            tool="book_reservation",
            args={"user_id": "u1", "payment_id": "credit_card_7334"},
            ok=False,
            error="Error: Payment method credit_card_7334 not found",
        )
        steps: list[Step | str] = [
            booking,
            say("That card is not on file."),
            USER,
            booking,
            say("It is still not found."),
        ]
        assert first(steps) is None
        assert first([*steps, USER, booking]) == 4  # the third: the ordinary threshold

    def test_a_write_to_another_target_is_not_a_repeat(self):
        steps: list[Step | str] = [cancel("3RK2T9"), USER, cancel("HATHAT"), USER, cancel("XY12Z")]
        assert first(steps) is None

    def test_another_call_between_is_not_only_talk(self):
        details = Step(
            tool="get_reservation_details", args={"reservation_id": "3RK2T9"}, result="x"
        )
        steps: list[Step | str] = [details, cancel(), USER, details, cancel(history=2)]
        assert first(steps) is None

    def test_a_wait_between_is_a_retry_after_a_wait(self):
        pause = Step(tool="sleep", args={"seconds": 30}, result="")
        steps: list[Step | str] = [cancel(), USER, pause, cancel(history=2)]
        assert first(steps) is None

    def test_progress_between_resets_it(self):
        search = Step(tool="search_flights", args={"date": "2024-05-20"}, result=["HAT001"])
        steps: list[Step | str] = [cancel(), USER, search, USER, cancel(history=2)]
        assert first(steps) is None

    def test_a_read_again_after_a_user_turn_is_no_write(self):
        details = Step(
            tool="get_reservation_details", args={"reservation_id": "3RK2T9"}, result="x"
        )
        steps: list[Step | str] = [details, USER, details, USER]
        assert first(steps) is None

    def test_a_customer_asking_for_one_more_of_a_new_thing_is_no_repeat(self):
        def add(item: str) -> Step:
            return Step(tool="add_to_cart", args={"item_id": item, "quantity": 1}, side_effect=True)

        steps: list[Step | str] = [add("mug"), USER, add("plate"), USER, add("bowl")]
        assert first(steps) is None


class TestSettingAndFlagsAgain:
    def test_the_setting_at_the_ordinary_threshold_switches_it_off(self):
        steps: list[Step | str] = [cancel(), USER, cancel(history=2), USER, cancel(history=3)]
        assert first(steps, LoopDetector(user_repeat_threshold=3)) == 2  # the ordinary rule
        assert first(steps) == 1

    def test_a_higher_setting_counts_repeats_that_each_answer_the_user(self):
        detector = LoopDetector(repeat_threshold=4, user_repeat_threshold=3)
        steps: list[Step | str] = [cancel(), USER, cancel(history=2), USER, cancel(history=3)]
        assert first(steps, detector) == 2

    def test_a_repeat_without_a_user_turn_breaks_the_run_of_answered_repeats(self):
        detector = LoopDetector(repeat_threshold=5, user_repeat_threshold=3)
        steps: list[Step | str] = [cancel(), USER, cancel(), cancel(), USER, cancel()]
        assert first(steps, detector) is None

    def test_users_who_ask_for_the_same_action_again_set_it_to_the_ordinary_threshold(self):
        one_more = Step(
            tool="add_to_cart", args={"item_id": "mug", "quantity": 1}, side_effect=True
        )
        steps: list[Step | str] = [one_more, USER, one_more]
        assert first(steps) == 1  # read as the same write re-issued
        assert first(steps, LoopDetector(user_repeat_threshold=3)) is None

    def test_below_two_is_refused(self):
        with pytest.raises(ValueError, match="user_repeat_threshold"):
            DetectorConfig(user_repeat_threshold=1)

    def test_a_loop_that_goes_on_is_flagged_again_with_fresh_evidence(self):
        steps: list[Step | str] = [cancel(), USER, cancel(history=2), USER]
        steps += [cancel(history=3), USER, cancel(history=4)]
        found = flags(steps)
        assert [i for i, _ in found] == [1, 3]
        assert found[1][1].flag_count == 2 and found[1][1].loop_start == 0
        assert found[1][1].evidence == (2, 3)


def lookup(reservation: str = "ethan_martin_2396", error: str | None = None) -> Step:
    """A read that fails: the agent keeps passing a user id as a reservation id."""
    return Step(
        tool="get_reservation_details",
        args={"reservation_id": reservation},
        ok=False,
        error=error or f"Error: Reservation {reservation} not found",
    )


STRICT = DetectorConfig(user_repeat_failures=True)


class TestStricterSettingForFailuresAfterAUserTurn:
    """`user_repeat_failures`: the same failure retried as the agent's next call after a user
    turn flags at `user_repeat_threshold` (off by default)."""

    def test_off_by_default_a_single_retry_is_no_loop(self):
        steps: list[Step | str] = [lookup(), say("Not found."), USER, lookup()]
        assert first(steps) is None

    def test_on_the_second_identical_failure_after_a_user_turn_is_flagged(self):
        steps: list[Step | str] = [
            lookup("ZFA04Y"),
            say("Could you give me your user id?"),
            USER,
            lookup(),
            say("I can't find ethan_martin_2396."),
            USER,
            lookup(),
        ]
        (index, verdict), *_ = flags(steps, LoopDetector(STRICT))
        assert index == 4
        assert verdict.rule == EXACT_REPEAT
        assert verdict.evidence == (2, 4) and verdict.loop_start == 2
        assert verdict.details["after_user_turn"] is True
        assert verdict.details["error"] == "Error: Reservation ethan_martin_2396 not found"
        assert "failed each time with the same error" in verdict.explanation
        assert "did not change what the agent does" in verdict.explanation
        assert "retry it unchanged" in verdict.advice

    def test_the_respond_form_is_the_same(self):
        steps: list[Step | str] = [
            lookup(),
            respond("I can't find it.", "Please check again."),
            lookup(),
        ]
        assert first(steps, LoopDetector(STRICT)) == 2
        assert first(steps) is None

    def test_a_failure_with_another_error_is_another_state(self):
        steps: list[Step | str] = [
            lookup(),
            say("Not found."),
            USER,
            lookup(error="Error: service unavailable"),
        ]
        assert first(steps, LoopDetector(STRICT)) is None

    def test_another_call_between_is_not_only_talk(self):
        other = Step(tool="get_user_details", args={"user_id": "ethan_martin_2396"}, result="{}")
        steps: list[Step | str] = [lookup(), say("Not found."), USER, other, lookup()]
        assert first(steps, LoopDetector(STRICT)) is None

    def test_back_to_back_failures_keep_the_ordinary_threshold(self):
        steps: list[Step | str] = [lookup(), lookup()]
        assert first(steps, LoopDetector(STRICT)) is None
        assert first([*steps, lookup()], LoopDetector(STRICT)) == 2

    def test_the_threshold_setting_still_turns_it_off(self):
        detector = LoopDetector(user_repeat_failures=True, user_repeat_threshold=3)
        steps: list[Step | str] = [lookup(), USER, lookup()]
        assert first(steps, detector) is None

    def test_successful_reads_are_not_counted_sooner(self):
        read = Step(tool="get_flight_status", args={"flight": "HAT039"}, result="delayed")
        steps: list[Step | str] = [read, USER, read]
        assert first(steps, LoopDetector(STRICT)) is None

    def test_it_is_a_setting_the_replay_and_config_files_take(self):
        from engine.loops.replay import checked_settings, detector_config

        config = detector_config({"user_repeat_failures": "true"})
        assert config.user_repeat_failures is True
        assert checked_settings({"user_repeat_failures": True}, "rewind.toml") == {
            "user_repeat_failures": True
        }
        with pytest.raises(Exception, match="user_repeat_failures"):
            checked_settings({"user_repeat_failures": "maybe"}, "rewind.toml")
