"""What a tool call does, read from its name or its shell command (pure functions, no I/O):
whether it writes, whether it only waits, what it acts on, and the words of a command without
its switches. `engine.loops.normalize` re-exports every public name.
"""

from __future__ import annotations

import functools
import posixpath
import re
from typing import Any

__all__ = [
    "normalize_path",
    "is_write",
    "is_shell_wait",
    "classify_call",
    "shell_target",
    "command_words",
    "answers_no",
]

_PATH_LIKE = re.compile(r"[\w.~\-/\\:@+]+")
_TOKEN_QUOTES = "'\"`,;()[]{}"
_QUOTED = re.compile(r"""'[^']*'?|"(?:[^"\\]|\\.)*"?""")


def normalize_path(text: str) -> str:
    """Canonical spelling of a path-like string: slashes, no ``.``/``..``/double or trailing slash.

    URLs (``scheme://…``) and strings that do not look like a path are returned unchanged.
    """
    if "://" in text or ("/" not in text and "\\" not in text) or not _PATH_LIKE.fullmatch(text):
        return text
    path = posixpath.normpath(text.replace("\\", "/"))
    return "" if path == "." else path


_WRITE_VERBS = frozenset(
    {
        "edit",
        "write",
        "insert",
        "append",
        "create",
        "replace",
        "str_replace",
        "patch",
        "save",
        "put",
        "overwrite",
        "delete",
        "remove",
        "rename",
        "move",
        "mkdir",
        "touch",
        "undo_edit",
        # what a business API changes (a booking, an order, an account): a cancellation
        # repeated while the record it returns keeps growing is still the same cancellation
        "cancel",
        "update",
        "modify",
        "book",
        "refund",
    }
)
_READ_VERBS = frozenset(
    {"get", "list", "search", "find", "read", "fetch", "show", "view", "describe", "query",
     "lookup", "check", "status", "count", "calculate", "preview", "validate", "estimate"}
)
"""A tool name starting with one of these reads, whatever it names after it
(``get_refund_status``, ``list_updates``): its result is what it is about, never "done"."""
_NAME_TOKENS = re.compile(r"[a-z]+")
_SHELL_WRITE = re.compile(
    r"(?:^|[;&|(]\s*)(?:sed\s+(?:-\w+\s+)*-i|tee\b|cp\b|mv\b|rm\b|mkdir\b|touch\b|patch\b"
    r"|git\s+(?:apply|checkout|commit|add|rm|mv|reset|stash)\b"
    r"|(?:edit|create|insert|append|str_replace)\b)"
    r"|>>|(?:^|[^\d&<>])>\|?\s*(?!/dev/null|&)[^\s&>]",
)
_SHELL_SLEEP = re.compile(r"\s*(?:sleep|timeout)\s+\d")


def _shell_command(args: Any) -> str | None:
    if type(args) is dict:
        value = args.get("command")
        if value is None:
            value = args.get("cmd")
            if value is None:
                value = args.get("script")
        return value if type(value) is str else None
    return args if type(args) is str else None


@functools.lru_cache(maxsize=1024)
def _named_like_a_write(tool: str) -> bool:
    tokens = _NAME_TOKENS.findall(tool.lower())
    if tokens and tokens[0] in _READ_VERBS:
        return False
    return any(t in _WRITE_VERBS for t in tokens)


def classify_call(tool: str, args: Any) -> tuple[bool, bool]:
    """(`is_write`, `is_shell_wait`) of one call, computed together."""
    # `_shell_command`, inlined: this runs on every call the detector reads
    if type(args) is dict:
        command = args.get("command")
        if command is None:
            command = args.get("cmd")
            if command is None:
                command = args.get("script")
        if type(command) is not str:
            command = None
    else:
        command = args if type(args) is str else None
    if command is None:
        return _named_like_a_write(tool), False
    if len(command) <= 200:  # agents repeat short commands; long ones are rarely re-run
        return _shell_kind(command)
    return _shell_kind.__wrapped__(command)


@functools.lru_cache(maxsize=256)
def _shell_kind(command: str) -> tuple[bool, bool]:
    stripped = command.strip()
    if " " not in stripped:
        # a sub-command of a multi-purpose tool: str_replace_editor {"command": "view"}
        return stripped.lower() in _WRITE_VERBS, False
    if _SHELL_SLEEP.match(command):
        return False, True
    return _SHELL_WRITE.search(_QUOTED.sub("''", command)) is not None, False


_BARE_EXIT_1 = re.compile(r"exit(?:ed)?(?: with)?(?: code| status)?:?\s*1", re.IGNORECASE)
_LAST_COMMAND = re.compile(r"\n|;|&&|\|\|")
_NO_MEANS_1 = frozenset(
    {"grep", "egrep", "fgrep", "zgrep", "rg", "ag", "ack", "pgrep", "diff", "cmp", "test", "[",
     "[[", "which"}
)
"""Programs whose exit status 1 answers "no" (no match, files differ, condition false, not
found) rather than reporting a failure."""


def answers_no(args: Any, error: str | None) -> bool:
    """Whether a failed shell call only answered "no": its error is a bare exit status 1,
    nothing printed, and the command's last program is one whose status 1 means no match
    (``grep``, ``rg``, ``git grep``), a difference (``diff``, ``cmp``) or a false condition
    (``test``). Searching for a word that is not there is a result, not a failure."""
    if error is None or len(error) > 40 or _BARE_EXIT_1.fullmatch(error.strip()) is None:
        return False
    command = _shell_command(args)
    if not command:
        return False
    return _last_program_answers_no(command) if len(command) <= 2000 else False


@functools.lru_cache(maxsize=256)
def _last_program_answers_no(command: str) -> bool:
    parts = [p for p in _LAST_COMMAND.split(_QUOTED.sub("''", command)) if p.strip()]
    if not parts:
        return False
    tokens = parts[-1].split("|")[-1].split()
    while tokens and ("=" in tokens[0] or tokens[0] in ("sudo", "command", "env")):
        tokens.pop(0)
    if not tokens:
        return False
    program = posixpath.basename(tokens[0])
    if program == "git":
        words = [t for t in tokens[1:] if not t.startswith("-")]
        return bool(words) and words[0] == "grep"
    return program in _NO_MEANS_1


def is_write(tool: str, args: Any) -> bool:
    """Whether a call changes files or other state: a tool named after a write (``edit_file``,
    ``write``, ``str_replace_editor`` with a ``str_replace`` / ``insert`` / ``create``
    sub-command), or a shell command that writes (``sed -i``, ``>``, ``>>``, ``tee``, ``mv``,
    ``git apply``…). Its outcome is "done", whatever it prints (a file that keeps growing does
    not make the same write new)."""
    return classify_call(tool, args)[0]


def is_shell_wait(args: Any) -> bool:
    """Whether a shell command only waits (``sleep 30``, ``timeout 60 …`` at its start)."""
    command = _shell_command(args)
    return command is not None and _SHELL_SLEEP.match(command) is not None


_FILE_TOKEN = re.compile(r"[\w.\-]+\.[A-Za-z]\w{0,5}")
_WORD = re.compile(r"[A-Za-z][\w\-]*")


_CD_PREFIX = re.compile(r"^\s*cd\s+\S+\s*&&\s*")


@functools.lru_cache(maxsize=256)
def command_words(command: str) -> tuple[str, ...]:
    """The words of a shell command without its flags: ``cd DIR &&`` prefixes, tokens starting
    with ``-`` and the directories of paths left out, quotes stripped (``cd /repo && mvn -q
    test -Dtest=A`` -> ``("mvn", "test")``); () for a text that is not a command (one word, or
    a multi-line script)."""
    if "\n" in command or " " not in command.strip():
        return ()
    while True:
        stripped = _CD_PREFIX.sub("", command, count=1)
        if stripped == command:
            break
        command = stripped
    words = []
    for token in command.split():
        token = token.strip(_TOKEN_QUOTES)
        if not token or token.startswith("-"):
            continue
        words.append(posixpath.basename(token.rstrip("/")) if "/" in token else token)
    return tuple(words) if len(words) >= 2 else ()


def shell_target(args: Any) -> str:
    """What a free-form shell command acts on, for calls without a target key: the program,
    its sub-command (``pip install``, ``git push``, ``python -m pytest``) and the paths and
    file names among its arguments; "" when `args` holds no shell command.

    ``python -m pytest tests/test_a.py`` and ``… tests/test_b.py`` act on different targets;
    ``pip install pillow==9.0.0`` and ``pip install pillow==9.0.1`` on the same one, as do
    ``mvn -q test`` and ``cd /repo && mvn -B test`` (switches before the sub-command and the
    directory it is run from are details).
    """
    command = _shell_command(args)
    if not command:
        return ""
    line = command.strip().split("\n", 1)[0]
    while True:  # the directory a command is run from is a detail of how it is run
        stripped = _CD_PREFIX.sub("", line, count=1)
        if stripped == line:
            break
        line = stripped
    tokens = line.split()
    while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
        tokens.pop(0)  # FOO=1 env assignments
    if not tokens:
        return ""
    head = [posixpath.basename(tokens[0])]
    rest = tokens[1:]
    if len(rest) >= 2 and rest[0] == "-m":
        head += rest[:2]
        rest = rest[2:]
    else:
        # the sub-command may come after switches: ``mvn -q -B test``
        flags = 0
        while flags < len(rest) and rest[flags].startswith("-"):
            flags += 1
        if flags < len(rest) and _WORD.fullmatch(rest[flags]):
            head.append(rest[flags])
            rest = rest[:flags] + rest[flags + 1 :]
    paths = sorted(
        {
            normalize_path(t.strip(_TOKEN_QUOTES))
            for t in rest
            if not t.startswith("-") and ("/" in t or _FILE_TOKEN.fullmatch(t.strip(_TOKEN_QUOTES)))
        }
    )
    return "sh:" + " ".join(head + paths)
