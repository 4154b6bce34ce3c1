"""Loops of conversational agents, boilerplate error text and nudged build commands: the three
classes as the detector's mechanisms."""

from __future__ import annotations

from engine.loops.detector import DetectorConfig, LoopDetector, Step
from engine.loops.normalize import error_signature


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

    def test_the_third_identical_failing_call_is_flagged_whatever_the_errors_say(self):
        # The same booking, retried unchanged after each "please go ahead", fails one way and
        # then another (the seats ran out, then the card): the third identical failed call is
        # the loop's evidence, counted in the agent's actions, not its messages.
        errors = ["Error: Not enough seats on flight HAT142"] * 2
        errors.append("Error: Payment method credit_card_7815826 not found")
        for talk in ("messages", "respond"):
            steps: list[Step | str] = ["Book me on HAT063 and HAT142, please."]
            for error in errors + errors[-1:]:
                steps.append(Step(tool=book().tool, args=book().args, ok=False, error=error))
                if talk == "respond":
                    steps.append(respond("Sorry, that did not work.", "Please go ahead."))
                else:
                    steps += [Step(tool=None, text="Sorry, that did not work."), "Go ahead."]
            assert first_flag(LoopDetector(), steps) == (4, "circuit_breaker"), talk

    def test_a_thought_between_failures_of_a_run_without_a_user_is_an_action(self):
        # Without a user, a turn is the agent's own step (it may be re-planning), so the same
        # call failing in different ways around thoughts waits for the breaker's count.
        errors = ["Error: Not enough seats on flight HAT142"] * 2
        errors.append("Error: Payment method credit_card_7815826 not found")
        steps: list[Step | str] = []
        for error in errors:
            steps.append(Step(tool=book().tool, args=book().args, ok=False, error=error))
            steps.append(Step(tool=None, text="Let me think about another way."))
        assert first_flag(LoopDetector(), steps) is None

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

    def test_a_cancellation_repeated_while_its_record_grows_is_the_same_write(self):
        """A business write (cancel, update, book…) answers with the whole record, which grows
        with each call (a refund line more in the payment history): like the same edit of a
        growing file, the same cancellation is the same write, so it is no progress."""
        steps: list[Step | str] = []
        history: list[dict[str, object]] = [{"payment_id": "gift_card_1", "amount": 280}]
        for _ in range(3):
            history = [*history, {"payment_id": "gift_card_1", "amount": -280}]
            steps += [Step(tool="cancel_reservation", args={"reservation_id": "3RK2T9"},
                           result={"reservation_id": "3RK2T9", "status": "cancelled",
                                   "payment_history": history}),
                      book(), Step(tool=None, text="Let me try that once more."),
                      "Yes, please try again."]
        assert first_flag(LoopDetector(), steps) == (6, "exact_repeat")

    def test_a_tool_named_for_reading_is_never_a_write(self):
        """``get_refund_status`` reads a refund: a status that moves is progress."""
        steps = [Step(tool="get_refund_status", args={"refund_id": "r-1"},
                      result={"state": state}) for state in ("queued", "sent", "settled")]
        assert first_flag(LoopDetector(), list(steps)) is None
        assert first_flag(LoopDetector(), [Step(tool="refund_payment", args={"id": "p-1"},
                                                result={"n": n}) for n in range(3)]) is not None


PTH_BANNER = """Error processing line 1 of /opt/conda/lib/python3.9/site-packages/distutils.pth:

  Traceback (most recent call last):
    File "/opt/conda/lib/python3.9/site.py", line 177, in addpackage
      exec(line)
    File "<string>", line 1, in <module>
  ModuleNotFoundError: No module named '_distutils_hack'

Remainder of file ignored
"""

MAVEN = """[INFO] BUILD FAILURE
[INFO] ------------------------------------------------------------------------
[INFO] Total time:  {seconds} s
[ERROR] Failed to execute goal org.apache.maven.plugins:maven-compiler-plugin:3.8.1:compile \
(default-compile) on project core: Compilation failure
[ERROR] /repo/core/src/main/java/a/Foo.java:[12,8] cannot find symbol
[ERROR]   symbol:   class {symbol}
[ERROR]   location: package a
[ERROR] -> [Help 1]
[ERROR]
[ERROR] To see the full stack trace of the errors, re-run Maven with the -e switch.
[ERROR] Re-run Maven using the -X switch to enable full debug logging.
[ERROR]
[ERROR] For more information about the errors and possible solutions, please read the \
following articles:
[ERROR] [Help 1] http://cwiki.apache.org/confluence/display/MAVEN/MojoFailureException
"""


class TestBoilerplateErrors:
    def test_an_environment_banner_does_not_change_a_failure(self):
        failure = "Traceback (most recent call last):\n  File \"repro.py\", line 3\nKeyError: 'k'"
        assert error_signature(PTH_BANNER + failure) == error_signature(failure)

    def test_failures_under_the_same_banner_stay_apart(self):
        one = PTH_BANNER + "pylint: error: argument --rgx: missing ), unterminated subpattern"
        two = PTH_BANNER + "pylint: error: unrecognized arguments: --bad-names"
        assert error_signature(one) != error_signature(two)

    def test_maven_failures_differ_by_what_failed_not_by_the_closing_advice(self):
        bar, baz = (
            MAVEN.format(seconds="3.1", symbol="Bar"),
            MAVEN.format(seconds="9", symbol="Baz"),
        )
        assert error_signature(bar) != error_signature(baz)
        assert error_signature(bar) == error_signature(MAVEN.format(seconds="42", symbol="Bar"))


def mvn(command: str) -> Step:
    return Step(
        tool="bash",
        args={"command": command},
        ok=False,
        error=MAVEN.format(seconds="12", symbol="Bar"),
    )


class TestNudgedFailingCommands:
    def test_a_build_retried_with_other_flags_and_paths_is_a_loop(self):
        steps: list[Step | str] = [
            mvn("mvn -q test -Dtest=FooTest"),
            mvn("cd /repo/core && mvn -o -B test -Dtest=FooTest -DfailIfNoTests=false"),
            mvn("mvn -e -U -Dmaven.test.failure.ignore=true -Dcheckstyle.skip=true test"),
        ]
        assert first_flag(LoopDetector(), steps) == (2, "near_duplicate")

    def test_other_packages_failing_the_same_way_are_not_details(self):
        steps: list[Step | str] = [
            Step(
                tool="bash",
                args={"command": f"pip install {name}"},
                ok=False,
                error=f"ERROR: No matching distribution found for {name}",
            )
            for name in ("requests-oauthlib", "flask", "numpy")
        ]
        assert first_flag(LoopDetector(), steps) is None

    def test_an_amount_nudged_into_the_same_complaint_is_a_loop(self):
        def pay(amount: int) -> Step:
            return Step(
                tool="book_reservation",
                args={"user_id": "liam_khan_2521", "payment": {"id": "cc_1", "amount": amount}},
                ok=False,
                error=f"Error: Payment amount does not add up, total is 1332, but paid {amount}",
            )

        steps: list[Step | str] = [pay(417), "Use my card.", pay(822), "Go ahead.", pay(666)]
        assert first_flag(LoopDetector(), steps) == (2, "near_duplicate")

    def test_another_payment_method_is_not_a_detail(self):
        def pay(method: str) -> Step:
            return Step(
                tool="book_reservation",
                args={"user_id": "u1", "payment": {"id": method, "amount": 500}},
                ok=False,
                error=f"Error: Not enough balance in payment method {method}",
            )

        steps: list[Step | str] = [pay("gift_card_8887175"), pay("certificate_7473723")]
        steps.append(Step(tool="book_reservation", args={"payment": "credit_card_1"}, result="ok"))
        assert first_flag(LoopDetector(), steps) is None


class TestAgentTurnsAfterTheUserSpoke:
    # An agent holding a policy line rewords its refusal each time the customer insists; an
    # agent stuck on one reply sends it again whatever the customer says.
    REFUSALS = [  # alike at 0.85-0.94 (difflib on the turn signature): under 0.95, over 0.8
        "I'm sorry, but travel insurance cannot be added to a reservation after it has been "
        "booked.",
        "I am sorry, but travel insurance cannot be added to the reservation after it was booked.",
        "I'm sorry, but the travel insurance cannot be added to a reservation once it has been "
        "booked.",
        "Sorry, but travel insurance cannot be added to a reservation after it has been booked, "
        "I'm afraid.",
    ]
    INSISTING = ["Please just add the insurance.", "Add it anyway, I need it.",
                 "I insist, add the insurance now.", "Why not? Add it."]

    def test_a_refusal_reworded_to_an_insistent_customer_is_not_a_loop(self):
        steps: list[Step | str] = []
        for refusal, ask in zip(self.REFUSALS, self.INSISTING, strict=True):
            steps += [ask, Step(tool=None, text=refusal)]
        assert first_flag(LoopDetector(), steps) is None
        # the same turns with no user between them are an agent talking in circles
        alone: list[Step | str] = [Step(tool=None, text=r) for r in self.REFUSALS]
        assert first_flag(LoopDetector(), alone) == (2, "idle_turns")
        # and the setting that decides it is one the operator can move
        loose = LoopDetector(DetectorConfig(user_turn_similarity=0.8))
        assert first_flag(loose, steps) == (2, "idle_turns")

    def test_the_same_reply_whatever_the_customer_says_is_a_loop(self):
        steps: list[Step | str] = []
        for ask in self.INSISTING:
            steps += [ask, Step(tool=None, text="Let me check that for you, one moment please.")]
        assert first_flag(LoopDetector(), steps) == (2, "idle_turns")
