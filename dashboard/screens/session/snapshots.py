"""The session page's Snapshot tree tab: the tree, a snapshot picked by click or menu, and the
rollback to it."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, dialogs, views
from dashboard.screens.session.page import Page
from dashboard.views.session import snapshots as snapshot_views


def render_snapshot_tree(page: Page) -> None:
    bundle, nodes, suggested = page.bundle, page.nodes, page.bundle.suggested
    show_retired = st.toggle("Show the older per-step snapshots", key="tree-retired")
    layout, edges = snapshot_views.tree_layout(bundle.tree, bundle.branches, show_retired)
    lane_names = {i + 1: f"{b.id} ({b.actor})" for i, b in enumerate(bundle.branches)}
    event = st.plotly_chart(
        charts.snapshot_tree(layout, edges, lane_names),
        key="tree",
        on_select="rerun",
        selection_mode="points",
    )
    points = event.selection.points if event is not None else []
    clicked = next((p.get("customdata") for p in points if p.get("customdata")), None)
    if clicked and clicked != st.session_state.get("tree-last-click"):
        st.session_state["tree-last-click"] = clicked
        st.session_state["tree-node"] = clicked
    ids = layout["id"].tolist()[::-1]
    if not ids:
        return
    if st.session_state.get("tree-node") not in ids:
        st.session_state["tree-node"] = suggested if suggested in ids else ids[0]
    chosen = st.selectbox(
        "Snapshot (or click a node)",
        ids,
        key="tree-node",
        format_func=lambda i: snapshot_views.snapshot_caption(nodes[i], suggested),
    )
    node = nodes[chosen]
    st.markdown(
        f"**{views.plain(node.id)}** · {views.plain(node.label or node.kind)} · "
        f"{views.plain(node.kind)} "
        f"snapshot before step {node.next_step} · {node.messages} messages · "
        + ("**latest: where the agent is now** · " if node.is_head else "")
        + ("can roll back here" if node.restorable else "cannot roll back here")
    )
    if node.abandoned_reason:
        st.caption(f"Taken out by a rollback: {views.plain(node.abandoned_reason)}")
    if node.restorable and node.on_live_line and page.user.can_act and not page.watch_only:
        # The dialog opens above, where the page's actions open theirs (`dialogs.open_asked`).
        st.button(f"Roll back to {node.id}…", key="tree-rollback", on_click=dialogs.ask,
                  args=("rollback", page.sid, node.id))
