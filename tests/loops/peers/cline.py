"""Cline: cline/cline src/core/task/__tests__/loop-detection.test.ts (checkRepeatedToolCall: a
soft warning at the 3rd consecutive identical call, a hard stop at the 5th; ``task_progress`` is
not part of the comparison). The peer's scenarios carry no results, so results are None.
"""

from __future__ import annotations

from .model import call, case

REF = "cline/cline src/core/task/__tests__/loop-detection.test.ts :: "

CASES = [
    case(
        "warn_at_three",
        REF + "Loop Detection > should warn at 3 identical calls and escalate at 5",
        [call("read_file", {"path": "src/main.ts"})] * 5,
        2,
    ),
    case(
        "reset_on_change",
        REF + "Loop Detection > should reset when tool or params change",
        [
            call("read_file", {"path": "a.ts"}),
            call("read_file", {"path": "a.ts"}),
            call("read_file", {"path": "b.ts"}),
            call("read_file", {"path": "b.ts"}),
            call("list_files", {"path": "b.ts"}),
        ],
        None,
    ),
    case(
        "different_tools_same_params",
        REF + "Loop Detection > should NOT count different tools with same params as identical",
        [
            call("read_file", {"path": "src/main.ts"}),
            call("search_files", {"path": "src/main.ts"}),
            call("list_files", {"path": "src/main.ts"}),
        ],
        None,
    ),
    case(
        "strip_task_progress",
        REF + "Loop Detection > should strip task_progress from comparison",
        [
            call("read_file", {"path": "src/index.ts", "task_progress": f"step {i} of 5"})
            for i in range(5)
        ],
        2,
    ),
]
