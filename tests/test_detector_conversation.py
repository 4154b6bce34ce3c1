"""Loops of conversational agents, boilerplate error text and nudged build commands (issue 26,
item 5): the three classes as the detector's mechanisms."""

from __future__ import annotations

from engine.loops.detector import DetectorConfig, LoopDetector, Step


def book(payment: str = "credit_card_7815826", amount: int = 104) -> Step:
    return Step(
        tool="book_reservation",
        args={
            "user_id": "aarav_garcia_1177",
            "flights": [{"flight_number": "HAT063", "date": "2024-05-16"}],
            "payment_methods": [{"payment_id": payment, "amount": amount}],
        },
        ok=False,
        error=f"Error: Payment method {payment} not found",
    )


def respond(text: str, reply: str) -> Step:
    return Step(tool="respond", args={"content": text}, result=reply)


def first_flag(detector: LoopDetector, steps: list[Step | str]) -> tuple[int, str] | None:
    """Feed steps; a plain string is a user message (not a step)."""
    index = 0
    for item in steps:
        if isinstance(item, str):
            detector.user_input()
            continue
        verdict = detector.observe(item)
        if verdict.looping:
            assert verdict.rule is not None
            return index, verdict.rule
        index += 1
    return None


class TestRetryBetweenUserTurns:
    def test_the_same_failing_call_between_respond_calls_is_a_loop(self):
        steps: list[Step | str] = []
        for _ in range(4):
            steps += [book(), respond("Sorry, let me try again.", "Yes, please try again.")]
        assert first_flag(LoopDetector(), steps) == (4, "exact_repeat")

    def test_the_same_failing_call_between_user_messages_is_a_loop(self):
        steps: list[Step | str] = []
        for _ in range(4):
            steps += [book(), Step(tool=None, text="Sorry, let me try again."), "Please go ahead."]
        assert first_flag(LoopDetector(), steps) == (4, "exact_repeat")

    def test_a_reply_that_changes_the_next_call_is_progress(self):
        steps: list[Step | str] = [
            book(),
            respond("That card is not on file.", "Use my gift card then."),
            book("gift_card_1"),
            respond("The gift card is not on file either.", "Try my other card, 4421."),
            Step(tool="book_reservation", args={"payment": "credit_card_4421"}, result="HATHAT"),
            respond("Booked: HATHAT.", "Thanks."),
        ]
        assert first_flag(LoopDetector(), steps) is None

    def test_a_conversation_is_not_talking_instead_of_acting(self):
        steps: list[Step | str] = [
            Step(tool="get_user_details", args={"user_id": "u1"}, result={"name": "Mia"}),
        ]
        questions = ["Where to?", "Which date suits you?", "How many passengers travel?"]
        questions += ["Which cabin would you like?", "Any checked bags?", "Shall I book it?"]
        for question in questions:
            steps.append(respond(question, "An answer."))
        assert first_flag(LoopDetector(), steps) is None

    def test_the_same_line_said_again_and_again_is_a_loop(self):
        steps: list[Step | str] = [
            respond(
                "I apologize, but I encountered an error: Recursion limit of 25 reached.",
                "Could you please try sending your request again?",
            )
            for _ in range(5)
        ]
        assert first_flag(LoopDetector(), steps) == (2, "idle_turns")

    def test_user_tools_are_a_setting(self):
        detector = LoopDetector(user_tools={"say"})
        steps: list[Step | str] = [
            Step(tool="fetch", args={"url": "u"}, ok=False, error="HTTP 500"),
            Step(tool="say", args={"content": "retrying"}, result="ok, retry"),
        ] * 3
        assert first_flag(detector, steps) == (4, "exact_repeat")
        assert "respond" in DetectorConfig().user_tools
