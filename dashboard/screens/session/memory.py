"""The session page's Memory tab: the decay chart, the memory table and the lifecycle log."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, data, views
from dashboard.screens.session.page import Page
from dashboard.views.session import memory as memory_views


def render_memory(page: Page) -> None:
    memory = data.memory_view(page.url, page.sid)
    if memory is None:
        st.info("Memory: not recorded. This session wrote no memories.")
        return
    decay = data.decay_view(page.url, page.sid)
    if decay is not None:
        curves, recalls, threshold, now_s = decay
        st.plotly_chart(charts.decay_curves(curves, recalls, threshold, now_s), key="memory")
        st.caption(
            "How strongly each memory is kept, from the first memory on (log scale: the "
            "session's seconds and the weeks after it both show): solid up to now, dashed "
            "after (if it is not recalled again); diamonds mark recalls, which strengthen it; "
            "under the dotted line a memory is forgotten."
        )
    else:
        st.caption("No memory is valid any more: every one was replaced by a newer one.")
    table = memory.items
    st.markdown(views.plain(memory_views.invalidated_text(table)))
    st.dataframe(
        table, hide_index=True,
        column_config={"why": st.column_config.TextColumn(width="large"),
                       "confidence": st.column_config.NumberColumn(format="%.2f"),
                       "memory": st.column_config.TextColumn(width="large")})
    if not memory.log.empty:
        with st.expander(f"Lifecycle and contradictions ({len(memory.log)})"):
            st.dataframe(memory.log, hide_index=True)
