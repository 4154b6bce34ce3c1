"""bench/corpora/convert_gptoss.py reads a harmony transcript into Steps, and its labelling rule
calls a read asked a 3rd time with nothing new since a loop, and nothing else."""

from __future__ import annotations

from support.converters import converter


def _converter():
    return converter("convert_gptoss")


def _call(city: str) -> str:
    return (
        "<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>"
        f'{{"city": "{city}"}}<|call|>\n\n'
        "<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"
        f'"{city}: 50F"<|end|>\n\n'
    )


TRANSCRIPT = (
    "# Trial\n\n## Conversation\n\n### Turn 1\n\n```\n<|start|>user<|message|>Weather for"
    " Oslo, Rome<|end|>\n```\n\n### Turn 2\n\n```\n"
    "<|start|>system<|message|>You are a model.<|end|>\n\n"
    "<|start|>user<|message|>Weather for Oslo, Rome<|end|>\n\n"
    + _call("Oslo")
    + "<|start|>assistant<|channel|>analysis<|message|>Now Rome.<|end|>\n\n"
    + _call("Rome")
    + "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city":"oslo"}<|call|>\n\n'
    "<|start|>assistant<|channel|>final<|message|>| City | F |<|return|>\n```\n"
    "## Results\n```\n             pass: 1\n      total calls: 3\n```\n"
)


def test_a_transcript_becomes_calls_with_their_answers_and_the_final_turn():
    steps, passed = _converter().parse_trial(TRANSCRIPT)
    assert passed
    assert [(s["tool"], s.get("args")) for s in steps] == [
        ("get_weather", {"city": "Oslo"}),
        ("get_weather", {"city": "Rome"}),
        ("get_weather", {"city": "oslo"}),
        (None, None),
    ]
    assert steps[0]["result"] == "Oslo: 50F"
    # the last call got no answer before the final message: a failed call
    assert steps[2]["ok"] is False and steps[2]["error"] == "no answer"
    assert steps[3]["text"] == "| City | F |"


def _run(*cities: str) -> list[dict]:
    return [{"tool": "get_weather", "args": {"city": c}, "result": f"{c}: 1F"} for c in cities]


def test_the_third_request_with_nothing_new_since_is_a_loop():
    label = _converter().label_run
    assert label(_run("NYC", "nyc", "NYC ")) == {"looping": True, "loop_start": 0, "flag_at": 2}
    got = label(_run("NYC", "Denver", "NYC", "Denver", "NYC"))
    assert got == {"looping": True, "loop_start": 0, "flag_at": 4}
    got = label(_run("NYC", "Denver", "NYC", "NYC", "NYC"))
    assert got == {"looping": True, "loop_start": 2, "flag_at": 4}


def test_a_city_asked_again_between_new_ones_is_no_loop():
    label = _converter().label_run
    cities = ["NYC", "Denver", "NYC", "Chicago", "NYC", "Austin", "NYC", "Boston", "NYC"]
    assert label(_run(*cities))["looping"] is False
    assert label(_run("NYC", "NYC", "Denver"))["looping"] is False
