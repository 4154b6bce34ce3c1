"""Healthy traces, many of them hard negatives: they repeat calls, but make progress."""

from __future__ import annotations

from .model import err, ok, say, trace, ts

HEALTHY_TRACES = [
    # --- transient errors followed by a successful retry ---------------------------------
    trace(
        "transient_503_then_success",
        "one 503, the identical retry succeeds",
        ok("web_search", {"query": "pillow crop box order"}, ["https://pillow.readthedocs.io"]),
        err("fetch", {"url": "https://pillow.readthedocs.io"}, "HTTP 503 Service Unavailable"),
        ok("fetch", {"url": "https://pillow.readthedocs.io"}, "crop(box): box is (left, upper, …)"),
        say("The box is (left, upper, right, lower)."),
        ok("image_crop", {"path": "uploads/r.jpg", "box": [820, 1330, 1180, 1400]}, {"w": 360}),
    ),
    trace(
        "two_rate_limits_then_success",
        "two identical 429s with backoff, then the call goes through",
        err(
            "kb_search",
            {"query": "refund policy", "request_id": "a1"},
            "HTTP 429 Too Many Requests, retry after 2s",
        ),
        ok("sleep", {"seconds": 2}, "slept 2s"),
        err(
            "kb_search",
            {"query": "refund policy", "request_id": "a2"},
            "HTTP 429 Too Many Requests, retry after 4s",
        ),
        ok("sleep", {"seconds": 4}, "slept 4s"),
        ok("kb_search", {"query": "refund policy", "request_id": "a3"}, ["KB-7"]),
        ok("kb_article", {"id": "KB-7"}, "Refunds within 14 days."),
    ),
    trace(
        "network_blip_four_failures_then_recovery",
        "a network blip: four different fetches time out, then everything works again",
        ok(
            "web_search",
            {"query": "eu holiday calendar 2025"},
            [f"https://cal.example/{c}" for c in ("de", "fr", "es", "it", "nl")],
        ),
        [
            err("fetch", {"url": f"https://cal.example/{c}"}, "timeout after 30s")
            for c in ("de", "fr", "es", "it")
        ],
        [
            ok("fetch", {"url": f"https://cal.example/{c}"}, f"holidays in {c}")
            for c in ("nl", "de", "fr")
        ],
    ),
    trace(
        "flaky_upload_each_chunk_retried",
        "a flaky upload: some chunks need a retry or two, every chunk gets stored in the end",
        err("upload_chunk", {"file": "report.pdf", "chunk": 0}, "connection reset by peer"),
        ok("upload_chunk", {"file": "report.pdf", "chunk": 0}, {"stored": 0}),
        ok("upload_chunk", {"file": "report.pdf", "chunk": 1}, {"stored": 1}),
        err("upload_chunk", {"file": "report.pdf", "chunk": 2}, "connection reset by peer"),
        err("upload_chunk", {"file": "report.pdf", "chunk": 2}, "connection reset by peer"),
        ok("upload_chunk", {"file": "report.pdf", "chunk": 2}, {"stored": 2}),
        err("upload_chunk", {"file": "report.pdf", "chunk": 3}, "connection reset by peer"),
        ok("upload_chunk", {"file": "report.pdf", "chunk": 3}, {"stored": 3}),
        ok("finish_upload", {"file": "report.pdf"}, {"url": "https://files.example/report.pdf"}),
    ),
    trace(
        "jittered_retry_succeeds_second_time",
        "a crop fails, the agent fixes the box order and it works",
        ok("load_image", {"path": "uploads/r.jpg"}, {"width": 1200, "height": 1600}),
        err(
            "image_crop",
            {"path": "uploads/r.jpg", "box": [820, 1400, 1180, 1330]},
            "invalid slice: y2 (1330) must be greater than y1 (1400)",
        ),
        ok(
            "image_crop",
            {"path": "uploads/r.jpg", "box": [820, 1330, 1180, 1400]},
            {"width": 360, "height": 70},
        ),
        ok("ocr", {"path": "uploads/r_crop.jpg"}, "TOTAL 42.10"),
        ok(
            "image_crop",
            {"path": "uploads/r.jpg", "box": [40, 100, 400, 180]},
            {"width": 360, "height": 80},
        ),
        ok("ocr", {"path": "uploads/r_crop.jpg"}, "ACME STORE"),
    ),
    trace(
        "two_different_errors_then_fix",
        "the crop fails twice for different reasons, then succeeds",
        err(
            "image_crop",
            {"path": "uploads/r.jpg", "box": [820, 1400, 1180, 1330]},
            "invalid slice: y2 (1330) must be greater than y1 (1400)",
        ),
        err(
            "image_crop",
            {"path": "uploads/r.jpg", "box": [820, 1330, 1280, 1400]},
            "invalid slice: x2 (1280) exceeds image width (1200)",
        ),
        ok(
            "image_crop",
            {"path": "uploads/r.jpg", "box": [820, 1330, 1180, 1400]},
            {"width": 360, "height": 70},
        ),
    ),
    # --- git status between edits ------------------------------------------------------------
    trace(
        "git_status_between_edits",
        "edit, git status, edit, git status …: the status text does not change, the edits do",
        ok("read_file", {"path": "src/crop.py"}, "def crop(img, box): ..."),
        [
            [
                ok(
                    "edit_file",
                    {"path": "src/crop.py", "old": f"line {i}", "new": f"line {i} fixed"},
                    "Edited src/crop.py",
                ),
                ok("git_status", {}, " M src/crop.py"),
            ]
            for i in range(6)
        ],
        ok("git_commit", {"message": "Normalize crop boxes"}, "[main 1a2b3c4] 1 file changed"),
        ok("git_status", {}, "nothing to commit, working tree clean"),
    ),
    trace(
        "git_status_and_diff_between_edits",
        "git status and git diff after every edit; the diff grows",
        [
            [
                ok(
                    "edit_file",
                    {"path": f"src/{name}.py", "old": "TODO", "new": "done"},
                    f"Edited src/{name}.py",
                ),
                ok("git_status", {"porcelain": True}, " M src/a.py\n M src/b.py"),
                ok("git_diff", {}, f"diff for {i + 1} files"),
            ]
            for i, name in enumerate(["a", "b", "a", "b"])
        ],
    ),
    # --- re-running tests while the failure count drops ----------------------------------------
    trace(
        "tests_rerun_failures_drop",
        "run tests, fix one thing, run tests again; failures 5 → 3 → 1 → 0",
        [
            [
                ok(
                    "run_tests",
                    {"cmd": "pytest -q"},
                    {"failed": failed, "passed": 40 - failed, "duration": f"{3 + i}.2s"},
                ),
                ok(
                    "edit_file",
                    {"path": "src/crop.py", "old": f"bug {i}", "new": f"fix {i}"},
                    "Edited src/crop.py",
                ),
            ]
            for i, failed in enumerate([5, 3, 1])
        ],
        ok("run_tests", {"cmd": "pytest -q"}, {"failed": 0, "passed": 40}),
    ),
    trace(
        "tests_fail_as_errors_while_count_drops",
        "the runner reports failures as tool errors; each run has fewer failures",
        [
            [
                err(
                    "run_tests",
                    {"cmd": "pytest tests -q"},
                    f"{failed} failed, {30 - failed} passed in 2.{i}1s",
                ),
                ok(
                    "edit_file",
                    {"path": "src/app.py", "old": f"x{i}", "new": f"y{i}"},
                    "Edited src/app.py",
                ),
            ]
            for i, failed in enumerate([6, 4, 4, 2, 1])
        ],
        ok("run_tests", {"cmd": "pytest tests -q"}, "30 passed in 2.02s"),
    ),
    trace(
        "same_failing_test_while_editing",
        "the same test keeps failing while the agent tries different fixes between runs",
        [
            [
                ok(
                    "edit_file",
                    {"path": "src/crop.py", "old": f"attempt {i}", "new": f"attempt {i + 1}"},
                    "Edited src/crop.py",
                ),
                err(
                    "run_tests",
                    {"cmd": "pytest tests/test_crop.py -q"},
                    "FAILED tests/test_crop.py::test_bounds - AssertionError\n1 failed in 0.5s",
                ),
            ]
            for i in range(4)
        ],
        ok(
            "edit_file",
            {"path": "src/crop.py", "old": "attempt 4", "new": "the real fix"},
            "Edited src/crop.py",
        ),
        ok("run_tests", {"cmd": "pytest tests/test_crop.py -q"}, "13 passed in 0.5s"),
    ),
    # --- pagination ---------------------------------------------------------------------------
    trace(
        "pagination_by_page_number",
        "fifteen pages of orders",
        [
            ok(
                "list_orders",
                {"page": p, "per_page": 50},
                {"items": [f"A-{p * 50 + k}" for k in range(3)], "page": p, "fetched_at": ts(p)},
            )
            for p in range(1, 16)
        ],
        say("All orders fetched."),
    ),
    trace(
        "pagination_by_cursor",
        "cursor pagination: the next call always passes the cursor the previous page returned",
        [
            ok(
                "list_tickets",
                {"cursor": f"c{p}"} if p else {},
                {"items": [f"T-{p}{k}" for k in range(2)], "next": f"c{p + 1}"},
            )
            for p in range(12)
        ],
    ),
    trace(
        "pagination_with_argless_next",
        "a 'next_page' tool without arguments, each call returning new rows",
        ok("open_report", {"name": "refunds-q3"}, {"rows": 1200}),
        [ok("next_page", {}, {"rows": [f"R{p * 100 + k}" for k in range(3)]}) for p in range(14)],
        ok("close_report", {}, "closed"),
    ),
    # --- polling with progress -------------------------------------------------------------
    trace(
        "poll_with_moving_percentage",
        "a build polled every 30 s: 0 % … 100 %",
        ok("start_build", {"target": "release"}, {"build_id": "b-9"}),
        [
            [
                ok(
                    "build_status",
                    {"build_id": "b-9"},
                    {"state": "running", "progress": pct, "updated_at": ts(pct)},
                ),
                ok("sleep", {"seconds": 30}, "slept 30s"),
            ]
            for pct in range(0, 100, 9)
        ],
        ok("build_status", {"build_id": "b-9"}, {"state": "succeeded", "progress": 100}),
    ),
    trace(
        "poll_twice_unchanged_then_progress",
        "two identical 'queued' answers, then the job starts and finishes",
        ok("submit_job", {"name": "export"}, {"job_id": "j-1"}),
        ok("job_status", {"job_id": "j-1"}, {"state": "queued"}),
        ok("job_status", {"job_id": "j-1"}, {"state": "queued"}),
        ok("job_status", {"job_id": "j-1"}, {"state": "running", "progress": 30}),
        ok("job_status", {"job_id": "j-1"}, {"state": "running", "progress": 80}),
        ok("job_status", {"job_id": "j-1"}, {"state": "done", "progress": 100}),
        ok("download", {"job_id": "j-1"}, {"bytes": 20480}),
    ),
    trace(
        "poll_with_sleep_unchanged_twice",
        "CI says 'queued' twice, a sleep after each, then it runs and passes",
        ok("trigger_ci", {"branch": "hotfix/crop"}, {"run": 119}),
        [
            [
                ok("ci_status", {"run": 119}, {"state": state}),
                ok("sleep", {"seconds": 30}, "slept 30s"),
            ]
            for state in ("queued", "queued", "running", "running: 3/8 jobs", "running: 7/8 jobs")
        ],
        ok("ci_status", {"run": 119}, {"state": "passed"}),
    ),
    trace(
        "deploy_log_tail_with_progress",
        "tailing a deploy log: every tail shows new lines until the rollout completes",
        ok("deploy", {"service": "checkout", "version": "v7.3"}, {"deploy_id": "d-7"}),
        [
            ok(
                "tail_log",
                {"deploy_id": "d-7", "lines": 5},
                f"{ts(i)} rollout: {i + 1}/20 pods updated",
            )
            for i in range(20)
        ],
        ok("tail_log", {"deploy_id": "d-7", "lines": 5}, "rollout complete"),
        say("The deploy finished."),
    ),
    # --- debugger stepping -----------------------------------------------------------------
    trace(
        "debugger_stepping_with_frames",
        "step through a function; every step lands on a new line or new locals",
        ok("debugger", {"cmd": "break crop.py:12"}, "Breakpoint 1 at crop.py:12"),
        ok("debugger", {"cmd": "run"}, {"line": 12, "locals": {"box": [1, 2, 3, 4]}}),
        [
            ok(
                "debugger",
                {"cmd": "next"},
                {"line": 13 + (i % 3), "locals": {"i": i // 3, "acc": i * (i + 1) // 2}},
            )
            for i in range(18)
        ],
        ok("debugger", {"cmd": "continue"}, "Program exited normally"),
    ),
    trace(
        "debugger_pdb_stepping_through_a_loop_body",
        "pdb 'next' through a two-line for loop: the output alternates between the same lines",
        ok("debugger", {"cmd": "break cart.py:40"}, "Breakpoint 1 at cart.py:40"),
        ok("debugger", {"cmd": "run"}, "> cart.py(40)total()\n-> for item in items:"),
        [
            [
                ok("debugger", {"cmd": "next"}, "> cart.py(41)total()\n-> acc += item.price"),
                ok("debugger", {"cmd": "next"}, "> cart.py(40)total()\n-> for item in items:"),
            ]
            for _ in range(4)
        ],
        ok("debugger", {"cmd": "next"}, "> cart.py(42)total()\n-> return acc"),
        ok("debugger", {"cmd": "print acc"}, "$1 = 61.5"),
        limitation=(
            "the tool's output hides the program state, so stepping through a loop body looks "
            "exactly like going in circles; return the frame's locals from the debugger tool or "
            "exempt it with tool_exemptions={'debugger': {'cycle', 'exact_repeat'}}"
        ),
    ),
    trace(
        "debugger_step_and_print",
        "step, print a variable, step, print it again: values move every time",
        ok("debugger", {"cmd": "run"}, "Breakpoint 1, total() at cart.py:40"),
        [
            [
                ok("debugger", {"cmd": "step"}, f"cart.py:{41 + (i % 2)}  acc += item.price"),
                ok("debugger", {"cmd": "print acc"}, f"$1 = {i * 5}.0"),
            ]
            for i in range(10)
        ],
        ok("debugger", {"cmd": "quit"}, "bye"),
    ),
    # --- exploring, distinct work ---------------------------------------------------------
    trace(
        "reading_many_files",
        "an agent reads through a package, one file after another",
        ok("list_dir", {"path": "src/shop"}, [f"m{i}.py" for i in range(12)]),
        [ok("read_file", {"path": f"src/shop/m{i}.py"}, f"# module {i}\n") for i in range(12)],
        say("I understand the package layout now."),
    ),
    trace(
        "missing_files_while_exploring",
        "the agent guesses file names; several do not exist, then it finds the right one",
        err("read_file", {"path": "src/crop.py"}, "No such file or directory: src/crop.py"),
        err(
            "read_file",
            {"path": "src/image/crop.py"},
            "No such file or directory: src/image/crop.py",
        ),
        err("read_file", {"path": "lib/crop.py"}, "No such file or directory: lib/crop.py"),
        ok("find", {"name": "crop*.py"}, ["pkg/imaging/cropping.py"]),
        ok("read_file", {"path": "pkg/imaging/cropping.py"}, "def crop(...): ..."),
    ),
    trace(
        "search_then_fetch_different_pages",
        "search / fetch alternate, but every query and page is new",
        [
            [
                ok("web_search", {"query": q}, [f"https://docs.example/{k}"]),
                ok("fetch", {"url": f"https://docs.example/{k}"}, f"page about {q}"),
            ]
            for k, q in enumerate(
                [
                    "pillow crop",
                    "pillow box tuple",
                    "numpy slicing rows",
                    "opencv roi",
                    "image coordinates origin",
                ]
            )
        ],
    ),
    trace(
        "list_then_details_for_each_item",
        "the same list call between detail pages of different items",
        [
            [
                ok("list_orders", {"status": "open"}, ["A-1", "A-2", "A-3", "A-4"]),
                ok("get_order", {"order_id": f"A-{k}"}, {"id": f"A-{k}", "total": 10 * k}),
            ]
            for k in range(1, 5)
        ],
    ),
    trace(
        "read_edit_read_again",
        "read a file, edit it, read it again to check: the content changes every time",
        [
            [
                ok("read_file", {"path": "src/app.py"}, f"version {i}"),
                ok(
                    "edit_file",
                    {"path": "src/app.py", "old": f"version {i}", "new": f"version {i + 1}"},
                    "Edited src/app.py",
                ),
            ]
            for i in range(5)
        ],
        ok("read_file", {"path": "src/app.py"}, "version 5"),
    ),
    trace(
        "same_call_twice_only",
        "the agent reads the same file twice (once to plan, once to edit) and moves on",
        ok("read_file", {"path": "src/app.py"}, "print('hi')"),
        say("Let me look again before editing."),
        ok("read_file", {"path": "src/app.py"}, "print('hi')"),
        ok("edit_file", {"path": "src/app.py", "old": "hi", "new": "hello"}, "Edited src/app.py"),
        ok("run_tests", {"cmd": "pytest -q"}, {"failed": 0}),
    ),
    trace(
        "build_errors_change_while_fixing",
        "cargo check fails with a different error after each fix",
        [
            [
                err(
                    "shell",
                    {"command": "cargo check"},
                    f"error[E0{308 + i}]: problem {i} at src/main.rs:{10 + i}:5",
                ),
                ok(
                    "edit_file",
                    {"path": "src/main.rs", "old": f"bad {i}", "new": f"good {i}"},
                    "Edited src/main.rs",
                ),
            ]
            for i in range(5)
        ],
        ok("shell", {"command": "cargo check"}, "Finished dev profile in 3.1s"),
    ),
    # --- side effects on different targets -----------------------------------------------
    trace(
        "tickets_for_different_customers",
        "three tickets with the same title for three different customers",
        [
            ok(
                "create_ticket",
                {"customer_id": f"C-{c}", "title": "Printer offline", "priority": "high"},
                {"ticket_id": f"T-{c}"},
                side_effect=True,
            )
            for c in (101, 102, 103)
        ],
        say("Created one ticket per affected customer."),
    ),
    trace(
        "same_email_to_several_recipients",
        "a notice about the freeze mailed to five people",
        [
            ok(
                "send_email",
                {
                    "to": f"{name}@example.com",
                    "subject": "Change freeze",
                    "body": "No deploys until Monday.",
                },
                {"status": "sent", "message_id": f"<{name}@mail>"},
                side_effect=True,
            )
            for name in ("ana", "bo", "chen", "dara", "eli")
        ],
    ),
    trace(
        "ticket_comment_updates",
        "one ticket, several different comments added over time",
        ok(
            "create_ticket",
            {"customer_id": "C-9", "title": "Crop tool broken"},
            {"ticket_id": "T-1"},
            side_effect=True,
        ),
        [
            ok("add_comment", {"ticket_id": "T-1", "text": text}, {"ok": True}, side_effect=True)
            for text in (
                "Reproduced with receipt 0193.",
                "Root cause: swapped y coordinates.",
                "Fix deployed in v7.4.",
            )
        ],
        ok("close_ticket", {"ticket_id": "T-1"}, {"status": "closed"}, side_effect=True),
    ),
    # --- agent turns ------------------------------------------------------------------------
    trace(
        "conversation_without_tools",
        "the agent explains a plan over several distinct turns",
        say("Here is what I found in the logs."),
        say("The crop tool swaps the y coordinates when the image is rotated."),
        say("I'd suggest normalizing the box before cropping."),
        say("Shall I go ahead and open a pull request?"),
        say("Meanwhile, here is a workaround you can use today."),
    ),
    trace(
        "occasional_empty_turns",
        "an empty turn now and then, always followed by real work",
        [[say(""), ok("read_file", {"path": f"docs/{i}.md"}, f"doc {i}")] for i in range(5)],
        say("Done reading the docs."),
    ),
    trace(
        "think_tool_with_new_thoughts",
        "the agent thinks before each step; every thought is different",
        [
            [ok("think", {"thought": thought}, "ok"), ok(tool, args, result)]
            for thought, tool, args, result in [
                ("First, find the config.", "find", {"name": "*.yaml"}, ["deploy/config.yaml"]),
                ("Now read it.", "read_file", {"path": "deploy/config.yaml"}, "retries: 3"),
                (
                    "Bump retries to five.",
                    "edit_file",
                    {"path": "deploy/config.yaml", "old": "3", "new": "5"},
                    "Edited",
                ),
                ("Verify with the linter.", "shell", {"command": "yamllint deploy"}, "ok"),
            ]
        ],
    ),
    # --- condensation in a long, productive session ----------------------------------------
    trace(
        "long_session_condenses_twice",
        "a long session condenses twice, with plenty of new work in between",
        [ok("read_file", {"path": f"src/m{i}.py"}, f"module {i}") for i in range(10)],
        ok("condense", {}, {"summary": "Read ten modules.", "kept": 8}),
        ok("read_file", {"path": "src/m3.py"}, "module 3"),
        [
            ok("edit_file", {"path": f"src/m{i}.py", "old": "a", "new": "b"}, f"Edited m{i}")
            for i in range(8)
        ],
        ok("run_tests", {"cmd": "pytest -q"}, {"failed": 2}),
        ok("condense", {}, {"summary": "Edited eight modules; 2 tests fail.", "kept": 9}),
        [
            ok("edit_file", {"path": f"tests/t{i}.py", "old": "x", "new": "y"}, f"Edited t{i}")
            for i in range(4)
        ],
        ok("run_tests", {"cmd": "pytest -q"}, {"failed": 0}),
        ok("condense", {}, {"summary": "All tests pass.", "kept": 6}),
        ok("git_commit", {"message": "Refactor modules"}, "[main 9f9f9f9] 12 files changed"),
    ),
    trace(
        "one_overflow_then_recovery",
        "one context overflow, the runtime condenses, the agent reads smaller slices",
        err("read_file", {"path": "data/dump.json"}, "context_length_exceeded: 410233 tokens"),
        ok("condense", {}, {"summary": "dump.json is too large to read at once."}),
        [
            ok(
                "read_file",
                {"path": "data/dump.json", "offset": k * 2000, "limit": 2000},
                f"slice {k}",
            )
            for k in range(6)
        ],
        ok("condense", {}, {"summary": "Read six slices of dump.json."}),
        [
            ok("grep", {"pattern": p, "path": "data/dump.json"}, [f"{p}:{k}"])
            for k, p in enumerate(["refund", "chargeback", "dispute", "fraud"])
        ],
    ),
    # --- polling with back-off, the answer unchanged for a while --------------------------------
    trace(
        "poll_with_backoff_same_answer_then_done",
        "a job sits at 45 % for four polls a minute apart, then finishes",
        ok("start_job", {"name": "exp-43"}, {"job_id": "exp-43"}),
        [
            [
                ok(
                    "job_status",
                    {"job_id": "exp-43"},
                    {"state": "running", "progress": 45, "updated_at": ts(k)},
                ),
                ok("sleep", {"seconds": 60 * 2**k}, f"slept {60 * 2**k}s"),
            ]
            for k in range(4)
        ],
        ok("job_status", {"job_id": "exp-43"}, {"state": "done", "progress": 100}),
        say("The job finished."),
    ),
    # --- a long, mixed, healthy coding session -------------------------------------------------
    trace(
        "long_mixed_coding_session",
        "forty steps of ordinary work with repeated status checks and a transient error",
        ok("list_dir", {"path": "."}, ["src", "tests"]),
        [
            [
                ok("read_file", {"path": f"src/f{i}.py"}, f"code {i}"),
                ok(
                    "edit_file",
                    {"path": f"src/f{i}.py", "old": "old", "new": f"new {i}"},
                    f"Edited src/f{i}.py",
                ),
                ok("git_status", {}, " M src/"),
                ok("run_tests", {"cmd": "pytest -q"}, {"failed": max(0, 8 - 2 * i)}),
            ]
            for i in range(5)
        ],
        err("git_push", {"remote": "origin"}, "remote: HTTP 502, please retry"),
        ok("git_push", {"remote": "origin"}, "pushed"),
        [
            ok("ci_status", {"branch": "main"}, {"state": s})
            for s in ("queued", "running", "running 50%", "passed")
        ],
        say("All green."),
    ),
]
