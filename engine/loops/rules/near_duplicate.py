"""``near_duplicate``: the same failure (or side effect) on the same target while the agent only
nudges its arguments."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, Final

from engine.loops.normalize import command_words, flatten, shell_target, values_close
from engine.loops.rules.base import Finding, Rule, clip, quote
from engine.loops.window import CALL, Observation, Window

__all__ = ["NEAR_DUPLICATE", "NearDuplicate"]

NEAR_DUPLICATE: Final = "near_duplicate"

_MISSING = object()
_EMPTY: tuple[Any, ...] = (None, "", "None", "null", [], {})
"""Values an agent gives an optional argument when it means none (compared with ``in``, so
``[]`` and ``{}`` match empty containers only; flattened leaves are never containers with
items)."""


@dataclass(slots=True)
class _Attempt:
    """A member of a near-duplicate chain."""

    index: int
    leaves: dict[str, Any]
    progress: int
    error: str = ""
    """The error text of a failure ("" for a side effect)."""
    turn: str | int = -1
    """The model response that issued it (`Step.turn`), else its own index: one attempt."""


class NearDuplicate(Rule):
    """Fires at `near_duplicate_threshold` failures of one tool with one error signature on one
    target (or side-effecting successes on one target) whose arguments differ only slightly,
    with no progress and no success of that tool in between. The target is the values of the
    `target_keys`, or for a free-form shell command its program, sub-command and paths.

    For failures, three more changes are details, however large: a command that keeps its words
    and changes only its flags and the directories of its paths (``mvn -q test -Dtest=A`` and
    ``mvn test -o -Dtest=A -DfailIfNoTests=false`` failing the same way: the same build failure,
    the same target); a number the error quotes back each time (``but paid 417``, ``but paid
    822``: the same complaint about the amount the agent keeps changing); and any other value of
    an argument that both errors name without quoting the value given (``unexpected keyword
    argument 'address'`` for "Cairo", then "Cairo, Egypt": no value fixes a wrong name). An
    argument left out and the same argument given an empty value (null, ``""``, ``"None"``,
    ``[]``, ``{}``) are the same call, for failures and side effects alike:
    ``get_user_tickets()`` and ``get_user_tickets(status="None")`` failing the same way are one
    attempt made again.

    Calls issued by one model response (`Step.turn`) are one attempt: three different guesses
    of one batch that fail alike are one try, so the chain must span `near_duplicate_threshold`
    turns."""

    id = NEAR_DUPLICATE
    kinds = frozenset({CALL})

    def __init__(
        self,
        near_duplicate_threshold: int,
        near_max_changed: int,
        near_numeric_abs: float,
        near_numeric_rel: float,
        near_text_similarity: float,
        target_keys: frozenset[str],
    ) -> None:
        if near_duplicate_threshold < 2:
            raise ValueError(
                f"near_duplicate_threshold must be at least 2, got {near_duplicate_threshold}"
            )
        self.threshold = near_duplicate_threshold
        self.max_changed = near_max_changed
        self.numeric_abs = near_numeric_abs
        self.numeric_rel = near_numeric_rel
        self.text_similarity = near_text_similarity
        self.target_keys = target_keys
        self._shapes: dict[str, tuple[str, dict[str, Any]]] = {}
        super().__init__()

    @property
    def span(self) -> int:
        return self.threshold

    def reset(self) -> None:
        self._chains: dict[tuple[str, bool, str, str], deque[_Attempt]] = {}

    def after_flag(self) -> None:
        self._chains.clear()

    def check(self, obs: Observation, window: Window) -> Finding | None:
        step = obs.step
        if step.ok and not step.side_effect:
            return None
        tool = obs.tool
        assert tool is not None
        index, signature = obs.index, obs.signature
        target, leaves = self._shape(obs.call, obs.args)
        key = (tool, step.ok, signature, target)
        if len(self._chains) > 64:  # a chain whose last attempt left the window is broken
            oldest = index - window.size
            self._chains = {k: c for k, c in self._chains.items() if c and c[-1].index > oldest}
        chain = self._chains.get(key)
        if chain is None:
            chain = self._chains[key] = deque(maxlen=8)
        elif chain:
            last = chain[-1]
            broken = (
                last.progress != obs.progress_before
                or last.index <= window.fence
                or index - last.index >= window.size
                or (not step.ok and window.last_ok.get(tool, -1) > last.index)
            )
            if broken:
                chain.clear()
        turn = step.turn
        chain.append(
            _Attempt(
                index,
                leaves,
                window.progress,
                step.error or "" if not step.ok else "",
                index if turn is None else turn,
            )
        )
        needed = self.threshold
        if len(chain) < needed:
            return None
        near = self._near_group(chain, step.ok)
        if len(near) < needed or not self.allowed((tool,)):
            return None
        turns = len({a.turn for a in near})
        if turns < needed:  # guesses issued together are one attempt
            return None
        diffs = _differences([a.leaves for a in near])
        if not diffs:  # nothing varied: an exact repeat, judged by its own threshold
            return None
        changed = ", ".join(sorted(diffs)[:4])
        details = {
            "count": len(near),
            "target": target,
            "arg_diffs": diffs,
            "error_signature": signature if not step.ok else None,
        }
        if turns < len(near):
            details["turns"] = turns
        if step.ok:
            explanation = (
                f"{tool} performed nearly the same side effect {len(near)} times on the same "
                f"target, changing only {changed}, so the action is being repeated."
            )
            advice = (
                f"The {tool} action already succeeded; a reworded repeat is a duplicate, do not "
                "perform it again."
            )
        else:
            explanation = (
                f"{tool} failed {len(near)} times with the same error ({quote(step.error)}) on "
                f"the same target while the agent only nudged its arguments ({changed} changed)."
            )
            advice = (
                f"Small changes to the {tool} arguments keep failing with the same error; step "
                "back and change the approach."
            )
        return Finding(
            f"{tool}\x00{step.ok}\x00{signature}\x00{target}",
            tool,
            [a.index for a in near],
            near[0].index,
            explanation,
            advice,
            details,
        )

    def _target(self, args: Any) -> str:
        """The target keys' values, else what a shell command acts on (`shell_target`)."""
        if not isinstance(args, dict):
            return ""
        keys = self.target_keys
        parts = [
            f"{key}={args[key]!r}" for key in sorted(args) if key in keys or key.endswith("_id")
        ]
        return ",".join(parts) if parts else shell_target(args)

    def _shape(self, call: str, args: Any) -> tuple[str, dict[str, Any]]:
        """Target and flattened leaves of a call's arguments, cached per call fingerprint."""
        shape = self._shapes.get(call)
        if shape is None:
            if len(self._shapes) >= 256:
                self._shapes.clear()
            shape = self._shapes[call] = (self._target(args), flatten(args))
        return shape

    def _near_group(self, chain: deque[_Attempt], side_effect: bool) -> list[_Attempt]:
        """The attempts linked to the newest one by a path of near-duplicate pairs, oldest
        first (``#submit`` ~ ``button#submit`` ~ ``#submit-button``)."""
        group = [chain[-1]]
        rest = list(chain)[:-1]
        frontier = [chain[-1]]
        while frontier and rest:
            current = frontier.pop()
            linked = [a for a in rest if self._near(a, current, side_effect)]
            if linked:
                rest = [a for a in rest if a not in linked]
                group.extend(linked)
                frontier.extend(linked)
        return sorted(group, key=lambda a: a.index)

    def _near(self, first: _Attempt, second: _Attempt, side_effect: bool) -> bool:
        a, b = first.leaves, second.leaves
        changed = 0
        for path in a.keys() | b.keys():
            x, y = a.get(path, _MISSING), b.get(path, _MISSING)
            if x == y:
                continue
            if (x is _MISSING and y in _EMPTY) or (y is _MISSING and x in _EMPTY):
                continue  # an optional argument left out or given an empty value
            changed += 1
            if changed > self.max_changed or x is _MISSING or y is _MISSING:
                return False
            if side_effect and not (isinstance(x, str) and isinstance(y, str)):
                return False  # a different number in a side effect is a different entity
            if values_close(x, y, self.numeric_abs, self.numeric_rel, self.text_similarity):
                continue
            if side_effect or not _detail(path, x, y, first.error, second.error):
                return False
        return True


def _detail(path: str, x: Any, y: Any, error_x: str, error_y: str) -> bool:
    """Whether two values of argument `path` of two failures (with the same error signature)
    differ only in a detail: a command's flags and directories, a number each error quotes, or
    any value of an argument both errors name without quoting the value given (``unexpected
    keyword argument 'address'``: no value fixes a wrong name). Another id or name is another
    thing to try, not a detail."""
    if isinstance(x, str) and isinstance(y, str):
        words = command_words(x)
        return (bool(words) and words == command_words(y)) or _named(path, x, y, error_x, error_y)
    if isinstance(x, bool) or isinstance(y, bool):
        return False
    if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
        return False
    return _quotes(error_x, x) and _quotes(error_y, y)


def _named(path: str, x: str, y: str, error_x: str, error_y: str) -> bool:
    """Whether each error quotes the argument's name and neither quotes the value it got."""
    key = path.rsplit(".", 1)[-1].split("[", 1)[0]
    if not key:
        return False
    named = (f"'{key}'", f'"{key}"', f"`{key}`")
    return (
        any(n in error_x for n in named)
        and any(n in error_y for n in named)
        and (not x or x not in error_x)
        and (not y or y not in error_y)
    )


def _quotes(error: str, number: float) -> bool:
    """Whether `error` quotes `number` (as a whole number, not inside a longer one)."""
    text = str(int(number)) if float(number).is_integer() else str(number)
    start = error.find(text)
    while start >= 0:
        end = start + len(text)
        if (start == 0 or not error[start - 1].isdigit()) and (
            end == len(error) or not error[end].isdigit()
        ):
            return True
        start = error.find(text, end)
    return False


def _differences(attempts: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Argument paths whose values differ across attempts, with each attempt's value."""
    paths: dict[str, None] = {}
    for leaves in attempts:
        paths.update(dict.fromkeys(leaves))
    out = {}
    for path in paths:
        values = [leaves.get(path) for leaves in attempts]
        if any(v != values[0] for v in values[1:]):
            out[path or "(value)"] = [clip(v, 80) if isinstance(v, str) else v for v in values]
    return out
