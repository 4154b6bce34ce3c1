"""Unit tests of the loop detector: one block per rule, each with its healthy counterpart."""

from __future__ import annotations

import dataclasses
import json
import tracemalloc

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.loops.detector import (
    CIRCUIT_BREAKER,
    CONTEXT_OVERFLOW,
    CYCLE,
    EXACT_REPEAT,
    IDLE_TURNS,
    NEAR_DUPLICATE,
    POLL_BUDGET,
    RECURRENCE,
    REPEATED_CONTENT,
    RULES,
    STEP_BUDGET,
    DetectorConfig,
    LoopDetector,
    Step,
    Verdict,
)
from engine.loops.fingerprint import canonical_json, fingerprint, fingerprint_normalized
from engine.loops.normalize import (
    error_signature,
    normalize_args,
    normalize_path,
    normalize_result,
    normalize_text,
    result_digest,
    turn_signature,
)
from engine.loops.rules import REGISTRY, Finding, Rule
from engine.loops.window import TURN, Observation, Window


def ok(tool, args=None, result=None, side_effect=False):
    return Step(tool=tool, args=args or {}, ok=True, result=result, side_effect=side_effect)


def fail(tool, args=None, error="error"):
    return Step(tool=tool, args=args or {}, ok=False, error=error)


def say(text):
    return Step(tool=None, text=text)


def feed(steps, detector=None):
    """All verdicts of a fresh (or given) detector over `steps`."""
    detector = detector or LoopDetector()
    return [detector.observe(s) for s in steps]


def flagged(verdicts):
    """Indexes of the looping verdicts."""
    return [i for i, v in enumerate(verdicts) if v.looping]


def first(verdicts) -> Verdict:
    return next(v for v in verdicts if v.looping)


CROP = {"path": "uploads/receipt.jpg", "box": [820, 1400, 1180, 1330]}
SLICE = "invalid slice: y2 (1330) must be greater than y1 (1400)"


# --- normalization ------------------------------------------------------------------------
class TestNormalization:
    def test_keys_are_sorted_and_volatile_fields_dropped(self):
        a = {"b": 1, "a": 2, "request_id": "r-1", "timestamp": "2025-10-01T09:00:00Z"}
        b = {"a": 2, "b": 1, "X-Request-ID": "r-2", "nonce": "n", "client_timestamp": 5}
        assert canonical_json(normalize_args(a)) == canonical_json(normalize_args(b))

    def test_retry_counters_and_thoughts_are_not_part_of_the_call(self):
        a = {"q": "x", "attempt": 1, "explanation": "first try"}
        b = {"q": "x", "attempt": 2, "reasoning": "the last one failed, retrying"}
        assert normalize_args(a) == normalize_args(b) == {"q": "x"}

    def test_whitespace_is_normalized_but_indentation_kept(self):
        assert normalize_text("  ls   -la\t/tmp ") == "ls -la /tmp"
        assert normalize_text("def f():\r\n    return 1   \n\n") == "def f():\n    return 1"
        assert normalize_text("def f():\n  return 1") != normalize_text("def f():\n    return 1")

    def test_whitespace_inside_code_is_kept(self):
        # an indent and its undo are two different calls
        indent = {"command": "sed -i 's/^return x/    return x/' src/a.py"}
        undo = {"command": "sed -i 's/^    return x/return x/' src/a.py"}
        assert normalize_args(indent) != normalize_args(undo)
        two = {"command": "sed -i 's/^x/  x/'  src/a.py"}
        four = {"command": "sed -i 's/^x/    x/' src/a.py"}
        assert normalize_args(two) != normalize_args(four)
        # outside quotes, spaces still do not matter
        assert normalize_args({"command": "ls   -la  'my dir'"}) == {"command": "ls -la 'my dir'"}
        # strings under code keys keep every space, only line endings are normalized
        a = {"path": "a.py", "old": "x = 1", "new": "    x = 1"}
        b = {"path": "a.py", "old": "x = 1", "new": "  x = 1"}
        assert normalize_args(a) != normalize_args(b)
        assert normalize_args({"content": "a  \r\nb"}) == {"content": "a  \nb"}
        heredoc = "cat > f.py <<'EOF'\ndef f():\n{}return 1\nEOF"
        assert normalize_args({"command": heredoc.format("  ")}) != normalize_args(
            {"command": heredoc.format("    ")}
        )

    def test_reindenting_step_by_step_is_not_a_repeat(self):
        steps = [
            ok(
                "str_replace",
                {"path": "src/a.py", "old_str": "return x", "new_str": " " * n + "return x"},
                "The file src/a.py has been edited.",
            )
            for n in (2, 4, 8)
        ]
        assert flagged(feed(steps)) == []

    def test_indent_and_undo_going_back_and_forth_is_a_cycle(self):
        # collapsed, indent and undo were one call: flagged as an exact repeat at the 3rd edit
        edited = "The file src/a.py has been edited."
        indent = ok("str_replace", {"path": "src/a.py", "old_str": "x", "new_str": "    x"}, edited)
        undo = ok("str_replace", {"path": "src/a.py", "old_str": "    x", "new_str": "x"}, edited)
        verdicts = feed([indent, undo] * 3)
        assert flagged(verdicts)[0] == 4 and verdicts[4].rule == CYCLE
        assert flagged(feed([indent, undo, ok("run_tests", {}, "1 passed")])) == []

    def test_paths_are_normalized_urls_are_not(self):
        assert normalize_path("./src//app.py") == "src/app.py"
        assert normalize_path("src\\pkg\\app.py") == "src/pkg/app.py"
        assert normalize_path("src/pkg/../app.py/") == "src/app.py"
        assert normalize_path("https://x.example//a/../b") == "https://x.example//a/../b"
        assert normalize_path("not a path/with spaces") == "not a path/with spaces"

    def test_result_keeps_progress_counters_but_drops_timestamps(self):
        a = normalize_result({"progress": 40, "updated_at": "2025-10-01T09:00:00Z"})
        b = normalize_result({"progress": 40, "updated_at": "2025-10-01T09:00:30Z"})
        c = normalize_result({"progress": 45, "updated_at": "2025-10-01T09:01:00Z"})
        assert a == b != c
        assert result_digest("09:00:01 heartbeat") == result_digest("09:00:31 heartbeat")

    def test_error_signature_masks_ids_times_and_echoed_arguments(self):
        a = error_signature("invalid slice [10:20] (request 3f9a2c1b7d)", {"x": 10, "y": 20})
        b = error_signature("invalid slice [11:21] (request 99e0aa41c2)", {"x": 11, "y": 21})
        assert a == b == "invalid slice [<arg>:<arg>] (request <id>)"
        # numbers that are not arguments stay: 3 failures is not 2 failures
        assert error_signature("3 failed", {}) != error_signature("2 failed", {})
        # durations are masked
        assert error_signature("1 failed in 0.84s") == error_signature("1 failed in 0.91s")

    BANNER = (
        "============================= test session starts ==============================\n"
        "platform linux -- Python 3.9.7, pytest-7.4.0, pluggy-1.0.0\n"
        "rootdir: /testbed\n"
        "collected 5 items\n\n"
        "tests/test_{name}.py F....                                          [100%]\n\n"
        "=================================== FAILURES ===================================\n"
        "___________________________________ test_{name} ___________________________________\n\n"
        "    def test_{name}():\n"
        "        img = load_fixture('receipt.jpg')\n"
        "        box = normalize((820, 1400, 1180, 1330))\n"
        "        region = crop(img, box)\n"
        ">       assert region.size == (360, 70)\n"
    )
    LOCALE = "bash: warning: setlocale: LC_ALL: cannot change locale (en_US.UTF-8)\n"

    def test_error_signature_masks_counters_that_go_up(self):
        a = error_signature("/bin/bash: line 11301: fixme: command not found")
        b = error_signature("/bin/bash: line 11342: fixme: command not found")
        assert a == b == "/bin/bash: line <n>: fixme: command not found"
        assert error_signature("job 1048576 died") == error_signature("job 1048990 died")
        # short numbers are not counters: HTTP 500 is not HTTP 503
        assert error_signature("HTTP 500") != error_signature("HTTP 503")

    def test_error_signature_skips_banners_every_command_prints(self):
        def pytest_failure(name, error):
            return self.BANNER.format(name=name) + f"E   {error}\ntests/test_{name}.py:10: x"

        a = error_signature(pytest_failure("a", "AssertionError: assert 1 == 2"))
        b = error_signature(pytest_failure("a", "ImportError: cannot import name 'crop'"))
        assert a != b and "assertionerror" in a and "platform" not in a
        c = error_signature(self.LOCALE + "ModuleNotFoundError: No module named 'foo'")
        d = error_signature(self.LOCALE + "PermissionError: [Errno 13] /etc/hosts")
        assert c != d and "setlocale" not in c
        # the same failure behind the banner is still the same failure
        e = error_signature(self.LOCALE + "ModuleNotFoundError: No module named 'foo'")
        assert c == e

    def test_same_shell_failure_with_a_growing_line_counter_is_a_repeat(self):
        steps = [
            fail(
                "bash",
                {"command": "fixme --all"},
                f"/bin/bash: line {11301 + 41 * i}: fixme: command not found",
            )
            for i in range(3)
        ]
        verdicts = feed(steps)
        assert flagged(verdicts) == [2] and verdicts[2].rule == EXACT_REPEAT

    def test_different_failures_behind_one_banner_are_not_one_loop(self):
        # every run prints the same 500 characters of warnings before the error that matters
        warnings = "".join(
            f"/usr/lib/python3/site-packages/pkg{k}/__init__.py:{k}: DeprecationWarning: "
            "pkg_resources is deprecated as an API\n"
            for k in range(6)
        )
        errors = [
            "ConnectionRefusedError: [Errno 111] Connection refused",
            "HTTPError: 503 Service Unavailable: warming up",
            "AssertionError: expected 3 rows, got 0",
        ]
        steps = []
        for error in errors:
            steps += [
                fail("bash", {"command": "python reproduce.py"}, self.LOCALE + warnings + error),
                say("The error changed; let me run it again."),
            ]
        assert flagged(feed(steps)) == []
        # the same failure behind the banner, three times, is a repeat
        same = [fail("bash", {"command": "python reproduce.py"}, warnings + errors[0])] * 3
        assert flagged(feed(same)) == [2]

    def test_error_signature_masks_values_of_dropped_volatile_keys(self):
        a = error_signature("rejected request 00000061-000b", {}, volatile=["00000061-000b"])
        assert "00000061" not in a

    def test_turn_signature_ignores_numbers_case_and_punctuation(self):
        assert turn_signature("Retrying (attempt 2)!") == turn_signature("retrying attempt 3.")
        assert turn_signature("   ") == turn_signature(None) == ""

    def test_free_text_of_a_tool_call_is_never_in_the_fingerprint(self):
        verdicts = feed(
            Step(tool="image_crop", args=CROP, ok=False, error=SLICE, text=f"thought {i}")
            for i in range(3)
        )
        assert flagged(verdicts) == [2]

    def test_custom_volatile_key_list(self):
        detector = LoopDetector(volatile_keys={"session_token"})
        steps = [fail("api", {"q": 1, "session_token": f"t{i}"}, "HTTP 500") for i in range(3)]
        assert flagged(feed(steps, detector)) == [2]
        # with the default list, session_token is part of the call: three different calls
        assert flagged(feed(steps, LoopDetector(breaker_failures=10))) == []


# --- exact_repeat -----------------------------------------------------------------------------
class TestExactRepeat:
    def test_third_identical_failure_is_flagged_with_evidence(self):
        verdicts = feed(
            [ok("load_image", {"path": "a.jpg"}, "img")] + [fail("image_crop", CROP, SLICE)] * 40
        )
        v = verdicts[3]
        assert flagged(verdicts)[0] == 3
        assert (v.rule, v.evidence, v.loop_start, v.tool, v.remedy) == (
            EXACT_REPEAT,
            (1, 2, 3),
            1,
            "image_crop",
            "rollback",
        )
        assert "image_crop" in v.explanation and "invalid slice" in v.explanation
        assert v.explanation.endswith(".") and v.explanation.count(". ") == 0
        assert v.details["fingerprint"] == fingerprint("image_crop", normalize_args(CROP))

    def test_identical_successful_results_are_not_progress(self):
        verdicts = feed([ok("read_file", {"path": "a.py"}, "same text")] * 3)
        assert flagged(verdicts) == [2] and verdicts[2].rule == EXACT_REPEAT

    def test_agent_turns_in_between_do_not_hide_the_repeat(self):
        steps = []
        for _ in range(3):
            steps += [fail("image_crop", CROP, SLICE), say("Let me try again.")]
        assert flagged(feed(steps))[0] == 4

    def test_side_effect_repeated_is_flagged_even_with_fresh_results(self):
        steps = [
            ok("create_ticket", {"title": "Printer"}, {"id": i}, side_effect=True) for i in range(3)
        ]
        v = feed(steps)[2]
        assert v.rule == EXACT_REPEAT and v.details["side_effect"] is True

    def test_healthy_transient_error_then_successful_retry(self):
        steps = [
            fail("fetch", {"url": "u"}, "HTTP 503"),
            ok("fetch", {"url": "u"}, "page"),
            fail("fetch", {"url": "u"}, "HTTP 503"),
            ok("fetch", {"url": "u"}, "page 2"),
        ]
        assert flagged(feed(steps)) == []

    def test_healthy_git_status_between_edits(self):
        steps = []
        for i in range(8):
            steps += [
                ok("edit_file", {"path": "a.py", "new": f"v{i}"}, "Edited a.py"),
                ok("git_status", {}, " M a.py"),
            ]
        assert flagged(feed(steps)) == []

    def test_healthy_same_call_twice(self):
        steps = [ok("read_file", {"path": "a.py"}, "x")] * 2 + [ok("edit_file", {"p": 1}, "ok")]
        assert flagged(feed(steps)) == []

    def test_healthy_same_results_with_progress_in_between(self):
        steps = [
            ok("read_file", {"path": "a.py"}, "x"),
            ok("read_file", {"path": "b.py"}, "y"),
            ok("read_file", {"path": "a.py"}, "x"),
            ok("read_file", {"path": "c.py"}, "z"),
            ok("read_file", {"path": "a.py"}, "x"),
        ]
        assert flagged(feed(steps)) == []

    def test_a_write_to_another_target_does_not_make_the_same_write_new(self):
        # write a.md, write b.md, then the same write of a.md twice more: the first write of
        # b.md changed b.md, nothing a.md shows (OpenClaw's stable argument churn)
        def write(path):
            return ok("write", {"path": path, "content": "same"}, f"wrote {path}")

        verdicts = feed([write("a.md"), write("b.md"), write("a.md"), write("a.md")])
        assert flagged(verdicts) == [3]
        assert verdicts[3].rule == EXACT_REPEAT and verdicts[3].evidence == (0, 2, 3)

    def test_healthy_the_same_write_after_its_target_changed(self):
        # a.md rewritten between (a revert and a redo), or a new read: the write is made again
        # on purpose
        def write(path, content="same"):
            return ok("write", {"path": path, "content": content}, f"wrote {path}")

        steps = [write("a.md"), write("a.md", "other"), write("a.md"), write("a.md", "x")]
        steps += [write("a.md")]
        assert flagged(feed(steps)) == []
        steps = [write("a.md"), ok("read_file", {"path": "log"}, "1"), write("a.md")]
        steps += [ok("read_file", {"path": "log"}, "2"), write("a.md")]
        assert flagged(feed(steps)) == []

    def test_healthy_a_write_naming_no_target_after_every_edit(self):
        # ``git add -A`` after each edit of a different file: every edit is progress for it
        steps = []
        for i in range(4):
            steps += [
                ok("edit_file", {"path": f"m{i}.py", "new": "x"}, "Edited"),
                ok("bash", {"command": "git add -A"}, ""),
            ]
        assert flagged(feed(steps)) == []

    def test_threshold_is_configurable(self):
        steps = [fail("image_crop", CROP, SLICE)] * 4
        assert flagged(feed(steps, LoopDetector(repeat_threshold=4)))[0] == 3


# --- near_duplicate -----------------------------------------------------------------------
class TestNearDuplicate:
    @staticmethod
    def jittered(boxes):
        return [
            fail(
                "image_crop",
                {"path": "r.jpg", "box": box},
                f"invalid slice: y2 ({box[3]}) must be greater than y1 ({box[1]})",
            )
            for box in boxes
        ]

    def test_jittered_retries_with_the_same_error_are_flagged_with_arg_diffs(self):
        boxes = [[820, 1400, 1180, 1330], [818, 1402, 1181, 1329], [822, 1398, 1178, 1331]]
        verdicts = feed(self.jittered(boxes))
        v = verdicts[2]
        assert flagged(verdicts) == [2]
        assert (v.rule, v.evidence, v.loop_start) == (NEAR_DUPLICATE, (0, 1, 2), 0)
        assert v.details["arg_diffs"]["box[0]"] == [820, 818, 822]
        assert "box[2]" in v.details["arg_diffs"]
        assert "path" not in v.details["arg_diffs"]
        assert "box[0]" in v.explanation

    def test_an_optional_argument_left_out_or_given_an_empty_value_is_the_same_call(self):
        """BFCL (gpt-oss): ``get_user_tickets()``, then with ``status="None"``, then without it
        again, each failing the same way: the same attempt three times."""
        error = "Error during execution: 'created_by'"
        for empty in ("None", None, "", []):
            steps = [fail("get_user_tickets", {}, error),
                     fail("get_user_tickets", {"status": empty}, error),
                     fail("get_user_tickets", {}, error)]
            v = first(feed(steps))
            assert v is not None and (v.rule, v.evidence) == (NEAR_DUPLICATE, (0, 1, 2)), empty
        # a status the agent names is another query, not the same call
        named = [fail("get_user_tickets", {}, error),
                 fail("get_user_tickets", {"status": "Open"}, error),
                 fail("get_user_tickets", {"status": "Closed"}, error)]
        assert flagged(feed(named)) == []

    def test_other_values_of_an_argument_the_error_rejects_by_name_are_the_same_attempt(self):
        """ToolBench: geocode(address=...) failing "unexpected keyword argument 'address'" for
        "Cairo", "Cairo, Egypt", "Giza": no value could fix a wrong argument name. An error
        that quotes the value back ("No such file: a.txt") is about the value: other values
        are other tries."""
        error = "reverse_geocode() got an unexpected keyword argument 'address'"
        steps = [fail("geocode", {"address": a}, error) for a in ("Cairo", "Cairo, Egypt", "Giza")]
        v = first(feed(steps))
        assert v is not None and (v.rule, v.evidence) == (NEAR_DUPLICATE, (0, 1, 2))
        files = [fail("open", {"name": n}, f"No such file: '{n}' (argument 'name')")
                 for n in ("a.txt", "notes.md", "todo")]
        assert flagged(feed(files)) == []

    def test_reworded_strings_count_as_near(self):
        queries = [
            "SELECT * FROM order WHERE id = 42",
            "select * from order where id=42;",
            "SELECT * FROM order WHERE id = 42 LIMIT 1",
        ]
        steps = [fail("run_sql", {"query": q}, 'relation "order" does not exist') for q in queries]
        assert first(feed(steps)).rule == NEAR_DUPLICATE

    def test_reworded_side_effects_count_as_near(self):
        titles = [
            "Refund missing for A-1",
            "Refund missing for A-1 (follow-up)",
            "Refund still missing for A-1",
        ]
        steps = [
            ok("create_ticket", {"customer_id": "C-1", "title": t}, {"id": i}, side_effect=True)
            for i, t in enumerate(titles)
        ]
        v = first(feed(steps))
        assert v.rule == NEAR_DUPLICATE and "title" in v.details["arg_diffs"]

    def test_healthy_same_error_on_different_targets(self):
        steps = [
            fail("read_file", {"path": p}, f"No such file: {p}")
            for p in ("a.py", "src/a.py", "lib/a.py")
        ]
        assert flagged(feed(steps)) == []

    def test_healthy_side_effects_for_different_entities(self):
        steps = [
            ok("label_issue", {"issue_number": n, "label": "bug"}, "ok", side_effect=True)
            for n in (5, 6, 7)
        ]
        assert flagged(feed(steps)) == []

    def test_healthy_big_changes_are_not_near(self):
        boxes = [[820, 1400, 1180, 1330], [10, 20, 300, 200], [400, 900, 600, 950]]
        assert flagged(feed(self.jittered(boxes))) == []

    def test_healthy_success_of_the_tool_resets_the_chain(self):
        boxes = [[820, 1400, 1180, 1330], [818, 1402, 1181, 1329]]
        steps = (
            self.jittered(boxes)
            + [ok("image_crop", {"path": "r.jpg", "box": [1, 2, 3, 4]}, {"w": 2})]
            + self.jittered([[822, 1398, 1178, 1331]])
        )
        assert flagged(feed(steps)) == []


class TestShellTargets:
    """Issue 12, class 5: free-form shell commands have no target key; without one, every
    command used to be 'the same target' for near-duplicates."""

    def test_different_scripts_failing_alike_are_not_near_duplicates(self):
        steps = [
            fail("bash", {"command": f"python scripts/check_{name}.py"}, "exit status 1")
            for name in ("schema", "style", "types")
        ]
        assert flagged(feed(steps)) == []

    def test_nudged_versions_of_one_install_are(self):
        steps = [
            fail(
                "bash",
                {"command": f"pip install pillow=={v}"},
                f"ERROR: No matching distribution found for pillow=={v}",
            )
            for v in ("9.0.0", "9.0.1", "9.0.2")
        ]
        verdicts = feed(steps)
        assert flagged(verdicts) == [2] and verdicts[2].rule == NEAR_DUPLICATE
        assert verdicts[2].details["target"] == "sh:pip install"


class TestVolatileResultsAndParaphrases:
    """Issue 12, class 6."""

    def test_fresh_ids_in_results_do_not_make_the_same_answer_new(self):
        steps = [
            ok(
                "inbox_status",
                {"box": "support"},
                {"unread": 0, "message_id": f"msg_{k}f3a9c2", "note": f"trace {k}c0ffee42 ok"},
            )
            for k in range(3)
        ]
        verdicts = feed(steps)
        assert flagged(verdicts) == [2] and verdicts[2].rule == EXACT_REPEAT
        # a different answer is still new
        steps[2] = ok("inbox_status", {"box": "support"}, {"unread": 1, "message_id": "msg_9"})
        assert flagged(feed(steps)) == []

    def test_stored_digests_keep_their_identity(self):
        assert result_digest("3f9a2c1b7d00e4a1") != result_digest("9c1f00aa3b2d4e5f")

    def test_paraphrased_search_with_the_same_hits_is_a_repeat(self):
        hits = ["https://pillow.readthedocs.io/crop"]
        queries = ["python pillow crop", "Pillow crop Python", "crop python pillow"]
        verdicts = feed([ok("web_search", {"query": q}, hits) for q in queries])
        assert flagged(verdicts) == [2] and verdicts[2].rule == EXACT_REPEAT

    def test_reworded_searches_that_find_new_hits_are_progress(self):
        queries = ["python pillow crop", "pillow crop box order", "PIL crop negative height"]
        steps = [ok("web_search", {"query": q}, [f"https://x/{i}"]) for i, q in enumerate(queries)]
        assert flagged(feed(steps)) == []
        # same words, different hits: the index changed, not a repeat
        same = [ok("web_search", {"query": "pillow crop"}, [f"https://x/{i}"]) for i in range(3)]
        assert flagged(feed(same)) == []


# --- cycle ------------------------------------------------------------------------------------
class TestCycle:
    SEARCH = ok("web_search", {"query": "freeze policy"}, ["https://wiki/freeze"])
    FETCH = ok("fetch", {"url": "https://wiki/freeze"}, "TBD")

    def test_ababa_is_flagged_at_the_third_head(self):
        # Relabelled: ABAB alone used to be flagged when the second round
        # ended; peers (and we) wait for the head of the third round.
        verdicts = feed([self.SEARCH, self.FETCH] * 5)
        v = verdicts[4]
        assert flagged(verdicts)[0] == 4
        assert (v.rule, v.evidence, v.loop_start) == (CYCLE, (0, 1, 2, 3, 4), 0)
        assert v.details["period"] == 2 and v.details["pattern"] == ["web_search", "fetch"]
        assert "web_search → fetch" in v.explanation

    def test_two_rounds_alone_are_healthy(self):
        pwd = ok("bash", {"command": "pwd"}, "/repo")
        read = ok("read_file", {"path": "file2.py"}, "x = 1\n")
        assert flagged(feed([pwd, read, pwd, read])) == []
        assert flagged(feed([self.SEARCH, self.FETCH] * 2)) == []

    def test_a_broken_alternation_starts_over(self):
        a, b = self.SEARCH, self.FETCH
        other = ok("read_file", {"path": "notes.md"}, "freeze until Monday")
        assert flagged(feed([a, b, a, b, other, a, b, a, b])) == []
        # ... and once the new alternation reaches its own third head, it is a cycle again
        verdicts = feed([a, b, a, b, other, a, b, a, b, a])
        assert flagged(verdicts) == [9] and verdicts[9].loop_start == 5

    @pytest.mark.parametrize("period", [3, 4, 5])
    def test_longer_periods(self, period):
        block = [ok(f"tool{k}", {"k": k}, "same") for k in range(period)]
        verdicts = feed(block * 3)
        assert flagged(verdicts)[0] == 2 * period
        assert first(verdicts).details["period"] == period

    def test_period_above_the_maximum_is_not_a_cycle(self):
        block = [ok(f"tool{k}", {"k": k}, "same") for k in range(6)]
        verdicts = feed(block * 2, LoopDetector(repeat_threshold=5))
        assert flagged(verdicts) == []

    def test_flapping_tool_alternating_error_and_result(self):
        steps = [
            fail("deploy_status", {"svc": "a"}, "HTTP 503"),
            ok("deploy_status", {"svc": "a"}, "degraded"),
        ] * 3
        assert first(feed(steps)).rule == CYCLE

    def test_waiting_is_not_part_of_a_cycle(self):
        poll = ok("ci_status", {"run": 1}, {"state": "queued"})
        sleep = ok("sleep", {"seconds": 30}, "slept 30s")
        healthy = [poll, sleep, poll, sleep, ok("ci_status", {"run": 1}, {"state": "running"})]
        assert flagged(feed(healthy)) == []
        # Relabelled: the third identical answer after waiting used to be
        # an exact repeat; polling with back-off is healthy until the poll budget.
        assert flagged(feed([poll, sleep] * 6)) == []
        # without the waits, the third identical answer is still no progress
        verdicts = feed([poll] * 3)
        assert flagged(verdicts) == [2] and verdicts[2].rule == EXACT_REPEAT

    def test_healthy_abab_with_changing_results(self):
        steps = []
        for i in range(10):
            steps += [
                ok("debugger", {"cmd": "step"}, f"line {10 + i}"),
                ok("debugger", {"cmd": "print acc"}, f"{i * 3}"),
            ]
        assert flagged(feed(steps)) == []

    def test_healthy_search_fetch_with_new_queries(self):
        steps = []
        for i in range(6):
            steps += [
                ok("web_search", {"query": f"q{i}"}, [f"u{i}"]),
                ok("fetch", {"url": f"u{i}"}, f"page {i}"),
            ]
        assert flagged(feed(steps)) == []


# --- recurrence -----------------------------------------------------------------------------
class TestRecurrence:
    PIP = {"command": "pip install pillow==9.0.0"}
    NO_DIST = "ERROR: No matching distribution found for pillow==9.0.0"

    def test_same_failure_with_fix_attempts_in_between(self):
        # each "fix attempt" is progress, which used to reset exact repeats
        steps = []
        for i in range(5):
            steps += [
                fail("bash", self.PIP, self.NO_DIST),
                ok("bash", {"command": "apt-get update"}, f"Get:{i} http://deb {i} kB"),
                ok("edit_file", {"path": "requirements.txt", "new": f"pillow>=9.{i}"}, "ok"),
            ]
        verdicts = feed(steps)
        assert flagged(verdicts) == [12]
        v = verdicts[12]
        assert (v.rule, v.evidence, v.loop_start) == (RECURRENCE, (0, 3, 6, 9, 12), 0)
        assert v.details["count"] == 5 and "pillow" in v.explanation

    def test_the_same_edit_while_the_file_keeps_growing(self):
        edit = {"command": "cat >> src/config.py <<'EOF'\nDEBUG = True\nEOF"}
        steps = []
        for i in range(6):
            steps += [
                ok("bash", edit, f"wrote {i + 1} lines"),
                ok("bash", {"command": "wc -l src/config.py"}, f"{40 + i} src/config.py"),
            ]
        verdicts = feed(steps)
        assert flagged(verdicts) == [8] and verdicts[8].rule == RECURRENCE
        # with nothing in between it is an exact repeat at the third
        verdicts = feed([ok("bash", edit, f"wrote {i} lines") for i in range(3)])
        assert flagged(verdicts) == [2] and verdicts[2].rule == EXACT_REPEAT

    def test_healthy_fixing_that_succeeds_before_the_threshold(self):
        steps = []
        for i in range(4):
            steps += [
                fail("bash", self.PIP, self.NO_DIST),
                ok("edit_file", {"path": "requirements.txt", "new": f"pillow>=9.{i}"}, "ok"),
            ]
        steps.append(ok("bash", self.PIP, "Successfully installed pillow-9.0.0"))
        assert flagged(feed(steps)) == []

    def test_healthy_status_checks_and_test_runs_between_edits(self):
        steps = []
        for i in range(10):
            steps += [
                ok("edit_file", {"path": "src/a.py", "old": f"v{i}", "new": f"v{i + 1}"}, "ok"),
                ok("git_status", {}, " M src/a.py"),
                ok("run_tests", {"cmd": "pytest -q"}, {"failed": 10 - i}),
            ]
        assert flagged(feed(steps)) == []

    def test_healthy_same_write_after_each_new_change(self):
        steps = []
        for i in range(8):
            steps += [
                ok("edit_file", {"path": "src/a.py", "old": f"v{i}", "new": f"v{i + 1}"}, "ok"),
                ok("bash", {"command": "python reproduce.py > out.txt"}, ""),
                ok("bash", {"command": "git add -A"}, ""),
                ok("bash", {"command": "cat out.txt"}, f"{8 - i} errors"),
            ]
        assert flagged(feed(steps)) == []

    def test_waiting_before_each_failure_is_left_to_the_poll_budget(self):
        steps = []
        for _ in range(6):
            steps += [
                fail("health_check", {"svc": "billing"}, "HTTP 503: upstream not ready"),
                ok("bash", {"command": "git log -1"}, "abc"),
                ok("sleep", {"seconds": 30}, "slept"),
            ]
        assert RECURRENCE not in {v.rule for v in feed(steps)}


# --- idle_turns ---------------------------------------------------------------------------
class TestIdleTurns:
    def test_three_empty_turns(self):
        verdicts = feed([ok("read_file", {"path": "a"}, "x"), say(""), say(None), say("  ")])
        v = verdicts[3]
        assert (v.rule, v.evidence, v.loop_start, v.tool) == (IDLE_TURNS, (1, 2, 3), 1, None)
        assert v.details == {"turns": 3, "empty": 3, "repeated": 0}

    def test_repeated_announcements(self):
        verdicts = feed(
            [
                say("I'll run the tests now."),
                say("I'll run the tests now!"),
                say("I'll run the tests now (attempt 3)."),
            ]
        )
        assert flagged(verdicts) == [2] and verdicts[2].rule == IDLE_TURNS

    def test_think_tool_counts_as_a_turn(self):
        verdicts = feed([ok("think", {"thought": "crop first"}, "ok")] * 3)
        assert verdicts[2].rule == IDLE_TURNS

    def test_healthy_distinct_turns(self):
        texts = ["Here is what I found.", "The crop swaps y.", "Shall I fix it?", "Done."]
        assert flagged(feed([say(t) for t in texts])) == []

    def test_healthy_empty_turns_between_tool_calls(self):
        steps = []
        for i in range(6):
            steps += [say(""), ok("read_file", {"path": f"f{i}"}, f"x{i}")]
        assert flagged(feed(steps)) == []

    def test_a_read_that_learns_nothing_new_does_not_end_the_run(self):
        # the same read, same answer, between repeated turns: nothing new was learned
        read = ok("read_file", {"path": "a"}, "x")
        steps = [read, say("I'll retry."), read, say("I'll retry."), say("I'll retry.")]
        verdicts = feed(steps)
        assert flagged(verdicts) == [4] and verdicts[4].rule == IDLE_TURNS

    def test_a_read_with_a_new_answer_ends_the_run(self):
        steps = [
            ok("read_file", {"path": "a"}, "x"),
            say("I'll retry."),
            ok("read_file", {"path": "a"}, "y"),
            say("I'll retry."),
            say("I'll retry."),
        ]
        assert flagged(feed(steps)) == []


class TestToollessTurns:
    """Issue 12, class 9: turns that call no tool, three in a row, in a tool-using run."""

    def test_three_different_answers_without_a_tool_in_a_tool_using_run(self):
        steps = [
            ok("read_file", {"path": "src/crop.py"}, "def crop(img, box): ..."),
            say("The crop function takes a box."),
            say("I think the box order is wrong, it should be x1, y1, x2, y2."),
            say("Let me explain the fix in detail before making it."),
        ]
        verdicts = feed(steps)
        v = verdicts[3]
        assert flagged(verdicts) == [3] and v.rule == IDLE_TURNS
        assert (v.evidence, v.loop_start) == ((1, 2, 3), 1)

    def test_healthy_talk_before_any_tool_and_answers_between_calls(self):
        chat = [say("Hello!"), say("I can help with refunds."), say("Which order is it?")]
        assert flagged(feed(chat)) == []
        work = []
        for i in range(4):
            work += [
                ok("read_file", {"path": f"f{i}.py"}, f"x{i}"),
                say(f"f{i} looks fine."),
                say(f"Next I will read f{i + 1}.py."),
            ]
        assert flagged(feed(work)) == []


class TestRepeatedContent:
    """Issue 12, class 9: one long streamed message repeating the same chunk (chanting)."""

    def test_a_message_chanting_the_same_sentence(self):
        text = "Let me check the file again to be sure. " * 14
        verdicts = feed([ok("read_file", {"path": "a.py"}, "x"), say("Reading it now. " + text)])
        v = verdicts[1]
        assert v.rule == REPEATED_CONTENT and (v.evidence, v.loop_start) == ((1,), 1)
        assert v.details["repeats"] >= 10

    def test_healthy_long_messages_code_and_tables(self):
        prose = " ".join(f"Step {i}: edit module {i} and run its {i * 3} tests." for i in range(60))
        code = "```python\n" + "    assert crop(img, box) is not None\n" * 30 + "```"
        table = "\n".join("| row | value | same cell text here |" for _ in range(30))
        for text in (prose, "Here is the fix:\n" + code, "Results:\n" + table):
            assert flagged(feed([say(text)])) == []


# --- context_overflow ---------------------------------------------------------------------
class TestContextOverflow:
    @staticmethod
    def condense(i):
        return ok("condense", {}, {"summary": f"summary {i}"})

    def test_condensations_without_new_work(self):
        reads = [ok("read_file", {"path": f"log{k}"}, f"L{k}") for k in range(3)]
        steps = reads + [
            self.condense(0),
            reads[1],
            reads[0],
            self.condense(1),
            reads[2],
            reads[1],
            self.condense(2),
        ]
        verdicts = feed(steps)
        v = first(verdicts)
        assert flagged(verdicts)[0] == 9
        assert (v.rule, v.loop_start) == (CONTEXT_OVERFLOW, 3)
        assert v.evidence == (3, 6, 9)

    def test_overflowing_model_calls_start_at_the_call_that_overflowed(self):
        steps = []
        for i in range(3):
            steps += [
                ok("get_logs", {"lines": 5000 + i}, f"dump {i}"),
                Step(tool=None, ok=False, error="prompt is too long: 210000 tokens"),
                ok("summarize_context", {}, {"summary": f"s{i}"}),
            ]
        v = first(feed(steps))
        assert v.rule == CONTEXT_OVERFLOW and v.loop_start == 0

    def test_ten_condensations_in_a_row(self):
        # back to back they used to make one episode, never flagged
        verdicts = feed([ok("list_dir", {"path": "."}, ["a"])] + [self.condense(0)] * 12)
        v = first(verdicts)
        assert flagged(verdicts)[0] == 10 and v.rule == CONTEXT_OVERFLOW
        assert (v.loop_start, v.details) == (1, {"run": 10})
        assert flagged(feed([self.condense(0)] * 9)) == []

    def test_healthy_condensations_each_after_one_new_step(self):
        # a planned condensation after real work is memory management
        steps = []
        for i in range(6):
            steps += [ok("read_file", {"path": f"src/m{i}.py"}, f"code {i}"), self.condense(i)]
        assert flagged(feed(steps)) == []

    def test_healthy_condensations_with_work_in_between(self):
        steps = []
        for i in range(4):
            steps += [ok("edit_file", {"path": f"f{i}_{k}"}, "ok") for k in range(5)]
            steps.append(self.condense(i))
        assert flagged(feed(steps)) == []


# --- circuit_breaker ----------------------------------------------------------------------
class TestCircuitBreaker:
    def test_five_consecutive_failures_with_different_arguments(self):
        errors = ["HTTP 503", "timeout after 30s", "HTTP 503", "HTTP 502", "HTTP 503"]
        steps = [
            fail("fetch", {"url": f"https://site{i}.example"}, e) for i, e in enumerate(errors)
        ]
        verdicts = feed(steps)
        v = verdicts[4]
        assert flagged(verdicts) == [4]
        assert (v.rule, v.evidence, v.loop_start) == (CIRCUIT_BREAKER, (0, 1, 2, 3, 4), 0)
        assert len(v.details["errors"]) == 3

    def test_per_tool_threshold(self):
        steps = [fail("fetch", {"url": f"u{i}"}, "HTTP 503") for i in range(3)]
        detector = LoopDetector(tool_breaker_failures={"fetch": 3})
        assert first(feed(steps, detector)).rule == CIRCUIT_BREAKER

    def test_healthy_four_failures_then_success(self):
        steps = [fail("fetch", {"url": f"u{i}"}, "timeout") for i in range(4)]
        steps += [ok("fetch", {"url": "u9"}, "page")]
        steps += [fail("fetch", {"url": f"w{i}"}, "timeout") for i in range(4)]
        assert flagged(feed(steps)) == []

    def test_healthy_failures_interleaved_with_progress(self):
        steps = []
        for i in range(8):
            steps += [
                ok("edit_file", {"path": "a.py", "new": f"v{i}"}, "Edited"),
                fail("run_tests", {"cmd": "pytest"}, f"{8 - i} failed"),
            ]
        assert flagged(feed(steps)) == []

    def test_healthy_searches_that_find_nothing_are_answers_not_failures(self):
        # grep's exit status 1 with nothing printed means "no match": a search for five
        # different words, none there, is exploring (no dead tool, no nudged failure)
        words = ["Foobar", "Fig.", "Figur", "Listing", "Viser"]
        steps = [fail("grep", {"command": f'grep "{w}" out/index.html'}, "exit 1\n") for w in words]
        steps += [
            fail("bash", {"command": f"cd /repo && git grep -n {w}"}, "Exit code 1") for w in words
        ]
        assert flagged(feed(steps)) == []

    def test_the_same_search_finding_nothing_three_times_is_still_a_repeat(self):
        steps = [fail("grep", {"command": "grep -rn Foobar src"}, "exit 1")] * 3
        verdicts = feed(steps)
        assert flagged(verdicts) == [2] and verdicts[2].rule == EXACT_REPEAT

    def test_an_exit_status_1_that_says_more_is_a_failure(self):
        # grep printed an error, or the program is not a search: failures as before
        steps = [
            fail("grep", {"command": f"grep x f{i}"}, "exit 1\ngrep: f: No such file")
            for i in range(5)
        ]
        assert first(feed(steps)).rule in (CIRCUIT_BREAKER, NEAR_DUPLICATE)
        steps = [fail("python", {"command": f"python t{i}.py"}, "exit 1") for i in range(5)]
        assert first(feed(steps)).rule == CIRCUIT_BREAKER


# --- poll_budget --------------------------------------------------------------------------
class TestPollBudget:
    @staticmethod
    def polls(n, sleep=True):
        steps = []
        for i in range(n):
            steps.append(ok("tail_log", {"id": "d-1"}, f"retrying (attempt {i})"))
            if sleep:
                steps.append(ok("sleep", {"seconds": 30}, "slept 30s"))
        return steps

    def test_changing_results_past_the_budget(self):
        detector = LoopDetector(poll_budget=10)
        verdicts = feed(self.polls(12), detector)
        v = first(verdicts)
        assert flagged(verdicts)[0] == 20  # the 11th tail_log; the first sleep does not reset
        assert (v.rule, v.tool, v.loop_start) == (POLL_BUDGET, "tail_log", 0)
        assert v.details == {"polls": 11, "budget": 10}

    def test_unchanged_polls_with_back_off_are_healthy_until_the_budget(self):
        #
        steps = []
        for k in range(12):
            steps += [
                ok("ci_status", {"run": 7}, {"state": "running"}),
                ok("sleep", {"seconds": 30 * 2**k}, f"slept {30 * 2**k}s"),
            ]
        assert flagged(feed(steps[:16])) == []
        verdicts = feed(steps, LoopDetector(poll_budget=10))
        assert flagged(verdicts)[0] == 20 and first(verdicts).rule == POLL_BUDGET
        # a poll with its own back-off in the shell command is waiting too
        shell = [ok("bash", {"command": "sleep 30 && kubectl get pods"}, "web-1 Pending")] * 6
        assert flagged(feed(shell)) == []

    def test_per_tool_budget(self):
        detector = LoopDetector(poll_budget=10, tool_poll_budgets={"tail_log": 30})
        assert flagged(feed(self.polls(25), detector)) == []

    def test_healthy_polling_with_progress_under_budget(self):
        assert flagged(feed(self.polls(40))) == []

    def test_healthy_test_runs_between_new_edits_do_not_count(self):
        detector = LoopDetector(poll_budget=5)
        steps = []
        for i in range(20):
            steps += [
                ok("edit_file", {"path": "a.py", "new": f"v{i}"}, "ok"),
                ok("run_tests", {}, {"failed": 20 - i}),
            ]
        assert flagged(feed(steps, detector)) == []

    def test_loop_start_never_reaches_past_the_horizon(self):
        detector = LoopDetector(poll_budget=40)
        verdicts = feed(self.polls(42), detector)
        index = flagged(verdicts)[0]
        v = verdicts[index]
        assert v.loop_start >= index - detector.horizon + 1
        assert min(v.evidence) >= index - detector.horizon + 1


# --- step_budget --------------------------------------------------------------------------
class TestStepBudget:
    def test_budget_flags_once_with_remedy_stop(self):
        steps = [ok("read_file", {"path": f"f{i}"}, f"x{i}") for i in range(15)]
        verdicts = feed(steps, LoopDetector(max_steps=10))
        assert flagged(verdicts) == [9]
        v = verdicts[9]
        assert (v.rule, v.remedy, v.loop_start) == (STEP_BUDGET, "stop", None)

    def test_no_budget(self):
        steps = [ok("read_file", {"path": f"f{i}"}, f"x{i}") for i in range(600)]
        assert flagged(feed(steps, LoopDetector(max_steps=None))) == []
        assert flagged(feed(steps))[0] == 499


# --- configuration, exemptions, off switch ------------------------------------------------
class TestConfiguration:
    LOOP = [fail("image_crop", CROP, SLICE)] * 6

    def test_off_switch(self):
        assert flagged(feed(self.LOOP, LoopDetector(enabled=False))) == []

    def test_disabled_rule(self):
        off = {EXACT_REPEAT, CIRCUIT_BREAKER, NEAR_DUPLICATE, RECURRENCE}
        assert flagged(feed(self.LOOP, LoopDetector(disabled_rules=off))) == []
        assert first(feed(self.LOOP, LoopDetector(disabled_rules=off - {RECURRENCE}))).rule == (
            RECURRENCE
        )

    def test_exempt_tool_is_transparent(self):
        steps = [fail("sleep", {"s": 1}, "interrupted")] * 6
        assert flagged(feed(steps, LoopDetector(exempt_tools={"sleep"}))) == []
        # an exempt tool between repeats neither hides nor makes them
        mixed = []
        for _ in range(3):
            mixed += [fail("image_crop", CROP, SLICE), ok("sleep", {"s": 1}, "slept")]
        verdicts = feed(mixed, LoopDetector(exempt_tools={"sleep"}))
        assert flagged(verdicts)[0] == 4 and first(verdicts).evidence == (0, 2, 4)

    def test_per_tool_rule_exemption(self):
        detector = LoopDetector(tool_exemptions={"wait_ci": {EXACT_REPEAT, CYCLE}})
        steps = [ok("wait_ci", {"run": 1}, "running")] * 6
        assert flagged(feed(steps, detector)) == []
        assert flagged(feed([ok("other", {}, "same")] * 3, detector)) == [2]

    def test_config_object_and_overrides(self):
        config = DetectorConfig(repeat_threshold=4)
        detector = LoopDetector(config, window=100)
        assert detector.repeat_threshold == 4 and detector.horizon == 100
        assert LoopDetector().horizon == DetectorConfig().window

    @pytest.mark.parametrize(
        "bad",
        [
            {"repeat_threshold": 1},
            {"window": 5},
            {"cycle_max_period": 1},
            {"disabled_rules": {"no_such_rule"}},
            {"tool_exemptions": {"x": {"nope"}}},
            {"max_steps": 0},
            {"overflow_pattern": "("},
        ],
    )
    def test_invalid_config_is_refused(self, bad):
        with pytest.raises(ValueError):
            LoopDetector(**bad)

    def test_unknown_keyword_is_refused(self):
        with pytest.raises(TypeError):
            LoopDetector(repeat_treshold=3)

    def test_a_string_is_not_a_set_of_tools(self):
        with pytest.raises(TypeError):
            LoopDetector(exempt_tools="sleep")


# --- the rule registry ------------------------------------------------------------------
class TestRegistry:
    def test_rules_run_in_registry_order_and_read_only_config_fields(self):
        assert RULES == tuple(rule.id for rule in REGISTRY)
        fields = {f.name for f in dataclasses.fields(DetectorConfig)}
        for rule in REGISTRY:
            assert rule.kinds and set(rule.settings) <= fields, rule.id

    def test_every_config_field_is_read_by_a_rule_or_the_detector(self):
        detector_fields = {
            "enabled",
            "window",
            "overflow_pattern",
            "condensation_tools",
            "thought_tools",
            "user_tools",
            "wait_tools",
            "exempt_tools",
            "tool_exemptions",
            "disabled_rules",
            "volatile_keys",
            "progress_keys",
            "thought_keys",
            "code_keys",
            "query_keys",
        }
        read = detector_fields | {name for rule in REGISTRY for name in rule.settings}
        assert read == {f.name for f in dataclasses.fields(DetectorConfig)}

    def test_a_new_rule_is_one_class(self):
        class SameTurnTwice(Rule):
            id = "same_turn_twice"
            kinds = frozenset({TURN})

            def reset(self) -> None:
                self.previous: str | None = None

            def check(self, obs: Observation, window: Window) -> Finding | None:
                text, previous = obs.step.text, self.previous
                self.previous = text
                if text is None or text != previous:
                    return None
                return Finding(
                    "turn",
                    None,
                    [obs.index - 1, obs.index],
                    obs.index - 1,
                    "The agent said the same thing twice.",
                    "Say something new.",
                )

        detector = LoopDetector(rules=(*REGISTRY, SameTurnTwice))
        verdicts = feed([say("a"), say("b"), say("b")], detector)
        assert flagged(verdicts) == [2]
        assert (verdicts[2].rule, verdicts[2].evidence) == ("same_turn_twice", (1, 2))


# --- after a verdict, reset, memory ------------------------------------------------------
class TestLifecycle:
    def test_same_loop_is_not_reflagged_on_every_step(self):
        verdicts = feed([fail("image_crop", CROP, SLICE)] * 12)
        assert flagged(verdicts) == [2, 5, 8, 11]
        again = verdicts[5]
        assert again.signature == verdicts[2].signature
        assert (again.flag_count, again.loop_start) == (2, 0)
        assert again.evidence == (3, 4, 5)
        assert verdicts[11].flag_count == 4

    def test_a_different_loop_gets_its_own_signature(self):
        steps = [fail("image_crop", CROP, SLICE)] * 3 + [ok("read_file", {"p": 1}, "x")] * 3
        verdicts = feed(steps)
        assert flagged(verdicts) == [2, 5]
        assert verdicts[5].signature != verdicts[2].signature and verdicts[5].flag_count == 1

    def test_reset_forgets_everything(self):
        detector = LoopDetector()
        feed([fail("image_crop", CROP, SLICE)] * 2, detector)
        detector.reset()
        assert detector.steps_observed == 0
        verdicts = feed([fail("image_crop", CROP, SLICE)] * 2, detector)
        assert flagged(verdicts) == []
        assert detector.observe(fail("image_crop", CROP, SLICE)).evidence == (0, 1, 2)

    def test_every_verdict_is_plain_json_and_explains_itself(self):
        steps = (
            [fail("image_crop", CROP, SLICE)] * 3
            + [say("")] * 3
            + [fail("fetch", {"url": f"u{i}"}, "HTTP 503") for i in range(5)]
        )
        for v in feed(steps, LoopDetector(max_steps=11)):
            if v.looping:
                assert v.rule in RULES and v.explanation and v.advice
                assert json.loads(canonical_json(v.details)) == json.loads(json.dumps(v.details))
                if v.loop_start is not None:
                    assert v.loop_start <= min(v.evidence)

    def test_memory_is_bounded_by_the_window(self):
        def stream(n, offset=0):
            for i in range(offset, offset + n):
                yield ok("read_file", {"path": f"f{i}.py"}, f"content {i}")
                yield fail("fetch", {"url": f"u{i}"}, f"HTTP 503 for u{i}")
                yield say(f"note {i}")

        tracemalloc.start()
        try:
            detector = LoopDetector(max_steps=None)
            for s in stream(2_000):
                detector.observe(s)
            small = tracemalloc.get_traced_memory()[0]
            # five times as many steps again: unbounded state would grow about sixfold
            for s in stream(10_000, 2_000):
                detector.observe(s)
            large = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert large < small * 1.5


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=120, unique=True))
def test_a_stream_of_never_repeated_calls_is_healthy(names):
    detector = LoopDetector()
    for name in names:
        assert not detector.observe(ok("read_file", {"path": name}, f"content of {name}")).looping


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=12)), JSON_VALUES)
@example("search", {"q": "half an emoji \ud83d"})
@example("search", ["\udfff"])
@example("calc", {"x": float("nan")})
@example("calc", {"x": [float("inf")]})
def test_the_detectors_fast_fingerprint_is_the_canonical_one(tool, args):
    """The detector skips re-canonicalizing normalized arguments; the digest must not change, and
    what `fingerprint` refuses (NaN, infinity, lone surrogates) is refused with the same error."""
    try:
        expected = fingerprint(tool, args)
    except (TypeError, ValueError) as exc:
        with pytest.raises(type(exc), match="no JSON form|lone surrogate"):
            fingerprint_normalized(tool, args)
    else:
        assert fingerprint_normalized(tool, args) == expected
