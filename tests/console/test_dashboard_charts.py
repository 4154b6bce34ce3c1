"""Figure builders (dashboard.charts): frames in, plotly figures (and Vega-Lite specs: the fleet's
loop charts, the session's timeline) out."""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import replace

import pandas as pd
import plotly.graph_objects as go

from dashboard import charts, views
from dashboard.views.session.timeline import STEP_LABELS
from engine.records import BranchInfo, StepRecord
from engine.types import StepStatus


def step(n, tool="crop", status="ok", branch=None, verdict=None, fp="A"):
    return StepRecord(n=n, tool=tool, args={"x": n}, fingerprint=fp, status=status,
                      error="bad" if status == "error" else None, result_digest=None,
                      result_preview=None, started_at=float(n), ended_at=n + 0.5,
                      side_effect=False, compensation=None, verdict=verdict,
                      on_live_line=branch is None, branch=branch)


def annotations(fig: go.Figure) -> list[str]:
    return [a.text for a in fig.layout.annotations]


def layers(spec: dict, mark: str) -> list[dict]:
    """The layers of a Vega-Lite spec that draw `mark` (bar, rect, text)."""
    return [layer for layer in spec["layer"] if layer["mark"]["type"] == mark]


def bars(spec: dict) -> list[dict]:
    (bar,) = layers(spec, "bar")
    return bar["data"]["values"]


def texts(spec: dict) -> list[str]:
    return [layer["mark"]["text"] for layer in layers(spec, "text")]


def x_range(spec: dict) -> list[float]:
    """The time axis' range (milliseconds), given as an expression: Vega-Lite turns a temporal
    field's numeric domain into datetime(year, …) calls, which read milliseconds as a year (the
    bars of a short window vanished in a span of millennia)."""
    domain = spec["encoding"]["x"]["scale"]["domain"]
    assert set(domain) == {"expr"}
    return json.loads(domain["expr"])


def color_scale(spec: dict) -> dict:
    (bar,) = layers(spec, "bar")
    return bar["encoding"]["color"]["scale"]


def test_loops_over_time_stacks_one_series_per_key_and_shades_the_freeze():
    loops = pd.DataFrame({"at": [3600.0, 3700.0, 7300.0], "scenario": ["refund", "crop", "crop"]})
    buckets = views.loop_buckets(loops, "scenario", 0, 4 * 3600, 3600)
    spec = charts.loops_over_time(buckets, "scenario", title="Loops by scenario",
                                  freeze=(3000.0, 9000.0), bucket_s=3600)
    assert color_scale(spec)["domain"] == ["crop", "refund"]
    assert sum(b["loops"] for b in bars(spec)) == 3
    # stacked: in the first hour, refund sits on crop
    first = sorted((b for b in bars(spec) if b["start"] == bars(spec)[0]["start"]),
                   key=lambda b: b["low"])
    assert [(b["series"], b["low"], b["high"]) for b in first] == [("crop", 0, 1),
                                                                   ("refund", 1, 2)]
    assert len(layers(spec, "rect")) == 1 and "freeze" in texts(spec)
    assert spec["title"]["text"] == "Loops by scenario"
    json.dumps(spec)  # what st.vega_lite_chart sends


def test_loops_over_time_says_when_there_is_nothing():
    empty = views.loop_buckets(pd.DataFrame(columns=["at", "prompt_version"]), "prompt_version",
                               0, 7200, 3600)
    spec = charts.loops_over_time(empty, "prompt_version")
    assert bars(spec) == []
    assert "No loops in this window" in texts(spec)


def test_loop_charts_show_the_consoles_clock_as_the_caption_does():
    """The time scale is UTC over the console's local wall clock, so the browser's own time
    zone never shifts the bars away from the caption (`ChartWindow.caption`)."""
    at = 1_700_000_000.0
    loops = pd.DataFrame({"at": [at], "scenario": ["refund"]})
    buckets = views.loop_buckets(loops, "scenario", at - 3600, at + 3600, 600)
    spec = charts.loops_over_time(buckets, "scenario", bucket_s=600)
    (bar,) = bars(spec)
    start = dt.datetime.fromtimestamp(bar["start"] / 1000, dt.UTC)
    local = views.when(at - at % 600)
    assert (start.hour, start.minute) == (local.hour, local.minute)
    assert bar["when"].startswith(f"{local:%d %b %H:%M}–")
    assert spec["encoding"]["x"]["scale"]["type"] == "utc"


def points(spec: dict) -> dict[tuple[str, bool], list[int]]:
    """The timeline's markers: step numbers by (status in the legend, filled)."""
    out: dict[tuple[str, bool], list[int]] = {}
    for layer in layers(spec, "point"):
        for p in layer["data"]["values"]:
            out.setdefault((p["status"], layer["mark"]["filled"]), []).append(p["n"])
    return out


def written(spec: dict) -> list[str]:
    """What the text layers write (labels of loops and rollbacks, step numbers)."""
    return [str(v.get("note", v.get("label"))) for layer in layers(spec, "text")
            for v in layer["data"]["values"]]


def status_scale(spec: dict, channel: str) -> dict[str, str]:
    scale = layers(spec, "point")[0]["encoding"][channel]["scale"]
    return dict(zip(scale["domain"], scale["range"], strict=True))


def test_timeline_marks_errors_abandoned_steps_loops_and_rollbacks():
    verdict = {"rule": "exact_repeat", "loop_start_step": 2, "evidence_steps": [2, 3, 4]}
    steps = [step(1), step(2, status="error", branch="b1"), step(3, status="error", branch="b1"),
             step(4, status="error", branch="b1", verdict=verdict), step(5, fp="B")]
    frame = views.timeline_frame(steps)
    spec = charts.timeline(frame, views.lane_order(frame), views.loop_windows(steps),
                           views.rollback_markers(steps, [BranchInfo("b1", "snap-2", "rewind",
                                                                     "loop", 9.0, 1)]))
    # live steps filled, abandoned ones hollow and faded
    assert points(spec) == {("ok", True): [1, 5], ("error", False): [2, 3, 4]}
    hollow = [la for la in layers(spec, "point") if not la["mark"]["filled"]]
    assert hollow[0]["mark"]["opacity"] < 1
    assert status_scale(spec, "shape")["error"] != status_scale(spec, "shape")["ok"]
    assert status_scale(spec, "color")["error"] == charts.ERROR
    # one loop window shaded over its steps, one dashed rollback rule
    (band,) = layers(spec, "rect")
    assert band["data"]["values"][0]["x0"] == 1.5 and band["data"]["values"][0]["x1"] == 4.5
    (rule,) = layers(spec, "rule")
    assert rule["mark"]["strokeDash"] and rule["data"]["values"][0]["x"] == 4.5
    assert rule["data"]["values"][0]["tip"] == {"title": "rolled back to snap-2", "by": "rewind",
                                                "reason": "loop"}
    assert "↩ snap-2" in written(spec) and "loop: exact_repeat" in written(spec)
    # Lanes named by tool and short arguments (the first call of each fingerprint), not hashes,
    # in the order given, top to bottom.
    y = layers(spec, "point")[0]["encoding"]["y"]
    assert y["scale"]["domain"] == ['crop {"x":1}', 'crop {"x":5}']
    assert y["axis"]["labelOverlap"] is False  # every lane named, never one hidden
    # step number over its clock time, at a few ticks (upright, legible on a phone)
    axis = layers(spec, "point")[0]["encoding"]["x"]["axis"]
    assert axis["labelAngle"] == 0 and len(axis["values"]) <= 4 and axis["values"][0] == 1
    assert '["1", "' in axis["labelExpr"]
    # the tooltip: the step's tool, arguments and error
    tips = {p["n"]: p["tip"] for la in layers(spec, "point") for p in la["data"]["values"]}
    assert tips[2]["title"] == "step 2 · crop" and tips[2]["args"] == '{"x":2}'
    assert tips[2]["error"] == "bad" and "error" not in tips[1]
    assert layers(spec, "point")[0]["encoding"]["tooltip"] == {"field": "tip", "type": "nominal"}
    assert spec["description"].startswith("Timeline: steps 1 to 5 in 2 lanes (2 ok, 3 error, "
                                          "3 abandoned); 1 loop window; 1 rollback")


def test_timeline_draws_a_quarantine_refusal_apart_from_a_failure():
    """A refused step never ran: on-call must not read it as the tool failing, so it has its
    own legend entry, marker and colour, live and abandoned alike."""
    refusal = "ToolQuarantined: refund_api is quarantined (q-1): HTTP 500"
    steps = [step(1), step(2, status="error"),
             replace(step(3, status=StepStatus.REFUSED), error=refusal),
             replace(step(4, status=StepStatus.REFUSED, branch="b1"), error=refusal),
             step(5, status="error", branch="b1"),
             # stored before the refused status existed: an error with the refusal's text
             replace(step(6, status="error"), error=refusal)]
    frame = views.timeline_frame(steps)
    spec = charts.timeline(frame, views.lane_order(frame))
    refused = "refused (quarantined tool)"
    assert points(spec) == {("ok", True): [1], ("error", True): [2], (refused, True): [3, 6],
                            (refused, False): [4], ("error", False): [5]}
    shapes, colors = status_scale(spec, "shape"), status_scale(spec, "color")
    assert list(shapes) == ["ok", "error", refused]  # the legend's entries
    assert shapes[refused] != shapes["error"] and colors[refused] != colors["error"]
    tips = {p["n"]: p["tip"] for la in layers(spec, "point") for p in la["data"]["values"]}
    assert tips[3]["error"].startswith("ToolQuarantined")


def test_timeline_draws_long_sessions_whole_and_handles_no_steps():
    steps = [step(n, status="error" if n % 7 == 0 else "ok") for n in range(1, 5001)]
    frame = views.timeline_frame(steps)
    spec = charts.timeline(frame, views.lane_order(frame))
    assert sum(len(ns) for ns in points(spec).values()) == 5000
    # a few step numbers written, not thousands
    assert len(written(spec)) <= STEP_LABELS + 2
    empty = charts.timeline(views.timeline_frame([]), [])
    assert "No steps recorded" in [la["mark"].get("text") for la in layers(empty, "text")]
    assert empty["description"] == "Timeline: no steps recorded"
    json.dumps(spec)  # plain JSON, as Streamlit sends it


def test_snapshot_tree_carries_snapshot_ids_for_selection():
    nodes = pd.DataFrame([
        {"id": "s1", "x": 0, "y": 0, "label": "start", "state": "restorable", "hover": "s1"},
        {"id": "s2", "x": 1, "y": 1, "label": "x", "state": "abandoned", "hover": "s2"},
        {"id": "s3", "x": 2, "y": 0, "label": "y", "state": "head", "hover": "s3"},
    ])
    fig = charts.snapshot_tree(nodes, [("s1", "s2"), ("s1", "s3"), ("s9", "s1")],
                               {1: "branch-7 (rewind)"})
    edges, *points = fig.data
    assert edges.hoverinfo == "skip" and list(edges.x) == [0, 1, None, 0, 2, None]
    assert {t.name: list(t.customdata) for t in points} == {
        "can roll back here": ["s1"], "taken out by a rollback": ["s2"],
        "latest (where the agent is now)": ["s3"]}  # on-call's words, not "head"
    assert next(t for t in points if t.name.startswith("latest")).marker.symbol == "star"
    assert list(fig.layout.yaxis.ticktext) == ["current", "branch-7 (rewind)"]
    assert fig.layout.clickmode == "event+select"
    # labelled nodes, never cut at the plot's edge: room above the top lane and beside the ends
    assert list(points[0].text) == ["start"] and points[0].cliponaxis is False
    bottom, top = fig.layout.yaxis.range
    assert top <= -0.5 and bottom >= 1.5  # reversed: the live line (0) on top
    # the ends' labels lean inwards; neighbours on a lane alternate above and below
    assert {t.name: list(t.textposition) for t in points} == {
        "can roll back here": ["top right"], "taken out by a rollback": ["top center"],
        "latest (where the agent is now)": ["bottom left"]}


def test_node_labels_alternate_along_each_lane():
    nodes = pd.DataFrame({"x": [0, 1, 2, 3, 2], "y": [0, 0, 0, 0, 1]})
    assert charts.label_positions(nodes).tolist() == [
        "top right", "bottom center", "top center", "bottom left", "top center"]


def test_snapshot_tree_without_snapshots():
    fig = charts.snapshot_tree(views.tree_layout([])[0], [])
    assert "No snapshots taken yet" in annotations(fig)


def test_decay_curves_draw_threshold_and_recalls():
    t0 = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
    curves = pd.DataFrame([{"memory": m, "t": t0 + dt.timedelta(hours=h), "strength": s}
                           for m in ("fx rate", "user name") for h, s in ((0, 1.0), (5, 0.4))])
    hits = pd.DataFrame([{"memory": "fx rate", "t": t0 + dt.timedelta(hours=2), "strength": 0.9}])
    fig = charts.decay_curves(curves, hits, threshold=0.2)
    lines = [t for t in fig.data if t.mode == "lines"]
    assert [t.name for t in lines] == ["fx rate", "user name"]
    assert len([t for t in fig.data if t.mode == "markers"]) == 1
    assert "forget threshold" in annotations(fig)
    assert "No memories" in annotations(charts.decay_curves(curves.iloc[0:0]))


def test_budget_charts():
    parts = views.budget_parts({"system": 100, "dialogue": 500, "memories": 50, "reserve": 200},
                               1000)
    now = charts.budget_now(parts, 1000)
    assert [t.name for t in now.data] == ["system", "dialogue", "memories", "reserve", "free"]
    assert tuple(now.layout.xaxis.range) == (0, 1000)
    history = pd.DataFrame({"step": [1, 2, 3], "system": [100] * 3, "dialogue": [200, 900, 150],
                            "memories": [50] * 3, "reserve": [200] * 3, "max_tokens": [1500] * 3})
    over = charts.budget_over_steps(history, [{"x": 2.5, "target": "snap-2", "actor": "rewind",
                                              "reason": "loop"}])
    assert [t.name for t in over.data] == ["system", "dialogue", "memories", "reserve", "window"]
    assert [s.x0 for s in over.layout.shapes] == [2.5]
    assert all(t.stackgroup == "tokens" for t in over.data[:4])
    assert "No steps with a token breakdown" in annotations(
        charts.budget_over_steps(history.iloc[0:0]))



# -- legibility ----------------------------------------------------------------------------------
def legend_is_below_the_plot(fig: go.Figure) -> bool:
    """The legend hangs from the figure's bottom edge, under the plot and its axis labels (plotly
    widens the bottom margin for a container-referenced legend), so it never meets the title or
    labels in the top margin."""
    legend = fig.layout.legend
    return (legend.yref == "container" and legend.y == 0 and legend.yanchor == "bottom"
            and legend.orientation == "h")


def thirteen_prompt_versions() -> pd.DataFrame:
    keys = [f"support-v{i}" for i in range(13)]
    loops = pd.DataFrame({"at": [60.0 * j for i in range(13) for j in range(i + 1)],
                          "prompt_version": [keys[i] for i in range(13) for _ in range(i + 1)]})
    return views.loop_buckets(loops, "prompt_version", 0, 900, 60)


def test_thirteen_prompt_versions_draw_six_series_and_other_under_the_title():
    buckets = thirteen_prompt_versions()
    spec = charts.loops_over_time(buckets, "prompt_version", title="by prompt version",
                                  bucket_s=60)
    scale = color_scale(spec)
    names = scale["domain"]
    assert len(names) == 7 and names[-1] == "other (7 more)"
    assert names[:6] == [f"support-v{i}" for i in (12, 11, 10, 9, 8, 7)]  # busiest first
    assert sum(b["loops"] for b in bars(spec)) == buckets["loops"].sum()
    assert len(set(scale["range"])) == 7 and scale["range"][-1] == charts.OTHER_COLOR
    (bar,) = layers(spec, "bar")
    assert bar["encoding"]["color"]["legend"]["orient"] == "bottom"
    assert spec["title"]["text"] == "by prompt version"
    # each bar covers most of its minute, and the last one is inside the x range
    assert {b["end"] - b["start"] for b in bars(spec)} == {0.85 * 60_000}
    lo, hi = x_range(spec)
    assert hi - lo == (buckets["bucket"].max() - buckets["bucket"].min()).total_seconds() \
        * 1000 + 60_000
    assert max(b["end"] for b in bars(spec)) <= hi


def test_series_keep_their_colour_when_other_series_come_and_go():
    few = charts.series_colors(["v7", "v8"])
    more = charts.series_colors(["v1", "v6", "v7", "v8", "v9"])
    assert few["v7"] == more["v7"] and few["v8"] == more["v8"]
    assert charts.series_colors(["v8"]) == {"v8": few["v8"]}
    clash = charts.series_colors(["v2", "v4"])  # both hash to one slot: the first keeps it
    assert clash["v2"] == charts.series_colors(["v2"])["v2"] and clash["v4"] != clash["v2"]
    six = charts.series_colors([f"p{i}" for i in range(6)])
    assert len(set(six.values())) == 6  # collisions move to a free colour


def test_the_freeze_label_stays_inside_the_charts_range():
    buckets = views.loop_buckets(pd.DataFrame({"at": [7200.0], "scenario": ["refund"]}),
                                 "scenario", 3600, 4 * 3600, 600)
    spec = charts.loops_over_time(buckets, "scenario", freeze=(0.0, 1e9), bucket_s=600)
    (shade,) = layers(spec, "rect")
    ((x0, x1),) = [(v["start"], v["end"]) for v in shade["data"]["values"]]
    lo, hi = x_range(spec)
    assert lo <= x0 < x1 <= hi
    outside = charts.loops_over_time(buckets, "scenario", freeze=(0.0, 60.0), bucket_s=600)
    assert layers(outside, "rect") == [] and "freeze" not in texts(outside)


def test_close_rollback_labels_are_staggered_above_the_plot_and_the_legend_is_below():
    steps = [step(n, status="error" if 3 <= n <= 11 else "ok", fp="A" if n < 12 else "B",
                  branch=("b1" if n < 9 else "b2") if 3 <= n <= 11 else None)
             for n in range(1, 21)]
    branches = [BranchInfo("b1", "snap-2", "rewind", "loop", 9.0, 1),
                BranchInfo("b2", "snap-8", "olivia", "again", 19.0, 1)]
    markers = views.rollback_markers(steps, branches)
    assert [m["x"] for m in markers] == [8.5, 11.5]  # 3 steps apart in 20: labels would touch
    frame = views.timeline_frame(steps)
    spec = charts.timeline(frame, views.lane_order(frame), [(2.5, 8.5, "exact_repeat")], markers)
    labels = [la for la in layers(spec, "text")
              if str(la["data"]["values"][0].get("note", "")).startswith(("↩", "loop:"))]
    rollback = {la["data"]["values"][0]["note"]: la for la in labels
                if la["data"]["values"][0]["note"].startswith("↩")}
    # above the plot (negative y, bottom baseline), one row apart
    ys = sorted(la["encoding"]["y"]["value"] for la in rollback.values())
    assert ys[1] < 0 and ys[0] == ys[1] - charts.LABEL_ROW_PX
    assert all(la["mark"]["baseline"] == "bottom" for la in rollback.values())
    (loop,) = [la for la in labels if la["data"]["values"][0]["note"].startswith("loop:")]
    assert loop["mark"]["baseline"] == "top" and loop["encoding"]["y"]["value"] >= 0  # inside
    legend = layers(spec, "point")[0]["encoding"]["color"]["legend"]
    assert legend["orient"] == "bottom"
    # the chart's height (Streamlit fits the whole chart to it) grows by the second row
    one = charts.timeline(frame, views.lane_order(frame), [], markers[:1])
    assert spec["height"] - one["height"] == charts.LABEL_ROW_PX


def test_stagger_moves_only_labels_that_would_touch():
    assert charts.stagger([0, 50, 100], span=100, room=0.25) == [0, 0, 0]
    assert charts.stagger([0, 5, 10, 60], span=100, room=0.25) == [0, 1, 2, 0]
    assert charts.stagger([0, 1, 2, 3], span=100, rows=2, room=0.25) == [0, 1, 0, 1]


def test_long_lane_names_wrap_onto_two_short_lines():
    """The lane's label expression reads the name as data (`datum.label`): a short name stays
    on one line, a long one is cut into the tool and its arguments."""
    axis = charts.LANE_LABEL
    assert "datum.label" in axis and "'" + "crop" not in axis
    assert f"> {charts.LANE_LINE_CHARS}" in axis and "[" in axis  # two lines, each cut


def test_memory_axis_spans_the_curves_not_a_fixed_week():
    # A log axis of the time since the first memory: it spans exactly the samples, minutes or weeks.
    t0 = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
    curves = pd.DataFrame([{"memory": "fx", "t": t0 + dt.timedelta(minutes=m), "strength": 1.0}
                           for m in range(0, 21, 5)])
    fig = charts.decay_curves(curves, None, 0.2)
    assert fig.layout.xaxis.type == "log"
    lo, hi = fig.layout.xaxis.range
    assert (round(10 ** lo), round(10 ** hi)) == (300, 1200)  # 5 to 20 minutes after the first
    assert legend_is_below_the_plot(fig)


# -- hostile text ------------------------------------------------------------------------------
EVIL = '<a href="https://evil.test">x</a> & [sign in](https://evil.test) %{y}'
"""A link plotly would render in any label, legend or hover, and a hovertemplate placeholder."""
MARKUP_ALLOWED = re.compile(r"</?(b|br|extra)>")


def rendered_strings(fig: go.Figure):
    """Every string plotly may render as text with markup (not customdata, which it never shows)."""
    def walk(value, key=""):
        if isinstance(value, str):
            yield key, value
        elif isinstance(value, dict):
            for k, v in value.items():
                if k != "customdata":
                    yield from walk(v, k)
        elif isinstance(value, (list, tuple)):
            for v in value:
                yield from walk(v, key)
        elif hasattr(value, "tolist"):
            yield from walk(value.tolist(), key)

    return list(walk(fig.to_plotly_json()))


def assert_no_markup_from(fig: go.Figure, shown: str = "&lt;a href") -> None:
    strings = rendered_strings(fig)
    leaks = [(k, s) for k, s in strings if "<" in MARKUP_ALLOWED.sub("", s)]
    assert leaks == []
    assert any(shown in s for _, s in strings)  # the hostile text is there, escaped
    templates = [s for k, s in strings if k == "hovertemplate"]
    assert not any("evil" in s for s in templates)  # never spliced into a template


def test_hostile_names_stay_data_in_loops_over_time():
    """Vega draws names as text (on a canvas; its tooltips escape HTML): a name is passed as it
    is, never escaped into "&lt;" on screen, and never reaches an expression, where it would
    be code."""
    loops = pd.DataFrame({"at": [3600.0], "scenario": [EVIL]})
    buckets = views.loop_buckets(loops, "scenario", 0, 4 * 3600, 3600)
    spec = charts.loops_over_time(buckets, "scenario", bucket_s=3600)
    assert [b["series"] for b in bars(spec)] == [EVIL]
    assert color_scale(spec)["domain"] == [EVIL]

    def code(value, key=""):
        if isinstance(value, dict):
            for k, v in value.items():
                yield from code(v, k)
        elif isinstance(value, list):
            for v in value:
                yield from code(v, key)
        elif key in ("expr", "labelExpr", "signal", "href", "url", "field"):
            yield value
    assert not any("evil" in str(c) for c in code(spec))


def spec_code(value, key=""):
    """Every string of a Vega-Lite spec that Vega reads as code or as a name to look up."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k != "values":  # inline data: drawn as text, never evaluated
                yield from spec_code(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from spec_code(v, key)
    elif key in ("expr", "labelExpr", "signal", "href", "url", "field", "calculate", "filter",
                 "test"):
        yield value


def test_hostile_tool_names_errors_and_rollbacks_stay_data_in_the_timeline():
    """Vega draws lanes and labels as text and its tooltip escapes HTML: foreign text is passed
    as it is (never "&lt;" on screen) and never reaches an expression, where it would be code."""
    verdict = {"rule": EVIL, "loop_start_step": 1, "evidence_steps": [1, 2]}
    steps = [StepRecord(n=n, tool=EVIL, args={"u": EVIL}, fingerprint="A", status="error",
                        error=EVIL, result_digest=None, result_preview=None, started_at=float(n),
                        ended_at=n + 0.5, side_effect=False, compensation=None,
                        verdict=verdict if n == 2 else None, on_live_line=False, branch=EVIL)
             for n in (1, 2)]
    frame = views.timeline_frame(steps)
    spec = charts.timeline(frame, views.lane_order(frame), views.loop_windows(steps),
                           views.rollback_markers(steps, [BranchInfo(EVIL, EVIL, EVIL, EVIL,
                                                                     9.0, 1)]))
    lane = f"{EVIL} {views.short_json({'u': EVIL}, views.LANE_ARGS_CHARS)}"
    assert layers(spec, "point")[0]["encoding"]["y"]["scale"]["domain"] == [lane]
    (tip, _) = [p["tip"] for p in layers(spec, "point")[0]["data"]["values"]]
    assert tip["title"] == f"step 1 · {EVIL}" and tip["error"] == EVIL
    assert f"loop: {EVIL}" in written(spec) and f"↩ {EVIL}" in written(spec)
    assert not any("&lt;" in t for t in written(spec))
    assert not any("evil" in str(c) for c in spec_code(spec))
    assert "evil" not in spec["description"]


def test_hostile_lane_names_labels_and_reasons_are_escaped_in_the_snapshot_tree():
    from engine.records import SnapshotNode

    nodes = [SnapshotNode(id="s1", parent=None, label=EVIL, created_at=1.0, on_live_line=True,
                          abandoned_reason=None, kind="manual", restorable=True, next_step=1,
                          messages=1, branch=None, is_head=False),
             SnapshotNode(id="s2", parent="s1", label=EVIL, created_at=2.0, on_live_line=False,
                          abandoned_reason=EVIL, kind="step", restorable=False, next_step=2,
                          messages=2, branch="b1", is_head=False)]
    layout, edges = views.tree_layout(nodes, [BranchInfo("b1", "s1", EVIL, EVIL, 3.0, 1)])
    fig = charts.snapshot_tree(layout, edges, {1: f"b1 ({EVIL})"})
    assert list(fig.layout.yaxis.ticktext) == ["current", views.plot_text(f"b1 ({EVIL})")]
    assert_no_markup_from(fig)


def test_hostile_memories_are_escaped_in_decay_curves():
    t0 = dt.datetime(2026, 10, 1, tzinfo=dt.UTC)
    curves = pd.DataFrame([{"memory": EVIL, "t": t0 + dt.timedelta(hours=h), "strength": s}
                           for h, s in ((0, 1.0), (5, 0.4))])
    hits = pd.DataFrame([{"memory": EVIL, "t": t0 + dt.timedelta(hours=2), "strength": 0.9}])
    fig = charts.decay_curves(curves, hits, threshold=0.2)
    assert fig.data[0].name == views.plot_text(EVIL[:40])
    assert_no_markup_from(fig)
