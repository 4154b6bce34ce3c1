"""The session page for on-call: "Was this a loop?" labels stored through the engine
with the operator's rights checked when they act, what each rule saw and the smallest setting
change in "Why flagged", watch-only sessions that say what Rewind cannot do there, memories that
say why they were invalidated, a decay chart that decays, and labels that tell steps and
snapshots apart. View functions with hand-made and engine records; the page through AppTest."""

from __future__ import annotations

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest
from support.fleet import LOOPING, seed_fleet, seed_looping
from support.paths import ROOT

from dashboard import charts, dialogs
from dashboard.signin.access import SESSION_KEY, User, role_authority
from dashboard.signin.passwords import hash_password
from dashboard.views import dialogs as dialog_views
from dashboard.views.session import header as header_views
from dashboard.views.session import memory as memory_views
from dashboard.views.session import snapshots as snapshot_views
from dashboard.views.session import timeline as timeline_views
from dashboard.views.session import why_flagged as why
from engine import Engine, PermissionDenied, RuleReading, WhyFlagged
from engine.loops.replay import Flag, SettingChange
from engine.loops.rules import REGISTRY
from engine.memory.embeddings import HashingEmbedder
from engine.memory.session import MemoryConfig
from engine.records import AuditEvent, SnapshotNode, StepRecord

APP = str(ROOT / "dashboard" / "app.py")
OPERATOR = User("olivia", "operator", "local")
VIEWER = User("victor", "viewer", "local")
WATCHED = "otlp-trace-1"
HASH = hash_password("pw")


def watch(engine: Engine, sid: str = WATCHED) -> None:
    """A session as `rewind otlp` writes it: watch-only, looping on one failing tool."""
    s = engine.session(sid, meta={"source": "otlp", "watch_only": True}, on_loop="flag")
    for _ in range(4):
        with s.step("book_flight", {"flight": "LH 400"}) as call:
            call.fail("503 upstream")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('session-page')}/rewind.db"
    seed_fleet(url, background=2)
    with Engine.open(url) as engine:
        watch(engine)
    return url


def page(store, tab: str, sid: str = LOOPING, user: User = OPERATOR) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90)
    at.secrets["rewind"] = {"store": store, "users": {
        "olivia": {"role": "operator", "password_hash": HASH},
        "victor": {"role": "viewer", "password_hash": HASH}}}
    at.session_state[SESSION_KEY] = user
    at.switch_page("screens/session/session.py")
    at.query_params["session"] = sid
    at.query_params["tab"] = tab
    return at.run()


def texts(elements) -> str:
    return "\n".join(str(e.value) for e in elements)


# -- a. was this a loop? ------------------------------------------------------------------------
def event(i, action, actor="olivia", at=0.0, reason=None, **detail):
    return AuditEvent(id=i, at=at, actor=actor, action=action, session="s", snapshot=None,
                      reason=reason, detail=detail)


def test_the_newest_label_counts_and_says_who_set_it():
    events = [event(3, "label", "olivia", 300.0, "same 500 six times", label="loop"),
              event(2, "rollback", "olivia", 200.0),
              event(1, "label", "bob", 100.0, label="not_loop")]
    seen = header_views.current_label(reversed(events))
    assert (seen.label, seen.actor, seen.reason) == ("loop", "olivia", "same 500 six times")
    text = header_views.label_text(seen)
    assert text.startswith("Labelled a loop by olivia at ") and text.endswith(
        ": same 500 six times")
    assert header_views.current_label([event(1, "rollback")]) is None
    assert header_views.label_text(None) == "No operator has said yet whether this was a loop."


def test_a_label_goes_through_the_engine_with_the_rights_held_when_it_is_saved(tmp_path):
    secrets = tmp_path / "secrets.toml"
    secrets.write_text(f'[rewind.users.olivia]\nrole = "operator"\npassword_hash = "{HASH}"\n')
    olivia = User("olivia", "operator", "local", authority=role_authority("local", [str(secrets)]))
    with Engine.open(f"sqlite:///{tmp_path}/rewind.db") as engine:
        seed_looping(engine)
        dialogs.label_session(engine, olivia, LOOPING, "loop", "  ")
        assert engine.fleet.labels() == {LOOPING: "loop"}
        row = engine.audit(action="label", session=LOOPING)[0]
        assert row.actor == "olivia" and not row.reason  # a blank reason is none
        with pytest.raises(PermissionDenied):
            dialogs.label_session(engine, VIEWER, LOOPING, "not_loop")
        # demoted while the page was open: the engine asks the secrets file when she acts
        secrets.write_text(f'[rewind.users.olivia]\nrole = "viewer"\npassword_hash = "{HASH}"\n')
        with pytest.raises(PermissionDenied):
            dialogs.label_session(engine, olivia, LOOPING, "not_loop", "false alarm")
        assert engine.fleet.labels() == {LOOPING: "loop"}


def test_operators_answer_was_this_a_loop_and_everyone_sees_the_answer(store):
    at = page(store, "Timeline")
    assert not at.exception
    assert "Was this a loop?" in texts(at.markdown)
    at.text_input(key="label-reason").input("refund_api failed the same way six times")
    at.button(key="label-not-loop").click().run()
    assert not at.exception
    with Engine.open(store) as engine:
        assert engine.fleet.labels()[LOOPING] == "not_loop"
        assert engine.audit(action="label", session=LOOPING)[0].actor == "olivia"
    at = page(store, "Timeline", user=VIEWER)
    shown = texts(at.markdown)
    assert "Labelled not a loop by olivia" in shown
    assert "refund\\_api failed the same way six times" in shown
    assert not [b for b in at.button if b.key in ("label-loop", "label-not-loop")]


# -- b. why flagged -----------------------------------------------------------------------------
def answer(rule="exact_repeat", change=None, **alone):
    readings = tuple(RuleReading(r.id, "", {n: 0 for n in r.settings}, alone.get(r.id))
                     for r in REGISTRY)
    return WhyFlagged("s", Flag(5, rule), readings, change, {})


def test_rule_readings_say_what_each_rule_saw_at_the_flagged_step():
    found = answer(exact_repeat=Flag(5, "exact_repeat"),
                   circuit_breaker=Flag(7, "circuit_breaker"), cycle=Flag(5, "cycle"),
                   near_duplicate=Flag(3, "near_duplicate"))
    rows = {r["rule"]: r for r in why.reading_rows(found)}
    assert list(rows) == [r.id for r in REGISTRY]  # the detector's order
    assert rows["exact_repeat"]["at this step"] == "flagged step 5"
    assert rows["exact_repeat"]["settings"] == (
        "repeat_threshold=0, user_repeat_threshold=0, user_repeat_failures=0")
    assert why.settings_text({"user_repeat_failures": False}) == "user_repeat_failures=false"
    assert rows["circuit_breaker"]["at this step"] == (
        "sees no loop yet at step 5; alone it would flag step 7")
    assert rows["recurrence"]["at this step"] == "sees no loop in this session"
    assert rows["cycle"]["at this step"].startswith("sees a loop at step 5 too")
    assert rows["near_duplicate"]["at this step"].startswith("sees a loop earlier, at step 3")


def test_the_change_is_worded_with_the_command_that_tries_it():
    found = answer(change=SettingChange("repeat_threshold", 3, 5, Flag(9, "recurrence"), 2 / 3))
    assert why.change_sentence(found) == ("repeat_threshold 3 → 5: the first flag would move "
                                          "to step 9 (recurrence)")
    assert why.replay_command(found) == "rewind replay --set repeat_threshold=5"
    found = answer(change=SettingChange("tool_exemptions", {}, {"refund_api": frozenset(
        {"exact_repeat"})}, None, float("inf")))
    assert why.change_sentence(found) == ("switching the rule off for refund_api: the session "
                                          "would not be flagged at all")
    assert why.replay_command(found) is None
    assert why.change_sentence(answer()) is None and why.replay_command(answer()) is None


def test_a_change_past_a_flag_that_stopped_the_session_says_the_record_ends_there():
    # the budget stopped the session at its flagged step 5: with a looser budget the replay
    # sees no flag in steps 1-5, which says nothing of the steps it never took
    found = answer("step_budget", SettingChange("max_steps", 5, 6, None, 0.2))
    assert why.change_sentence(found, last_step=5) == (
        "max_steps 5 → 6: no flag in the steps recorded, which end at step 5, where the flag "
        "stopped the session (what it would have done next is not recorded)")
    # steps recorded after the flag: the replay saw them, and "not at all" holds
    assert why.change_sentence(found, last_step=9) == (
        "max_steps 5 → 6: the session would not be flagged at all")


def test_the_why_flagged_tab_shows_each_rule_and_the_smallest_change(store):
    at = page(store, "Why flagged")
    assert not at.exception
    assert "What each rule saw" in texts(at.markdown)
    readings = at.dataframe[-1].value
    assert list(readings["rule"]) == [r.id for r in REGISTRY]
    fired = readings[readings["at this step"].str.startswith("flagged step")]
    assert len(fired) == 1
    shown = texts(at.markdown)
    assert "Smallest setting change that would not have flagged it:" in shown
    assert "repeat\\_threshold 3 → 4" in shown
    assert "rewind replay --set repeat_threshold=4" in texts(at.caption)


# -- c. memory: why a memory was invalidated ----------------------------------------------------
def test_the_memory_table_says_why_by_which_judge_how_sure_and_what_replaced_it(tmp_path):
    with Engine.open(f"sqlite:///{tmp_path}/m.db",
                     memory=MemoryConfig(embedder=HashingEmbedder())) as engine:
        s = engine.session("mem")
        s.memory.add("The user lives in Lyon", key="user.home_city")
        s.memory.add("The user lives in Porto", key="user.home_city")
        items = s.memory.items(include_invalid=True)
    table = memory_views.memory_table(items).set_index("memory")
    old, new = table.loc["The user lives in Lyon"], table.loc["The user lives in Porto"]
    assert old["state"].startswith("invalidated ") and new["state"] == "valid"
    assert old["why"] == "replaced by a newer 'user.home_city'"
    assert (old["judge"], old["confidence"]) == ("key (exact fact)", 1.0)
    assert old["replaced by"] == "The user lives in Porto"
    assert old["key"] == new["key"] == "user.home_city"
    assert new["why"] == new["judge"] == new["replaced by"] == "" and pd.isna(new["confidence"])
    assert memory_views.invalidated_text(memory_views.memory_table(items)) == (
        "2 memories, 1 invalidated by a newer one (key (exact fact)); each says why, how sure "
        "the judge was and what replaced it.")


def test_the_memory_tab_shows_the_demo_rate_replaced_by_its_key_and_why(tmp_path):
    from support.demo_memory import run_scenario

    from engine.demo.scenarios import FX_KEY

    url = f"sqlite:///{tmp_path}/demo.db"
    with Engine.open(url, memory=MemoryConfig(embedder=HashingEmbedder())) as engine:
        sid = run_scenario(engine, "finance", index=1)
    at = page(url, "Memory", sid=sid)
    assert not at.exception
    assert "invalidated by a newer one (key (exact fact))" in texts(at.markdown).replace("\\", "")
    table = at.dataframe[0].value
    gone = table[table["state"].str.startswith("invalidated")]
    assert gone["judge"].tolist() == ["key (exact fact)"]
    assert gone["why"].tolist() == [f"replaced by a newer {FX_KEY!r}"]
    assert gone["key"].tolist() == [FX_KEY] and gone["confidence"].tolist() == [1.0]
    assert gone["replaced by"].iloc[0].startswith(("EUR/USD exchange rate", "发票"))
    log = at.dataframe[1].value
    assert f"replaced (key {FX_KEY})" in log["event"].tolist()


# -- d. watch-only ------------------------------------------------------------------------------
def test_a_watch_only_session_says_what_rewind_can_and_cannot_do(store):
    at = page(store, "Snapshot tree", sid=WATCHED)
    assert not at.exception
    assert "watch-only" in texts(at.caption)
    note = texts(at.info)
    assert "It cannot" in note and "roll the agent back" in note and "notice" in note
    assert "It can" in note and "label" in note
    buttons = [b.label for b in at.button]
    assert not [b for b in buttons if b.startswith(("Roll back", "Send notice"))], buttons
    assert "cannot be released, stopped or rolled back here" in texts(at.error)
    assert {"Yes, a loop", "No, not a loop"} <= set(buttons)  # labelled like any other
    at = page(store, "Why flagged", sid=WATCHED)
    assert "Suggested rollback target" not in texts(at.markdown)
    assert "suggests no target" in texts(at.caption)


# -- e. legibility ------------------------------------------------------------------------------
class Curve:
    def __init__(self, times, weights, accesses, threshold=0.1):
        self.times, self.weights, self.accesses, self.threshold = (times, weights, accesses,
                                                                   threshold)


class Mem:
    def __init__(self, mid, text, created_at, access_times=()):
        self.id, self.text, self.created_at, self.access_times = (mid, text, created_at,
                                                                  access_times)


def test_the_decay_chart_decays_on_a_log_axis_with_a_legend_and_recall_marks(tmp_path):
    with Engine.open(f"sqlite:///{tmp_path}/d.db",
                     memory=MemoryConfig(embedder=HashingEmbedder())) as engine:
        s = engine.session("decay")
        s.memory.add("The user wants a square crop", importance=0.9)
        s.memory.add("Points cost 10 per edit", importance=0.5)
        s.memory.recall("square crop", k=1)
        items = s.memory.items()
        start = min(m.created_at for m in items)
        now = max(t for m in items for t in (m.created_at, *m.access_times)) + 60
        curves = []
        for a, b in memory_views.decay_windows(items, start):
            curves.append(s.memory.curves(a, b, points=memory_views.DECAY_POINTS))
            if memory_views.decay_done(curves[-1], b, now):
                break
    frame, recalls, threshold = memory_views.decay_frames(items, curves, start, now)
    fig = charts.decay_curves(frame, recalls, threshold, now - start)
    lines = [t for t in fig.data if t.mode == "lines"]
    legend = [t.name for t in fig.data if t.showlegend is not False]
    assert legend == ["The user wants a square crop", "Points cost 10 per edit", "recall"]
    assert fig.layout.showlegend is True
    strong = frame[frame["memory"] == "The user wants a square crop"]["strength"]
    assert strong.iloc[0] > 0.85 and strong.iloc[-1] < threshold  # it decays past forgetting
    assert {line.line.dash for line in lines} == {"solid", "dash"}  # now, and if not recalled
    marks = [t for t in fig.data if t.mode == "markers"]
    assert len(marks) == 1 and len(marks[0].x) == 1 and marks[0].x[0] > 0  # on the log axis
    assert fig.layout.xaxis.type == "log"
    ticks = list(fig.layout.xaxis.ticktext)
    assert "1 min" in ticks and "1 day" in ticks and "1 month" in ticks
    assert fig.layout.yaxis.range[0] == 0 and "forget threshold" in [
        a.text for a in fig.layout.annotations]


def test_decay_windows_start_at_the_first_event_and_stop_when_all_are_forgotten():
    t0 = 1_900_000_000.0
    items = [Mem("a", "x", t0), Mem("b", "y", t0 + 0.02, (t0 + 5,))]
    windows = memory_views.decay_windows(items, t0)
    assert windows[0] == (t0 + 0.01, t0 + 0.1) and windows[-1][1] == t0 + 1e9
    assert all(b == c for (_, b), (c, _) in zip(windows, windows[1:], strict=False))
    assert memory_views.decay_windows([Mem("a", "x", t0)], t0)[0][0] == t0 + 1  # nothing else: 1 s
    assert memory_views.decay_done(Curve([1, 2], {"a": [0.5, 0.05]}, {}), end=10, now=5)
    # not now yet
    assert not memory_views.decay_done(Curve([1, 2], {"a": [0.5, 0.05]}, {}), end=4, now=5)
    assert not memory_views.decay_done(Curve([1, 2], {"a": [0.5, 0.2]}, {}), end=10, now=5)


def test_memories_that_read_the_same_get_numbered_in_the_legend():
    names = memory_views.memory_names([Mem("a", "same", 0), Mem("b", "same", 1),
                                       Mem("c", "other", 2)])
    assert names == {"a": "same", "b": "same (2)", "c": "other"}


def node(sid, label, next_step, created_at, on_live_line=True):
    return SnapshotNode(id=sid, parent=None, label=label, kind="step", created_at=created_at,
                        next_step=next_step, messages=2, on_live_line=on_live_line,
                        restorable=True, is_head=False, branch=None, abandoned_reason=None)


def test_identical_snapshot_labels_are_told_apart_by_step_then_time():
    nodes = [node("s1", "before post_invoice", 3, 100.0), node("s2", "before post_invoice", 5,
                                                             200.0),
             node("s3", "before post_invoice", 5, 300.0), node("s4", "start", 1, 50.0)]
    labels = snapshot_views.node_labels(nodes)
    assert labels["s4"] == "start"
    assert labels["s1"] == "before post_invoi…\nstep 3"
    assert labels["s2"].startswith("before post_invoi…\nstep 5 · ")
    assert len(set(labels.values())) == 4
    frame, _ = snapshot_views.tree_layout(nodes)
    fig = charts.snapshot_tree(frame, [])
    drawn = [t for trace in fig.data if trace.text is not None for t in trace.text]
    assert "before post_invoi…<br>step 3" in drawn


def step(n, verdict=None, status="error"):
    return StepRecord(n=n, tool="refund_api", args={"order": "A-1"}, fingerprint="A",
                      status=status, error="HTTP 500", result_digest=None, result_preview=None,
                      started_at=float(n), ended_at=n + 0.5, side_effect=False, compensation=None,
                      verdict=verdict, on_live_line=True, branch=None)


def test_timeline_steps_carry_their_numbers_upright():
    short = [step(n) for n in range(1, 7)]
    frame = timeline_views.timeline_frame(short)
    assert list(frame["label"]) == ["1", "2", "3", "4", "5", "6"]
    spec = charts.timeline(frame, timeline_views.lane_order(frame))
    (numbers,) = [la for la in spec["layer"]
                  if la["mark"]["type"] == "text" and la["encoding"].get("text") ==
                  {"field": "label"}]
    assert [v["label"] for v in numbers["data"]["values"]] == list(frame["label"])
    assert "angle" not in numbers["mark"]  # upright
    (points,) = [la for la in spec["layer"] if la["mark"]["type"] == "point"]
    assert points["encoding"]["x"]["axis"]["labelAngle"] == 0
    verdict = {"rule": "exact_repeat", "loop_start_step": 37, "evidence_steps": [37, 38, 39]}
    long = [step(n, verdict if n == 39 else None) for n in range(1, 201)]
    shown = timeline_views.labelled_steps(long)
    assert {37, 39, 1} <= shown and len(shown) <= timeline_views.STEP_LABELS + 2


def test_the_rollback_dialog_puts_its_decide_bar_before_the_notice_on_a_phone():
    phone = dialog_views.DIALOG_CSS.split("@media (max-width:640px)")[1]
    assert f"st-key-{dialog_views.NOTICE_KEY}" in phone and "order:1" in phone
    assert f"st-key-{dialog_views.DETAILS_KEY}" in phone and "order:2" in phone


def test_a_long_session_page_draws_the_newest_steps_and_says_how_many_of_all(tmp_path,
                                                                             monkeypatch):
    """An MCP client connected all day: the page reads and draws the newest steps only (the
    loop, its evidence and recent rollbacks are there), and says how many it left out."""
    from dashboard import data

    url = f"sqlite:///{tmp_path}/long.db"
    with Engine.open(url, on_loop="flag") as engine:
        s = engine.session("all-day", meta={"tenant": "acme"})
        s.holds_on_loops = False  # flagged and left looping, not held for on-call
        for i in range(120):
            with s.step("search", {"q": f"question {i}"}) as call:
                call.ok({"hits": i})
        for _ in range(4):
            with s.step("book", {"flight": "LH 400"}) as call:
                call.fail("503 upstream")
    monkeypatch.setattr(data, "SESSION_STEPS", 50)
    data.forget_histories()
    bundle = data.session_bundle(url, "all-day")
    assert [r.n for r in bundle.steps] == list(range(75, 125))
    assert bundle.info.steps == 124 and bundle.info.status == "looping"
    assert timeline_views.steps_shown(50, 124).startswith(" Showing the newest 50 of 124 steps")
    assert timeline_views.steps_shown(124, 124) == ""
    at = page(url, "Timeline", sid="all-day")
    assert not at.exception
    assert "Showing the newest 50 of 124 steps" in texts(at.caption)
