"""Figure builders: a frame in, a plotly figure or a Vega-Lite spec out. Pure functions, no
Streamlit, no I/O.

Plotly renders a subset of HTML (`<a href>` included) in names, tick labels, annotations and
hovers, so every foreign string (tool, memory, actor, reason, facet value, snapshot id) in a
plotly figure goes through `views.plot_text` here, and never into a `hovertemplate`, where `%{…}`
is a placeholder. Hover columns built by `dashboard.views` for plotly arrive escaped already.
Vega-Lite specs (the fleet's loop charts, the session's timeline) carry foreign text as data
only: Vega draws it as text and its tooltip escapes it; it never goes into an expression.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go

from dashboard import views
from dashboard.views import BUDGET_PARTS, clock_ticks, plot_text

# A calm palette: muted blues and greens for normal work, warm tones only where attention is due.
OK = "#5B8DB8"
ERROR = "#C8553D"
RUNNING = "#9AA5B1"
REFUSED = "#8E6C8A"
ROLLBACK = "#D08A2E"
HEAD = "#2F5D7C"
LOOP_SHADE = "rgba(200, 85, 61, 0.10)"
FREEZE_SHADE = "rgba(91, 141, 184, 0.10)"
SERIES = ["#4E79A7", "#F28E2B", "#59A14F", "#B07AA1", "#E15759", "#76B7B2", "#EDC948",
          "#9C755F", "#FF9DA7"]
"""Series colours (Tableau 10 without its grey; grey means "other"): nine hues told apart at a
glance, where the old muted palette had near twins (two oranges, two teals)."""
PART_COLORS = {"system": "#8E6C8A", "dialogue": "#5B8DB8", "memories": "#6AA58F",
               "reserve": "#B7A27A", "free": "#E4E8EC", "dropped": "#C8553D"}


LEGEND_BELOW = {"orientation": "h", "xref": "container", "yref": "container", "x": 0,
                "xanchor": "left", "y": 0, "yanchor": "bottom"}
"""Legends sit under the plot, referenced to the figure's box: plotly then widens the bottom
margin to fit them, below the tick labels and axis title, and they never meet the title or the
labels drawn in the top margin (rollback markers)."""


def _base(fig: go.Figure, height: int, **layout) -> go.Figure:
    layout = {"legend": LEGEND_BELOW, "margin": {"l": 10, "r": 10, "t": 36, "b": 10}, **layout}
    fig.update_layout(template="plotly_white", height=height, hoverlabel={"align": "left"},
                      **layout)
    return fig


def _empty(fig: go.Figure, text: str) -> go.Figure:
    fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5,
                       font={"color": "#7B8794", "size": 14})
    return fig


OTHER_COLOR = "#B8C2CC"


def series_colors(keys: Sequence[str]) -> dict[str, str]:
    """A colour per series that stays the same across refreshes and windows: each key takes
    the palette slot its name hashes to; only a key whose slot another key (first by name)
    already holds moves to the next free one, so series keep distinct colours."""
    natural = {key: zlib.crc32(key.encode("utf-8")) % len(SERIES) for key in sorted(keys)}
    slots: dict[str, int] = {}
    for key, slot in natural.items():
        if slot not in slots.values():
            slots[key] = slot
    for key, slot in natural.items():
        if key not in slots:
            while slot in slots.values() and len(slots) < len(SERIES):
                slot = (slot + 1) % len(SERIES)
            slots[key] = slot
    return {key: SERIES[slots[key]] for key in natural}


def _wall_ms(ts: float) -> int:
    """A unix time as the console's local wall clock, in milliseconds, for a chart whose time
    scale is UTC: the browser then shows the same clock as the captions (`views.when`), not its
    own time zone."""
    offset = views.when(ts).utcoffset()
    return round((ts + (offset.total_seconds() if offset else 0.0)) * 1000)


def _wall_text(ts: float, fmt: str = "%d %b %H:%M") -> str:
    return f"{views.when(ts):{fmt}}"


CLOCK_LABEL = ("utcFormat(datum.value, utchours(datum.value) || utcminutes(datum.value) "
               "? '%H:%M' : '%a %d %b')")
"""Time axis labels on a 24-hour clock, the day's name at midnight (a UTC scale of wall times)."""


LEGEND_LABEL_PX = 160
LEGEND_COLUMNS = "max(1, min(3, floor(width / 180)))"
"""Legend entries per row: as many as fit the chart's width, up to 3 (one on a phone)."""
LEGEND_LABEL = ("length(datum.label) > 20 ? substring(datum.label, 0, 7) + '…' + "
                "substring(datum.label, length(datum.label) - 12) : datum.label")
"""A long name cut in its middle, keeping its end (where versions differ: "refund-a…prompt-v12");
the bar's tooltip has it whole. The name is data here (`datum.label`), never code."""
LEGEND_ROW_PX = 18


def loops_summary(series: pd.DataFrame, title: str, freeze_text: str = "") -> str:
    """The chart in words (its accessible name, as screen readers and tests read it): the loops
    in the window and per series, busiest first, and the freeze when it shows."""
    totals = ({} if series.empty else
              {str(k): int(n) for k, n in series.groupby("series", sort=False)["loops"].sum()
               .items()})
    total = sum(totals.values())
    parts = ", ".join(f"{name} {n}" for name, n in totals.items() if n)
    text = f"{title}: {total} loop{'s' if total != 1 else ''}" + (f" ({parts})" if parts else "")
    return text + (f"; {freeze_text}" if freeze_text else "")


def loops_over_time(buckets: pd.DataFrame, by: str, *, title: str = "",
                    freeze: tuple[float, float] | None = None, height: int = 300,
                    bucket_s: int | None = None, top: int = views.TOP_SERIES) -> dict:
    """Stacked bars of loop episodes per time bucket, as a Vega-Lite spec (`st.vega_lite_chart`):
    the `top` values of `by` with the most loops get a bar colour each, the rest stack as one
    grey "other" series.

    Vega-Lite, not plotly: this is the fleet's first screen, and Streamlit's vega chunk is a
    sixth of plotly's (0.86 MB against 4.7 MB), which the browser would otherwise download,
    parse and run before it draws the first chart (and, while it runs, anything else).
    Vega draws text as text (on a canvas): names need no escaping, and are never markup.

    Args:
        buckets: `views.loop_buckets` output (bucket, `by`, loops).
        by: the grouping column (prompt_version, scenario, …).
        freeze: (start, end) unix times of a change freeze, shaded.
        height: of the whole chart, title, axes and legend included.
        bucket_s: bucket width, so each bar covers its bucket and the last one is not cut.
    """
    series = views.top_series(buckets, by, top)
    names = list(dict.fromkeys(series.loc[~series["other"], "series"].tolist()))
    others = list(dict.fromkeys(series.loc[series["other"], "series"].tolist()))
    colors = series_colors(names)
    width_s = bucket_s or 0
    rank = {name: i for i, name in enumerate([*names, *others])}
    bars = []
    base: dict[float, int] = {}  # stacked here, in rank order: the first series at the bottom
    shown = series[series["loops"] > 0]
    for row in shown.iloc[shown["series"].map(rank).argsort(kind="stable")].itertuples(
            index=False):
        start = pd.Timestamp(row.bucket).timestamp()
        end = start + width_s
        when = _wall_text(start) + (f"–{_wall_text(end, '%H:%M')}" if width_s else "")
        low = base.get(start, 0)
        base[start] = low + int(row.loops)
        bars.append({"start": _wall_ms(start), "end": _wall_ms(start + 0.85 * width_s),
                     "series": str(row.series), "loops": int(row.loops), "low": low,
                     "high": base[start], "when": when})
    domain = None
    if not buckets.empty:
        lo = pd.Timestamp(buckets["bucket"].min()).timestamp()
        hi = pd.Timestamp(buckets["bucket"].max()).timestamp() + width_s
        domain = [lo, hi]
    x = {"field": "start", "type": "temporal", "title": None,
         # As an expression: Vega-Lite turns a temporal field's numeric domain into
         # datetime(year, …) calls, which read a millisecond count as a year.
         "scale": {"type": "utc", **({"domain": {
             "expr": "[" + ", ".join(str(_wall_ms(t)) for t in domain) + "]"}} if domain
             else {})},
         "axis": {"labelOverlap": True, "grid": False, "labelExpr": CLOCK_LABEL,
                  "description": "time, on the console's clock"}}
    layers: list[dict] = []
    freeze_text = ""
    if freeze is not None:
        f0, f1 = freeze
        if domain is not None:  # inside the range, so its label shows
            f0, f1 = max(f0, domain[0]), min(f1, domain[1])
        if f0 < f1:
            freeze_text = f"freeze {_wall_text(f0)}–{_wall_text(f1)}"
            shade = {"values": [{"start": _wall_ms(f0), "end": _wall_ms(f1)}]}
            layers += [
                {"data": shade, "mark": {"type": "rect", "color": FREEZE_SHADE},
                 "encoding": {"x2": {"field": "end"}}},
                {"data": shade, "mark": {"type": "text", "text": "freeze", "align": "left",
                                         "baseline": "top", "dx": 4, "dy": 4,
                                         "color": "#5B7083", "fontSize": 11},
                 "encoding": {"y": {"value": 0}}},
            ]
    layers.append({
        "data": {"values": bars},
        "mark": {"type": "bar"},
        "encoding": {
            "x2": {"field": "end"},
            "y": {"field": "high", "type": "quantitative", "title": "loops",
                  "scale": {"domainMin": 0, **({} if bars else {"domain": [0, 1]})},
                  "axis": {"tickMinStep": 1, "format": "d"}},
            "y2": {"field": "low"},
            "color": {"field": "series", "type": "nominal", "title": None,
                      "scale": {"domain": [*names, *others],
                                "range": [*(colors[n] for n in names),
                                          *(OTHER_COLOR for _ in others)]},
                      "legend": {"orient": "bottom", "direction": "horizontal",
                                 "columns": {"expr": LEGEND_COLUMNS},
                                 "labelLimit": LEGEND_LABEL_PX, "labelExpr": LEGEND_LABEL,
                                 "symbolType": "square"}},
            "tooltip": [{"field": "series", "type": "nominal", "title": by},
                        {"field": "when", "type": "nominal", "title": "time"},
                        {"field": "loops", "type": "quantitative", "title": "loops"}],
        },
    })
    if not bars:
        layers.append({"data": {"values": [{}]},
                       "mark": {"type": "text", "text": "No loops in this window",
                                "fontSize": 14, "color": "#7B8794"},
                       "encoding": {"x": {"value": {"expr": "width / 2"}},
                                    "y": {"value": {"expr": "height / 2"}}}})
    return {
        "description": loops_summary(series, title or f"Loops by {by}", freeze_text),
        "title": {"text": title, "anchor": "start", "fontSize": 14, "fontWeight": "normal"},
        # taller when the legend needs more than three rows (on a phone, one entry a row), so
        # the plot keeps its height
        "height": height + LEGEND_ROW_PX * max(0, len(rank) - 3),
        "encoding": {"x": x},  # one time scale for the shade, its label and the bars
        "layer": layers,
    }


# Shapes are built as plain dicts and set in one layout update: `add_vrect`/`add_vline` validate
# and copy the whole shape list on every call, which costs seconds on a session with many loops.
LABEL_ROOM = 0.25
"""Labels closer than this share of the x range may overlap (the plot is narrow on a phone):
the later one moves a row."""
LABEL_ROW_PX = 13
LABEL_ROWS = 3


def stagger(xs: Sequence[float], span: float, rows: int = LABEL_ROWS,
            room: float = LABEL_ROOM) -> list[int]:
    """A row (0, 1, …) per label at `xs` (in order) so that labels on one row are at least
    `room * span` apart; when all rows are taken, the row whose last label is furthest back."""
    last: list[float | None] = [None] * rows
    out = []
    for x in xs:
        gaps = [math.inf if at is None else x - at for at in last]
        free = [r for r, gap in enumerate(gaps) if gap >= room * span]
        row = free[0] if free else max(range(rows), key=lambda r: gaps[r])
        last[row] = x
        out.append(row)
    return out


def _rollback_shapes(markers: Sequence[dict],
                     span: float = 1.0) -> tuple[list[dict], list[dict]]:
    """Dashed lines, labelled "↩ target" above the plot (in the top margin, where no legend
    is), staggered upwards when two rollbacks are close."""
    shapes = [{"type": "line", "xref": "x", "yref": "paper", "x0": m["x"], "x1": m["x"],
               "y0": 0, "y1": 1, "line": {"color": ROLLBACK, "dash": "dash", "width": 2}}
              for m in markers]
    rows = stagger([m["x"] for m in markers], span)
    notes = [{"x": m["x"], "y": 1.0, "xref": "x", "yref": "paper", "showarrow": False,
              "yanchor": "bottom", "text": f"↩ {plot_text(m['target'])}",
              "yshift": LABEL_ROW_PX * row, "font": {"size": 10, "color": ROLLBACK},
              "hovertext": plot_text(f"rolled back to {m['target']} by {m['actor']}: "
                                     f"{m['reason']}")}
             for m, row in zip(markers, rows, strict=True)]
    return shapes, notes


LANE_LINE_CHARS = 24


def _cut(text: str, width: int) -> str:
    """A Vega expression: the string `text` evaluates to, cut to `width` characters."""
    return f"(length({text}) > {width} ? substring({text}, 0, {width - 1}) + '…' : {text})"


def _lane_label(width: int = LANE_LINE_CHARS) -> str:
    """A lane's name as its axis shows it: the tool on one line and its arguments on the next,
    each cut to `width` characters, so the names leave the plot room on a phone (the tooltip
    keeps the whole call). The name is data here (`datum.label`), never code."""
    space = "indexof(datum.label, ' ')"
    tool = f"substring(datum.label, 0, {space})"
    args = f"substring(datum.label, {space} + 1)"
    return (f"{space} > 0 && length(datum.label) > {width} "
            f"? [{_cut(tool, width)}, {_cut(args, width)}] : {_cut('datum.label', width)}")


LANE_LABEL = _lane_label()
LANE_PX = 34
"""Height of one lane: a two-line name and the markers fit."""
AXES_PX = 140
"""Height of what the chart draws under its lanes: the step axis' two-line labels, its title and
the legend."""


def _polygon(points: Sequence[tuple[float, float]]) -> str:
    return "M" + "L".join(f"{x:.3f},{y:.3f}" for x, y in points) + "Z"


def _x_shape(arm: float = 0.28) -> str:
    """An ✕ as one closed outline (Vega symbols are paths in a unit box): filled, it reads as
    a cross; unfilled, as its outline, as plotly's "x-open" did."""
    plus = [(-arm, -1), (arm, -1), (arm, -arm), (1, -arm), (1, arm), (arm, arm), (arm, 1),
            (-arm, 1), (-arm, arm), (-1, arm), (-1, -arm), (-arm, -arm)]
    c = math.sqrt(0.5)
    return _polygon([(c * (x - y) * 1.1, c * (x + y) * 1.1) for x, y in plus])


X_SHAPE = _x_shape()
SQUARE_X_SHAPE = ("M-1,-1L1,-1L1,1L-1,1Z"  # the frame, and its hole wound the other way
                  "M-0.75,-0.75L-0.75,0.75L0.75,0.75L0.75,-0.75Z" + _x_shape(0.2))
STATUS_STYLES = {  # outcome: (legend name, colour, shape)
    "ok": ("ok", OK, "circle"),
    "error": ("error", ERROR, X_SHAPE),
    "refused": ("refused (quarantined tool)", REFUSED, SQUARE_X_SHAPE),
    "running": ("in flight", RUNNING, "diamond"),
}
ABANDONED_OPACITY = 0.45


def timeline_summary(frame: pd.DataFrame, lanes: Sequence[str], windows: Sequence,
                     markers: Sequence) -> str:
    """The timeline in words (its accessible name, as screen readers and tests read it)."""
    if frame.empty:
        return "Timeline: no steps recorded"
    counts = frame["outcome"].value_counts()
    said = ", ".join(f"{int(counts[k])} {STATUS_STYLES[k][0].split(' (')[0]}"
                     for k in STATUS_STYLES if counts.get(k))
    abandoned = int((frame["line"] == "abandoned").sum())
    return (f"Timeline: steps {int(frame['n'].min())} to {int(frame['n'].max())} in "
            f"{len(lanes)} lane{'s' if len(lanes) != 1 else ''} ({said}"
            + (f", {abandoned} abandoned" if abandoned else "") + f"); {len(windows)} loop "
            f"window{'s' if len(windows) != 1 else ''}; {len(markers)} "
            f"rollback{'s' if len(markers) != 1 else ''}")


def timeline(frame: pd.DataFrame, lanes: Sequence[str],
             windows: Sequence[tuple[float, float, str]] = (),
             markers: Sequence[dict] = ()) -> dict:
    """Steps on x, fingerprint lanes on y; status by a marker's colour and shape (hollow when a
    rollback abandoned it), loop windows shaded, rollbacks as dashed lines: a Vega-Lite spec
    (`st.vega_lite_chart`).

    Vega-Lite, not plotly, for the reason `loops_over_time` gives: this is the session page's
    first chart, and plotly's bundle cost more than the rest of the page; 2,000 markers also
    draw faster as Vega's SVG or canvas than as plotly's WebGL without a GPU. Foreign text
    (lanes, tools, arguments, errors, rule names, rollback targets) is data in the spec, drawn
    as text and shown by the tooltip escaped: never markup, never part of an expression.

    Args:
        frame: `views.timeline_frame` output.
        lanes: lane order, top to bottom (`views.lane_order`).
        windows: (x0, x1, rule) spans to shade (`views.loop_windows`).
        markers: rollback markers (`views.rollback_markers`).
    """
    present = set(frame["outcome"]) if not frame.empty else set()
    shown = [k for k in STATUS_STYLES if k in present]
    xs = [float(v) for v in frame["n"]] + [v for w in windows for v in w[:2]] + \
        [float(m["x"]) for m in markers]
    lo, hi = (min(xs) - 1, max(xs) + 1) if xs else (0.0, 1.0)
    span = hi - lo
    ticks, lines = clock_ticks(frame, 4) if "at" in frame else ([], [])
    axis: dict = {"grid": False, "labelAngle": 0, "labelFlush": True, "labelOverlap": True,
                  "tickMinStep": 1, "format": "d"}
    if ticks:  # the step and its clock time under it; the labels are ours, never foreign text
        axis.update(values=ticks, labelExpr=f"{json.dumps(lines)}[indexof({json.dumps(ticks)}, "
                                            "datum.value)] || datum.label")
    x = {"type": "quantitative", "title": "step and clock time" if ticks else "step",
         "scale": {"domain": [lo, hi], "zero": False, "nice": False}, "axis": axis}
    layers: list[dict] = []
    if windows:
        rows = stagger([x0 for x0, _, _ in windows], span)
        shade = [{"x0": x0, "x1": x1, "note": f"loop: {rule}", "row": row}
                 for (x0, x1, rule), row in zip(windows, rows, strict=True)]
        layers += [
            {"data": {"values": shade}, "mark": {"type": "rect", "color": LOOP_SHADE},
             "encoding": {"x": {"field": "x0", **x}, "x2": {"field": "x1"}}},
            *({"data": {"values": [r for r in shade if r["row"] == row]},
               "mark": {"type": "text", "align": "left", "baseline": "top", "dx": 3,
                        "fontSize": 10, "color": ERROR},
               "encoding": {"x": {"field": "x0", **x}, "y": {"value": 2 + LABEL_ROW_PX * row},
                            "text": {"field": "note"}}}
              for row in sorted(set(rows))),
        ]
    status = {"field": "status", "type": "nominal", "title": None,
              "legend": {"orient": "bottom", "direction": "horizontal", "symbolSize": 80}}
    for outcome_line, filled, opacity in (("live", True, 1.0),
                                          ("abandoned", False, ABANDONED_OPACITY)):
        part = frame[frame["line"] == outcome_line] if not frame.empty else frame
        if part.empty:
            continue
        points = [{"n": int(n), "lane": str(lane), "status": STATUS_STYLES[o][0], "tip": tip}
                  for n, lane, o, tip in zip(part["n"], part["lane"], part["outcome"],
                                              part["tip"], strict=True)]
        layers.append({
            "data": {"values": points},
            "mark": {"type": "point", "filled": filled, "opacity": opacity, "size": 70,
                     "strokeWidth": 1.2},
            "encoding": {
                "x": {"field": "n", **x},
                "y": {"field": "lane", "type": "nominal", "title": None,
                      "scale": {"domain": list(lanes)},
                      "axis": {"labelExpr": LANE_LABEL, "labelLimit": 200, "labelFontSize": 11,
                               "labelOverlap": False,  # every lane named, always
                               "grid": True, "ticks": False, "labelPadding": 6}},
                "color": {**status, "scale": {"domain": [STATUS_STYLES[k][0] for k in shown],
                                              "range": [STATUS_STYLES[k][1] for k in shown]}},
                "shape": {**status, "scale": {"domain": [STATUS_STYLES[k][0] for k in shown],
                                              "range": [STATUS_STYLES[k][2] for k in shown]}},
                # the whole object: vega-tooltip shows its title and its named lines, escaped
                "tooltip": {"field": "tip", "type": "nominal"},
            },
        })
    labelled = frame[frame["label"] != ""] if "label" in frame and not frame.empty else frame
    if not labelled.empty:
        # Step numbers over the markers (`views.labelled_steps`), upright: a phone cannot
        # hover, and the axis has room for four ticks only.
        layers.append({
            "data": {"values": [{"n": int(n), "lane": str(lane), "label": str(label)}
                                for n, lane, label in zip(labelled["n"], labelled["lane"],
                                                          labelled["label"], strict=True)]},
            "mark": {"type": "text", "dy": -11, "fontSize": 9, "color": "#7B8794"},
            "encoding": {"x": {"field": "n", **x},
                         "y": {"field": "lane", "type": "nominal", "title": None,
                               "scale": {"domain": list(lanes)}},
                         "text": {"field": "label"}},
        })
    if markers:
        rows = stagger([float(m["x"]) for m in markers], span)
        cuts = [{"x": float(m["x"]), "note": f"↩ {m['target']}", "row": row,
                 "tip": {"title": f"rolled back to {m['target']}", "by": str(m["actor"]),
                         "reason": str(m["reason"] or "")}}
                for m, row in zip(markers, rows, strict=True)]
        layers += [
            {"data": {"values": cuts},
             "mark": {"type": "rule", "color": ROLLBACK, "strokeDash": [6, 4], "strokeWidth": 2},
             "encoding": {"x": {"field": "x", **x},
                          "tooltip": {"field": "tip", "type": "nominal"}}},
            *({"data": {"values": [c for c in cuts if c["row"] == row]},
               "mark": {"type": "text", "align": "center", "baseline": "bottom",
                        "fontSize": 10, "color": ROLLBACK},
               "encoding": {"x": {"field": "x", **x}, "y": {"value": -4 - LABEL_ROW_PX * row},
                            "text": {"field": "note"},
                            "tooltip": {"field": "tip", "type": "nominal"}}}
              for row in sorted(set(rows))),
        ]
    if frame.empty:
        layers.append({"data": {"values": [{}]},
                       "mark": {"type": "text", "text": "No steps recorded", "fontSize": 14,
                                "color": "#7B8794"},
                       "encoding": {"x": {"value": {"expr": "width / 2"}},
                                    "y": {"value": {"expr": "height / 2"}}}})
    label_rows = 1 + max(stagger([float(m["x"]) for m in markers], span), default=-1)
    return {
        "description": timeline_summary(frame, lanes, windows, markers),
        # of the whole chart (Streamlit fits the spec to it): the lanes, the axis' two-line
        # labels and title, the legend, and the rollbacks' labels above the plot
        "height": LANE_PX * max(len(lanes), 2) + AXES_PX + LABEL_ROW_PX * label_rows,
        "layer": layers,
    }


def label_positions(nodes: pd.DataFrame) -> pd.Series:
    """Where each node's label goes: above and below in turn along a lane, so neighbours'
    labels do not run into each other on a narrow screen; at the ends of the tree, towards the
    inside, so they are not cut at the chart's edge."""
    if nodes.empty:
        return pd.Series([], dtype=object)
    first, last = nodes["x"].min(), nodes["x"].max()
    rank = nodes.groupby("y")["x"].rank(method="first").astype(int) - 1
    vertical = rank.map(lambda r: "top" if r % 2 == 0 else "bottom")
    horizontal = nodes["x"].map(
        lambda x: "left" if x == last and last > first else "right" if x == first and last >
        first else "center")
    return vertical + " " + horizontal


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
    # Legend names in on-call's words: the state keys stay the engine's.
    styles = [("restorable", "can roll back here", OK, "circle", 11),
              ("retired", "expired (cannot roll back here)", RUNNING, "circle-open", 7),
              ("abandoned", "taken out by a rollback", ERROR, "circle-x-open", 10),
              ("head", "latest (where the agent is now)", HEAD, "star", 18)]
    where = label_positions(nodes)
    for state, name, color, symbol, size in styles:
        part = nodes[nodes["state"] == state]
        if part.empty:
            continue
        fig.add_trace(go.Scatter(
            x=part["x"], y=part["y"], mode="markers+text" if len(nodes) <= 60 else "markers",
            name=name, customdata=part["id"], hovertext=part["hover"],
            hovertemplate="%{hovertext}<extra></extra>",
            text=part["label"].map(lambda t: "<br>".join(plot_text(line)
                                                         for line in str(t).split("\n"))),
            textposition=where[part.index].tolist(),
            cliponaxis=False,
            textfont={"size": 10, "color": "#52606D"},
            marker={"color": color, "symbol": symbol, "size": size,
                    "line": {"width": 1.5, "color": color}},
        ))
    lanes = sorted(set(nodes["y"].tolist())) if not nodes.empty else [0]
    xs = nodes["x"].tolist() if not nodes.empty else [0]
    names = {0: "current", **(lane_names or {})}
    # Room above the top lane and below the bottom one for the node labels (the head's star is
    # tall): nothing is cut at the plot's edge.
    _base(fig, 170 + 64 * len(lanes), clickmode="event+select", dragmode="pan",
          xaxis={"title": "snapshots, oldest → newest", "showticklabels": False,
                 "zeroline": False, "range": [min(xs) - 0.6, max(xs) + 0.6]},
          yaxis={"tickvals": lanes,
                 "ticktext": [plot_text(names.get(v, f"branch {v}")) for v in lanes],
                 "range": [max(lanes) + 0.6, min(lanes) - 0.6], "zeroline": False,
                 "automargin": True})
    if nodes.empty:
        _empty(fig, "No snapshots taken yet")
    return fig


ELAPSED_TICKS = ((1e-3, "1 ms"), (1.0, "1 s"), (60.0, "1 min"), (3600.0, "1 h"),
                 (86400.0, "1 day"), (30 * 86400.0, "1 month"), (365 * 86400.0, "1 year"),
                 (10 * 365 * 86400.0, "10 years"))
"""Ticks of the decay chart's log axis, in on-call's units, at least a decade and a half apart
so they stay apart on a phone."""
RECALL = "#2F3B48"


def decay_curves(curves: pd.DataFrame, accesses: pd.DataFrame | None = None,
                 threshold: float | None = None, now_s: float | None = None) -> go.Figure:
    """Memory strength over the time since the first memory (a log axis, so the session's
    seconds and the weeks of decay both show), one line per memory: solid up to now, dashed
    after (what happens if it is not recalled again); recalls as diamonds, the forget threshold
    as a dotted line, a legend under the plot.

    Args:
        curves: `views.decay_frames` output (memory, elapsed seconds, t, strength, ahead);
            without `elapsed`, seconds since its first `t`.
        accesses: memory, elapsed (or t), strength right after each recall.
        threshold: strength below which a memory is forgotten.
        now_s: now, in seconds since the first memory (a dashed "now" line).
    """
    fig = go.Figure()
    if "elapsed" not in curves:  # clock times only: measure from the first one
        origin = curves["t"].min() if not curves.empty else None
        curves = curves.assign(elapsed=[(t - origin).total_seconds() for t in curves["t"]])
        if accesses is not None:
            accesses = accesses.assign(elapsed=[(t - origin).total_seconds()
                                                for t in accesses["t"]])
    curves = curves[curves["elapsed"] > 0]
    hits = accesses[accesses["elapsed"] > 0] if accesses is not None else None
    colors: dict[str, str] = {}
    for i, (memory, part) in enumerate(curves.groupby("memory", sort=False)):
        color = colors[memory] = SERIES[i % len(SERIES)]
        name = plot_text(str(memory)[:40])
        meta = [plot_text(str(memory)[:80])]
        ahead = part["ahead"].astype(bool) if "ahead" in part else pd.Series(False, part.index)
        past, later = part[~ahead], part[ahead]
        if not past.empty and not later.empty:  # the dashed part starts where the solid ends
            later = pd.concat([past.tail(1), later])
        for segment, dash, first in ((past, "solid", True), (later, "dash", past.empty)):
            if segment.empty:
                continue
            fig.add_trace(go.Scatter(
                x=segment["elapsed"], y=segment["strength"], mode="lines", name=name,
                legendgroup=name, showlegend=first, meta=meta,
                customdata=[f"{t:%Y-%m-%d %H:%M:%S}" for t in segment["t"]],
                line={"color": color, "width": 2.5, "dash": dash},
                hovertemplate="%{meta[0]}<br>%{customdata}: strength %{y:.2f}"
                              + ("<br>if not recalled again" if dash == "dash" else "")
                              + "<extra></extra>"))
    if hits is not None and not hits.empty:
        for i, (memory, part) in enumerate(hits.groupby("memory", sort=False)):
            fig.add_trace(go.Scatter(
                x=part["elapsed"], y=part["strength"], mode="markers", name="recall",
                legendgroup="recall", showlegend=i == 0, meta=[plot_text(str(memory)[:80])],
                customdata=[f"{t:%Y-%m-%d %H:%M:%S}" for t in part["t"]],
                marker={"color": colors.get(memory, RECALL), "size": 11, "symbol": "diamond",
                        "line": {"width": 1.5, "color": RECALL}},
                hovertemplate="%{meta[0]}<br>recalled at %{customdata}<br>strength after: "
                              "%{y:.2f}<extra></extra>"))
    if threshold is not None:
        fig.add_hline(y=threshold, line={"color": ERROR, "dash": "dot"},
                      annotation_text="forget threshold", annotation_position="bottom left")
    xaxis: dict = {"type": "log", "title": "time since the first memory (log scale)",
                   "zeroline": False}
    top = 1.0
    if not curves.empty:
        lo, hi = float(curves["elapsed"].min()), float(curves["elapsed"].max())
        xaxis["range"] = [math.log10(lo), math.log10(hi)]
        ticks = [(v, t) for v, t in ELAPSED_TICKS if lo <= v <= hi]
        xaxis.update(tickmode="array", tickvals=[v for v, _ in ticks],
                     ticktext=[t for _, t in ticks], tickangle=0)
        top = max(top, float(curves["strength"].max()))
    if now_s is not None and now_s > 0:  # a trace, not a shape: data coordinates on a log axis
        fig.add_trace(go.Scatter(x=[now_s, now_s], y=[0, top * 1.04], mode="lines+text",
                                 text=["now", ""], textposition="top right",
                                 line={"color": "#7B8794", "dash": "dot", "width": 1},
                                 showlegend=False, hoverinfo="skip"))
    _base(fig, 360, showlegend=True, xaxis=xaxis,
          yaxis={"title": "strength", "range": [0, top * 1.08], "zeroline": True})
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
    steps = len(history)
    _base(fig, 320, xaxis={"title": "step", "tickformat": "d",
                           "dtick": max(1, math.ceil(steps / 10)) if steps else None},
          yaxis={"title": "tokens", "rangemode": "tozero"},
          hovermode="x unified", shapes=_rollback_shapes(markers)[0])
    if history.empty:
        _empty(fig, "No steps with a token breakdown")
    return fig

