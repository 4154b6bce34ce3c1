"""The session page's Timeline tab: every step in its call's lane, loop windows and rollbacks."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go
import streamlit as st

from dashboard import charts
from dashboard.screens.session.page import Page
from dashboard.views.session import timeline as timeline_views
from engine import BranchInfo, StepRecord


def timeline_figure(steps: Sequence[StepRecord], branches: Sequence[BranchInfo]) -> go.Figure:
    frame = timeline_views.timeline_frame(steps)
    return charts.timeline(
        frame,
        timeline_views.lane_order(frame),
        timeline_views.loop_windows(steps),
        timeline_views.rollback_markers(steps, branches),
    )


def render_timeline(page: Page) -> None:
    steps, branches = page.bundle.steps, page.bundle.branches
    # Built once per read of the history (a 2,000-step figure costs a tenth of a second), and
    # never changed afterwards: st.plotly_chart copies it.
    fig = page.bundle.memo.get("timeline", lambda: timeline_figure(steps, branches))
    st.plotly_chart(fig, key="timeline")
    st.caption(
        "● ok · ✕ error · ⊠ refused (quarantined tool) · hollow: abandoned by a rollback · "
        "red band: loop window · "
        "dashed line: rollback. Hover a step for its tool, arguments and error."
        + timeline_views.steps_shown(len(steps), page.bundle.info.steps)
    )
