"""Token budgets: build a context that fits the model's window (pure code, no I/O).

Layout of the built text, one segment per line group, each ending with a newline::

    system: <system prompt>
    memory: <most relevant recalled memory>
    memory: <next one, possibly trimmed at a sentence boundary>
    user: <oldest kept dialogue message>
    assistant: ...
    user: <latest user message>

Every segment starts with a letter and ends with ``\\n``. With the pre-tokenization rules of
``cl100k_base`` and ``o200k_base`` no BPE piece can then straddle two segments, so the token count
of the whole text is exactly the sum of the (cached) counts of its segments; the builder still
counts the final text once more and only returns what tiktoken confirms fits.

Priorities, highest first: the system prompt, the latest user message, recalled memories up to
their share of what is left, then the dialogue from newest to oldest (the oldest is dropped first).
Messages are never cut; only the last packed memory may be trimmed, and only at a sentence end that
lies outside every fenced code block and JSON object or array.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from operator import not_
from typing import Any

from engine.budget.tokens import ENCODING_NAMES, TokenCounter, UnknownEncoding, counter
from engine.errors import BudgetError

__all__ = ["BudgetError", "Context", "ContextBuilder", "split_sentences"]



@dataclass(frozen=True)
class Context:
    """A built context and how its tokens were spent."""

    text: str
    """The final text; its tiktoken count is `tokens`."""
    tokens: int
    """Tokens of `text` as counted by tiktoken; never above `budget`."""
    breakdown: dict[str, int]
    """Tokens per part: ``system``, ``memories``, ``dialogue`` (kept), ``reserve`` (held back
    for the reply) and ``dropped`` (tokens of memories and messages left out, including the
    trimmed-off tail of a memory)."""
    budget: int
    """Tokens the text may use: ``floor(max_tokens * (1 - reserve))``."""
    max_tokens: int
    """The model window the builder was given."""
    encoding: str
    """Encoding the counts are in."""
    messages: list[Mapping[str, Any]] = field(default_factory=list)
    """Kept dialogue messages (the caller's dicts), oldest first."""
    memories: list[str] = field(default_factory=list)
    """Kept memories in relevance order; the last one may be trimmed."""
    dropped_messages: list[int] = field(default_factory=list)
    """Indexes (into the given dialogue) of the messages left out."""
    dropped_memories: list[int] = field(default_factory=list)
    """Indexes (into the given memories) of the memories left out entirely."""
    trimmed_memory: int | None = None
    """Index of the memory kept only in part, if any."""


_FENCE_MARK = re.compile(r"`{3,}|~{3,}")
# A sentence ends after . ! ? (then closing quotes/brackets and whitespace), after a Chinese or
# full-width terminator, or at a line break.
_SENTENCE_END = re.compile(r"""[.!?]+["'”’)\]]*(?:\s+|$)|[。！？；…]+[”’」』）]*\s*|\n+""")
_BRACKETS = {"{": "}", "[": "]"}


def _protected_spans(text: str) -> list[tuple[int, int]]:
    """Half-open spans that must not be cut: fenced code blocks, bracketed JSON-like blocks."""
    spans: list[tuple[int, int]] = []
    # Fences are matched wherever they appear, not only at line starts: being conservative
    # costs at most a cut point.
    opening = None
    for mark in _FENCE_MARK.finditer(text):
        if opening is None:
            opening = mark
        elif mark.group()[0] == opening.group()[0] and len(mark.group()) >= len(opening.group()):
            spans.append((opening.start(), mark.end()))
            opening = None
    if opening is not None:  # an unclosed fence runs to the end
        spans.append((opening.start(), len(text)))
    fenced = list(spans)

    def in_fence(i: int) -> int | None:
        for start, end in fenced:
            if start <= i < end:
                return end
        return None

    i, n = 0, len(text)
    while i < n:
        skip = in_fence(i)
        if skip is not None:
            i = skip
            continue
        if text[i] in _BRACKETS:
            end = _match_brackets(text, i)
            spans.append((i, end))
            i = end
            continue
        i += 1
    return sorted(spans)


def _match_brackets(text: str, start: int) -> int:
    """End (exclusive) of the bracketed block opening at ``start``; the text end if unbalanced."""
    stack = [_BRACKETS[text[start]]]
    in_string = False
    i = start + 1
    n = len(text)
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 2
                continue
            if ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in _BRACKETS:
            stack.append(_BRACKETS[ch])
        elif ch == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    return n


def split_sentences(text: str) -> list[str]:
    """Split text into sentences, never inside a fenced code block or a JSON object/array.

    English (``. ! ?``) and Chinese (``。！？；…``) terminators and line breaks end a sentence.
    Each piece keeps its trailing whitespace, so ``"".join(pieces) == text``.

    Args:
        text: any text.

    Returns:
        The sentences in order (a single piece when no cut is allowed).
    """
    if not text:
        return []
    spans = _protected_spans(text)
    cuts: list[int] = []
    for match in _SENTENCE_END.finditer(text):
        cut = match.end()
        if cut <= 0 or cut >= len(text):
            continue
        if any(start < cut < end for start, end in spans):
            continue
        cuts.append(cut)
    for _, end in spans:  # the end of a fenced block or JSON value is a clean place to cut
        if 0 < end < len(text) and text[end - 1] == "\n":
            cuts.append(end)
    pieces = []
    prev = 0
    for cut in sorted(set(cuts)):
        if cut > prev:
            pieces.append(text[prev:cut])
            prev = cut
    pieces.append(text[prev:])
    return pieces


def _label(role: Any, index: int) -> str:
    if not isinstance(role, str) or not role:
        raise BudgetError(
            f"dialogue message {index} has no role: each message needs a 'role' string"
        )
    # The segment must start with a letter (see the module docstring).
    return role if role[0].isalpha() else f"role {role}"


def _content_text(message: Mapping[str, Any]) -> str:
    content = message.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    else:  # multi-part content (a list of parts) or other plain data
        text = json.dumps(content, ensure_ascii=False, default=str)
    tool_calls = message.get("tool_calls")
    if tool_calls:
        extra = json.dumps(tool_calls, ensure_ascii=False, default=str)
        text = f"{text}\n{extra}" if text else extra
    return text


def _segment(label: str, body: str) -> str:
    return f"{label}: {body}\n"


def _message_segment(message: Mapping[str, Any], index: int) -> str:
    role = message.get("role")
    content = message.get("content")
    if (type(role) is str and type(content) is str and role[:1].isalpha()
            and not message.get("tool_calls")):
        return f"{role}: {content}\n"  # the common message, without the helpers
    return _segment(_label(role, index), _content_text(message))


class ContextBuilder:
    """Packs a system prompt, recalled memories and dialogue into a token budget.

    Example::

        ctx = ContextBuilder(max_tokens=8192, reserve=0.2).build(
            system="You are…", memories=[h.text for h in hits], dialogue=messages)
    """

    def __init__(
        self,
        max_tokens: int = 8192,
        reserve: float = 0.2,
        encoding: str = "cl100k_base",
        memory_share: float = 0.25,
        verify: bool = True,
    ) -> None:
        """Create a builder.

        Args:
            max_tokens: the model's context window.
            reserve: fraction of the window held back for the reply, in [0, 1).
            encoding: ``cl100k_base`` or ``o200k_base``.
            memory_share: fraction of what is left after the system prompt and the latest user
                message that memories may always claim; when the dialogue needs less, memories
                may use the rest too. In [0, 1].
            verify: count the final text once more with tiktoken (about 1 ms for 6,000 tokens)
                and drop more if it were over budget. The layout makes this a no-op; it is the
                belt to that pair of braces.

        Raises:
            BudgetError: max_tokens, reserve or memory_share out of range, or unknown encoding.
            EncodingUnavailable, EncodingIntegrityError: the encoding's rank file is missing or
                corrupt (see `engine.budget.tokens.get_encoding`).
        """
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise BudgetError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        if (
            isinstance(reserve, bool)
            or not isinstance(reserve, (int, float))
            or not (0.0 <= reserve < 1.0)
        ):
            raise BudgetError(
                f"reserve must be a fraction in [0, 1) of max_tokens held for the reply, "
                f"got {reserve!r}"
            )
        if not isinstance(memory_share, (int, float)) or not (0.0 <= memory_share <= 1.0):
            raise BudgetError(f"memory_share must be in [0, 1], got {memory_share!r}")
        if encoding not in ENCODING_NAMES:
            raise BudgetError(
                f"unknown encoding {encoding!r}: use one of {', '.join(ENCODING_NAMES)}"
            )
        self.max_tokens = max_tokens
        self.reserve = float(reserve)
        self.encoding = encoding
        self.memory_share = float(memory_share)
        self.verify = verify
        self.budget = math.floor(max_tokens * (1.0 - self.reserve))
        try:
            self._counter: TokenCounter = counter(encoding)
        except UnknownEncoding as exc:  # pragma: no cover - guarded above
            raise BudgetError(str(exc)) from exc

    def count(self, text: str) -> int:
        """Tokens of ``text`` in this builder's encoding (cached by content).

        Args:
            text: any string.

        Returns:
            The token count.
        """
        return self._counter.count(text)

    def build(
        self,
        system: str = "",
        memories: Sequence[str] = (),
        dialogue: Sequence[Mapping[str, Any]] = (),
    ) -> Context:
        """Build a context that fits ``max_tokens * (1 - reserve)`` tokens.

        Args:
            system: the system prompt; always kept whole.
            memories: recalled memory texts, most relevant first.
            dialogue: chat messages (``role``, ``content``, optional ``tool_calls``), oldest
                first. The latest ``user`` message is always kept.

        Returns:
            The `Context`.

        Raises:
            BudgetError: a bad argument, or the system prompt (alone, or with the latest user
                message) does not fit the budget.
        """
        if not isinstance(system, str):
            raise BudgetError(f"system must be a string, got {type(system).__name__}")
        if isinstance(memories, str) or not isinstance(memories, Sequence):
            raise BudgetError("memories must be a list of strings, most relevant first")
        if isinstance(dialogue, (str, Mapping)) or not isinstance(dialogue, Sequence):
            raise BudgetError("dialogue must be a list of message dicts, oldest first")
        counter = self._counter
        count_line = counter.count_line
        budget = self.budget

        system_segment = _segment("system", system)
        system_tokens = count_line("system", system)
        if system_tokens > budget:
            raise BudgetError(
                f"the system prompt alone takes {system_tokens} tokens, over the budget of "
                f"{budget} (max_tokens {self.max_tokens} less a {self.reserve:.0%} reply "
                "reserve): shorten the system prompt or raise max_tokens"
            )

        # Every message is counted on every build (the breakdown's ``dropped`` and the memories'
        # room need them all), so the common message, a plain string under a role that is its
        # own label, is looked up by the caller's own strings without making its line.
        known_lines = counter.lines.get
        message_tokens: list[int] = []
        append = message_tokens.append
        for message in dialogue:
            if type(message) is not dict and not isinstance(message, Mapping):
                raise BudgetError(
                    f"dialogue message {len(message_tokens)} is a {type(message).__name__}, "
                    "not a dict with 'role' and 'content'"
                )
            role = message.get("role")
            content = message.get("content")
            if type(role) is str and type(content) is str and not message.get("tool_calls"):
                known = known_lines(role)
                n = None if known is None else known.get(content)
                if n is not None:
                    append(n)
                    continue
            append(count_line(_label(role, len(message_tokens)), _content_text(message)))
        latest_user = next(
            (i for i in range(len(dialogue) - 1, -1, -1) if dialogue[i].get("role") == "user"),
            None,
        )
        pinned_tokens = message_tokens[latest_user] if latest_user is not None else 0
        if system_tokens + pinned_tokens > budget:
            raise BudgetError(
                f"the system prompt ({system_tokens} tokens) and the latest user message "
                f"({pinned_tokens} tokens) together exceed the budget of {budget}: shorten "
                "them or raise max_tokens"
            )
        room = budget - system_tokens - pinned_tokens

        all_message_tokens = sum(message_tokens)
        other_tokens = all_message_tokens - pinned_tokens

        for j, memory in enumerate(memories):
            if not isinstance(memory, str):
                raise BudgetError(f"memory {j} is a {type(memory).__name__}, not a string")
        memory_tokens = [count_line("memory", memory) for memory in memories]
        all_memory_tokens = sum(memory_tokens)
        memory_room = min(
            all_memory_tokens, max(math.floor(room * self.memory_share), room - other_tokens)
        )

        kept_memories, kept_memory_segments, memory_used, trimmed = self._pack_memories(
            memories, memory_tokens, memory_room
        )
        dialogue_room = room - memory_used

        # What is kept: the messages from `start` on, and the latest user message.
        dialogue_used = pinned_tokens
        spent = 0
        start = len(message_tokens)
        for i in range(len(message_tokens) - 1, -1, -1):
            if i == latest_user:
                continue
            if spent + message_tokens[i] > dialogue_room:
                break  # drop this one and everything older
            spent += message_tokens[i]
            start = i
        dialogue_used += spent
        kept = list(range(start, len(message_tokens)))
        if latest_user is not None and latest_user < start:
            kept.insert(0, latest_user)

        text, tokens, kept, kept_memory_segments, memory_used, dialogue_used = self._assemble(
            system_segment,
            system_tokens,
            kept_memory_segments,
            dialogue,
            message_tokens,
            kept,
            latest_user,
            memory_used,
            dialogue_used,
        )
        kept_memories = kept_memories[: len(kept_memory_segments)]
        if trimmed is not None and trimmed >= len(kept_memories):
            trimmed = None
        dropped_memory_idx = list(range(len(kept_memories), len(memories)))
        keep = [False] * len(message_tokens)
        for i in kept:
            keep[i] = True
        dropped_messages = list(compress(range(len(keep)), map(not_, keep)))
        # the kept messages' tokens are `dialogue_used`, whatever `_assemble` shed
        dropped_tokens = all_memory_tokens - memory_used + all_message_tokens - dialogue_used

        return Context(
            text=text,
            tokens=tokens,
            breakdown={
                "system": system_tokens,
                "memories": memory_used,
                "dialogue": dialogue_used,
                "reserve": self.max_tokens - budget,
                "dropped": dropped_tokens,
            },
            budget=budget,
            max_tokens=self.max_tokens,
            encoding=self.encoding,
            messages=[dialogue[i] for i in kept],
            memories=kept_memories,
            dropped_messages=dropped_messages,
            dropped_memories=dropped_memory_idx,
            trimmed_memory=trimmed,
        )

    def _pack_memories(
        self,
        memories: Sequence[str],
        tokens: list[int],
        room: int,
    ) -> tuple[list[str], list[str], int, int | None]:
        """Greedy packing in relevance order; the first one that does not fit is trimmed."""
        kept: list[str] = []
        kept_segments: list[str] = []
        used = 0
        trimmed: int | None = None
        for j, memory in enumerate(memories):
            if used + tokens[j] <= room:
                kept.append(memory)
                kept_segments.append(_segment("memory", memory))
                used += tokens[j]
                continue
            part = self._trim(memories[j], room - used)
            if part is not None:
                text, n = part
                kept.append(text)
                kept_segments.append(_segment("memory", text))
                used += n
                trimmed = j
            break
        return kept, kept_segments, used, trimmed

    def _trim(self, memory: str, room: int) -> tuple[str, int] | None:
        """Longest sentence prefix of ``memory`` whose segment fits ``room`` tokens, if any."""
        if room <= 0:
            return None
        sentences = split_sentences(memory)
        if len(sentences) < 2:
            return None
        prefixes = []
        acc = ""
        for sentence in sentences[:-1]:  # the full text is known not to fit
            acc += sentence
            prefixes.append(acc.rstrip())
        count = self._counter.count_uncached
        lo, hi, best = 0, len(prefixes) - 1, None
        while lo <= hi:  # counts grow with the prefix, so bisect
            mid = (lo + hi) // 2
            n = count(_segment("memory", prefixes[mid]))
            if n <= room:
                best = (prefixes[mid], n)
                lo = mid + 1
            else:
                hi = mid - 1
        if best is None or not best[0]:
            return None
        return best

    def _assemble(
        self,
        system_segment: str,
        system_tokens: int,
        memory_segments: list[str],
        dialogue: Sequence[Mapping[str, Any]],
        message_tokens: list[int],
        kept: list[int],
        latest_user: int | None,
        memory_used: int,
        dialogue_used: int,
    ) -> tuple[str, int, list[int], list[str], int, int]:
        """Join the kept parts (`kept`: indexes of kept messages, ascending); with ``verify``,
        drop more until tiktoken confirms the fit."""
        count = self._counter.count_uncached
        memory_segments = list(memory_segments)
        message_segments = {i: _message_segment(dialogue[i], i) for i in kept}
        while True:
            parts = [system_segment, *memory_segments]
            parts.extend(message_segments[i] for i in kept)
            text = "".join(parts)
            estimate = system_tokens + memory_used + dialogue_used
            if not self.verify:
                return text, estimate, kept, memory_segments, memory_used, dialogue_used
            tokens = count(text)
            if tokens <= self.budget:
                return text, tokens, kept, memory_segments, memory_used, dialogue_used
            # Only reachable if segment counts were not additive: shed the oldest message,
            # then the least relevant memory.
            oldest = next((i for i in kept if i != latest_user), None)
            if oldest is not None:
                kept = [i for i in kept if i != oldest]
                dialogue_used -= message_tokens[oldest]
            elif memory_segments:
                memory_used -= self._counter.count(memory_segments.pop())
            else:
                raise BudgetError(
                    f"the system prompt and the latest user message take {tokens} tokens "
                    f"together, over the budget of {self.budget}: shorten them or raise max_tokens"
                )
