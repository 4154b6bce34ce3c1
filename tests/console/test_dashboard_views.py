"""View models of the console (dashboard.views): records in, frames out."""

from __future__ import annotations

import re
import time

import pandas as pd
import pytest
from support.fleet import AUTO_ROLLED_BACK, LOOPING, seed_fleet

from dashboard import views
from dashboard.views import fleet as fleet_views
from engine import PAUSED_TEMPLATES, TEMPLATES, Engine
from engine.records import (
    AuditEvent,
    BranchInfo,
    MessageRecord,
    RollbackPreview,
    SessionInfo,
    SnapshotNode,
    StepRecord,
)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('views')}/rewind.db"
    seed_fleet(url)
    engine = Engine.open(url)
    yield engine
    engine.close()


def step(n, tool="t", args=None, status="ok", error=None, branch=None, verdict=None,
         fp=None, late=False, side_effect=False, text=None):
    return StepRecord(n=n, tool=tool, args=args if args is not None else {}, fingerprint=fp or
                      f"{tool}-{args}", status=status, error=error, result_digest=None,
                      result_preview=None, started_at=1000.0 + n, ended_at=1000.5 + n,
                      side_effect=side_effect, compensation=None, verdict=verdict,
                      on_live_line=branch is None, branch=branch, late=late, text=text)


def node(sid, parent=None, *, kind="step", restorable=True, branch=None, head=False, n=1,
         label=None):
    return SnapshotNode(id=sid, parent=parent, label=label, created_at=1000.0 + n,
                        on_live_line=branch is None, abandoned_reason="rolled back" if branch
                        else None, kind=kind, restorable=restorable and branch is None,
                        next_step=n, messages=n, branch=branch, is_head=head)


# -- fleet --------------------------------------------------------------------------------------
def test_sessions_frame_has_one_row_per_session_with_link_and_state(fleet):
    frame = views.sessions_frame(fleet.sessions(limit=100))
    assert len(frame) == 26
    row = frame.set_index("session").loc[LOOPING]
    assert row["status"] == "looping" and "looping" in row["state"]
    assert row["tenant"] == "globex" and row["prompt_version"] == "v8"
    assert row["verdict"] == "exact_repeat" and "refund_api" in row["explanation"]
    assert row["link"] == f"session?session={LOOPING}"
    assert pd.isna(frame.set_index("session").loc["bg-001", "verdict"])


def test_session_link_encodes_the_id():
    assert views.session_link("a b/{c}:d") == "session?session=a%20b%2F%7Bc%7D%3Ad"


def test_select_sessions_searches_sorts_and_cuts(fleet):
    frame = views.sessions_frame(fleet.sessions(limit=100))
    assert views.select_sessions(frame, search="GLOBEX")["tenant"].eq("globex").all()
    by_loops = views.select_sessions(frame, sort="Loop verdicts")
    assert by_loops["loops"].is_monotonic_decreasing
    by_status = views.select_sessions(frame, sort="Status")
    assert by_status.iloc[0]["status"] == "looping"
    assert len(views.select_sessions(frame, limit=5)) == 5
    assert views.select_sessions(frame, search="no such thing").empty


def test_facets_are_sorted_distinct_values(fleet):
    menus = views.facets(info.meta for info in fleet.sessions(limit=100))
    assert menus["prompt_version"] == ["v6", "v7", "v8"]
    assert menus["scenario"] == ["image_edit", "invoice", "itinerary", "refund"]
    assert views.facets([]) == {"tenant": [], "scenario": [], "prompt_version": []}


def test_kpis_flag_what_needs_attention():
    calm = views.kpis({"sessions": 10, "active": 3, "looping": 0, "rollbacks_window": 2,
                       "compensations_pending": 1, "compensations_failed": 0})
    assert [k.label for k in calm] == ["Active sessions", "Looping now", "Rollbacks, last hour",
                                      "Compensations"]
    assert [k.value for k in calm] == ["3", "0", "2", "1 / 0"]
    assert not any(k.alert for k in calm)
    busy = views.kpis({"looping": 2, "compensations_failed": 1}, window_s=6 * 3600)
    assert busy[1].alert and busy[3].alert and busy[2].label == "Rollbacks, last 6 hours"


def test_the_why_flagged_column_is_wide_enough_for_its_longest_text_in_screen_cells():
    """The fleet table never wraps a cell: the column must fit the longest explanation as it is
    drawn, where CJK and emoji take two cells and combining or control characters none."""
    width = fleet_views.text_width
    px, pad = fleet_views.CHAR_PX, fleet_views.CELL_PAD_PX
    assert fleet_views.text_cells("") == 0
    assert fleet_views.text_cells("refund_api failed") == 17
    assert fleet_views.text_cells("返金APIが失敗") == 13  # five wide, three narrow
    assert fleet_views.text_cells("🔁 loop") == 7
    assert fleet_views.text_cells("cafe\u0301") == 4  # e + combining acute: one é
    assert fleet_views.text_cells("a\u200db\u2060c\ufe0f") == 3  # joiners, variation selector
    assert fleet_views.text_cells("a\x00\x1bb") == 2  # controls draw nothing
    assert fleet_views.text_cells("a\tb\nc") == 5  # the canvas draws whitespace as spaces

    latin, japanese = "x" * 60, "返" * 60
    assert width(pd.Series([latin])) == int(60 * px + pad)
    assert width(pd.Series([japanese])) == int(120 * px + pad)  # twice as wide, not cut
    assert width(pd.Series(["a" * 40, "返" * 30, None])) == int(60 * px + pad)  # the widest
    # nothing, blanks and missing values fall back to the least; very long text to the most
    assert width(pd.Series([], dtype=object)) == width(pd.Series([None, ""])) == 200
    assert width(pd.Series(["返" * 2000])) == 1400
    assert width(pd.Series(["short"]), least=80) == 80  # 5 cells: 61 px
    assert width(pd.Series(["short"]), least=10, most=55) == 55


# -- loops over time ----------------------------------------------------------------------------
def test_bucket_seconds_gives_a_readable_number_of_bars():
    for window in (3600, 6 * 3600, 86400, 7 * 86400, 30 * 86400):
        assert 4 <= window / views.bucket_seconds(window) <= 36
    assert views.bucket_seconds(86400) == 3600


def test_loop_buckets_count_per_key_and_fill_quiet_buckets_with_zero():
    loops = pd.DataFrame({"at": [3600.0 * 2 + 5, 3600.0 * 2 + 9, 3600.0 * 5, 3600.0 * 5],
                          "prompt_version": ["v7", "v7", "v8", None]})
    out = views.loop_buckets(loops, "prompt_version", since=0, until=6 * 3600, bucket_s=3600)
    assert set(out["prompt_version"]) == {"v7", "v8", "(none)"}
    assert len(out) == 7 * 3
    hour2 = out[out["bucket"] == pd.Timestamp(7200, unit="s", tz="UTC")]
    assert hour2.set_index("prompt_version")["loops"].to_dict() == {"(none)": 0, "v7": 2, "v8": 0}
    assert out["loops"].sum() == 4


def test_loop_buckets_of_nothing_is_a_zero_series():
    out = views.loop_buckets(pd.DataFrame(columns=["at", "scenario"]), "scenario", 0, 7200, 3600)
    assert list(out.columns) == ["bucket", "scenario", "loops"]
    assert out["loops"].sum() == 0 and len(out) == 3


# -- timeline -----------------------------------------------------------------------------------
def test_timeline_frame_lanes_outcomes_and_plain_tooltips():
    steps = [step(1, "crop", {"x": 1}, fp="A"), step(2, "crop", {"x": "<b>"}, "error", "bad <i>",
             fp="B"), step(3, None, None, fp="agent", text="thinking"),
             step(4, "crop", {"x": 1}, "error", "bad", branch="branch-9", fp="A", late=True)]
    frame = views.timeline_frame(steps)
    assert frame["outcome"].tolist() == ["ok", "error", "ok", "error"]
    assert frame["line"].tolist() == ["live", "live", "live", "abandoned"]
    assert frame.loc[2, "lane"] == views.AGENT_LANE
    # Lanes read as the tool and its short arguments, not as fingerprint hashes.
    assert frame.loc[0, "lane"] == frame.loc[3, "lane"] == 'crop {"x":1}'
    # plain text, as the tool wrote it: Vega's tooltip escapes it, the chart never parses it
    at = f"{views.when(1002.0):%Y-%m-%d %H:%M:%S}"
    assert frame.loc[1, "tip"] == {"title": "step 2 · crop", "at": at, "args": '{"x":"<b>"}',
                                   "error": "bad <i>"}
    assert frame.loc[2, "tip"]["text"] == "thinking" and "args" not in frame.loc[2, "tip"]
    abandoned = frame.loc[3, "tip"]["abandoned"]
    assert "branch-9" in abandoned and "late" in abandoned
    assert views.lane_order(frame) == ['crop {"x":1}', 'crop {"x":"<b>"}', views.AGENT_LANE]


def test_timeline_frame_groups_rare_fingerprints_into_one_lane():
    steps = [step(i, "search", {"q": i}, fp=f"fp{i}") for i in range(1, 40)]
    steps += [step(40 + i, "crop", {"x": 1}, fp="hot") for i in range(5)]
    frame = views.timeline_frame(steps, max_lanes=3)
    assert frame["lane"].nunique() == 4
    assert (frame["lane"] == views.OTHER_LANE).sum() == 37
    assert views.lane_order(frame)[-1] == views.OTHER_LANE


def test_loop_windows_merge_repeated_verdicts_of_one_loop():
    v = {"rule": "exact_repeat", "loop_start_step": 3, "evidence_steps": [3, 4, 5]}
    steps = [step(n, status="error") for n in range(1, 10)]
    steps[4] = step(5, status="error", verdict=v)
    steps[7] = step(8, status="error", verdict={**v, "evidence_steps": [6, 7, 8]})
    assert views.loop_windows(steps) == [(2.5, 8.5, "exact_repeat")]
    assert views.loop_windows([step(1)]) == []


def test_rollback_markers_sit_after_the_last_abandoned_step():
    steps = [step(1), step(2, branch="b1"), step(3, branch="b1"), step(4),
             step(5, branch="b1", late=True)]
    branches = [BranchInfo("b1", "snap-2", "rewind", "loop", 1010.0, 1),
                BranchInfo("b2", "snap-1", "alice", "empty", 1020.0, 2)]
    markers = views.rollback_markers(steps, branches)
    assert [(m["x"], m["target"], m["actor"]) for m in markers] == [(3.5, "snap-2", "rewind")]


# -- why flagged --------------------------------------------------------------------------------
def test_evidence_frame_lists_the_evidence_steps(fleet):
    s = fleet.get_session(LOOPING)
    verdict = s.info().last_verdict
    frame = views.evidence_frame(s.steps(), verdict)
    assert frame["step"].tolist() == verdict["evidence_steps"]
    assert set(frame["tool"]) == {"refund_api"}
    assert frame["error"].str.contains("HTTP 500").all()
    assert views.evidence_frame(s.steps(), None).empty


def test_arg_diffs_show_only_the_arguments_that_differ():
    a = step(1, "crop", {"image": "x.png", "box": [0, 0, 10, 10], "mode": "fast"})
    b = step(2, "crop", {"image": "x.png", "box": [0, 0, 11, 10]})
    diff = views.arg_diffs([a, b])
    assert diff["argument"].tolist() == ["box[2]", "mode"]
    assert diff.set_index("argument").loc["mode", "step 2"] == "—"
    assert views.arg_diffs([a, a]).empty


def test_near_duplicate_groups_need_one_tool_and_different_fingerprints():
    same = [step(1, "a", {"x": 1}, fp="1"), step(2, "a", {"x": 1}, fp="1")]
    near = [step(3, "b", {"x": 1}, fp="2"), step(4, "b", {"x": 2}, fp="3")]
    assert views.near_duplicate_groups(same + near) == [near]


# -- snapshot tree ------------------------------------------------------------------------------
def test_tree_layout_hides_retired_nodes_and_links_through_them():
    nodes = [node("s1", kind="manual", n=1, label="start"),
             node("s2", "s1", restorable=False, n=2),
             node("s3", "s2", n=3),
             node("s4", "s3", branch="b1", n=4),
             node("s5", "s3", head=True, n=5)]
    branches = [BranchInfo("b1", "s3", "alice", "loop", 1010.0, 1)]
    frame, edges = views.tree_layout(nodes, branches)
    assert frame["id"].tolist() == ["s1", "s3", "s4", "s5"]
    assert ("s1", "s3") in edges and ("s3", "s4") in edges and ("s3", "s5") in edges
    by_id = frame.set_index("id")
    assert by_id.loc["s4", "y"] == 1 and by_id.loc["s4", "state"] == "abandoned"
    assert by_id.loc["s5", "state"] == "head" and by_id.loc["s1", "state"] == "restorable"
    assert "rolled back" in by_id.loc["s4", "hover"]
    full, full_edges = views.tree_layout(nodes, branches, include_retired=True)
    assert "s2" in full["id"].tolist() and ("s1", "s2") in full_edges
    assert full.set_index("id").loc["s2", "state"] == "retired"


def test_tree_layout_of_a_real_rolled_back_session(fleet):
    s = fleet.get_session(AUTO_ROLLED_BACK)
    frame, edges = views.tree_layout(s.tree(), s.branches())
    assert frame["is_head"].sum() == 1
    assert (frame["state"] == "abandoned").any()
    assert set(frame["y"]) == {0, 1}
    assert all(p in set(frame["id"]) and c in set(frame["id"]) for p, c in edges)


def test_rollback_choices_are_restorable_live_snapshots_newest_first():
    nodes = [node("s1", n=1), node("s2", "s1", restorable=False, n=2), node("s3", "s2", n=3),
             node("s4", "s3", branch="b1", n=4)]
    assert views.rollback_choices(nodes, "s1") == (["s3", "s1"], 1)
    assert views.rollback_choices(nodes, "gone") == (["s3", "s1"], 0)
    caption = views.snapshot_caption(node("s3", n=3, label="before crop", head=True), "s3")
    assert caption == "s3 · before crop · before step 3 · latest · suggested"


# -- messages -----------------------------------------------------------------------------------
def test_messages_view_and_html_strike_abandoned_and_mark_notices():
    records = [
        MessageRecord(1, 0, {"role": "user", "content": "crop <script>x</script>"}, None, 1.0),
        MessageRecord(2, 1, {"role": "assistant", "content": "retry\nagain"}, "b1", 2.0),
        MessageRecord(3, 1, {"role": "assistant", "content": "reset", "rewind_notice": True},
                      None, 3.0),
        MessageRecord(4, 2, {"role": "tool", "content": [{"type": "text", "text": "part"}]},
                      None, 4.0),
    ]
    branches = [BranchInfo("b1", "s1", "alice", "loop on crop", 2.5, 1)]
    items = views.messages_view(records, branches)
    assert [m.abandoned for m in items] == [False, True, False, False]
    assert items[1].reason == "rolled back to s1 by alice: loop on crop"
    assert items[2].notice and items[3].text == "part"
    page = views.messages_html(items)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<del>retry<br>again</del>" in page
    assert page.count("<del>") == 1
    assert "rw-notice" in page and ">notice<" in page


def test_content_text_of_other_shapes():
    assert views.content_text(None) == ""
    assert views.content_text({"a": 1}) == '{"a":1}'


def test_plain_neutralises_markdown():
    assert views.plain("a*b_[x](y) :rocket: $x$") == r"a\*b\_\[x\]\(y\) \:rocket\: \$x\$"


def test_plain_breaks_links_html_and_auto_links():
    wj = views.WORD_JOINER
    assert views.plain("[Your session expired - sign in](https://evil.test)") == (
        rf"\[Your session expired \- sign in\]\(https\:{wj}//evil\.test\)")
    assert views.plain('<a href="https://evil.test">x</a>') == (
        rf'\<a href\="https\:{wj}//evil\.test"\>x\</a\>')
    assert views.plain("see HTTP://evil.test/x, WWW.evil.test or x@evil.test") == (
        rf"see HTTP\:{wj}//evil\.test/x, WWW{wj}\.evil\.test or x@{wj}evil\.test")
    assert views.plain("h1\n===\n&lt; `code` ~~x~~ | a |") == (
        "h1\n\\=\\=\\=\n\\&lt; \\`code\\` \\~\\~x\\~\\~ \\| a \\|")
    assert views.plain("sess-1 ") == r"sess\-1 "  # nothing trimmed
    assert views.plain(None) == "None"


def test_store_label_keeps_scheme_host_and_path_of_the_redacted_url():
    assert views.store_label("redis://u:***@10.0.0.5:6379/0?retries=0&password=s3cret#x") == (
        "redis://u:***@10.0.0.5:6379/0")
    assert views.store_label("sqlite:////var/lib/rewind/rewind.db") == "/var/lib/rewind/rewind.db"
    assert views.store_label("sqlite:///:memory:") == ":memory:"


def test_literal_shows_every_character_in_a_code_span():
    assert views.literal("a") == "`a`"
    assert views.literal("x `y` z") == "``x `y` z``"
    assert views.literal("`x`") == "`` `x` ``"
    assert views.literal(repr("sess-1 ")) == "`'sess-1 '`"
    assert views.literal("a\nb") == "`a b`"


def test_plot_text_escapes_what_plotly_renders_as_markup():
    assert views.plot_text('<a href="https://evil.test">x</a> & <b>') == (
        '&lt;a href="https://evil.test"&gt;x&lt;/a&gt; &amp; &lt;b&gt;')


# -- actions ------------------------------------------------------------------------------------
def test_notice_choices_give_the_exact_text():
    assert views.notice_text("English template") == TEMPLATES["en"]
    assert views.notice_text("Chinese template") == TEMPLATES["zh"]
    assert views.notice_text("Custom text", "  We fixed it.  ") == "We fixed it."
    assert views.notice_text("Custom text", "   ") is None
    # on its own (no rollback), the template claims no reset
    assert views.notice_text("English template", rolled_back=False) == PAUSED_TEMPLATES["en"]
    assert views.notice_text("Chinese template", rolled_back=False) == PAUSED_TEMPLATES["zh"]
    assert views.default_notice_choice("zh-CN") == "Chinese template"
    assert views.default_notice_choice(None) == "English template"


def test_preview_frames(fleet):
    s = fleet.get_session(LOOPING)
    start = next(n.id for n in s.tree() if n.label == "start")
    steps, comps = views.preview_frames(s.preview_rollback(start))
    assert steps["step"].tolist() == list(range(1, 9))
    assert comps.to_dict("records") == [{"step": 2, "compensation": "points_refund",
                                         "args": '{"points":5,"user":"u-42"}'}]
    empty_steps, empty_comps = views.preview_frames(
        RollbackPreview(session="x", target="s", messages=[], steps=[], compensations=[]))
    assert empty_steps.empty and empty_comps.empty


# -- audit --------------------------------------------------------------------------------------
def test_audit_frame_and_csv_keep_chinese_text():
    events = [AuditEvent(2, time.time(), "olivia", "notice", "s-1", None, None,
                         {"text": "对话上下文已重置"}),
              AuditEvent(1, time.time(), "rewind", "rollback", "s-1", "snap-3", "loop", {})]
    frame = views.audit_frame(events)
    assert frame["actor"].tolist() == ["olivia", "rewind"]
    data = views.audit_csv(frame)
    assert data.startswith(b"\xef\xbb\xbf")
    text = data.decode("utf-8-sig")
    assert text.splitlines()[0] == ",".join(views.AUDIT_COLUMNS)
    assert "对话上下文已重置" in text and "olivia" in text
    assert views.audit_csv(views.audit_frame([])).decode("utf-8-sig").strip() == \
        ",".join(views.AUDIT_COLUMNS)


def test_audit_csv_neutralises_formulas():
    import csv
    import io

    hostile = ['=HYPERLINK("https://evil.test","x")', "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)",
               "\t=1+1", "\r=1+1"]
    events = [AuditEvent(n, 1000.0 + n, text, "rollback", text, text, text, {"note": text})
              for n, text in enumerate(hostile, 1)]
    frame = views.audit_frame(events)
    text = views.audit_csv(frame).decode("utf-8-sig")
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    assert [r["actor"] for r in rows] == ["'" + text for text in hostile]
    for row in rows:
        for column in ("actor", "session", "snapshot", "reason"):
            assert row[column].startswith("'"), (column, row[column])
    assert rows[0]["detail"].startswith('{"note"')  # JSON starts with "{": nothing to neutralise
    assert frame["actor"].tolist() == hostile  # only the export changes, not the table
    safe = views.audit_csv(views.audit_frame([AuditEvent(1, 1000.0, "olivia", "rollback", "s-1",
                                                         "snap-3", "loop 3x", {})]))
    assert "'" not in safe.decode("utf-8-sig")


# -- budget -------------------------------------------------------------------------------------
def test_budget_parts_adds_free_room_against_the_window():
    parts = views.budget_parts({"system": 100, "dialogue": 500, "memories": 50, "reserve": 200},
                               1000)
    assert parts.set_index("part")["tokens"].to_dict() == {
        "system": 100, "dialogue": 500, "memories": 50, "reserve": 200, "free": 150}
    assert "free" not in views.budget_parts({"system": 1}, None)["part"].tolist()


def test_memory_table_and_log_from_the_session_memory(fleet):
    memory = fleet.get_session(AUTO_ROLLED_BACK).memory
    items = memory.items(include_invalid=True)
    table = views.memory_table(items)
    assert table["recalls"].sum() == 1 and set(table["tier"]) <= {"short", "long"}
    log = views.memory_log_frame(memory.log(), {m.id: m.text for m in items})
    assert "promote" in set(log["event"])
    assert "The user wants a square crop of img-7.png" in set(log["memory"])


def test_memory_log_frame_describes_contradictions():
    fixes = [{"at": 5.0, "kept": "m2", "invalidated": "m1", "kind": "number",
              "reason": "rate was 1.08, now 1.12"},
             {"at": 1.0, "id": "m1", "event": "prune", "reason": "weight 0.05 < 0.1"}]
    log = views.memory_log_frame(fixes, {"m1": "rate 1.08", "m2": "rate 1.12"})
    assert log["event"].tolist() == ["prune", "contradiction (number)"]
    assert log.loc[1, "memory"] == "kept “rate 1.12”, invalidated “rate 1.08”"


def test_budget_history_follows_the_loop_and_the_rollback(fleet):
    steps = fleet.get_session(AUTO_ROLLED_BACK).steps()
    history = views.budget_history(steps)
    assert history["step"].tolist() == [s.n for s in steps]
    assert history["line"].tolist() == ["live", "abandoned", "abandoned", "abandoned", "live"]
    dialogue = history["dialogue"].tolist()
    assert dialogue[1] < dialogue[2] < dialogue[3] > dialogue[4]  # swells, then drops
    current = views.current_budget(history)
    assert current["step"] == 5 and current["max_tokens"] == 8192
    assert views.current_budget(views.budget_history([step(1)])) is None
    assert views.budget_history(fleet.get_session(LOOPING).steps()).empty


def test_when_is_local_and_aware():
    assert views.when(None) is None
    assert views.when(0).tzinfo is not None


def test_sessions_frame_of_hand_made_info():
    info = SessionInfo(id="s", meta={}, status="stopped", head=None, epoch=0, created_at=1.0,
                       updated_at=2.0)
    frame = views.sessions_frame([info])
    assert frame.loc[0, "locale"] == "en" and frame.loc[0, "tenant"] is None


# -- on-call: needs you, since when, how bad -------------------------------------------
def budget_step(n, tool="refund", *, total=1000, side_effect=False, status="ok", verdict=None):
    s = step(n, tool, {"n": n}, status, side_effect=side_effect, verdict=verdict)
    return StepRecord(**{**s.__dict__, "budget": {"total": total}})


def test_loop_cost_of_a_session_still_looping():
    verdict = {"rule": "exact_repeat", "loop_start_step": 3, "evidence_steps": [3, 4, 5],
               "explanation": "", "details": {}, "at": 1005.0}
    steps = [budget_step(1), budget_step(2, "debit", side_effect=True),
             budget_step(3, total=2000), budget_step(4, "charge", total=3000, side_effect=True),
             budget_step(5, total=4000, verdict=verdict), budget_step(6, total=5000)]
    cost = views.loop_cost(steps, verdict, looping=True, now=1100.0)
    assert (cost.start_step, cost.end_step, cost.steps) == (3, 6, 4)
    assert cost.started_at == 1003.0 and cost.ongoing and cost.duration_s == 97.0
    assert cost.tokens == 2000 + 3000 + 4000 + 5000
    assert cost.side_effects == ((4, "charge"),)  # the debit came before the loop
    line = views.loop_cost_line(cost)
    assert "step 3" in line and "4 steps wasted" in line and "charge (step 4)" in line


def test_loop_cost_after_a_rollback_ends_at_the_flagging_step_and_knows_missing_budgets():
    verdict = {"rule": "exact_repeat", "loop_start_step": 2, "evidence_steps": [2, 3],
               "explanation": "", "details": {}, "at": 1004.0}
    steps = [step(1), step(2, status="error"), step(3, status="error", verdict=verdict),
             step(4)]
    cost = views.loop_cost(steps, verdict, looping=False, now=5000.0)
    assert (cost.start_step, cost.end_step, cost.steps) == (2, 3, 2)
    assert not cost.ongoing and cost.duration_s == 1003.5 - 1002.0
    assert cost.tokens is None and cost.side_effects == ()
    assert views.loop_cost(steps, None, looping=True) is None
    assert views.loop_cost([], verdict, looping=True) is None


def test_a_loop_left_for_on_call_lasts_until_the_rollback_that_ended_it():
    """Flagged at step 3, the session waited six minutes for a person to roll it back: the
    loop lasted until that rollback, not until the flag."""
    from engine.records import BranchInfo

    verdict = {"rule": "exact_repeat", "loop_start_step": 2, "evidence_steps": [2, 3],
               "explanation": "", "details": {}, "at": 1004.0}
    steps = [step(1), step(2, status="error", branch="b1"),
             step(3, status="error", verdict=verdict, branch="b1")]
    cut = BranchInfo(id="b1", from_snapshot="start", actor="olivia", reason="loop",
                     created_at=1003.5 + 360, epoch=1)
    other = BranchInfo(id="b0", from_snapshot="x", actor="a", reason="r", created_at=9999.0,
                       epoch=0)
    cost = views.loop_cost(steps, verdict, looping=False, now=5000.0, branches=[other, cut])
    assert cost.rolled_back_at == cut.created_at
    assert cost.duration_s == 1003.5 + 360 - 1002.0
    assert "lasted 6 min" in views.loop_cost_line(cost)
    assert "until the rollback at" in views.loop_cost_line(cost)
    unknown = views.loop_cost(steps, verdict, looping=False, now=5000.0, branches=[other])
    assert unknown.rolled_back_at is None and unknown.duration_s == 1.5


def test_duration_text_reads_like_people_write():
    assert views.duration_text(42) == "42 s"
    assert views.duration_text(12 * 60 + 5) == "12 min"
    assert views.duration_text(3 * 3600 + 5 * 60) == "3 h 05 min"
    assert views.duration_text(2 * 86400 + 4 * 3600) == "2 d 4 h"
    assert views.duration_text(None) == "" and views.duration_text(-3) == "0 s"


def test_loop_steps_counts_from_the_loop_start_to_the_newest_step():
    verdict = {"loop_start_step": 3}
    assert views.loop_steps(8, verdict) == 6
    assert views.loop_steps(8, None) is None and views.loop_steps(8, {}) is None


def test_looping_sessions_come_first_by_default_with_since_when_columns(fleet):
    frame = views.sessions_frame(fleet.sessions(limit=100))
    shown = views.select_sessions(frame)
    assert shown.iloc[0]["session"] == LOOPING and shown.iloc[0]["status"] == "looping"
    row = frame.set_index("session").loc[LOOPING]
    assert row["loop_steps"] == 6 and pd.notna(row["flagged_at"])
    assert row["state"] == ["looping"]  # a word, coloured by the table; never emoji alone
    calm = frame.set_index("session").loc[AUTO_ROLLED_BACK]
    assert pd.isna(calm["loop_steps"]) and pd.isna(calm["flagged_at"])
    blank = views.blank_missing(frame).set_index("session")
    assert blank.loc["bg-001", "verdict"] == "" and blank.loc["bg-001", "loop_steps"] == ""
    assert blank.loc[LOOPING, "loop_steps"] == "6"
    assert "None" not in blank[list(views.BLANK_COLUMNS)].astype(str).to_numpy()


def test_status_words_and_colours_cover_every_status():
    for status in views.STATUS_ORDER:
        assert views.status_label(status).replace(" ", "").isalpha()
        assert views.status_markdown(status).startswith(f":{views.STATUS_COLORS[status]}[")


def test_needs_you_lists_looping_sessions_then_failed_and_stuck_compensations(fleet):
    from engine.records import Compensation

    frame = views.sessions_frame(fleet.sessions(limit=100))
    looping = frame[frame["status"] == "looping"]
    now = time.time()

    def comp(i, status, age, error=None):
        return Compensation(id=i, session=f"s-{i}", step=2, name="points_refund", args={},
                            idempotency_key=f"k{i}", status=status, attempts=1, error=error,
                            created_at=now - age, updated_at=now - age)

    comps = [comp(1, "failed", 30, "HTTP 500"), comp(2, "pending", 3600), comp(3, "pending", 5)]
    items = views.needs_you(looping, comps, now)
    assert [i.kind for i in items] == ["loop", "compensation", "compensation"]
    assert items[0].session == LOOPING and "6 steps in the loop" in items[0].text
    assert re.search(r"last step \d+ (s|min)", items[0].text)  # is an agent still on it?
    assert "failed (HTTP 500)" in items[1].text and "pending for 1 h 00 min" in items[2].text
    assert items[0].query == {"session": LOOPING}
    assert [i.query for i in items[1:]] == [{"comp-status": "failed"}, {"comp-status": "pending"}]
    assert views.needs_you(looping.iloc[0:0], [comp(3, "pending", 5)], now) == []
    assert views.needs_you_heading(items, len(looping)) == (
        "Needs you: 1 looping session and 2 compensations", 0)


def test_the_needs_you_heading_counts_every_looping_session_not_just_those_listed():
    now = 1_000.0
    looping = pd.DataFrame({
        "session": [f"s{i}" for i in range(13)], "scenario": "refund", "status": "looping",
        "flagged_at": pd.to_datetime([now - i for i in range(13)], unit="s", utc=True),
        "loop_steps": 3, "hold": ""})
    items = views.needs_you(looping, [], now)
    assert len(items) == 6
    assert [i.session for i in items] == [f"s{i}" for i in range(6)]  # newest loop first
    assert views.needs_you_heading(items, len(looping)) == ("Needs you: 13 looping sessions", 7)


def test_compensations_frame_ages_and_marks_stuck_ones():
    from engine.records import Compensation

    now = 10_000.0
    comps = [Compensation(id=1, session="s", step=2, name="refund", args={"ref": 1},
                          idempotency_key="k", status="pending", attempts=0, error=None,
                          created_at=now - 900, updated_at=now - 900),
             Compensation(id=2, session="t", step=3, name="refund", args={}, idempotency_key="j",
                          status="failed", attempts=3, error="boom", created_at=now - 10,
                          updated_at=now - 5)]
    frame = views.compensations_frame(comps, now)
    assert frame["stuck"].tolist() == [True, False]
    assert frame["age"].tolist() == ["15 min", "10 s"]
    assert frame["last_error"].tolist() == ["", "boom"]
    assert frame["link"].tolist() == ["session?session=s", "session?session=t"]


def test_user_view_shows_live_words_and_notices_only():
    def rec(seq, role, content, branch=None, **extra):
        return MessageRecord(seq=seq, pos=seq, message={"role": role, "content": content,
                                                        **extra}, branch=branch,
                             created_at=1000.0 + seq)

    records = [rec(1, "system", "be brief"), rec(2, "user", "refund <b>me</b>"),
               rec(3, "assistant", ""), rec(4, "tool", "HTTP 500"),
               rec(5, "assistant", "trying again", branch="b1"),
               rec(6, "assistant", "Sorry for the wait", rewind_notice=True)]
    items = views.messages_view(records, [])
    seen = views.user_view(items)
    assert [m.seq for m in seen] == [2, 6]
    html = views.user_view_html(seen)
    assert "refund &lt;b&gt;me&lt;/b&gt;" in html and "<b>" not in html
    assert "HTTP 500" not in html and "trying again" not in html


def test_last_notice_names_when_who_and_what():
    from engine.recovery.notices import NOTICE_FLAG

    records = [MessageRecord(1, 1, {"role": "user", "content": "hi"}, None, 1000.0),
               MessageRecord(2, 2, {"role": "assistant", "content": "first", NOTICE_FLAG: True},
                             "b1", 1010.0),
               MessageRecord(3, 3, {"role": "assistant", "content": "again", NOTICE_FLAG: True},
                             None, 1100.0)]
    audit = [AuditEvent(1, 1010.2, "rewind", "rollback", "s", "snap-1", "loop"),
             AuditEvent(2, 1100.3, "alice", "notice", "s", None, None)]
    seen = views.last_notice(records, audit)
    assert (seen.text, seen.at, seen.actor, seen.live) == ("again", 1100.0, "alice", True)
    assert views.last_notice(records[:2], audit).actor == "rewind"
    assert views.last_notice(records[:2], []).actor is None
    assert views.last_notice(records[:1], audit) is None
    preview = RollbackPreview("s", "snap-1", [records[2].message, records[0].message], [], [])
    assert views.notices_leaving(preview) == 1


def test_clock_ticks_label_steps_with_their_time():
    steps = [step(n) for n in range(1, 31)]
    frame = views.timeline_frame(steps)
    vals, text = views.clock_ticks(frame, count=4)
    assert vals[0] == 1 and vals[-1] == 30 and len(vals) == 4
    assert text[0] == ["1", f"{views.when(1001.0):%H:%M:%S}"]  # two lines
    assert views.clock_ticks(views.timeline_frame([])) == ([], [])


def test_snapshot_nodes_get_short_labels():
    assert views.node_label(node("a", n=7)) == "step 7"
    assert views.node_label(node("b", kind="manual", label="before the refund call")) == \
        "before the refund…"
    layout, _ = views.tree_layout([node("a", n=1), node("b", "a", n=2, label="start",
                                                          kind="manual")])
    assert layout["label"].tolist() == ["step 1", "start"]


def test_compensations_frame_says_which_handlers_a_live_process_has():
    from engine.records import Compensation

    def comp(cid, name, status):
        return Compensation(id=cid, session="s", step=cid, name=name, args={},
                            idempotency_key=f"k{cid}", status=status, attempts=1, error=None,
                            created_at=0.0, updated_at=0.0,
                            resolved_by="olivia" if status == "resolved" else None,
                            resolved_reason="by hand" if status == "resolved" else None)

    comps = [comp(1, "refund", "failed"), comp(2, "refund", "pending"), comp(3, "mail", "running"),
             comp(4, "points", "pending"), comp(5, "refund", "done"), comp(6, "mail", "resolved")]
    frame = views.compensations_frame(comps, 100.0, live={"points": 99.0})
    assert frame["live"].tolist() == ["no", "no", "no", "yes", "", ""]
    assert frame["resolved"].tolist() == ["", "", "", "", "", "olivia: by hand"]
    assert views.handlers_without_process(frame) == [("refund", 2), ("mail", 1)]
    assert views.compensations_frame(comps, 100.0)["live"].tolist() == [""] * 6
    assert set(views.COMPENSATION_COLORS) >= {"pending", "running", "failed", "done", "resolved"}


# -- legible charts: the fitted window, top-N series, the memory span --------------------------
def bars(window: views.ChartWindow) -> int:
    """How many bars the loop charts draw for `window` (as `loop_buckets` lays them out)."""
    out = views.loop_buckets(pd.DataFrame(columns=["at", "scenario"]), "scenario",
                             window.since, window.until, window.bucket_s)
    return len(out)


@pytest.mark.parametrize("span_s", [0, 40, 600, 1800, 3 * 3600, 20 * 3600, 3 * 86400,
                                    7 * 86400 - 60])
def test_the_auto_window_covers_every_episode_with_a_readable_number_of_bars(span_s):
    now = 2_000_000_000.0
    ats = [now - 30 - span_s + i * span_s / 9 for i in range(10)]
    window = views.fit_window(ats, now)
    assert window.since <= min(ats) and window.until >= max(ats)
    assert views.MIN_BARS <= bars(window) <= views.MAX_BARS, (span_s, window)
    assert window.until - window.since >= views.AUTO_MIN_SPAN_S
    # the demo's half hour of loops fills the chart instead of one or two bars of 24 hours
    if 0 < span_s <= 3600:
        assert window.until - window.since <= 2 * max(span_s, views.AUTO_MIN_SPAN_S)


def test_the_auto_window_ends_now_while_loops_are_recent_and_at_the_last_one_otherwise():
    now = 2_000_000_000.0
    live = views.fit_window([now - 3000, now - 1200, now - 60], now)
    assert live.until == now
    quiet = views.fit_window([now - 5 * 86400, now - 4 * 86400], now)  # nothing for 4 days
    assert quiet.until < now - 3 * 86400 and quiet.since <= now - 5 * 86400
    assert views.MIN_BARS <= bars(quiet) <= views.MAX_BARS
    old = views.fit_window([now - 30 * 86400], now)  # beyond the lookback: an empty last hour
    assert (old.since, old.until) == (now - 3600, now)
    assert "one bar per" in live.caption()


def test_top_series_keeps_the_busiest_and_sums_the_rest_as_other():
    keys = [f"v{i:02d}" for i in range(13)]
    loops = pd.DataFrame({"at": [100.0 * j for i, k in enumerate(keys) for j in range(i + 1)],
                          "prompt_version": [k for i, k in enumerate(keys) for _ in range(i + 1)]})
    buckets = views.loop_buckets(loops, "prompt_version", 0, 1300, 300)
    top = views.top_series(buckets, "prompt_version")
    names = list(dict.fromkeys(top["series"]))
    assert names == ["v12", "v11", "v10", "v09", "v08", "v07", "other (7 more)"]
    assert top["loops"].sum() == buckets["loops"].sum() == len(loops)  # nothing lost
    assert top.loc[top["other"], "loops"].sum() == sum(range(1, 8))
    seven = views.top_series(buckets[buckets["prompt_version"].isin(keys[:7])], "prompt_version")
    assert not seven["other"].any() and seven["series"].nunique() == 7  # never "1 more"
    assert views.top_series(views.loop_buckets(loops.iloc[0:0], "prompt_version", 0, 600, 300),
                            "prompt_version").empty


def test_step_list_joins_runs():
    assert views.step_list([9, 4, 5, 6, 12]) == "4–6, 9, 12"
    assert views.step_list([3]) == "3"
    assert views.step_list(range(0, 40, 2), limit=3) == "0, 2, 4, …"
    assert views.bucket_text(60) == "1 min" and views.bucket_text(7200) == "2 h"
    assert views.bucket_text(30) == "30 s" and views.bucket_text(86400) == "1 d"


# -- fleet controls --------------------------------------------------------------------
def test_bulk_preview_adds_up_each_session_and_says_why_one_is_skipped():
    from engine.records import BulkRollbackItem

    notice = {"role": "assistant", "content": "reset", "rewind_notice": True}
    leaving = RollbackPreview(session="a", target="snap-2", messages=[{"role": "user"}, notice],
                              steps=[step(3, "refund_api"), step(4, "refund_api")],
                              compensations=[(4, "refund.undo", {}), (3, "refund.undo", {})])
    items = [BulkRollbackItem("a", True, preview=leaving, batch="b-1"),
             BulkRollbackItem("bare", False, "NothingToRollBack: no snapshot", batch="b-1")]
    totals = views.bulk_totals(items)
    assert (totals.sessions, totals.skipped, totals.steps, totals.messages) == (1, 1, 2, 2)
    assert totals.compensations_text() == "refund.undo ×2"
    frame = views.bulk_preview_frame(items, {"a": {"status": "looping", "tenant": "acme"}})
    assert frame.to_dict("records")[0] == {
        "session": "a", "status": "looping", "tenant": "acme", "prompt_version": "",
        "back_to": "snap-2", "steps": 2, "messages": "2 (1 notice)", "note": "",
        "compensations": "refund.undo (step 4), refund.undo (step 3)"}
    skipped = frame.to_dict("records")[1]
    assert skipped["note"] == "skipped: NothingToRollBack: no snapshot"
    assert pd.isna(skipped["steps"])


def test_audit_summaries_say_what_fleet_controls_did():
    bulk = AuditEvent(3, 1000.0, "olivia", "rollback_many", None, None, "v9 loops",
                      {"batch": "batch-1", "sessions": 3, "rolled_back": 2,
                       "failed": {"c": "RollbackConflict: …"},
                       "where": {"session": ["a", "b", "c"], "status": "looping"}})
    quarantine = AuditEvent(2, 1000.0, "olivia", "quarantine", None, None, "HTTP 500",
                            {"id": "q-1", "tool": "refund_api", "scope": {"tenant": "acme"},
                             "until": None})
    one = AuditEvent(1, 1000.0, "olivia", "rollback", "a", "snap-2", "v9 loops",
                     {"batch": "batch-1", "steps": 3, "messages": 2, "compensations": [1]})
    frame = views.audit_frame([bulk, quarantine, one])
    assert frame["summary"].tolist() == [
        "bulk rollback: 2 of 3 sessions rolled back (status=looping, 3 listed sessions); "
        "1 failed: c",
        "quarantined tool refund_api for tenant=acme until lifted (q-1)",
        "to snap-2: 3 steps, 2 messages taken out of the conversation, 1 compensation queued"]
    assert frame["batch"].tolist() == ["batch-1", "", "batch-1"]


def test_the_auto_window_reads_a_week_only_when_the_last_day_had_no_loop():
    asked: list[float] = []
    day_old = pd.DataFrame({"at": [100.0]})

    def fetch(lookback):
        asked.append(lookback)
        return day_old if lookback > 86400 else day_old.iloc[0:0]

    episodes, lookback = views.auto_episodes(fetch)
    assert asked == [86400, 7 * 86400] and lookback == 7 * 86400 and len(episodes) == 1
    asked.clear()
    episodes, lookback = views.auto_episodes(lambda s: asked.append(s) or day_old)
    assert asked == [86400] and lookback == 86400


def test_audit_summary_shows_a_notice_as_plain_bounded_text():
    text = "Sorry [click](https://evil.test)\x07\u202e\nrefund on its way. " + "x" * 300
    said = views.audit_summary("notice", None, {"text": text, "batch": "b-7"})
    assert said.startswith('notice: "Sorry [click](https://evil.test) refund on its way. ')
    assert '…"' in said and "\x07" not in said and "\u202e" not in said and "\n" not in said
    assert said.endswith(" (batch b-7)") and len(said) < 100
    assert views.audit_summary("notice", None, {}) == "notice"


def test_compensations_frame_says_when_a_failed_one_is_tried_next():
    import datetime as dt

    from engine.records import Compensation

    now = 10_000.0

    def comp(cid, status, lease_until):
        return Compensation(id=cid, session="s", step=cid, name="refund", args={},
                            idempotency_key=f"k{cid}", status=status, attempts=1,
                            error="HTTP 503", created_at=now - 60, updated_at=now - 5,
                            lease_until=lease_until)

    comps = [comp(1, "pending", now + 30), comp(2, "pending", None), comp(3, "pending", now - 1),
             comp(4, "running", now + 60), comp(5, "failed", None)]
    frame = views.compensations_frame(comps, now)
    local = dt.datetime.fromtimestamp(now + 30).strftime("%H:%M:%S")
    assert frame["next_try"].tolist() == [f"{local} (in 30 s)", "", "due now", "", ""]
    assert "next_try" in views.COMPENSATION_COLUMNS
