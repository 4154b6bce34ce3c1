"""Contradiction judges: does a newer memory replace an older one? (pure code)

`SessionMemory.add` asks a `ContradictionJudge`, in one batch, about the older memories a new one
may replace (at most `MemoryConfig.judge_pairs`: the same owner's, closest in words or sharing a
subject key, newest first). Each answer is a `Judgement` with a confidence and a reason, which the
memory stores on the invalidated item and in its correction log, with the judge's name, so the
console shows why and by whom a memory was invalidated.

Shipped judges:

- `RulesJudge` (`engine.memory.rules`, the default): conservative, offline rules for first-person
  and owner-attributed changes of state in English and Chinese.
- `EndpointJudge` (`engine.memory.endpoint`): the model you already run, over any
  OpenAI-compatible endpoint; the route to recall on free text.
- `FunctionJudge`: calls a function the user passes (their LLM), batched and cached.
- `NLIJudge` (`engine.memory.nli`): a natural-language-inference model the user has on disk.
  No NLI model ships with Rewind (none is packaged on the registries this project installs
  from), and weights are never fetched from a model hub at run time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "ContradictionJudge",
    "FunctionJudge",
    "Judgement",
]


@dataclass(frozen=True)
class Judgement:
    """A judge's answer about one (older, newer) pair."""

    contradicts: bool
    """Whether the newer memory replaces the older one."""
    confidence: float
    """0..1; the memory invalidates only at or above `MemoryConfig.min_confidence`."""
    reason: str
    """One sentence for the console."""
    kind: str = "update"
    """``update``, ``negation``, ``key`` (an exact keyed fact) or the judge's own word."""


NO = Judgement(False, 0.0, "")


@runtime_checkable
class ContradictionJudge(Protocol):
    """Decides which older memories a newer one replaces."""

    name: str
    """Shown with each invalidation (``rules``, ``llm``, …). A judge may also have
    ``keys(text) -> set of str`` (the owner|attribute pairs a text claims): older memories sharing
    one are candidates even without a shared word."""

    def judge(self, pairs: Sequence[tuple[str, str]]) -> list[Judgement]:
        """Judge a batch of pairs.

        Args:
            pairs: ``(older_text, newer_text)`` pairs, all with the same newer text when called
                by `SessionMemory.add`.

        Returns:
            One `Judgement` per pair, in order.
        """
        ...


class _Cache:
    """A small LRU of judgements by (older, newer) text."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data: OrderedDict[tuple[str, str], Judgement] = OrderedDict()

    def get(self, pair: tuple[str, str]) -> Judgement | None:
        found = self.data.get(pair)
        if found is not None:
            self.data.move_to_end(pair)
        return found

    def put(self, pair: tuple[str, str], value: Judgement) -> None:
        self.data[pair] = value
        if len(self.data) > self.size:
            self.data.popitem(last=False)


class FunctionJudge:
    """Asks a function the user passes (an LLM call, a local NLI model), batched and cached."""

    def __init__(
        self,
        fn: Callable[[list[tuple[str, str]]], Sequence[Any]],
        name: str = "llm",
        cache_size: int = 4096,
    ) -> None:
        """Wrap a judging function.

        Args:
            fn: takes ``[(older_text, newer_text), …]`` and returns one answer per pair: a
                `Judgement`, a ``(contradicts, confidence, reason)`` tuple, a dict with those
                keys, or a bool (confidence 1 or 0).
            name: shown with each invalidation.
            cache_size: pairs remembered (the same pair is never asked twice while cached).
        """
        self.fn = fn
        self.name = name
        self._cache = _Cache(cache_size)

    def judge(self, pairs: Sequence[tuple[str, str]]) -> list[Judgement]:
        """Judge a batch; only the pairs not cached reach the function, in one call.

        Raises:
            ValueError: the function returned a different number of answers than pairs.
        """
        out: list[Judgement | None] = [self._cache.get(p) for p in pairs]
        todo = list(dict.fromkeys(p for p, j in zip(pairs, out, strict=True) if j is None))
        if todo:
            answers = list(self.fn(todo))
            if len(answers) != len(todo):
                raise ValueError(
                    f"judge {self.name!r} returned {len(answers)} answers for {len(todo)} pairs: "
                    "return exactly one per pair, in order"
                )
            for pair, answer in zip(todo, answers, strict=True):
                self._cache.put(pair, _judgement(answer))
        return [
            j if j is not None else self._cache.get(p) or NO
            for p, j in zip(pairs, out, strict=True)
        ]


def _judgement(answer: Any) -> Judgement:
    if isinstance(answer, Judgement):
        return answer
    if isinstance(answer, bool):
        return Judgement(answer, 1.0 if answer else 0.0, "")
    if isinstance(answer, dict):
        return Judgement(
            bool(answer.get("contradicts")),
            float(answer.get("confidence", 1.0 if answer.get("contradicts") else 0.0)),
            str(answer.get("reason", "")),
            str(answer.get("kind", "update")),
        )
    contradicts, confidence, reason = answer
    return Judgement(bool(contradicts), float(confidence), str(reason))
