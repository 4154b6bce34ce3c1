"""Gemini CLI: google-gemini/gemini-cli packages/core/src/services/loopDetectionService.test.ts.

Tool calls: the service flags when the last k*5 calls repeat a block of k (k = 1…5): the 5th
identical call, or 5 full rounds of a cycle. The peer's scenarios carry no results (None).

Content: the service flags a 50-character chunk seen 10 times close together in one streamed
reply. A streamed reply is one agent turn for us, so a case is a single Step whose text is all the
chunks the test streams (up to the loop bound of the test); the peer flags inside that one turn.
Events that are neither tool calls nor content (a ``thought``) are no Step. Left out: the
enable/disable switches, the LLM-assisted check, the telemetry and reset plumbing.
"""

from __future__ import annotations

import random

from .model import call, case, say

REF = "google-gemini/gemini-cli packages/core/src/services/loopDetectionService.test.ts :: "
COUNT = "we flag the 3rd identical call (house rule); Gemini CLI waits for the 5th"
CYCLE = "we flag a cycle at its third head (ABABA…); Gemini CLI waits for 5 full rounds"
CHUNK = 50
THRESHOLD = 10


def repetitive(i: int, length: int) -> str:
    """The test's createRepetitiveContent."""
    base = f"This is a unique sentence, id={i}. "
    return (base * (length // len(base) + 1))[:length]


def noise(seed: int, length: int) -> str:
    """The test's generateRandomString, seeded so the case is the same on every run."""
    rng = random.Random(seed)
    chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    return "".join(rng.choice(chars) for _ in range(length))


T = call("testTool", {"param": "value"})
A = call("read_file", {"file_path": "loop_a.txt"})
B = call("read_file", {"file_path": "loop_b.txt"})
C = call("read_file", {"file_path": "loop_c.txt"})

CASES = [
    case(
        "fewer_than_threshold",
        REF + "Tool Call Loop Detection > should not detect a loop for fewer than "
        "TOOL_CALL_LOOP_THRESHOLD identical calls",
        [T] * 4,
        None,
        disagree=COUNT,
        ours=2,
    ),
    case(
        "threshold_call",
        REF + "Tool Call Loop Detection > should detect a loop on the TOOL_CALL_LOOP_THRESHOLD-th "
        "identical call",
        [T] * 5,
        4,
        disagree=COUNT,
        ours=2,
    ),
    case(
        "different_tool_calls",
        REF + "Tool Call Loop Detection > should not detect a loop for different tool calls",
        [
            call("testTool", {"param": "value1"}),
            call("testTool", {"param": "value2"}),
            call("anotherTool", {"param": "value1"}),
        ]
        * 3,
        None,
        disagree="nine calls that repeat a block of three with identical outcomes are a cycle for "
        "us "
        "(third head at step 6); Gemini CLI needs 5 rounds",
        ours=6,
    ),
    case(
        "other_events_do_not_reset",
        REF + "Tool Call Loop Detection > should not reset tool call counter for other event types",
        [T] * 5,
        4,
        disagree=COUNT,
        ours=2,
    ),
    case(
        "cycle_2",
        REF + "Tool Call Loop Detection > should detect an alternating tool call loop (cycle of "
        "length 2)",
        [A, B] * 7 + [A],
        9,
        disagree=CYCLE,
        ours=4,
    ),
    case(
        "cycle_3",
        REF + "Tool Call Loop Detection > should detect a cyclic tool call loop of length 3",
        ([A, B, C] * 7)[:20],
        14,
        disagree=CYCLE,
        ours=6,
    ),
    case(
        "cycle_5",
        REF + "Tool Call Loop Detection > should detect a cyclic tool call loop of length 5",
        [call("t", {"id": k}) for k in range(1, 6)] * 6,
        24,
        disagree=CYCLE,
        ours=10,
    ),
    case(
        "broken_alternation",
        REF + "Tool Call Loop Detection > should not detect loops for non-looping alternating "
        "sequences that vary",
        [A, B, A, B, C, A, B, A, B],
        None,
    ),
    case(
        "random_content",
        REF + "Content Loop Detection > should not detect a loop for random content",
        [say("".join(noise(i, 10) for i in range(1000)))],
        None,
    ),
    case(
        "chunk_repeats",
        REF + "Content Loop Detection > should detect a loop when a chunk of content repeats "
        "consecutively",
        [say(repetitive(1, CHUNK) * THRESHOLD)],
        0,
    ),
    case(
        "list_with_shared_prefix",
        REF
        + "Content Loop Detection > should not detect a loop for a list with a long shared prefix",
        [
            say(
                "".join(
                    f"- projects/my-google-cloud-project-12345/locations/us-central1/services/{i}\n"
                    for i in range(15)
                )
            )
        ],
        None,
    ),
    case(
        "repetitions_far_apart",
        REF + "Content Loop Detection > should not detect a loop if repetitions are very far apart",
        [say("".join(repetitive(1, CHUNK) + noise(100 + i, 500) for i in range(THRESHOLD)))],
        None,
    ),
    case(
        "long_pattern",
        REF + "Content Loop Detection > should detect a loop with longer repeating patterns (e.g. "
        "~150 chars)",
        [say(repetitive(1, 150) * (THRESHOLD + 2))],
        0,
    ),
    case(
        "user_example_1",
        REF + "Content Loop Detection > should detect the specific user-provided loop example",
        [
            say(
                "I will not output any text.\n  I will just end the turn.\n  I am done.\n  I will "
                "not do anything else.\n  I will wait for the user's next command.\n"
                * (THRESHOLD + 5)
            )
        ],
        0,
    ),
    case(
        "user_example_2",
        REF
        + "Content Loop Detection > should detect the second specific user-provided loop example",
        [
            say(
                "I have added all the requested logs and verified the test file. I will now mark "
                "the task as complete.\n  " * (THRESHOLD + 5)
            )
        ],
        0,
    ),
    case(
        "alternating_short_phrases",
        REF + "Content Loop Detection > should detect a loop of alternating short phrases",
        [say("Thinking... Done. " * (THRESHOLD * 3))],
        0,
    ),
    case(
        "repeated_thought_process",
        REF + "Content Loop Detection > should detect a loop of repeated complex thought processes",
        [
            say(
                "I need to check the file. The file does not exist. I will create the file. "
                * (THRESHOLD + 5)
            )
        ],
        0,
    ),
    case(
        "inside_code_block",
        REF + "Content Loop Detection with Code Blocks > should not detect a loop when repetitive "
        "content is inside a code block",
        [say("```\n" + repetitive(1, CHUNK) * THRESHOLD + "\n```")],
        None,
    ),
    case(
        "transition_into_code_block",
        REF + "Content Loop Detection with Code Blocks > should not detect loops when content "
        "transitions into a code block",
        [
            say(
                repetitive(1, CHUNK) * (THRESHOLD - 2)
                + "```javascript\n"
                + repetitive(1, CHUNK) * THRESHOLD
            )
        ],
        None,
    ),
    case(
        "looping_text_after_code_block",
        REF
        + "Content Loop Detection with Code Blocks > should handle content with mixed code blocks "
        "and looping text",
        [say("```\ncode1\n```" + repetitive(1, CHUNK) * THRESHOLD)],
        0,
    ),
    case(
        "code_blocks_no_loop",
        REF + "Content Loop Detection with Code Blocks > should handle content with multiple code "
        "blocks and no loops",
        [say("```\ncode1\n```\nsome text\n```\ncode2\n```")],
        None,
    ),
    case(
        "code_block_repeating_tokens",
        REF + "Content Loop Detection with Code Blocks > should not detect a loop for a long code "
        "block with some repeating tokens",
        [say("```\n" + "for (let i = 0; i < 10; i++) { console.log(i); }" * 20 + "\n```")],
        None,
    ),
    case(
        "table_resets",
        REF + "Content Loop Detection with Code Blocks > should reset tracking when a table is "
        "detected",
        [
            say(
                repetitive(1, CHUNK) * (THRESHOLD - 1)
                + "| Column 1 | Column 2 |"
                + repetitive(1, CHUNK) * (THRESHOLD - 1)
            )
        ],
        None,
    ),
    case(
        "list_item_resets",
        REF + "Content Loop Detection with Code Blocks > should reset tracking when a list item is "
        "detected",
        [
            say(
                repetitive(1, CHUNK) * (THRESHOLD - 1)
                + "* List item"
                + repetitive(1, CHUNK) * (THRESHOLD - 1)
            )
        ],
        None,
    ),
]
