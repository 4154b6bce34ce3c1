"""Roo Code: RooCodeInc/Roo-Code src/core/tools/__tests__/ToolRepetitionDetector.spec.ts.

ToolRepetitionDetector(limit) blocks the call that makes `limit` consecutive identical repeats
(limit 2: the 3rd identical call; the default 3: the 4th); a different call in between resets the
count, and so does a block. Most tests configure limit 2. The peer's scenarios carry no results,
so results are None. Left out: the limit 0 / negative-limit cases (an off switch, not a scenario)
and message-text checks.
"""

from __future__ import annotations

from .model import call, case

REF = "RooCodeInc/Roo-Code src/core/tools/__tests__/ToolRepetitionDetector.spec.ts :: "
COUNT4 = "we flag the 3rd identical call (house rule); Roo Code's default limit 3 blocks the 4th"


def t(name: str = "tool-name", **params: str):
    return call(name, dict(params))


R = call("read_file", {"path": "test.txt"})

CASES = [
    case(
        "different_tool_calls",
        REF + "no repetition > should allow execution for different tool calls",
        [t("first-tool"), t("second-tool"), t("third-tool")],
        None,
    ),
    case(
        "reset_by_different_call",
        REF + "no repetition > should reset the counter when different tool calls are made",
        [t("same-tool"), t("different-tool"), t("same-tool")],
        None,
    ),
    case(
        "limit3_block_on_fourth",
        REF + "repetition below limit > should allow execution when repetition is below limit and "
        "block when limit reached",
        [t("repeat-tool")] * 4,
        3,
        disagree=COUNT4,
        ours=2,
    ),
    case(
        "limit3_block_reaches_limit",
        REF + "repetition reaches limit > should block execution when repetition reaches the limit",
        [t("repeat-tool")] * 4,
        3,
        disagree=COUNT4,
        ours=2,
    ),
    case(
        "reset_after_limit",
        REF + "repetition reaches limit > should reset internal state after limit is reached",
        [t("repeat-tool")] * 3 + [t("new-tool")],
        2,
    ),
    case(
        "reflag_after_reset",
        REF + "repetition after limit > should require reaching the limit again after reset",
        [t("repeat-tool")] * 6,
        2,
    ),
    case(
        "tool_name_in_message",
        REF + "tool name interpolation > should include tool name in the error message",
        [t("special-tool-name")] * 3,
        2,
    ),
    case(
        "empty_tool_call",
        REF + "edge cases > should handle empty tool call",
        [t("empty-tool")] * 3,
        2,
    ),
    case(
        "different_names_forced_identical",
        REF + "edge cases > should handle different tool names with identical serialized JSON",
        [
            t("tool-name-1", param="value"),
            t("tool-name-2", param="value"),
            t("tool-name-2", param="value"),
        ],
        2,
        disagree="the peer forces the two tools to serialize alike with a mock; for us two "
        "different "
        "tools are two different calls, and two identical calls are not a loop",
        ours=None,
    ),
    case(
        "param_order",
        REF
        + "edge cases > should treat tools with same parameters in different order as identical",
        [
            t("same-tool", a="1", b="2", c="3"),
            t("same-tool", c="3", a="1", b="2"),
            t("same-tool", b="2", c="3", a="1"),
        ],
        2,
    ),
    case(
        "limit1_block_on_second",
        REF
        + "explicit Nth call blocking behavior > should allow the 1st call but block on the 2nd "
        "call for limit 1",
        [t()] * 2,
        1,
        disagree="limit 1 is the peer's configuration; two identical calls are not a loop for us",
        ours=None,
    ),
    case(
        "limit2_block_on_third",
        REF
        + "explicit Nth call blocking behavior > should allow first 2 calls but block on the 3rd "
        "call for limit 2",
        [t()] * 3,
        2,
    ),
    case(
        "limit3_default_block_on_fourth",
        REF
        + "explicit Nth call blocking behavior > should allow first 3 calls but block on the 4th "
        "call for limit 3 (default)",
        [t()] * 4,
        3,
        disagree=COUNT4,
        ours=2,
    ),
    case(
        "limit5_block_on_sixth",
        REF + "explicit Nth call blocking behavior > should handle different limits correctly",
        [t()] * 6,
        5,
        disagree="we flag the 3rd identical call (house rule); the peer's limit 5 blocks the 6th",
        ours=2,
    ),
    case(
        "reset_after_block",
        REF + "explicit Nth call blocking behavior > should reset counter after blocking and allow "
        "new attempts",
        [t()] * 4,
        2,
    ),
    case(
        "native_args_different_files",
        REF
        + "native protocol with nativeArgs > should differentiate read_file calls with different "
        "files in nativeArgs",
        [
            call("read_file", {"path": "file1.ts"}),
            call("read_file", {"path": "file2.ts"}),
            call("read_file", {"path": "file1.ts"}),
        ],
        None,
    ),
    case(
        "native_args_same_file",
        REF + "native protocol with nativeArgs > should detect repetition when same files are read "
        "multiple times with nativeArgs",
        [call("read_file", {"path": "same-file.ts"})] * 3,
        2,
    ),
    case(
        "native_args_slices",
        REF + "native protocol with nativeArgs > should treat different slice offsets as distinct "
        "read_file calls",
        [
            call("read_file", {"path": "a.ts", "offset": 1, "limit": 2000}),
            call("read_file", {"path": "a.ts", "offset": 2001, "limit": 2000}),
        ],
        None,
    ),
    case(
        "native_args_cwd",
        REF
        + "native protocol with nativeArgs > should handle tools with both params and nativeArgs",
        [
            call("execute_command", {"command": "ls", "cwd": "/home/user"}),
            call("execute_command", {"command": "ls", "cwd": "/home/admin"}),
        ],
        None,
    ),
    case(
        "params_only",
        REF
        + "native protocol with nativeArgs > should handle tools with only params (no nativeArgs)",
        [R] * 3,
        2,
    ),
]
