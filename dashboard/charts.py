"""Figure builders: a frame in, a plotly figure out. Pure functions, no Streamlit, no I/O.

Plotly renders a subset of HTML (`<a href>` included) in names, tick labels, annotations and
hovers, so every foreign string (tool, memory, actor, reason, facet value, snapshot id) goes
through `views.plot_text` here, and never into a `hovertemplate`, where `%{…}` is a placeholder.
Hover columns built by `dashboard.views` arrive escaped already.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from dashboard.views import BUDGET_PARTS, clock_ticks, plot_text

# A calm palette: muted blues and greens for normal work, warm tones only where attention is due.
OK = "#5B8DB8"
ERROR = "#C8553D"
RUNNING = "#9AA5B1"
ROLLBACK = "#D08A2E"
HEAD = "#2F5D7C"
LOOP_SHADE = "rgba(200, 85, 61, 0.10)"
FREEZE_SHADE = "rgba(91, 141, 184, 0.10)"
SERIES = ["#3B6E8F", "#6AA58F", "#D08A2E", "#8E6C8A", "#C8553D", "#7A9CC6", "#B7A27A",
          "#5F7470", "#A3C4BC", "#E0A458"]
PART_COLORS = {"system": "#8E6C8A", "dialogue": "#5B8DB8", "memories": "#6AA58F",
               "reserve": "#B7A27A", "free": "#E4E8EC", "dropped": "#C8553D"}
WEBGL_FROM = 1500
"""Scatter traces switch to WebGL beyond this many points."""


def _base(fig: go.Figure, height: int, **layout) -> go.Figure:
    fig.update_layout(
        template="plotly_white", height=height, margin={"l": 10, "r": 10, "t": 36, "b": 10},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.0, "xanchor": "right", "x": 1},
        hoverlabel={"align": "left"}, **layout,
    )
    return fig


def _empty(fig: go.Figure, text: str) -> go.Figure:
    fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
                       font={"color": "#7B8794", "size": 14})
    return fig


def loops_over_time(buckets: pd.DataFrame, by: str, *, title: str = "",
                    freeze: tuple[float, float] | None = None, height: int = 280) -> go.Figure:
    """Stacked bars of loop episodes per time bucket, one colour per value of `by`.

    Args:
        buckets: `views.loop_buckets` output (bucket, `by`, loops).
        by: the grouping column (prompt_version, scenario, …).
        freeze: (start, end) unix times of a change freeze, shaded.
    """
    fig = go.Figure()
    keys = [k for k in buckets[by].unique().tolist() if k != ""] if not buckets.empty else []
    for i, key in enumerate(keys):
        part = buckets[buckets[by] == key]
        name = plot_text(key)
        fig.add_trace(go.Bar(
            x=part["bucket"], y=part["loops"], name=name, marker_color=SERIES[i % len(SERIES)],
            hovertemplate=f"{by}: %{{fullData.name}}<br>%{{x|%b %d %H:%M}}<br>"
                          "%{y} loops<extra></extra>",
        ))
    _base(fig, height, barmode="stack", title={"text": title, "font": {"size": 14}},
          yaxis={"title": "loops", "rangemode": "tozero"}, bargap=0.15)
    if not buckets.empty:
        fig.update_xaxes(range=[buckets["bucket"].min(), buckets["bucket"].max()])
    if freeze is not None:
        x0, x1 = (pd.Timestamp(int(t), unit="s", tz="UTC") for t in freeze)
        fig.add_vrect(x0=x0, x1=x1, fillcolor=FREEZE_SHADE, line_width=0, layer="below",
                      annotation_text="freeze", annotation_position="top left")
    if not keys or int(buckets["loops"].sum()) == 0:
        _empty(fig, "No loops in this window")
    return fig


# Shapes are built as plain dicts and set in one layout update: `add_vrect`/`add_vline` validate
# and copy the whole shape list on every call, which costs seconds on a session with many loops.
def _loop_shapes(windows: Sequence[tuple[float, float, str]]) -> tuple[list[dict], list[dict]]:
    shapes = [{"type": "rect", "xref": "x", "yref": "paper", "x0": x0, "x1": x1, "y0": 0,
               "y1": 1, "fillcolor": LOOP_SHADE, "line": {"width": 0}, "layer": "below"}
              for x0, x1, _ in windows]
    notes = [{"x": x0, "y": 1, "xref": "x", "yref": "paper", "xanchor": "left",
              "yanchor": "top", "showarrow": False, "text": f"loop: {plot_text(rule)}",
              "font": {"size": 10, "color": ERROR}} for x0, _, rule in windows]
    return shapes, notes


def _rollback_shapes(markers: Sequence[dict]) -> tuple[list[dict], list[dict]]:
    shapes = [{"type": "line", "xref": "x", "yref": "paper", "x0": m["x"], "x1": m["x"],
               "y0": 0, "y1": 1, "line": {"color": ROLLBACK, "dash": "dash", "width": 2}}
              for m in markers]
    notes = [{"x": m["x"], "y": 1.0, "xref": "x", "yref": "paper", "showarrow": False,
              "yanchor": "bottom", "text": f"↩ {plot_text(m['target'])}",
              "font": {"size": 10, "color": ROLLBACK},
              "hovertext": plot_text(f"rolled back to {m['target']} by {m['actor']}: "
                                     f"{m['reason']}")}
             for m in markers]
    return shapes, notes


def timeline(frame: pd.DataFrame, lanes: Sequence[str],
             windows: Sequence[tuple[float, float, str]] = (),
             markers: Sequence[dict] = ()) -> go.Figure:
    """Steps on x, fingerprint lanes on y; errors marked, loop windows shaded, rollbacks drawn.

    Args:
        frame: `views.timeline_frame` output.
        lanes: lane order, top to bottom (`views.lane_order`).
        windows: (x0, x1, rule) spans to shade (`views.loop_windows`).
        markers: rollback markers (`views.rollback_markers`).
    """
    fig = go.Figure()
    scatter = go.Scattergl if len(frame) >= WEBGL_FROM else go.Scatter
    styles = [
        ("ok", "live", "ok", OK, "circle", 1.0),
        ("error", "live", "error", ERROR, "x", 1.0),
        ("running", "live", "running", RUNNING, "circle-open", 1.0),
        ("ok", "abandoned", "ok (abandoned)", OK, "circle-open", 0.45),
        ("error", "abandoned", "error (abandoned)", ERROR, "x-open", 0.45),
        ("running", "abandoned", "in flight (abandoned)", RUNNING, "circle-open", 0.45),
    ]
    for outcome, line, name, color, symbol, opacity in styles:
        part = frame[(frame["outcome"] == outcome) & (frame["line"] == line)]
        if part.empty:
            continue
        fig.add_trace(scatter(
            x=part["n"], y=part["lane"].map(plot_text), mode="markers", name=name,
            marker={"color": color, "symbol": symbol, "size": 9, "opacity": opacity,
                    "line": {"width": 1, "color": color}},
            text=part["hover"], hovertemplate="%{text}<extra></extra>",
        ))
    shapes, notes = _loop_shapes(windows)
    more_shapes, more_notes = _rollback_shapes(markers)
    lanes = [plot_text(lane) for lane in lanes]
    tickvals, ticktext = clock_ticks(frame) if "at" in frame else ([], [])
    xaxis = {"title": "step and clock time", "rangemode": "tozero", "zeroline": False}
    if tickvals:
        xaxis.update(tickmode="array", tickvals=tickvals, ticktext=ticktext)
    _base(fig, 160 + 26 * max(len(lanes), 2), shapes=shapes + more_shapes,
          annotations=notes + more_notes,
          xaxis=xaxis,
          yaxis={"type": "category", "categoryorder": "array", "categoryarray": lanes[::-1],
                 "title": None, "automargin": True})
    if frame.empty:
        _empty(fig, "No steps recorded")
    return fig


def snapshot_tree(nodes: pd.DataFrame, edges: Sequence[tuple[str, str]],
                  lane_names: dict[int, str] | None = None) -> go.Figure:
    """Node-link tree of snapshots: live line on top, abandoned branches below, head marked.

    Every node carries its snapshot id as `customdata`, so a selection names the snapshot.
    """
    fig = go.Figure()
    pos = {r.id: (r.x, r.y) for r in nodes.itertuples()}
    ex, ey = [], []
    for parent, child in edges:
        if parent in pos and child in pos:
            (x0, y0), (x1, y1) = pos[parent], pos[child]
            ex += [x0, x1, None]
            ey += [y0, y1, None]
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", hoverinfo="skip", showlegend=False,
                             line={"color": "#B8C2CC", "width": 1.5}))
    styles = [("restorable", "restorable", OK, "circle", 11),
              ("retired", "retired", RUNNING, "circle-open", 7),
              ("abandoned", "abandoned", ERROR, "circle-x-open", 10),
              ("head", "head", HEAD, "star", 18)]
    for state, name, color, symbol, size in styles:
        part = nodes[nodes["state"] == state]
        if part.empty:
            continue
        fig.add_trace(go.Scatter(
            x=part["x"], y=part["y"], mode="markers+text" if len(nodes) <= 60 else "markers",
            name=name, customdata=part["id"], hovertext=part["hover"],
            hovertemplate="%{hovertext}<extra></extra>",
            text=part["label"].map(plot_text), textposition="top center",
            textfont={"size": 10, "color": "#52606D"},
            marker={"color": color, "symbol": symbol, "size": size,
                    "line": {"width": 1.5, "color": color}},
        ))
    lanes = sorted(set(nodes["y"].tolist())) if not nodes.empty else [0]
    names = {0: "live line", **(lane_names or {})}
    _base(fig, 160 + 44 * len(lanes), clickmode="event+select", dragmode="pan",
          xaxis={"title": "snapshots, oldest → newest", "showticklabels": False,
                 "zeroline": False},
          yaxis={"tickvals": lanes,
                 "ticktext": [plot_text(names.get(v, f"branch {v}")) for v in lanes],
                 "autorange": "reversed", "zeroline": False, "automargin": True})
    if nodes.empty:
        _empty(fig, "No snapshots taken yet")
    return fig


def decay_curves(curves: pd.DataFrame, accesses: pd.DataFrame | None = None,
                 threshold: float | None = None) -> go.Figure:
    """Memory strength over time, one line per memory, with the forget threshold and accesses.

    Args:
        curves: columns memory, t (datetime), strength.
        accesses: columns memory, t, strength (points where a memory was recalled).
        threshold: strength below which a memory is forgotten.
    """
    fig = go.Figure()
    for i, (memory, part) in enumerate(curves.groupby("memory", sort=False)):
        color = SERIES[i % len(SERIES)]
        fig.add_trace(go.Scatter(x=part["t"], y=part["strength"], mode="lines",
                                 name=plot_text(str(memory)[:40]),
                                 meta=[plot_text(str(memory)[:80])],
                                 line={"color": color, "width": 2},
                                 hovertemplate="%{meta[0]}<br>%{y:.2f}<extra></extra>"))
        if accesses is not None and not accesses.empty:
            hits = accesses[accesses["memory"] == memory]
            if not hits.empty:
                fig.add_trace(go.Scatter(x=hits["t"], y=hits["strength"], mode="markers",
                                         showlegend=False, marker={"color": color, "size": 8,
                                                                   "symbol": "diamond"},
                                         hovertemplate="recalled<extra></extra>"))
    if threshold is not None:
        fig.add_hline(y=threshold, line={"color": ERROR, "dash": "dot"},
                      annotation_text="forget threshold", annotation_position="bottom right")
    _base(fig, 340, yaxis={"title": "strength", "rangemode": "tozero"}, xaxis={"title": None})
    if curves.empty:
        _empty(fig, "No memories")
    return fig


def budget_now(parts: pd.DataFrame, max_tokens: int | None) -> go.Figure:
    """One horizontal bar: the current context split into its parts, against the window."""
    fig = go.Figure()
    for row in parts.itertuples():
        fig.add_trace(go.Bar(
            y=["context"], x=[row.tokens], name=row.part, orientation="h",
            marker_color=PART_COLORS.get(row.part, RUNNING),
            hovertemplate=f"{row.part}: %{{x:,}} tokens<extra></extra>",
        ))
    title = f"window: {max_tokens:,} tokens" if max_tokens else ""
    _base(fig, 170, barmode="stack", title={"text": title, "font": {"size": 13}},
          xaxis={"title": "tokens", "range": [0, max_tokens] if max_tokens else None},
          yaxis={"showticklabels": False})
    return fig


def budget_over_steps(history: pd.DataFrame, markers: Sequence[dict] = ()) -> go.Figure:
    """Stacked areas of the context parts over steps: a loop swells, a rollback drops.

    Args:
        history: `views.budget_history` (step, system, dialogue, memories, reserve, max_tokens).
        markers: rollback markers (`views.rollback_markers`), drawn as dashed lines.
    """
    fig = go.Figure()
    for part in BUDGET_PARTS:
        if part not in history:
            continue
        fig.add_trace(go.Scatter(
            x=history["step"], y=history[part], name=part, mode="lines", stackgroup="tokens",
            line={"width": 0.5, "color": PART_COLORS[part]},
            hovertemplate=f"{part}: %{{y:,}} tokens<extra></extra>",
        ))
    if "max_tokens" in history and history["max_tokens"].notna().any():
        fig.add_trace(go.Scatter(x=history["step"], y=history["max_tokens"], name="window",
                                 mode="lines", line={"color": ERROR, "dash": "dash"}))
    _base(fig, 320, xaxis={"title": "step"}, yaxis={"title": "tokens", "rangemode": "tozero"},
          hovermode="x unified", shapes=_rollback_shapes(markers)[0])
    if history.empty:
        _empty(fig, "No steps with a token breakdown")
    return fig

