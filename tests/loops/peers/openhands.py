"""OpenHands stuck detector: All-Hands-AI/OpenHands tests/unit/controller/test_is_stuck.py.

Mapping: an Action with its Observation is one Step; CmdRunAction -> ``run``(command),
FileReadAction -> ``read``(path), IPythonRunCellAction -> ``ipython``(code); an
ErrorObservation or an IPython syntax error is a failure; an agent MessageAction is a turn; user
messages are left out (headless mode filters them); an AgentCondensationObservation is a
condensation episode. OpenHands checks the whole history; `flag_at` is the first step after
which ``is_stuck`` is True (4 identical action/observation pairs; 3 identical actions that all
end in an error or in the same syntax error; 3 identical agent messages; a 2-step pattern
repeated 3 times; 10 condensations in a row). Left out: the interactive-mode cases (they depend
on user messages, which are not Steps) and the delegate plumbing.
"""

from __future__ import annotations

from .model import call, case, condensed, fail, say

REF = "All-Hands-AI/OpenHands tests/unit/controller/test_is_stuck.py :: "
J = "\n[Jupyter current working directory:\n[Jupyter Python interpreter:"
CODE = (
    "\nedit_file_by_replace(\n    'book_store.py',\n"
    '    to_replace="""def total(basket):\n    if not basket:\n        return 0\n'
)
COUNT = (
    "we flag the 3rd identical call with an identical outcome (house rule, DESIGN's crop example); "
    "OpenHands waits for the 4th"
)
CYCLE = (
    "we flag a 2-step cycle with identical outcomes at its third head (ABABA, the rule the Gemini "
    "CLI and OpenClaw cases hold us to); OpenHands waits for three full rounds (ABABAB)"
)


def _syntax(msg: str, random_line: bool, n: int = 4):
    out = []
    for i in range(n):
        line = (i + 1) * 10 if random_line else "42"
        extra = "\n" * (i + 1) if random_line else ""
        out.append(
            fail(
                "ipython",
                {"code": CODE},
                f'  Cell In[1], line {line}\nto_replace="""def largest(min_factor, max_factor):\n'
                f"            ^\n{msg}{extra}{J}",
            )
        )
    return out


def _unterminated(random_line: bool, n: int = 4):
    out = []
    for i in range(n):
        line = (i + 1) * 10 if random_line else "1"
        out.append(
            fail(
                "ipython",
                {"code": CODE},
                f'print("  Cell In[1], line {line}\nhello\n       ^\n'
                f"SyntaxError: unterminated string literal (detected at line {line}){J}",
            )
        )
    return out


UNTERMINATED = 'print("hello\n       ^\nSyntaxError: unterminated string literal (detected at line '
LS = call("run", {"command": "ls"}, "")
LS_FILES = call("run", {"command": "ls"}, "file1.txt\nfile2.txt")
READ1 = call("read", {"path": "file1.txt"}, "File content")

CASES = [
    case("history_too_short", REF + "test_history_too_short", [LS_FILES], None),
    case(
        "repeating_action_observation",
        REF + "test_is_stuck_repeating_action_observation",
        [say("Hello"), LS, LS, LS, LS],
        4,
        disagree=COUNT,
        ours=3,
    ),
    case(
        "interactive_mode_four_ls",
        REF + "test_interactive_mode_resets_after_user_message (headless part)",
        [LS, LS, LS, LS],
        3,
        disagree=COUNT,
        ours=2,
    ),
    case(
        "repeating_action_error",
        REF + "test_is_stuck_repeating_action_error",
        [
            say("Hello"),
            fail("run", {"command": "invalid_command"}, "Command not found"),
            fail("run", {"command": "invalid_command"}, "Command still not found or another error"),
            fail("run", {"command": "invalid_command"}, "Different error"),
            fail("run", {"command": "invalid_command"}, "Command not found"),
        ],
        3,
    ),
    case(
        "invalid_syntax_error",
        REF + "test_is_stuck_invalid_syntax_error",
        _syntax("SyntaxError: invalid syntax. Perhaps you forgot a comma?", False),
        2,
    ),
    case(
        "invalid_syntax_error_random_lines",
        REF + "test_is_not_stuck_invalid_syntax_error_random_lines",
        _syntax("SyntaxError: invalid syntax. Perhaps you forgot a comma?", True),
        None,
    ),
    case(
        "invalid_syntax_error_only_three_incidents",
        REF + "test_is_not_stuck_invalid_syntax_error_only_three_incidents",
        _syntax("SyntaxError: invalid syntax. Perhaps you forgot a comma?", True, 3),
        None,
    ),
    case(
        "incomplete_input_error",
        REF + "test_is_stuck_incomplete_input_error",
        _syntax("SyntaxError: incomplete input", False),
        2,
    ),
    case(
        "incomplete_input_error_random_lines",
        REF + "test_is_not_stuck_incomplete_input_error",
        _syntax("SyntaxError: incomplete input", True),
        None,
    ),
    case(
        "unterminated_string_random_lines",
        REF + "test_is_not_stuck_ipython_unterminated_string_error_random_lines",
        _unterminated(True),
        None,
    ),
    case(
        "unterminated_string_two_incidents",
        REF + "test_is_not_stuck_ipython_unterminated_string_error_only_two_incidents",
        _unterminated(False, 2),
        None,
    ),
    case(
        "unterminated_string",
        REF + "test_is_stuck_ipython_unterminated_string_error",
        _unterminated(False),
        2,
    ),
    case(
        "syntax_error_not_at_end",
        REF + "test_is_not_stuck_ipython_syntax_error_not_at_end",
        [
            fail(
                "ipython",
                {"code": 'print("hello'},
                UNTERMINATED + "1)\nThis is some additional output",
            ),
            fail(
                "ipython",
                {"code": 'print("hello'},
                UNTERMINATED + "1)\nToo much output here on and on",
            ),
            fail(
                "ipython",
                {"code": 'print("hello'},
                UNTERMINATED + "3)\nEnough",
            ),
            fail(
                "ipython",
                {"code": 'print("hello'},
                UNTERMINATED + "2)\nLast line of output",
            ),
        ],
        None,
    ),
    case(
        "repeating_action_observation_pattern",
        REF + "test_is_stuck_repeating_action_observation_pattern",
        [LS_FILES, READ1, LS_FILES, READ1, LS_FILES, READ1],
        5,
        disagree=CYCLE,
        ours=4,
    ),
    case(
        "not_stuck",
        REF + "test_is_stuck_not_stuck",
        [
            say("Hello"),
            LS_FILES,
            READ1,
            call("run", {"command": "pwd"}, "/home/user"),
            call("read", {"path": "file2.txt"}, "Another file content"),
            call("run", {"command": "pwd"}, "/home/user"),
            call("read", {"path": "file2.txt"}, "Another file content"),
        ],
        None,
    ),
    case(
        "monologue",
        REF + "test_is_stuck_monologue",
        [
            say("Hi there!"),
            call("run", {"command": "echo 42"}, "42"),
            say("I'm doing well, thanks for asking."),
            say("I'm doing well, thanks for asking."),
            say("I'm doing well, thanks for asking."),
        ],
        4,
    ),
    case(
        "context_window_error_loop",
        REF + "test_is_stuck_context_window_error_loop",
        [say("Hello")] + [condensed("Trimming prompt to meet context window limitations")] * 10,
        10,
    ),
    case(
        "context_window_error_with_other_events",
        REF + "test_is_not_stuck_context_window_error_with_other_events",
        [say("Hello")]
        + [
            s
            for i in range(10)
            for s in (
                [condensed("Trimming prompt to meet context window limitations")]
                + (
                    [call("run", {"command": f"ls {i}"}, "file1.txt\nfile2.txt")]
                    + (
                        [call("read", {"path": f"file{i}.txt"}, f"File content {i}")]
                        if i % 2 == 0
                        else []
                    )
                    if i < 9
                    else []
                )
            )
        ],
        None,
    ),
    case(
        "context_window_error_less_than_ten",
        REF + "test_is_not_stuck_context_window_error_less_than_ten",
        [say("Hello")] + [condensed("Trimming prompt to meet context window limitations")] * 9,
        None,
    ),
]
