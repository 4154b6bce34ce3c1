"""bench/corpora/convert_toolbench.py reads ToolBench's recorded calls into Steps (an API's error,
a turn the harness could not read as a call, an answer cut inside its error) and labels a run
by the rule of TOOLBENCH_LABELS.md, and nothing else."""

from __future__ import annotations

import json

from support.converters import converter


def _converter():
    return converter("convert_toolbench")


def _answer(response: object = "", error: str = "") -> str:
    return json.dumps({"error": error, "response": response})


RECORD = (
    "Step 1: "
    + repr({"name": "search_books", "arguments": '{"author": "King"}',
            "response": _answer({"books": ["It"]})})
    + "\nStep 2: "
    + repr({"name": "search_books", "arguments": '{"author": "King", "page": 2}',
            "response": _answer(error="Function executing from api error...\n404 page")})
    + "\nStep 3: "
    + repr({"name": "invalid_hallucination_function_name", "arguments": "I found It.",
            "response": _answer(error="No such function name: : I found It. The author is")})
    + "\nStep 4: "
    + repr({"name": "Finish", "arguments": '{"final_answer": "It"}',
            # the harness's answer cut at 1,024 characters inside its error: no whole JSON
            "response": '{"error": "No such function name: ' + "x" * 1000})
)


def test_a_record_becomes_steps_with_their_outcomes():
    steps = _converter().steptool_steps(RECORD)
    assert [s.get("tool") for s in steps] == ["search_books", "search_books", None, "Finish"]
    assert steps[0]["result"] == {"books": ["It"]} and "ok" not in steps[0]
    assert steps[1]["ok"] is False and steps[1]["error"].startswith("Function executing")
    # prose where the function name goes: a turn without a call, answered by a rejection
    # (its text taken once: the parser leaves a piece of the same prose in the arguments)
    assert steps[2]["ok"] is False and steps[2]["text"].count("I found It.") == 1
    assert steps[2]["error"].startswith("No such function name")
    # an answer cut inside its error is still a failure, not a result
    assert steps[3]["ok"] is False and "result" not in steps[3]
    assert [s.get("turn") for s in steps] == ["0", "1", None, "3"]


def _call(tool: str, args: dict, error: str | None = None) -> dict:
    step: dict = {"tool": tool, "args": args}
    if error:
        step.update(ok=False, error=error)
    else:
        step["result"] = "ok"
    return step


def test_the_rule_calls_three_repeats_rejections_or_failures_a_loop_and_nothing_else():
    label = _converter().label_run
    a, b = _call("search", {"q": "a"}), _call("search", {"q": "b"})
    assert label([a, a, a])["flag_at"] == 2
    # a call made again after a new call is not a loop; the head of a third round of a cycle is
    assert label([a, b, a])["looping"] is False
    assert label([a, b, a, b, a]) == {"looping": True, "loop_start": 0, "flag_at": 4,
                                      "reason": "cycle"}
    prose = {"tool": None, "text": "I think", "ok": False, "error": "No such function name: : x"}
    assert label([prose, prose, prose])["reason"] == "the same rejection 3 times in a row"
    geo = [_call("geocode", {"address": q}, "Function executing error...\nunexpected 'address'")
           for q in ("Cairo", "Cairo, Egypt", "Giza")]
    assert label(geo)["reason"] == "same failure of one tool 3 times in a row"
    assert label([geo[0], a, geo[1], b, geo[2]])["looping"] is False
