"""Normalization of tool calls for loop detection (pure functions, no I/O).

Two calls that an on-call engineer would call "the same" must get the same fingerprint, even when
the agent's runtime stamps them with a fresh request id, the agent adds a different "explanation"
each time, or writes ``./src//a.py`` instead of ``src/a.py``. This module turns arguments, results,
error texts and agent turns into such canonical forms; `engine.loops.fingerprint` then hashes them.

- Arguments: volatile keys (request/trace ids, timestamps, nonces), progress counters (attempt,
  retry…) and free-text thoughts (thought, reasoning, explanation…) are dropped; one-line strings
  have their whitespace collapsed outside quotes, multi-line strings lose trailing blanks and
  ``\\r``; path-like strings are normalized (``./a//b/`` -> ``a/b``, backslashes -> slashes).
  Strings under keys that carry code (``old``, ``new_str``, ``content``, ``patch``…) keep every
  space: an indent and its undo are two different edits.
- Results: only volatile keys are dropped (a moving progress counter in a result is progress, not
  noise); timestamps, durations and generated ids (UUIDs, long hex or numeric ids) inside
  strings are masked, and so are the values of id keys (``message_id``…): a fresh message id
  does not make the same answer new.
- Search queries (``query``, ``q``…) are compared as sets of lower-cased words: a paraphrase
  that only reorders or recases the words is the same search.
- Error signatures: the informative lines of the error text (banners, separators and warnings
  that every command prints left out) with ids, timestamps, durations, addresses, counters
  (``line 11301:``) and the values the agent passed in the arguments masked, so "invalid slice
  [10:20]" and "invalid slice [11:21]" of two jittered retries share one signature.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from engine.loops.fingerprint import canonicalize, digest, normalized_digest
from engine.loops.shell import (
    _QUOTED,
    _TOKEN_QUOTES,
    answers_no,
    classify_call,
    command_words,
    is_shell_wait,
    is_write,
    normalize_path,
    shell_target,
)

__all__ = [
    "DEFAULT_VOLATILE_KEYS",
    "DEFAULT_PROGRESS_KEYS",
    "DEFAULT_THOUGHT_KEYS",
    "DEFAULT_TARGET_KEYS",
    "DEFAULT_CODE_KEYS",
    "DEFAULT_QUERY_KEYS",
    "Normalizer",
    "normalize_args",
    "normalize_result",
    "normalize_text",
    "normalize_path",
    "mask_volatile",
    "error_signature",
    "informative_lines",
    "error_location",
    "result_version",
    "VERSION_KEYS",
    "turn_signature",
    "flatten",
    "values_close",
    "is_write",
    "is_shell_wait",
    "classify_call",
    "shell_target",
    "command_words",
    "answers_no",
    "result_digest",
]

DEFAULT_VOLATILE_KEYS: frozenset[str] = frozenset(
    {
        "request_id",
        "requestid",
        "req_id",
        "trace_id",
        "traceid",
        "span_id",
        "parent_span_id",
        "correlation_id",
        "idempotency_key",
        "nonce",
        "timestamp",
        "ts",
        "_ts",
        "_t",
        "created_at",
        "updated_at",
        "sent_at",
        "received_at",
        "server_time",
        "client_time",
        "now",
        "elapsed",
        "elapsed_ms",
        "duration",
        "duration_ms",
        "took",
        "took_ms",
        "latency_ms",
        "started_at",
        "finished_at",
        "ended_at",
        "completed_at",
        "cache_buster",
        "cachebuster",
    }
)
"""Keys whose values change on every call without changing its meaning (dropped everywhere)."""

RESULT_VOLATILE_KEYS: frozenset[str] = frozenset({"pid", "ppid", "process_id"})
"""Result keys whose values are fresh on every run (a process id); dropped from results only,
since an argument naming a process picks which one."""

VOLATILE_KEY_SUFFIXES: tuple[str, ...] = (
    "_request_id",
    "_trace_id",
    "_span_id",
    "_correlation_id",
    "_timestamp",
    "_nonce",
)
"""Key endings treated as volatile too (``x_request_id``, ``client_timestamp``…)."""

DEFAULT_PROGRESS_KEYS: frozenset[str] = frozenset(
    {
        "task_progress",
        "attempt",
        "attempts",
        "attempt_number",
        "retry",
        "retries",
        "retry_count",
        "try",
        "tries",
        "iteration",
        "call_count",
    }
)
"""Argument keys that count the agent's own retries or track its progress through the task
(Cline's ``task_progress`` checklist, sent with every call); dropped from arguments only."""

DEFAULT_THOUGHT_KEYS: frozenset[str] = frozenset(
    {
        "thought",
        "thoughts",
        "reasoning",
        "reason_for_call",
        "explanation",
        "rationale",
        "justification",
        "comment_to_self",
    }
)
"""Argument keys carrying the agent's free-text thinking; never part of a fingerprint."""

DEFAULT_TARGET_KEYS: frozenset[str] = frozenset(
    {
        "path",
        "file",
        "file_path",
        "filepath",
        "filename",
        "url",
        "uri",
        "href",
        "target",
        "resource",
        "image",
        "id",
        "issue",
        "repo",
        "repository",
        "table",
        "endpoint",
        "host",
        "to",
        "recipient",
        "email",
        "channel",
        "branch",
    }
)
"""Top-level argument keys naming what a call acts on (keys ending in ``_id`` also count)."""

DEFAULT_CODE_KEYS: frozenset[str] = frozenset(
    {
        "old",
        "new",
        "old_str",
        "new_str",
        "old_string",
        "new_string",
        "old_text",
        "new_text",
        "content",
        "contents",
        "file_text",
        "insert_text",
        "new_content",
        "code",
        "source",
        "script",
        "patch",
        "diff",
        "replacement",
        "expression",
        "text",
    }
)
"""Argument keys whose strings carry code or text in which whitespace matters (edits, patches,
scripts): only their line endings are normalized."""

DEFAULT_QUERY_KEYS: frozenset[str] = frozenset(
    {"query", "q", "search", "search_query", "search_term", "keywords", "terms", "term"}
)
"""Argument keys holding a search query: compared as a set of lower-cased words, so a
paraphrase that only reorders or recases the words is the same search."""

_ID_KEY = re.compile(r"(?:^|_)(?:id|uuid|guid|etag)$|[a-z]Id$")
"""Result keys whose values are generated identifiers (``id``, ``message_id``, ``etag``…)."""

_REFERENCE = (
    r"(?:conversation|chat|channel|thread|room|space|group|recipient|target|parent|user"
    r"|account|project|repo|repository|workspace|folder|directory|file)"
)
_REFERENCE_KEY = re.compile(rf"^{_REFERENCE}$", re.IGNORECASE)
_REFERENCE_ID_KEY = re.compile(rf"^{_REFERENCE}_?(?:id|Id|ID)$", re.IGNORECASE)
"""Result keys naming where a call went, not what it made: the id of the conversation a message
was sent to (``conversation.id``, ``chat_id``) is kept, since a send to another conversation is
another send; only the ids of what the call created are masked."""

VERSION_KEYS: frozenset[str] = frozenset(
    {"revision", "rev", "version", "generation", "seq", "sequence", "version_id"}
)
"""Result keys of a write that report the new version of what it wrote: a write acknowledged
with a new revision changed something (a file whose content only grows does not count)."""

_TIME_PATTERNS = {
    "time": r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?"
    r"|\b\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?\b",
    "duration": r"\b\d+(?:\.\d+)?\s?(?:ms|us|µs|ns|s|sec|secs|seconds)\b",
    # a fresh scratch directory per run: /tmp/run-3, /var/folders/…/T/tmpab12
    "tmp": r"(?:/private)?(?:/tmp|/var/tmp|/var/folders)/[\w.-]*\d[\w.-]*",
}
_ID_PATTERNS = {
    "uuid": r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
    "addr": r"\b0x[0-9a-fA-F]+\b",
    # 8+ hex digits with at least one digit: request ids, hashes, long numeric ids
    "id": r"\b(?=[0-9a-fA-F-]*\d)[0-9a-fA-F]{8,}(?:-[0-9a-fA-F]{2,})*\b",
}


def _one_pass(patterns: dict[str, str]) -> re.Pattern[str]:
    """One regex trying the patterns in order; the group name says which one matched."""
    return re.compile("|".join(f"(?P<{name}>{pattern})" for name, pattern in patterns.items()))


_TIMES = _one_pass(_TIME_PATTERNS)
_TIMES_AND_IDS = _one_pass({**_TIME_PATTERNS, **_ID_PATTERNS})


def _placeholder(match: re.Match[str]) -> str:
    return f"<{match.lastgroup}>"


_NUMBER_TOKEN = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
# A shell's script line counter (``bash: line 11301: …``) goes up with every command; a line
# number without the colon (``Cell In[1], line 10``, ``detected at line 3``) points into the
# code and tells one error from another.
_COUNTER = re.compile(r"\b(line) \d+(?=:)|\b(attempt|retry|try) #?\d+\b|\b\d{5,}\b", re.IGNORECASE)
# Lines that say nothing about this failure: separators, test-runner banners, warnings that
# every command of an environment prints.
_SEPARATOR_CHARS = "=-_*~#+. \t"
_BOILERPLATE = re.compile(
    r"platform \S+ -- python|rootdir:|cachedir:|configfile:|testpaths:|plugins:"
    r"|collect(?:ed|ing) \d+ items?|test session starts|short test summary info"
    r"|.*setlocale: |.*warning: running pip as the 'root' user|\[notice\]"
    r"|.*(?:deprecation|future|user|runtime)warning:"
    # Python frames inside the interpreter, the same for every failure
    r"|file \"<frozen |file \"<string>\", line 1, in <module>"
    # Maven's and Gradle's closing advice, printed under every build failure
    r"|\[error\]\s*$|\[error\] (?:-> \[help|\[help \d|re-run maven|to see the full stack trace"
    r"|for more information about the errors|after correcting the problems)"
    r"|\[info\] (?:build failure|total time|finished at)"
    r"|\* (?:try|get more help|what went wrong):|> (?:run with --|get more help)"
    r"|failure: build failed with an exception|build failed in \d"
    r"|deprecated gradle features|you can use '--warning-mode"
    # npm's log pointer and disclaimers
    r"|npm err! (?:a complete log of this run|this is probably not a problem with npm"
    r"|code elifecycle|errno \d)|npm err!\s*$",
    re.IGNORECASE,
)
# A site-packages .pth file that fails to load prints a banner and a traceback before every
# Python command of a broken environment ("Error processing line 1 of x.pth: ... Remainder of
# file ignored"): the whole block says nothing about the command's own failure.
_PTH_BANNER = re.compile(r"error processing line \d+ of .*\.pth", re.IGNORECASE)
_PTH_BANNER_END = re.compile(r"remainder of file ignored", re.IGNORECASE)
_PTH_BANNER_LINES = 14
_ERRORISH = re.compile(
    r"error|exception|fail|fatal|cannot|can't|could not|couldn't|not found|no such|denied"
    r"|invalid|refused|unable|timed? ?out|abort|panic|missing|unknown|undefined|not defined"
    r"|unexpected|traceback|exit (?:code|status)|errno",
    re.IGNORECASE,
)
# Lines that say where in the code the error is (``File "x.py", line 12``, ``Cell In[1], line
# 10``): the same message at another place is another failure.
_LOCATION = re.compile(r"\bline \d+\b(?!:)", re.IGNORECASE)
_MAX_LINES = 6
_PUNCTUATION = re.compile(r"[^\w\s]+")
_DIGITS = re.compile(r"\d+")
_DIGIT = re.compile(r"\d")
_SIGNATURE_CHARS = 400


def normalize_text(text: str) -> str:
    """Whitespace-insensitive form of a string argument.

    One-line strings (commands, queries) have runs of whitespace collapsed to one space and are
    trimmed, except inside quotes (``sed -i 's/^    x/x/'`` keeps its four spaces); multi-line
    strings (file contents, patches) keep their indentation but lose ``\\r``, trailing spaces
    and leading/trailing blank lines. Path-like strings are normalized as paths.
    """
    if "\n" not in text and "\r" not in text:
        if "  " in text or "\t" in text or text[:1].isspace() or text[-1:].isspace():
            if "'" in text or '"' in text:
                text = _collapse_outside_quotes(text)
            else:
                text = " ".join(text.split())
        if "/" in text or "\\" in text:
            return normalize_path(text)
        return text
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).strip("\n")


def normalize_code(text: str) -> str:
    """Form of a string that carries code: only line endings normalized (``\\r\\n`` -> ``\\n``)."""
    if "\r" in text:
        return text.replace("\r\n", "\n").replace("\r", "\n")
    return text


def _collapse_outside_quotes(text: str) -> str:
    """Whitespace runs collapsed and the ends trimmed, quoted parts (an unclosed quote runs to
    the end) kept as they are."""
    parts = []
    last = 0
    for match in _QUOTED.finditer(text):
        parts.append(re.sub(r"\s+", " ", text[last : match.start()]))
        parts.append(match.group())
        last = match.end()
    parts.append(re.sub(r"\s+", " ", text[last:]))
    return "".join(parts).strip()


def mask_volatile(text: str, ids: bool = False) -> str:
    """`text` with timestamps and durations (and with ``ids=True`` also UUIDs, hex or long
    numeric ids and memory addresses) replaced by placeholders such as ``<time>``."""
    # The patterns try every position of the text; most texts hold nothing they could match,
    # which one quick search tells (`_TIMES_HINT`).
    if (_TIMES_AND_IDS_HINT if ids else _TIMES_HINT).search(text) is None:
        return text
    return (_TIMES_AND_IDS if ids else _TIMES).sub(_placeholder, text)


_TIMES_HINT = re.compile(r"\d:\d|\d\s?[mnsuµ]|/tmp|/var/")
_TIMES_AND_IDS_HINT = re.compile(r"\d:\d|\d\s?[mnsuµ]|/tmp|/var/|0x|[0-9a-fA-F]{8}")
"""What every text `_TIMES` masks holds: a time a digit, a colon and a digit; a duration a digit,
then its unit (after at most one space); a scratch directory ``/tmp`` or ``/var/``. With
`_ID_PATTERNS` (`_TIMES_AND_IDS`): an address ``0x``, a UUID or an id a run of 8 hex digits. A
text without any of them is left as it is without trying every pattern at every position."""


def _key_name(key: str) -> str:
    """``durationMs``, ``duration-ms`` and ``DURATION_MS`` all name ``duration_ms``."""
    if not key.islower() and not key.isupper():
        key = _CAMEL.sub("_", key)
    return key.lower().replace("-", "_")


_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


class Normalizer:
    """Drops configured keys and normalizes strings, caching the per-key decision.

    Build one per detector; `args` and `result` return plain JSON data ready for
    `engine.loops.fingerprint.canonical_json`.
    """

    __slots__ = (
        "_arg_drop",
        "_result_drop",
        "_code",
        "_query",
        "_arg_cache",
        "_result_cache",
        "_labelled",
    )

    def __init__(
        self,
        volatile_keys: Iterable[str] = DEFAULT_VOLATILE_KEYS,
        progress_keys: Iterable[str] = DEFAULT_PROGRESS_KEYS,
        thought_keys: Iterable[str] = DEFAULT_THOUGHT_KEYS,
        code_keys: Iterable[str] = DEFAULT_CODE_KEYS,
        query_keys: Iterable[str] = DEFAULT_QUERY_KEYS,
    ) -> None:
        volatile = frozenset(_key_name(k) for k in volatile_keys)
        self._result_drop = volatile | RESULT_VOLATILE_KEYS
        self._arg_drop = volatile | {_key_name(k) for k in (*progress_keys, *thought_keys)}
        self._code = frozenset(_key_name(k) for k in code_keys)
        self._query = frozenset(_key_name(k) for k in query_keys)
        self._arg_cache: dict[str, int] = {}
        self._result_cache: dict[str, int] = {}
        self._labelled: list[str] = []

    def args(self, value: Any) -> Any:
        """Tool arguments without volatile, progress and thought keys, strings normalized."""
        return self._walk(value, self._arg_drop, self._code, self._arg_cache, False)

    def _treatment(self, key: str, drop: frozenset[str], code: frozenset[str], mask: bool) -> int:
        name = _key_name(key)
        if _is_dropped(key, drop):
            return _DROP
        if mask:  # a result
            if _REFERENCE_KEY.match(key):
                return _REF
            return _ID if _ID_KEY.search(key) and not _REFERENCE_ID_KEY.match(key) else _KEEP
        if name in code:
            return _CODE
        return _QUERY if name in self._query else _KEEP

    def result(self, value: Any) -> Any:
        """A tool result without volatile keys; timestamps and durations in strings masked, and
        the values the result itself labels as ids or volatile (``sessionId: "sess-3"``, ``pid:
        1003``) masked where its text repeats them ("still running (session sess-3, pid
        1003)")."""
        labelled = self._labelled
        labelled.clear()
        out = self._walk(value, self._result_drop, frozenset(), self._result_cache, True)
        if labelled:
            out = _mask_strings(out, sorted(set(labelled), key=len, reverse=True))
            labelled.clear()
        return out

    def volatile_values(self, args: Any) -> list[str]:
        """The values (as text) of the volatile keys in `args`; an error message that echoes a
        request id or timestamp must not get a new signature because of it."""
        found: list[str] = []
        stack = [args]
        while stack:
            value = stack.pop()
            if isinstance(value, dict):
                for key, item in value.items():
                    if isinstance(key, str) and _is_dropped(key, self._result_drop):
                        if isinstance(item, (str, int, float)) and not isinstance(item, bool):
                            found.append(str(item))
                    else:
                        stack.append(item)
            elif isinstance(value, (list, tuple)):
                stack.extend(value)
        return found

    def _reference(
        self, value: Any, drop: frozenset[str], code: frozenset[str], cache: dict[str, int]
    ) -> Any:
        """A result value naming where a call went (``conversation: {id: …}``): its own ids
        are kept as they are, the rest is normalized like any result."""
        if type(value) is not dict:
            return self._walk(value, drop, code, cache, True)
        return {
            key: item
            if type(key) is str and _ID_KEY.search(key) and type(item) in (str, int)
            else self._walk(item, drop, code, cache, True)
            for key, item in value.items()
        }

    def _walk(
        self,
        value: Any,
        drop: frozenset[str],
        code: frozenset[str],
        cache: dict[str, int],
        mask: bool,
    ) -> Any:
        kind = type(value)
        if kind is str:
            text = normalize_text(value)
            if mask and _DIGIT.search(text):
                # ids only inside free text: a lone token may be the whole answer (a stored
                # result digest fed back on replay must keep its identity)
                ids = " " in text and _HEX_RUN.search(text) is not None
                return mask_volatile(text, ids=ids)
            return text
        if kind is dict:
            out = {}
            for key, item in value.items():
                if type(key) is not str:
                    return self._walk(canonicalize(value), drop, code, cache, mask)
                treatment = cache.get(key)
                if treatment is None:
                    treatment = self._treatment(key, drop, code, mask)
                    if len(cache) > 4096:  # keys come from tool schemas; this only guards abuse
                        cache.clear()
                    cache[key] = treatment
                if treatment == _KEEP:
                    out[key] = self._walk(item, drop, code, cache, mask)
                    continue
                if mask and treatment != _REF and type(item) in (str, int):
                    text = str(item)
                    if len(text) >= 3:
                        self._labelled.append(text)
                if treatment == _DROP:
                    continue
                if treatment == _REF:
                    out[key] = self._reference(item, drop, code, cache)
                elif type(item) is str:
                    out[key] = (
                        normalize_code(item)
                        if treatment == _CODE
                        else normalize_query(item)
                        if treatment == _QUERY
                        else "<id>"
                    )
                elif treatment == _ID and type(item) is int:
                    out[key] = "<id>"
                else:
                    out[key] = self._walk(item, drop, code, cache, mask)
            return out
        if kind is list or kind is tuple:
            return [self._walk(item, drop, code, cache, mask) for item in value]
        if value is None or kind is int or kind is float or kind is bool:
            return value
        try:
            plain = canonicalize(value)
        except TypeError:
            plain = f"<{type(value).__name__}>"
        return self._walk(plain, drop, code, cache, mask)


_KEEP, _DROP, _CODE, _QUERY, _ID, _REF = 0, 1, 2, 3, 4, 5
"""How `Normalizer` treats a key: keep and normalize, drop, keep its string as code, compare
its string as a set of words, mask its value as a generated id, keep the ids of the object it
refers to."""


def _mask_strings(value: Any, labelled: list[str]) -> Any:
    """`value` with the `labelled` values inside its strings replaced by ``<id>`` (a number
    only as a whole number)."""
    if type(value) is str:
        if len(value) <= 3 or value == "<id>":
            return value
        for item in labelled:
            if item in value:
                if item.isdigit():
                    value = re.sub(rf"(?<!\d){item}(?!\d)", "<id>", value)
                else:
                    value = value.replace(item, "<id>")
        return value
    if type(value) is dict:
        return {key: _mask_strings(item, labelled) for key, item in value.items()}
    if type(value) is list:
        return [_mask_strings(item, labelled) for item in value]
    return value


def result_version(result: Any) -> str:
    """The values of `VERSION_KEYS` in a (nested) dict result, as text ("" when none): what a
    write's acknowledgement says about the new state, where its text may only echo the file."""
    found: list[str] = []
    stack = [result]
    budget = 64
    while stack and budget:
        budget -= 1
        value = stack.pop()
        if type(value) is dict:
            for key, item in value.items():
                if type(key) is str and _key_name(key) in VERSION_KEYS:
                    if type(item) in (str, int, float):
                        found.append(f"{key}={item}")
                elif type(item) in (dict, list):
                    stack.append(item)
        elif type(value) is list:
            stack.extend(value[:16])
    return ",".join(sorted(found))


def normalize_query(text: str) -> str:
    """A search query as its sorted, de-duplicated, lower-cased words."""
    return " ".join(sorted(set(_QUERY_WORDS.findall(text.lower()))))


_QUERY_WORDS = re.compile(r"\w+")
_HEX_RUN = re.compile(r"[0-9a-fA-F]{8}")


def _is_dropped(key: str, drop: frozenset[str]) -> bool:
    name = _key_name(key)
    return name in drop or name.endswith(VOLATILE_KEY_SUFFIXES)


_DEFAULT_NORMALIZER = Normalizer()


def normalize_args(args: Any) -> Any:
    """`args` normalized with the default key lists (see `Normalizer` for custom lists)."""
    return _DEFAULT_NORMALIZER.args(args)


def normalize_result(result: Any) -> Any:
    """`result` normalized with the default key lists (see `Normalizer` for custom lists)."""
    return _DEFAULT_NORMALIZER.result(result)


def result_digest(result: Any, normalizer: Normalizer = _DEFAULT_NORMALIZER) -> str:
    """Digest of a tool result after normalization; equal digests mean "no new information".

    A caller that stores only digests should store this one, so that the detector sees the same
    value whether it is fed the live result or the stored digest (a digest string is hashed as is,
    which keeps equal digests equal).
    """
    if type(result) is str and _DIGEST_TEXT.fullmatch(result):
        # a stored digest fed back (every step of a session): lower-case hex is normalized to
        # itself (no space, no path, nothing a mask matches), and its JSON text is quoted as is
        return digest(f'"{result}"')
    return normalized_digest(normalizer.result(result))


_DIGEST_TEXT = re.compile(r"[0-9a-f]+")


def _leaves(value: Any, out: list[Any]) -> None:
    if isinstance(value, dict):
        for item in value.values():
            _leaves(item, out)
    elif isinstance(value, list):
        for item in value:
            _leaves(item, out)
    elif value is not None and not isinstance(value, bool):
        out.append(value)


def informative_lines(error: str) -> str:
    """The part of a (multi-line) error text that tells one failure from another.

    Blank and separator lines, test-runner banners, build tools' closing advice (Maven, Gradle,
    npm), interpreter-internal frames and environment warnings (a broken ``.pth`` file's banner
    and traceback before every Python command) are left out; of
    the rest, the lines that read like an error (error, failed, not found, …) or say where the
    error is (``line 12``) are kept, or all of them when none does; at most the first two and the
    last four, joined with `` | ``. A one-line error is returned as it is.
    """
    if "\n" not in error:
        return error
    kept = []
    banner = 0  # lines left of a .pth banner block
    for line in error.splitlines():
        line = line.strip().strip(_SEPARATOR_CHARS)
        if banner:
            banner = 0 if _PTH_BANNER_END.match(line) else banner - 1
            continue
        if _PTH_BANNER.match(line):
            banner = _PTH_BANNER_LINES
            continue
        if line and not _BOILERPLATE.match(line):
            kept.append(line)
    errorish = [line for line in kept if _ERRORISH.search(line) or _LOCATION.search(line)]
    chosen = errorish or kept
    if len(chosen) > _MAX_LINES:
        chosen = chosen[:2] + chosen[-(_MAX_LINES - 2) :]
    return " | ".join(chosen)


def error_signature(error: str | None, args: Any = None, volatile: Iterable[str] = ()) -> str:
    """The shape of an error message: what stays the same across retries of one failure.

    Built from the `informative_lines` of the error, lower-cased, whitespace collapsed, ids /
    timestamps / durations / addresses masked, counters masked (``line 11301:`` -> ``line <n>``,
    ``attempt 3`` -> ``attempt <n>``, numbers of five or more digits), and every value the agent
    passed in `args` (normalized arguments, and each word of 4+ characters of a multi-word string
    argument) replaced by
    ``<arg>``, so retries whose arguments were jittered and echoed back in the error share one
    signature. Values in `volatile` (request ids and the like dropped from the arguments) are
    masked as ``<volatile>``. Cut to 400 chars.
    """
    text = " ".join(informative_lines(error or "").split())
    for value in volatile:
        if len(value) >= 4:
            text = text.replace(value, "<volatile>")
    leaves: list[Any] = []
    _leaves(args, leaves)
    numbers = set()
    strings: set[str] = set()
    for leaf in leaves:
        if isinstance(leaf, str):
            if 3 <= len(leaf) <= 300:
                strings.add(leaf)
            if " " in leaf:  # errors often echo one word of a command: "… for pillow==9.0"
                # (not a directory it names: ``cd /repo/core && mvn test`` and ``mvn test``
                # report the same failure at the same place)
                strings.update(
                    token
                    for token in (t.strip(_TOKEN_QUOTES) for t in leaf.split())
                    if len(token) >= 4 and not (token.startswith("/") and "." not in token)
                )
        elif isinstance(leaf, (int, float)):
            numbers.add(str(leaf))
            if isinstance(leaf, float) and leaf.is_integer():
                numbers.add(str(int(leaf)))
    for leaf in sorted(strings, key=len, reverse=True):
        text = text.replace(leaf, "<arg>")
    if numbers:
        text = _NUMBER_TOKEN.sub(lambda m: "<arg>" if m.group() in numbers else m.group(), text)
    text = mask_volatile(text, ids=True)
    text = _COUNTER.sub(_counter, text).lower()
    return text[:_SIGNATURE_CHARS]


def _counter(match: re.Match[str]) -> str:
    word = match.group(1) or match.group(2)
    return f"{word} <n>" if word else "<n>"


def error_location(signature: str) -> str:
    """Where in the code an error (its `error_signature`) says it happened: its ``line N``
    mentions, "" when it names none."""
    if "line" not in signature:
        return ""
    return ",".join(_LOCATION.findall(signature))


def turn_signature(text: str | None) -> str:
    """Comparable form of an agent's message turn: empty string for an empty turn; otherwise
    lower-cased words without punctuation, with every number replaced by ``#``."""
    if not text or not text.strip():
        return ""
    words = _PUNCTUATION.sub(" ", _DIGITS.sub("#", text.lower()))
    return " ".join(words.split())


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Leaves of nested dicts/lists keyed by their path (``a.b[0]``); a scalar maps from ``""``."""
    out: dict[str, Any] = {}
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, list) and value:
        for i, item in enumerate(value):
            out.update(flatten(item, f"{prefix}[{i}]"))
    else:
        out[prefix] = value
    return out


def values_close(
    a: Any, b: Any, numeric_abs: float, numeric_rel: float, text_similarity: float
) -> bool:
    """Whether two argument leaves differ only "slightly".

    Numbers are close within ``max(numeric_abs, numeric_rel * max(|a|, |b|))``; strings when their
    case-insensitive similarity ratio (difflib) reaches `text_similarity`; anything else only when
    equal.
    """
    if a == b:
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(a - b) <= max(numeric_abs, numeric_rel * max(abs(a), abs(b)))
    if isinstance(a, str) and isinstance(b, str):
        a, b = a.lower(), b.lower()
        matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
        if matcher.real_quick_ratio() < text_similarity or matcher.quick_ratio() < text_similarity:
            return False
        if len(a) + len(b) > 4000:  # the exact ratio is quadratic; the bound is good enough here
            return True
        return matcher.ratio() >= text_similarity
    return False
