"""View model of the session page's Memory tab: the memory table (why, by which judge and how
surely a memory was invalidated, and what replaced it), the lifecycle log, and the decay chart's
frames (pure, no Streamlit, no I/O)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import pandas as pd

from dashboard.views.common import when


class MemoryRecord(Protocol):
    """What this tab reads of a memory (`Session.memory.items()`). The engine's memory record is
    not among its public names, the only ones the console imports, so the fields read are named
    here and mypy checks the engine's record against them."""

    @property
    def id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def key(self) -> str | None: ...
    @property
    def tier(self) -> str: ...
    @property
    def importance(self) -> float: ...
    @property
    def created_at(self) -> float: ...
    @property
    def access_times(self) -> Sequence[float]: ...
    @property
    def access_count(self) -> int: ...
    @property
    def invalid_at(self) -> float | None: ...
    @property
    def invalid_reason(self) -> str | None: ...
    @property
    def invalid_by(self) -> str | None: ...
    @property
    def invalid_confidence(self) -> float | None: ...
    @property
    def superseded_by(self) -> str | None: ...


class DecayCurve(Protocol):
    """What the decay chart reads of one window's curves (`Session.memory.curves`), named here for
    the same reason as `MemoryRecord`."""

    @property
    def times(self) -> Sequence[float]: ...
    @property
    def weights(self) -> Mapping[str, Sequence[float | None]]: ...
    @property
    def accesses(self) -> Mapping[str, Sequence[tuple[float, float]]]: ...
    @property
    def threshold(self) -> float: ...


def memory_label(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def memory_names(items: Sequence[MemoryRecord]) -> dict[str, str]:
    """Memory id -> its short text, numbered where two would read the same (legend entries)."""
    names: dict[str, str] = {}
    seen: Counter[str] = Counter()
    for m in items:
        name = memory_label(m.text)
        seen[name] += 1
        names[m.id] = name if seen[name] == 1 else f"{name} ({seen[name]})"
    return names


# The decay chart spans seconds (recalls during the session) and weeks (a 7-day half-life): a
# log axis of the time since the first memory shows both, sampled a decade at a time.
DECAY_POINTS = 19
"""Samples per decade of the decay chart."""
DECAY_LAST_DECADE = 9
"""The chart never reaches past 10^9 s (31 years) after the first memory."""


def decay_first_decade(items: Sequence[MemoryRecord], start: float) -> int:
    """The decade (10^k s after the first memory) where the decay chart begins: the one holding
    the earliest later event (another memory written, a recall), between 1 ms and 1 s."""
    offsets = [t - start for m in items for t in (m.created_at, *m.access_times) if t > start]
    first = min(offsets, default=1.0)
    return max(-3, min(0, math.floor(math.log10(first))))


def decay_windows(items: Sequence[MemoryRecord], start: float) -> list[tuple[float, float]]:
    """(from, to) unix times, one per decade of the time since the first memory, from
    `decay_first_decade` to 10^DECAY_LAST_DECADE s; the loader stops early with `decay_done`."""
    first = decay_first_decade(items, start)
    return [(start + 10.0 ** k, start + 10.0 ** (k + 1)) for k in range(first, DECAY_LAST_DECADE)]


def decay_done(curve: DecayCurve, end: float, now: float) -> bool:
    """Whether the chart reached far enough: past now, and every memory under the threshold."""
    last = [series[-1] for series in curve.weights.values() if series]
    return end >= now and all(w is not None and w < curve.threshold for w in last)


def decay_frames(items: Sequence[MemoryRecord], curves: Sequence[DecayCurve], start: float,
                 now: float) -> tuple[pd.DataFrame, pd.DataFrame, float | None]:
    """(curves, recalls, threshold) for `charts.decay_curves` from the `Curve` of each window of
    `decay_windows`: per memory its weight at each sample (elapsed seconds since the first
    memory, clock time, `ahead` for samples after now: what happens if it is not recalled
    again) and each recall once."""
    names = memory_names(items)
    rows, hits, seen = [], [], set()
    for mid in dict.fromkeys([m.id for m in items]):
        for curve in curves:
            series = curve.weights.get(mid) or []
            rows += [{"memory": names.get(mid, mid), "elapsed": t - start, "t": when(t),
                      "strength": w, "ahead": t > now}
                     for t, w in zip(curve.times, series, strict=True) if w is not None]
    for curve in curves:
        for mid, marks in curve.accesses.items():
            for t, w in marks:
                if (mid, t) not in seen:
                    seen.add((mid, t))
                    hits.append({"memory": names.get(mid, mid), "elapsed": t - start,
                                 "t": when(t), "strength": w})
    columns = ["memory", "elapsed", "t", "strength"]
    frame = pd.DataFrame(rows, columns=[*columns, "ahead"])
    frame = frame.drop_duplicates(["memory", "elapsed"])
    threshold = curves[0].threshold if curves else None
    return frame.reset_index(drop=True), pd.DataFrame(hits, columns=columns), threshold


JUDGE_WORDS = {"key": "key (exact fact)", "rules": "rules judge", "llm": "your LLM judge",
               "nli": "NLI model"}
"""How the judge that invalidated a memory reads; other names as they are."""
MEMORY_COLUMNS = ["memory", "key", "state", "why", "judge", "confidence", "replaced by", "tier",
                  "importance", "recalls", "created"]


def memory_table(items: Sequence[MemoryRecord]) -> pd.DataFrame:
    """One row per memory: its text and fact key, and for an invalidated one why, by which judge,
    how sure the judge was and which memory replaced it (by its text, else its id)."""
    texts = {m.id: m.text for m in items}
    rows = []
    for m in items:
        invalid = m.invalid_at is not None
        by = m.invalid_by
        newer = m.superseded_by
        rows.append({
            "memory": m.text, "key": m.key or "",
            "state": f"invalidated {when(m.invalid_at):%Y-%m-%d %H:%M:%S}" if invalid else "valid",
            "why": (m.invalid_reason or "no reason recorded") if invalid else "",
            "judge": JUDGE_WORDS.get(by, by) if invalid and by else "",
            "confidence": m.invalid_confidence if invalid else None,
            "replaced by": memory_label(texts.get(newer, newer), 60) if invalid and newer else "",
            "tier": m.tier, "importance": m.importance, "recalls": m.access_count,
            "created": when(m.created_at)})
    frame = pd.DataFrame(rows, columns=MEMORY_COLUMNS)
    frame["confidence"] = frame["confidence"].astype("Float64")
    return frame


def invalidated_text(table: pd.DataFrame) -> str:
    """A line over the memory table: how many memories were invalidated, and by what."""
    gone = table[table["why"] != ""]
    total = f"{len(table)} memor{'y' if len(table) == 1 else 'ies'}"
    if gone.empty:
        return f"{total}, none invalidated."
    judges = ", ".join(f"{name} ×{n}" if n > 1 else name
                       for name, n in Counter(gone["judge"].replace("", "unknown")).items())
    return (f"{total}, {len(gone)} invalidated by a newer one "
            f"({judges}); each says why, how sure the judge was and what replaced it.")


def memory_log_frame(entries: Iterable[Mapping[str, Any]],
                     names: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Memory lifecycle events (promote, evict, prune, a judge unavailable) and replacements, by
    time, each replacement with the judge that decided it (or the key it was written with);
    `names` maps memory ids to their text."""
    known = names or {}

    def name(mid: Any) -> Any:
        # Memory ids are strings; anything else (None when an entry has no id) shows as is.
        return known.get(mid, mid) if isinstance(mid, str) else mid

    rows = []
    for e in sorted(entries, key=lambda e: e.get("at") or 0):
        if "event" in e:
            what, about = e["event"], name(e.get("id"))
        else:
            kept, gone, judge = e.get("kept"), e.get("invalidated"), e.get("judge")
            if judge == "key":  # an exact fact the agent stored by key, written again
                what = f"replaced (key {e.get('key')})"
            else:
                what = f"contradiction ({e.get('kind', '?')})"
                what += f", {JUDGE_WORDS.get(judge, judge)}" if judge else ""
            about = f"kept “{name(kept)}”, invalidated “{name(gone)}”"
        rows.append({"time": when(e.get("at")), "event": what, "memory": about,
                     "reason": e.get("reason")})
    return pd.DataFrame(rows, columns=["time", "event", "memory", "reason"])
