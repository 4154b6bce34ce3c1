"""bench/corpora/convert_bfcl.py reads BFCL's multi-turn log into Steps (user requests, calls
and the API's answers, a response the harness could not decode; a response without a call,
whose prose the log does not keep, adds no step) and labels a run by the rule of
BFCL_LABELS.md, and nothing else."""

from __future__ import annotations

import json

from support.converters import converter


def _converter():
    return converter("convert_bfcl")


def _response(calls: list[dict], answers: list[str], note: str) -> list[dict]:
    decoded = "Successfully decoded model response."
    out = [{"role": "assistant", "content": calls}, {"role": "handler_log", "content": decoded}]
    out += [{"role": "tool", "content": a} for a in answers]
    if note != decoded:
        out.append({"role": "handler_log", "content": note})
    return out


def test_a_log_becomes_user_turns_calls_answers_and_rejections():
    c = _converter()
    ok = "Successfully decoded model response."
    record = {
        "inference_log": [
            [{"role": "state_info"}],
            {
                "begin_of_turn_query": [{"role": "user", "content": "Move it."}],
                "step_0": _response(
                    [{"ls": '{"a": true}'}], ['{"current_directory_content": []}'], ok
                ),
                "step_1": _response(
                    [{"mv": '{"source": "a"}'}], ['{"error": "mv: no such file"}'], ok
                ),
                "step_2": _response(
                    [{"echo<|channel|>x": "{}"}], ["Error during execution: bad"], ok
                ),
                "step_3": _response([], [], c.EMPTY),
            },
            {
                "begin_of_turn_query": [{"role": "user", "content": "Again."}],
                "step_0": _response([{"touch?commentary": "{}"}], [], c.DECODE_ERROR),
            },
            [{"role": "state_info"}],
        ]
    }
    steps = c.record_steps(record)
    assert steps == [
        {"user": "Move it."},
        {
            "tool": "ls",
            "args": {"a": True},
            "turn": "0",
            "result": {"current_directory_content": []},
        },
        {
            "tool": "mv",
            "args": {"source": "a"},
            "turn": "1",
            "ok": False,
            "error": "mv: no such file",
        },
        {
            "tool": "echo<|channel|>x",
            "args": {},
            "turn": "2",
            "ok": False,
            "error": "Error during execution: bad",
        },
        # the answer in prose ending the request is not kept by the log: no step
        {"user": "Again."},
        {"tool": None, "text": "touch?commentary({})", "ok": False, "error": c.DECODE_ERROR},
    ]


def _call(tool: str, args: dict, turn: int, result=None, error: str | None = None) -> dict:
    step = {"tool": tool, "args": args, "turn": str(turn)}
    if error is not None:
        step.update(ok=False, error=error)
    else:
        step["result"] = result
    return step


def test_the_rule_reads_repeats_state_changes_and_user_turns():
    c = _converter()
    listing = {"current_directory_content": ["a"]}
    ls = [_call("ls", {"a": False}, k, listing) for k in range(3)]
    assert c.label_run(ls)["flag_at"] == 2 and c.label_run(ls)["loop_start"] == 0
    # a successful write between: the third ls is a new look
    moved = [ls[0], ls[1], _call("mv", {"source": "a", "destination": "b"}, 2, {}), ls[2]]
    assert not c.label_run(moved)["looping"]
    # a read between changes nothing
    found = [ls[0], _call("find", {"path": "."}, 1, {"matches": []}), ls[1], ls[2]]
    assert c.label_run(found)["flag_at"] == 3
    # a user request between starts the count again
    assert not c.label_run([ls[0], ls[1], {"user": "next"}, ls[2]])["looping"]
    # one tool failing the same way with nudged arguments, 3 times in a row
    err = "mv: path not allowed in destination."
    mvs = [
        _call("mv", {"source": "a", "destination": d}, k, error=err)
        for k, d in enumerate(("t/a", "./t", "/t"))
    ]
    assert c.label_run(mvs)["reason"] == "same failure of one tool 3 times in a row"
    # different errors (each names its folder) are other tries
    cds = [
        _call("cd", {"folder": f}, k, error=f"cd: '{f}': No such file") for k, f in enumerate("xyz")
    ]
    assert not c.label_run(cds)["looping"]
    # three rejected responses in a row, user requests between
    rejected = {"tool": None, "text": "x", "ok": False, "error": c.DECODE_ERROR}
    label = c.label_run([rejected, {"user": "a"}, rejected, {"user": "b"}, rejected])
    assert label["reason"] == "the same rejection 3 times in a row" and label["flag_at"] == 2
    # the same call twice in one response is one attempt
    assert not c.label_run([ls[0], {**ls[1], "turn": "0"}, ls[2]])["looping"]


def test_the_split_keeps_every_run_of_a_task_in_one_half():
    c = _converter()
    tasks = [f"multi_turn_base_{n}" for n in range(10)] + [
        f"multi_turn_miss_func_{n}" for n in range(6)
    ]
    split = c.split_tasks(tasks + tasks)
    assert set(split) == set(tasks)
    assert sum(v == "tuned" for v in split.values()) == 5 + 3
    assert json.dumps(split, sort_keys=True) == json.dumps(c.split_tasks(tasks), sort_keys=True)
