"""Mechanisms added while tuning the detector on the peer suites: each test holds one
class of behaviour, independent of the peer case that revealed it."""

from __future__ import annotations

from engine.loops.detector import CIRCUIT_BREAKER, LoopDetector, Step
from engine.loops.normalize import error_signature, normalize_result, result_digest


def first_flag(steps):
    detector = LoopDetector()
    for i, step in enumerate(steps):
        verdict = detector.observe(step)
        if verdict.looping:
            return i, verdict
    return None, None


def fail(tool, args, error):
    return Step(tool=tool, args=args, ok=False, error=error)


def ok(tool, args, result):
    return Step(tool=tool, args=args, ok=True, result=result)


def test_a_python_error_at_another_line_is_another_error():
    a = error_signature('  File "app.py", line 10\n    x = (\n        ^\nSyntaxError: invalid')
    b = error_signature('  File "app.py", line 20\n    x = (\n        ^\nSyntaxError: invalid')
    assert a != b
    # a shell's script line counter is still masked
    assert error_signature("bash: line 11: x: command not found") == error_signature(
        "bash: line 97: x: command not found"
    )


def test_attempt_counters_are_masked_in_errors():
    assert error_signature("failed to spawn: attempt 1") == error_signature(
        "failed to spawn: attempt 7"
    )


def test_the_same_call_failing_back_to_back_with_different_errors():
    errors = ["connection reset", "HTTP 502", "TLS handshake failed"]
    steps = [fail("fetch", {"url": "https://x.example"}, e) for e in errors]
    index, verdict = first_flag(steps)
    assert index == 2 and verdict.rule == CIRCUIT_BREAKER
    assert verdict.details["same_call"] is True


def test_the_same_call_failing_with_a_thought_between_is_left_to_the_breaker():
    steps = []
    for e in ["connection reset", "HTTP 502", "TLS handshake failed"]:
        steps += [fail("fetch", {"url": "https://x.example"}, e), Step(tool=None, text=f"hm {e}")]
    assert first_flag(steps)[0] is None


def test_a_runtime_trimming_the_context_is_a_planned_condensation():
    trim = Step(tool=None, ok=False, error="Trimming prompt to meet context window limitations")
    steps = []
    for i in range(5):
        steps += [ok("read", {"path": f"f{i}"}, f"content {i}"), trim]
    assert first_flag(steps)[0] is None
    index, verdict = first_flag([trim] * 11)
    assert (index, verdict.rule) == (9, "context_overflow")


def test_ids_a_result_labels_are_masked_in_its_text():
    a = {"text": "still running (session sess-1, pid 1001)", "sessionId": "sess-1", "pid": 1001}
    b = {"text": "still running (session sess-2, pid 1002)", "sessionId": "sess-2", "pid": 1002}
    assert result_digest(a) == result_digest(b)
    assert normalize_result({"durationMs": 5, "out": "x"}) == {"out": "x"}


def test_the_conversation_a_message_went_to_is_kept():
    a = {"message": {"id": "m1", "conversation": {"id": "room-1"}}}
    b = {"message": {"id": "m2", "conversation": {"id": "room-2"}}}
    c = {"message": {"id": "m3", "conversation": {"id": "room-1"}}}
    assert result_digest(a) != result_digest(b)
    assert result_digest(a) == result_digest(c)


def test_a_write_acknowledged_with_a_new_revision_is_new():
    steps = [
        ok("write", {"path": "a.md", "content": "x"}, {"ok": True, "revision": i}) for i in range(6)
    ]
    assert first_flag(steps)[0] is None
    same = [ok("write", {"path": "a.md", "content": "x"}, {"ok": True, "revision": 1})] * 3
    assert first_flag(same)[0] == 2


def test_chanting_needs_the_same_text_between_returns():
    listing = "".join(f"- projects/p-1/locations/us-central1/services/svc{i}\n" for i in range(20))
    assert first_flag([Step(tool=None, text=listing)])[0] is None
    chant = "I will now check the file and then report back to you. " * 12
    assert first_flag([Step(tool=None, text=chant)])[1].rule == "repeated_content"
