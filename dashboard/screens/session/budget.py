"""The session page's Token budget tab: the current context's split and the budget over the
steps."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import charts
from dashboard.screens.session.page import Page
from dashboard.views.session import budget as budget_views
from dashboard.views.session import timeline as timeline_views


def render_token_budget(page: Page) -> None:
    steps, branches = page.bundle.steps, page.bundle.branches
    history = budget_views.budget_history(steps)
    current = budget_views.current_budget(history)
    if current is None:
        st.info(
            "Token budget: not recorded. The agent runtime passed no context to "
            "`Session.step(..., context=ctx)` for this session's live steps."
        )
        return
    max_tokens = int(current["max_tokens"]) if pd.notna(current["max_tokens"]) else None
    st.markdown(f"**Context of step {int(current['step'])}** (the newest in the conversation now)")
    st.plotly_chart(
        charts.budget_now(budget_views.budget_parts(current, max_tokens), max_tokens),
        key="budget-now",
    )
    st.plotly_chart(
        charts.budget_over_steps(history, timeline_views.rollback_markers(steps, branches)),
        key="budget-steps",
    )
    st.caption(
        "A loop shows as the dialogue swelling; a rollback (dashed line) as the drop after it."
    )
