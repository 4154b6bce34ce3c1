"""View model of the session page's Snapshot tree tab: node positions, lanes and labels, and how
snapshots are named in the rollback menus (pure, no Streamlit, no I/O)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pandas as pd

from dashboard.views.common import plot_text, when
from engine import BranchInfo, SnapshotNode


def tree_layout(nodes: Sequence[SnapshotNode], branches: Sequence[BranchInfo] = (),
                include_retired: bool = False) -> tuple[pd.DataFrame, list[tuple[str, str]]]:
    """Node positions and edges for the snapshot tree.

    x is the creation order, y the lane: 0 for the live line, 1, 2, … for abandoned branches in
    the order they were cut. Retired step snapshots (no longer restorable) are hidden unless
    `include_retired`; their children are linked to the nearest shown ancestor.

    Returns:
        (nodes frame with id, x, y, label, state, is_head, restorable, hover; edges as
        (parent id, child id)).
    """
    by_id = {n.id: n for n in nodes}

    def shown(n: SnapshotNode) -> bool:
        return (include_retired or n.restorable or not n.on_live_line or n.is_head
                or n.kind != "step")

    lanes = {b.id: i + 1 for i, b in enumerate(branches)}
    for n in nodes:
        if n.branch and n.branch not in lanes:
            lanes[n.branch] = len(lanes) + 1
    reasons = {b.id: b for b in branches}
    rows, edges = [], []
    visible = [n for n in nodes if shown(n)]
    visible_ids = {n.id for n in visible}
    labels = node_labels(visible)
    for x, n in enumerate(visible):
        parent = n.parent
        guard = 0
        while parent is not None and parent not in visible_ids and guard < len(by_id):
            parent = by_id[parent].parent if parent in by_id else None
            guard += 1
        if parent is not None:
            edges.append((parent, n.id))
        if n.is_head:
            state = "head"
        elif not n.on_live_line:
            state = "abandoned"
        elif n.restorable:
            state = "restorable"
        else:
            state = "retired"
        b = reasons.get(n.branch) if n.branch else None
        hover = [f"<b>{plot_text(n.id)}</b> · {plot_text(n.label or n.kind)}",
                 f"{n.kind} snapshot, before step {n.next_step}, {n.messages} messages",
                 f"taken {when(n.created_at):%Y-%m-%d %H:%M:%S}"]
        if n.is_head:
            hover.append("latest: where the agent is now")
        if n.abandoned_reason:
            hover.append(plot_text(n.abandoned_reason[:300]))
        elif not n.restorable:
            hover.append("expired by retention: cannot roll back here")
        rows.append({"id": n.id, "x": x, "y": lanes.get(n.branch, 0) if n.branch else 0,
                     "label": labels[n.id], "state": state, "is_head": n.is_head,
                     "restorable": n.restorable and n.on_live_line, "next_step": n.next_step,
                     "branch": n.branch, "reason": b.reason if b else None,
                     "hover": "<br>".join(hover)})
    frame = pd.DataFrame(rows, columns=["id", "x", "y", "label", "state", "is_head",
                                        "restorable", "next_step", "branch", "reason", "hover"])
    return frame, edges


def node_label(node: SnapshotNode, limit: int = 18) -> str:
    """The short text drawn next to a snapshot node: its label, else "step N"."""
    text = node.label or (f"step {node.next_step}" if node.kind == "step" else node.kind)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def node_labels(nodes: Sequence[SnapshotNode], limit: int = 18) -> dict[str, str]:
    """Snapshot id -> the text drawn next to its node (`node_label`); where several nodes would
    read the same ("before post_invoi…" three times), a second line tells them apart: the step
    they come before, their time when that is the same too, and their id as a last resort.
    Lines are joined with "\n" (the chart escapes each line and breaks between them)."""
    first = {n.id: node_label(n, limit) for n in nodes}
    same = Counter(first.values())
    out = {}
    for n in nodes:
        text = first[n.id]
        if same[text] > 1:
            text += f"\nstep {n.next_step}"
        out[n.id] = text
    for extra in (lambda n: f" · {when(n.created_at):%H:%M:%S}", lambda n: f" · {n.id}"):
        twice = Counter(out.values())
        out = {n.id: out[n.id] + extra(n) if twice[out[n.id]] > 1 else out[n.id]
               for n in nodes}
    return out


def rollback_choices(nodes: Sequence[SnapshotNode], suggested: str | None) -> tuple[list[str], int]:
    """Restorable snapshots on the live line, newest first, and the index of `suggested`."""
    choices = [n.id for n in reversed(nodes) if n.on_live_line and n.restorable]
    index = choices.index(suggested) if suggested in choices else 0
    return choices, index


def snapshot_caption(node: SnapshotNode, suggested: str | None = None) -> str:
    """How a snapshot is named in menus: id, label, position, and a mark for the suggested."""
    text = f"{node.id} · {node.label or node.kind} · before step {node.next_step}"
    if node.is_head:
        text += " · latest"
    if node.id == suggested:
        text += " · suggested"
    return text
