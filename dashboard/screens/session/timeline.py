"""The session page's Timeline tab: every step in its call's lane, loop windows and rollbacks."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from dashboard import charts
from dashboard.screens.session.page import Page
from dashboard.views.session import timeline as timeline_views
from engine import BranchInfo, StepRecord


def timeline_figure(steps: Sequence[StepRecord], branches: Sequence[BranchInfo]) -> dict:
    frame = timeline_views.timeline_frame(steps)
    return charts.timeline(
        frame,
        timeline_views.lane_order(frame),
        timeline_views.loop_windows(steps),
        timeline_views.rollback_markers(steps, branches),
    )


def render_timeline(page: Page) -> None:
    steps, branches = page.bundle.steps, page.bundle.branches
    # Built once per read of the history, and never changed afterwards: Streamlit serialises
    # it. Vega-Lite, not plotly, on the page's first tab: see `charts.timeline`.
    spec = page.bundle.memo.get("timeline", lambda: timeline_figure(steps, branches))
    st.vega_lite_chart(spec, key="timeline", width="stretch")
    st.caption(
        "● ok · ✕ error · ⊠ refused (quarantined tool) · ◆ in flight · "
        "hollow: abandoned by a rollback · "
        "red band: loop window · "
        "dashed line: rollback. Hover a step for its tool, arguments and error."
        + timeline_views.steps_shown(len(steps), page.bundle.info.steps)
    )
