"""Agents of other kinds: calls one model response issued together (`Step.turn`), answers the
harness rejects again and again, and short step budgets, as the shapes real agents produce."""

from __future__ import annotations

from engine.loops.detector import DetectorConfig, LoopDetector, Step, budget_scaled


def guess(symbol: str, turn: str | None) -> Step:
    """A code-search agent guessing a symbol's name; the search API does not know it."""
    return Step(
        tool="get_symbol_definition",
        args={"symbol": symbol, "repo": "django"},
        ok=False,
        error=f"Symbol '{symbol}' not found in repository django",
        turn=turn,
    )


def found(turn: str | None) -> Step:
    return Step(
        tool="search_code",
        args={"query": "parse config"},
        result=["django/conf/__init__.py:88 def _parse_config(self, path):"],
        turn=turn,
    )


def flags(steps: list[Step | str], detector: LoopDetector | None = None) -> list[tuple[int, str]]:
    """(index, rule) of every looping verdict; a plain string is the user (or a harness
    answering as a user message), not a step."""
    detector = detector or LoopDetector()
    out, index = [], 0
    for item in steps:
        if isinstance(item, str):
            detector.user_input()
            continue
        verdict = detector.observe(item)
        if verdict.looping:
            out.append((index, verdict.rule or ""))
        index += 1
    return out


def test_a_batch_of_different_guesses_that_all_fail_then_success_is_one_attempt():
    batch = [guess(name, "resp_1") for name in ("parse_config", "parse_conf", "parse_configs")]
    assert flags([*batch, found("resp_2")]) == []
    # the same calls as three responses in a row are three failed tries: a near-duplicate loop
    one_by_one = [guess(name, None) for name in ("parse_config", "parse_conf", "parse_configs")]
    assert flags(one_by_one) == [(2, "near_duplicate")]


def test_five_guesses_in_two_responses_do_not_trip_the_circuit_breaker():
    names = ["Config", "ConfigParser", "SettingsLoader", "LazySettings", "UserSettingsHolder"]
    turns = ["resp_1", "resp_1", "resp_1", "resp_2", "resp_2"]
    steps = [guess(name, turn) for name, turn in zip(names, turns, strict=True)]
    assert flags([*steps, found("resp_3")]) == []
    # the same five failures issued one per response are five failures in a row
    assert (4, "circuit_breaker") in flags([guess(name, None) for name in names])


def batch(turn: str) -> list[Step]:
    """One response's three calls to three different APIs, each failing its own way."""
    return [
        Step(tool="get_symbol_definition", args={"symbol": "Settings._setup"}, ok=False,
             error="Symbol 'Settings._setup' not found", turn=turn),
        Step(tool="open_file", args={"path": "django/conf/settings.py"}, ok=False,
             error="No such file: django/conf/settings.py", turn=turn),
        Step(tool="search_code", args={"query": "ImproperlyConfigured DJANGO_SETTINGS_MODULE"},
             ok=False, error="search backend: query too long (max 3 terms)", turn=turn),
    ]


def test_the_same_failed_batch_sent_again_is_a_repeat():
    got = flags([*batch("resp_1"), *batch("resp_2")])
    assert got == [(5, "exact_repeat")]
    detector = LoopDetector()
    for step in [*batch("resp_1"), *batch("resp_2")][:-1]:
        assert not detector.observe(step).looping
    verdict = detector.observe(batch("resp_2")[-1])
    assert verdict.evidence == (0, 1, 2, 3, 4, 5) and verdict.loop_start == 0
    assert verdict.details["batch"] == 3


def test_a_failed_batch_sent_again_in_another_order_is_a_repeat_but_not_after_progress():
    again = batch("resp_2")
    assert flags([*batch("resp_1"), again[2], again[0], again[1]]) == [(5, "exact_repeat")]
    # something new learned between the two batches: the second one is another attempt
    assert flags([*batch("resp_1"), found("resp_2"), *batch("resp_3")]) == []
    # the customer asked for the retry: counted as usual, not at once
    assert flags([*batch("resp_1"), "please try again", *batch("resp_2")]) == []


def test_one_call_issued_twice_in_one_response_counts_once():
    crop = Step(tool="image_crop", args={"x": 10, "y": 20, "w": 0}, ok=False,
                error="invalid slice", turn="resp_1")
    twice = [crop, crop]
    assert flags([*twice, Step(tool="image_crop", args={"x": 10, "y": 20, "w": 5},
                                result="ok", turn="resp_2")]) == []
    # three responses retrying it are the usual exact repeat
    retries = [Step(tool="image_crop", args={"x": 10, "y": 20, "w": 0}, ok=False,
                    error="invalid slice", turn=f"resp_{k}") for k in range(3)]
    assert flags(retries) == [(2, "exact_repeat")]


def rejected(text: str) -> Step:
    """A free-text answer the harness validated and rejected."""
    return Step(tool=None, text=text, ok=False,
                error="Answer rejected: locations not precise; give file:line for each location")


def test_three_rejected_answers_in_a_row_are_a_loop_even_when_the_harness_answers_as_the_user():
    run: list[Step | str] = [
        Step(tool="search_code", args={"query": "parse_config"}, result=["django/conf.py:12"]),
        rejected("The bug is in django/conf.py."),
        "Your answer is not valid: locations not precise.",
        rejected("Sorry! The bug is in the configuration module of django."),
        "Your answer is not valid: locations not precise.",
        rejected("Apologies, I believe the problem lies in conf.py, in the parser."),
    ]
    assert flags(run) == [(3, "idle_turns")]
    detector = LoopDetector()
    verdicts = [detector.observe(s) if isinstance(s, Step) else detector.user_input()
                for s in run]
    last = verdicts[-1]
    assert last is not None and last.evidence == (1, 2, 3)
    assert "rejected 3 times" in last.explanation


def test_rejections_of_another_kind_or_with_progress_between_are_no_loop():
    other = Step(tool=None, text="Final answer: conf.py", ok=False,
                 error="Not a valid call: expected a JSON object with 'locations'")
    assert flags([rejected("a"), other, rejected("b")]) == []
    new = Step(tool="open_file", args={"path": "django/conf/__init__.py"}, result="class Settings")
    assert flags([rejected("a"), rejected("b"), new, rejected("c")]) == []
    # a failing tool call between does not end the run: it is no progress
    dead = Step(tool="open_file", args={"path": "conf.py"}, ok=False, error="No such file")
    assert flags([rejected("a"), rejected("b"), dead, rejected("c")]) == [(3, "idle_turns")]


def reworded(query: str) -> Step:
    return Step(tool="search_api", args={"query": query}, ok=False,
                error="404: no endpoint matches the query")


def test_a_short_budget_scales_the_repeat_thresholds():
    searches = ["list users by team", "members of group 42", "team roster endpoint",
                "who belongs to engineering"]
    # a budget of 6 actions: the third rewording of the failing search trips the breaker
    assert flags([reworded(q) for q in searches], LoopDetector(max_steps=6))[0] == (
        2, "circuit_breaker")
    # with the default budget the breaker waits for 5 failures
    assert flags([reworded(q) for q in searches]) == []
    assert budget_scaled(DetectorConfig(max_steps=6)) == {
        "breaker_failures": 3, "recurrence_threshold": 3}
    assert budget_scaled(DetectorConfig()) == {}
    tight = budget_scaled(DetectorConfig(max_steps=4, tool_breaker_failures={"ci": 8}))
    assert tight["repeat_threshold"] == 2 and tight["tool_breaker_failures"] == {"ci": 2}


def test_a_rejected_message_that_repeats_itself_is_left_to_the_count_of_rejected_answers():
    """A model pasting one image link ten times into an answer the harness refuses (ToolBench):
    one refused message is not the agent going round; the next answer may be right. Three
    such refusals in a row are, as any three rejected answers are; an accepted message that
    chants is still flagged at once."""
    chant = "Here is the pattern: " + "![waves-1](data:image/svg+xml;base64,PHN2ZyB3aWR0aD0i) " * 12
    refused = Step(tool=None, text=chant, ok=False, error="No such function name: " + chant[:40])
    finish = Step(tool="Finish", args={"return_type": "give_answer", "final_answer": "waves-1"},
                  result="ok")
    assert flags([refused, finish]) == []
    assert flags([refused, refused, refused]) == [(2, "idle_turns")]
    assert flags([Step(tool=None, text=chant)]) == [(0, "repeated_content")]
