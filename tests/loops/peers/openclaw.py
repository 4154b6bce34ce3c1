"""OpenClaw: openclaw/openclaw src/agents/tool-loop-detection.test.ts.

OpenClaw checks a call against the history before running it: a warning once the same arguments
were seen WARNING_THRESHOLD (10) times, a block at 20, a global no-progress breaker at 30, a
ping-pong warning at 10 alternating calls, unknown-tool failures at 10. So `flag_at` is the index
of the first call that draws the warning (10 repeats of the same arguments, 10 alternating
calls); where a test asserts only its final check (the global breaker), the index of that final
call; None where the test asserts no block. A recorded call with its outcome is one Step. Left
out: hashing internals, history trimming, run scoping and the off switch.
"""

from __future__ import annotations

from .model import call, case, fail

REF = "openclaw/openclaw src/agents/tool-loop-detection.test.ts :: "
COUNT = (
    "we flag the 3rd identical call with an identical outcome (house rule); OpenClaw warns at the "
    "10th repeat (a configurable threshold)"
)
CYCLE = (
    "we flag an alternation with identical outcomes at its third head (ABABA); OpenClaw at 10 calls"
)
WARN = 10


def text(t: str, **details) -> dict:
    return {"content": [{"type": "text", "text": t}], "details": details}


SAME = text("same output", ok=True)
POLL_PARAMS = {"action": "poll", "sessionId": "sess-1"}
POLL = text("(no new output)\n\nProcess still running.", status="running", aggregated="steady")


def send(i: int) -> dict:
    payload = {
        "ok": True,
        "channel": "feishu",
        "chatId": "oc_chat",
        "runId": f"run_{i}",
        "messageId": f"om_{i}",
        "receipt": {"platformMessageId": f"p_{i}"},
    }
    return {"content": [{"type": "text", "text": str(payload)}], "details": payload}


SEND = {"action": "send", "target": "feishu:oc_chat", "text": "ping"}
UNKNOWN = "Tool exec not found"
UNKNOWN_ARGS = [
    {"command": "ls"}, {"command": "pwd"}, {"input": "whoami"}, {"cmd": "env"},
    {"shell": "bash -lc ls"}, {"command": "printf ok"}, {"cwd": "/tmp", "command": "ls"},
    {"args": ["ls", "/tmp"]}, {"command": "find . -maxdepth 1"}, {"text": "run ls"},
    {"command": "uname -a"}, {"command": "id"}, {"command": "date"}, {"command": "ps"},
    {"command": "df -h"}, {"command": "free -m"}, {"command": "ls /tmp"}, {"command": "ls -la"},
    {"command": "cat /etc/hostname"}, {"command": "echo done"},
]  # fmt: skip

CASES = [
    case(
        "unique_calls",
        REF + "detectToolCallLoop > does not flag unique tool calls",
        [call("read", {"path": f"/file{i}.txt"}) for i in range(15)]
        + [call("read", {"path": "/new-file.txt"})],
        None,
    ),
    case(
        "generic_repeat_warning",
        REF + "detectToolCallLoop > warns on generic repeated tool+args calls",
        [call("read", {"path": "/same.txt"})] * (WARN + 1),
        WARN,
        disagree=COUNT,
        ours=2,
    ),
    case(
        "generic_no_progress_critical",
        REF + "detectToolCallLoop > blocks generic no-progress loops at critical threshold",
        [call("read", {"path": "/same.txt"}, SAME)] * 21,
        WARN,
        disagree=COUNT,
        ours=2,
    ),
    case(
        "known_poll_no_progress",
        REF + "detectToolCallLoop > warns for known polling no-progress loops",
        [call("process", POLL_PARAMS, POLL)] * (WARN + 1),
        WARN,
        disagree=COUNT + "; a poll whose result never changes is no progress",
        ours=2,
    ),
    case(
        "known_poll_progress",
        REF + "detectToolCallLoop > does not block known polling when output progresses",
        [
            call(
                "process", POLL_PARAMS, text(f"line {i}", status="running", aggregated=f"line {i}")
            )
            for i in range(25)
        ]
        + [call("process", POLL_PARAMS, text("line 25", status="running", aggregated="line 25"))],
        None,
    ),
    case(
        "global_breaker",
        REF + "detectToolCallLoop > blocks any tool with global no-progress breaker at 30",
        [call("read", {"path": "/same.txt"}, SAME)] * 31,
        WARN,
        disagree=COUNT,
        ours=2,
    ),
    case(
        "stable_argument_churn",
        REF + "detectToolCallLoop > blocks repeated stable argument churn with the global circuit "
        "breaker",
        [
            call(
                "write", {"path": p, "content": "same content"}, text(f"wrote {p}", ok=True, path=p)
            )
            for p in (["/tmp/a.md", "/tmp/b.md", "/tmp/a.md", "/tmp/a.md", "/tmp/b.md"] * 6)
        ]
        + [
            call(
                "write",
                {"path": "/tmp/c.md", "content": "same content"},
                text("wrote /tmp/c.md", ok=True, path="/tmp/c.md"),
            )
        ],
        30,
        disagree="the same write with the same outcome for the 3rd time (step 3) is a loop for us; "
        "OpenClaw waits for its global breaker",
        ours=3,
    ),
    case(
        "argument_churn_with_probes",
        REF + "detectToolCallLoop > blocks stable argument churn despite bounded singleton probes",
        [
            call(
                "write", {"path": p, "content": "same content"}, text(f"wrote {p}", ok=True, path=p)
            )
            for p in [
                f"/tmp/probe-{i}.md" if i in (8, 19) else f"/tmp/{i % 2}.md" for i in range(30)
            ]
        ]
        + [
            call(
                "write",
                {"path": "/tmp/next-probe.md", "content": "same content"},
                text("wrote /tmp/next-probe.md", ok=True, path="/tmp/next-probe.md"),
            )
        ],
        30,
        disagree=CYCLE,
        ours=4,
    ),
    case(
        "one_shot_batch",
        REF + "detectToolCallLoop > does not block a one-shot batch of distinct arguments",
        [
            call(
                "write",
                {"path": f"/tmp/file-{i}.md", "content": "same content"},
                text("write complete", ok=True),
            )
            for i in range(30)
        ]
        + [
            call(
                "write",
                {"path": "/tmp/next.md", "content": "same content"},
                text("write complete", ok=True),
            )
        ],
        None,
    ),
    case(
        "two_pass_batch",
        REF + "detectToolCallLoop > does not block a legitimate two-pass batch",
        [
            call(
                "write",
                {"path": f"/tmp/batch-{i % 15}.md", "content": "same content"},
                text(f"wrote /tmp/batch-{i % 15}.md", ok=True, path=f"/tmp/batch-{i % 15}.md"),
            )
            for i in range(30)
        ]
        + [
            call(
                "write",
                {"path": "/tmp/next.md", "content": "same content"},
                text("wrote /tmp/next.md", ok=True, path="/tmp/next.md"),
            )
        ],
        None,
    ),
    case(
        "churn_with_progress",
        REF + "detectToolCallLoop > does not block argument churn when a repeated variant makes "
        "progress",
        [
            call(
                "write",
                {"path": p, "content": "same content"},
                text(f"write {p} revision {i}", ok=True, revision=i),
            )
            for i, p in enumerate(["/tmp/a.md" if i % 2 == 0 else "/tmp/b.md" for i in range(30)])
        ]
        + [
            call(
                "write",
                {"path": "/tmp/c.md", "content": "same content"},
                text("write /tmp/c.md revision 30", ok=True, revision=30),
            )
        ],
        None,
    ),
    case(
        "exec_volatile_details",
        REF + "detectToolCallLoop > blocks repeated completed exec calls despite volatile runtime "
        "details",
        [
            call(
                "exec",
                {"command": "grafana-api.sh datasources"},
                text(
                    "Loki\nPrometheus",
                    status="completed",
                    exitCode=0,
                    durationMs=100 + i,
                    cwd=f"/tmp/run-{i}",
                    aggregated="Loki\nPrometheus",
                ),
            )
            for i in range(21)
        ],
        WARN,
        disagree=COUNT + "; duration and scratch directory are volatile",
        ours=2,
    ),
    case(
        "exec_running_volatile_text",
        REF + "detectToolCallLoop > blocks repeated running exec calls despite volatile session "
        "details and text",
        [
            call(
                "exec",
                {"command": "tail -f /var/log/app.log", "yieldMs": 1000},
                text(
                    f"Command still running (session sess-{i}, pid {1000 + i})",
                    status="running",
                    sessionId=f"sess-{i}",
                    pid=1000 + i,
                    startedAt=1_764_000_000_000 + i,
                    cwd=f"/tmp/run-{i}",
                    tail="(no new output)",
                ),
            )
            for i in range(21)
        ],
        WARN,
        disagree=COUNT + "; session ids, pids and start times are volatile",
        ours=2,
    ),
    case(
        "exec_changing_output",
        REF
        + "detectToolCallLoop > keeps changing exec output below the global no-progress breaker",
        [
            call(
                "exec",
                {"command": "date"},
                text(
                    f"tick {i}",
                    status="completed",
                    exitCode=0,
                    durationMs=100 + i,
                    aggregated=f"tick {i}",
                ),
            )
            for i in range(31)
        ],
        WARN,
        disagree="a command whose output changes every time is polling: healthy until the poll "
        "budget (40); OpenClaw warns on the repeated arguments at 10",
        ours=None,
    ),
    case(
        "exec_failures_with_counter",
        REF + "detectToolCallLoop > keeps changing empty-output exec failures below the global "
        "no-progress breaker",
        [
            fail(
                "exec",
                {"command": "openclaw flaky-helper"},
                f"Runtime failed before spawn: attempt {i}",
            )
            for i in range(31)
        ],
        WARN,
        disagree="the same failure whose text only counts attempts is the same failure; we flag "
        "the "
        "3rd (house rule), OpenClaw warns at 10",
        ours=2,
    ),
    case(
        "unknown_tool_below_threshold",
        REF + "detectToolCallLoop > does not block repeated unknown-tool failures before the "
        "unknown-tool threshold",
        [fail("exec", {"command": f"echo {i}"}, UNKNOWN) for i in range(9)]
        + [fail("exec", {"command": "echo still allowed"}, UNKNOWN)],
        None,
        disagree="the same failure while only a number in the command changes is a nudged retry: "
        "we flag the 3rd (house rule); OpenClaw waits for 10 unknown-tool failures",
        ours=2,
    ),
    case(
        "unknown_tool_changing_args",
        REF + "detectToolCallLoop > blocks repeated unknown-tool failures even when the args keep "
        "changing",
        [fail("exec", a, UNKNOWN) for a in UNKNOWN_ARGS]
        + [fail("exec", {"command": "echo still looping"}, UNKNOWN)],
        WARN,
        disagree="a dead tool: we flag the 5th failure in a row (house rule); OpenClaw at 10",
        ours=4,
    ),
    case(
        "ping_pong_warning",
        REF + "detectToolCallLoop > warns on ping-pong alternating patterns",
        [
            call("read", {"path": "/a.txt"}) if i % 2 == 0 else call("list", {"dir": "/workspace"})
            for i in range(WARN)
        ],
        WARN - 1,
        disagree=CYCLE,
        ours=4,
    ),
    case(
        "ping_pong_stable_critical",
        REF + "detectToolCallLoop > blocks ping-pong alternating patterns at critical threshold",
        [
            call("read", {"path": "/a.txt"}, text("read stable", ok=True))
            if i % 2 == 0
            else call("list", {"dir": "/workspace"}, text("list stable", ok=True))
            for i in range(20)
        ],
        WARN - 1,
        disagree=CYCLE,
        ours=4,
    ),
    case(
        "ping_pong_progressing",
        REF
        + "detectToolCallLoop > does not block ping-pong at critical threshold when outcomes are "
        "progressing",
        [
            call("read", {"path": "/a.txt"}, text(f"read {i}", ok=True))
            if i % 2 == 0
            else call("list", {"dir": "/workspace"}, text(f"list {i}", ok=True))
            for i in range(20)
        ],
        WARN - 1,
        disagree="every result is new: progress, not a loop (OpenClaw still warns on the "
        "alternation "
        "of arguments, and only declines to block)",
        ours=None,
    ),
    case(
        "ping_pong_broken",
        REF + "detectToolCallLoop > does not flag ping-pong when alternation is broken",
        [
            call("read", {"path": "/a.txt"}),
            call("list", {"dir": "/workspace"}),
            call("read", {"path": "/a.txt"}),
            call("write", {"path": "/tmp/out.txt"}),
            call("list", {"dir": "/workspace"}),
        ],
        None,
    ),
    case(
        "send_loop_fresh_ids",
        REF
        + "message send loop detection (#89090) > escalates identical-arg send loops to critical "
        "even though every id differs",
        [call("message", SEND, send(i)) for i in range(21)],
        WARN,
        disagree=COUNT + "; run, message and receipt ids are volatile",
        ours=2,
    ),
    case(
        "sessions_send_fresh_run_id",
        REF + "message send loop detection (#89090) > also blocks sessions_send loops whose result "
        "carries a fresh runId",
        [
            call(
                "sessions_send",
                {"sessionKey": "agent:main:peer", "text": "ping"},
                text(str({"ok": True, "runId": f"run_{i}"}), ok=True, runId=f"run_{i}"),
            )
            for i in range(21)
        ],
        WARN,
        disagree=COUNT + "; the run id is volatile",
        ours=2,
    ),
    case(
        "distinct_messages",
        REF + "message send loop detection (#89090) > does not flag distinct messages (different "
        "args) as a no-progress loop",
        [
            call(
                "message",
                {"action": "send", "target": "feishu:oc_chat", "text": f"line {i}"},
                send(i),
            )
            for i in range(20)
        ]
        + [
            call(
                "message",
                {"action": "send", "target": "feishu:oc_chat", "text": "line final"},
                send(20),
            )
        ],
        None,
    ),
    case(
        "plugin_vetoes",
        REF
        + "message send loop detection (#89090) > still escalates repeated plugin/approval vetoes "
        "to a critical loop",
        [
            call(
                "message",
                {"action": "read", "target": "feishu:oc_chat"},
                text("blocked", status="blocked", deniedReason="plugin-before-tool-call"),
            )
            for _ in range(21)
        ],
        WARN,
        disagree=COUNT,
        ours=2,
    ),
    case(
        "conversation_changes",
        REF
        + "message send loop detection (#89090) > does not escalate when a stable conversation id "
        "changes between sends",
        [
            call(
                "message",
                {"action": "send", "to": "feishu:chat-1", "content": "hello"},
                {
                    "message": {
                        "id": f"qa_{i}",
                        "direction": "outbound",
                        "conversation": {"id": f"loop-room-{i}", "chatType": "channel"},
                        "text": "hello",
                    }
                },
            )
            for i in range(21)
        ],
        None,
    ),
]
