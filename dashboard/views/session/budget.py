"""View model of the session page's Token budget tab: each step's context split into its parts,
and the current context against the model's window (pure, no Streamlit, no I/O)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pandas as pd

from engine import StepRecord, TokenBreakdown

BudgetPart = Literal["system", "dialogue", "memories", "reserve"]
BUDGET_PARTS: tuple[BudgetPart, ...] = ("system", "dialogue", "memories", "reserve")
"""The parts of a context the budget charts stack (`TokenBreakdown` keys, typed as such so
reading one from a breakdown is typed too)."""
BUDGET_COLUMNS = ["step", *BUDGET_PARTS, "dropped", "total", "max_tokens", "line"]


def budget_history(steps: Sequence[StepRecord]) -> pd.DataFrame:
    """Token breakdown per step (from `StepRecord.budget`), live and abandoned, in step order.

    Empty when the runtime never passed a context to `Session.step`.
    """
    rows = []
    for s in steps:
        budget: TokenBreakdown | None = getattr(s, "budget", None)
        if not budget:
            continue
        rows.append({"step": s.n, **{k: budget.get(k) for k in BUDGET_COLUMNS[1:-1]},
                     "line": "live" if s.on_live_line else "abandoned"})
    return pd.DataFrame(rows, columns=BUDGET_COLUMNS)


def current_budget(history: pd.DataFrame) -> pd.Series | None:
    """The newest breakdown on the live line (the context the agent works with now)."""
    live = history[history["line"] == "live"]
    return None if live.empty else live.iloc[-1]


def budget_parts(breakdown: TokenBreakdown | pd.Series, max_tokens: int | None) -> pd.DataFrame:
    """One context's token split (system, dialogue, memories, reserve, free) against the window."""
    tokens: dict[str, int] = {p: int(breakdown.get(p) or 0) for p in BUDGET_PARTS}
    if max_tokens:
        tokens["free"] = max(int(max_tokens) - sum(tokens.values()), 0)
    return pd.DataFrame([{"part": p, "tokens": n} for p, n in tokens.items()],
                        columns=["part", "tokens"])
