"""The session page's Messages tab: every write (abandoned ones struck through) beside the
conversation as the user sees it."""

from __future__ import annotations

import streamlit as st

from dashboard.screens.session.page import Page
from dashboard.views.session import messages as message_views

MESSAGE_WINDOWS = {"last 100": 100, "last 500": 500, "all": None}


def render_messages(page: Page) -> None:
    items = message_views.messages_view(page.bundle.messages, page.bundle.branches)
    abandoned = sum(m.abandoned for m in items)
    c1, c2 = st.columns([3, 1])
    c1.caption(
        f"{len(items) - abandoned:,} live and {abandoned:,} abandoned messages, in the "
        "order they were written; abandoned ones are struck through."
    )
    window = c2.selectbox(
        "Show", list(MESSAGE_WINDOWS), key="msg-window", label_visibility="collapsed"
    )
    limit = MESSAGE_WINDOWS[window]
    shown = items[-limit:] if limit else items
    if not shown:
        st.info("No messages yet.")
        return
    forensic, user_side = st.columns([3, 2])
    with forensic:
        st.markdown("**Forensic:** every write, abandoned ones struck through")
        st.html(message_views.MESSAGES_CSS + message_views.messages_html(shown))
    with user_side:
        seen = message_views.user_view(shown)
        st.markdown("**As the user sees it:** live messages, notices as shown")
        if seen:
            st.html(message_views.USER_VIEW_CSS + message_views.user_view_html(seen))
        else:
            st.caption("The user sees no message yet.")
