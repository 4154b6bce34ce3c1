"""Replay of the fleet's own history and operator labels, through the public API and
the CLI, on a real store: replay writes nothing, sees abandoned branches, and measures the
detector against the labels."""

from __future__ import annotations

import json

import pytest
from support.fleet import LOOPING, seed_looping

from engine import Actor, PermissionDenied, Role
from engine.cli.parser import main


@pytest.fixture
def fleet(open_engine, tmp_path):
    url = f"sqlite:///{tmp_path}/r.db"
    engine = open_engine(url)
    seed_looping(engine)  # refund_api fails 6 times (policy flag)
    calm = engine.session("calm")
    for i in range(3):
        with calm.step("search", {"q": i}) as call:
            call.ok(i)
    retried = engine.session("retried")  # two failures, then it works: no loop
    for ok in (False, False, True):
        with retried.step("fetch", {"url": "a"}) as call:
            call.ok("x") if ok else call.fail("timeout")
    return engine, url


def _feed_ids(engine):
    return [e.id for e in engine.events(limit=100_000)]


def test_replay_reports_the_flag_now_and_under_another_config_and_writes_nothing(fleet):
    engine, _ = fleet
    before = (_feed_ids(engine), engine.audit(limit=10_000))
    report = engine.replay({"repeat_threshold": 6})
    by = {r.session: r for r in report.sessions}
    assert set(by) == {LOOPING, "calm", "retried"}
    now, later = by[LOOPING].before, by[LOOPING].after
    assert now is not None and later is not None and later.step >= now.step
    assert by["calm"].before is None and by["calm"].after is None
    assert report.summary.sessions == 3
    assert (_feed_ids(engine), engine.audit(limit=10_000)) == before  # nothing written


def test_replay_sees_abandoned_branches(fleet):
    engine, _ = fleet
    start = next(n.id for n in engine.get_session(LOOPING).tree() if n.label == "start")
    engine.rollback(LOOPING, to=start, actor="alice", reason="loop")
    (after,) = [r for r in engine.replay({}).sessions if r.session == LOOPING]
    assert after.before is not None  # the loop left the live line, not the history


def test_labels_feed_precision_and_recall(fleet):
    engine, _ = fleet
    engine.label(LOOPING, "loop", actor="alice", reason="it was")
    engine.label("retried", "loop", actor="alice")
    engine.label("retried", "not_loop", actor="bob", reason="it recovered")  # newest counts
    assert engine.fleet.labels() == {LOOPING: "loop", "retried": "not_loop"}
    summary = engine.replay({}).summary
    assert summary.labelled == 2 and summary.precision_before == 1.0
    assert summary.recall_before == 1.0
    assert [e.actor for e in engine.audit(action="label")] == ["bob", "alice", "alice"]


def test_labels_are_operator_actions_and_take_two_values(fleet):
    engine, _ = fleet
    with pytest.raises(PermissionDenied):
        engine.label(LOOPING, "loop", actor=Actor("v", Role.VIEWER))
    with pytest.raises(ValueError, match="loop or not_loop"):
        engine.label(LOOPING, "maybe", actor="alice")
    assert engine.fleet.labels() == {}


def test_a_bad_setting_is_refused_before_the_fleet_is_read(fleet):
    engine, _ = fleet
    from engine import ConfigError

    with pytest.raises(ConfigError):
        engine.replay({"no_such_field": 1})


def test_the_cli_replays_and_labels(fleet, capsys):
    engine, url = fleet
    assert main(["label", LOOPING, "loop", "--actor", "alice", "--store", url]) == 0
    capsys.readouterr()
    assert main(["--store", url, "replay", "--set", "repeat_threshold=6", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(data) == {"sessions", "summary"}
    row = next(r for r in data["sessions"] if r["session"] == LOOPING)
    assert set(row) == {"session", "before", "after", "label"} and row["label"] == "loop"
    assert set(row["before"]) == {"step", "rule"}
    assert main(["--store", url, "replay", "--set", "nonsense=1"]) == 2
    assert main(["--store", url, "replay", "--where", "tenant=globex"]) == 0
    assert "Nothing was written" in capsys.readouterr().out


def test_a_watched_session_says_what_rewind_cannot_do(open_engine, tmp_path):
    """An agent Rewind only watches (OpenTelemetry) is flagged like any other, but the engine
    refuses to pretend it rolled it back or told its user; a quarantine does not hide its
    calls from the detector."""
    from engine import WatchOnly

    engine = open_engine(f"sqlite:///{tmp_path}/w.db")
    s = engine.session("otel-1", meta={"source": "otlp", "watch_only": True}, on_loop="flag")
    engine.quarantine("image_crop", actor="alice", reason="broken")
    for _ in range(4):
        with s.step("image_crop", {"x": 1}, snapshot=False) as call:
            call.fail("invalid slice")
    assert s.info().status == "looping"  # judged, not refused
    with pytest.raises(WatchOnly, match="cannot be rolled back"):
        engine.rollback("otel-1", actor="alice", reason="loop")
    with pytest.raises(WatchOnly, match="cannot be sent a notice"):
        engine.get_session("otel-1").inject_notice(actor="alice")
    (item,) = engine.rollback_many({"session": "otel-1"}, actor="alice", reason="loop")
    assert not item.ok and isinstance(item.exception, WatchOnly)
    engine.label("otel-1", "loop", actor="alice")  # labels work
    assert engine.fleet.labels() == {"otel-1": "loop"}


def test_one_detector_configuration_for_every_process(open_engine, tmp_path):
    """Settings declared once reach every engine on the store, whatever its own detector, and
    each verdict records the configuration that produced it."""
    from engine import ConfigError, LoopDetector

    url = f"sqlite:///{tmp_path}/d.db"
    console = open_engine(url)
    agent = open_engine(url, detector_factory=lambda: LoopDetector(repeat_threshold=3))
    with pytest.raises(ConfigError):
        console.fleet.declare_detector({"no_such_field": 1}, actor="alice", reason="typo")
    console.fleet.declare_detector({"repeat_threshold": 5}, actor="alice", reason="fewer flags")
    agent._runtime.forget_declared_detector()  # another process: within a second
    s = agent.session("crop", on_loop="flag")
    s.holds_on_loops = False  # it goes on after the flag: the replay compares every step
    flagged_at = None
    for i in range(8):
        with s.step("image_crop", {"x": 1}) as call:
            call.fail("invalid slice")
        if flagged_at is None and s.info().status == "looping":
            flagged_at = i + 1
    assert flagged_at == 5  # the declared threshold, not the process's own 3
    assert s.info().last_verdict["detector"] == {"repeat_threshold": 5}
    (row,) = console.audit(action="detector")
    assert row.actor == "alice" and row.detail["settings"] == {"repeat_threshold": 5}
    console.fleet.declare_detector({}, actor="alice", reason="back to defaults")
    assert console.fleet.detector_settings() == {}


def test_the_cli_declares_and_shows_the_detector_settings(fleet, capsys):
    engine, url = fleet
    assert main(["--store", url, "detector", "--set", "repeat_threshold=5"]) == 2  # no actor
    assert main(["--store", url, "detector", "--set", "repeat_threshold=5", "--actor", "alice",
                 "--reason", "fewer flags"]) == 0
    assert main(["--store", url, "detector"]) == 0
    assert "repeat_threshold=5" in capsys.readouterr().out
    engine._runtime.forget_declared_detector()
    assert engine.fleet.detector_settings() == {"repeat_threshold": "5"}
    assert main(["--store", url, "detector", "--reset", "--actor", "alice", "--reason", "x"]) == 0


def test_the_cli_shows_which_detector_settings_come_from_this_process_file(fleet, capsys,
                                                                           tmp_path, monkeypatch):
    _, url = fleet
    config = tmp_path / "rewind.toml"
    config.write_text("[rewind.detector]\nrepeat_threshold = 4\nmax_steps = 900\n")
    monkeypatch.setenv("REWIND_CONFIG", str(config))
    assert main(["--store", url, "detector", "--set", "repeat_threshold=5", "--actor", "alice",
                 "--reason", "fewer flags"]) == 0
    capsys.readouterr()
    assert main(["--store", url, "detector"]) == 0
    said = capsys.readouterr().out
    assert "repeat_threshold=5" in said  # the store's declaration wins field by field
    assert "configuration file ([rewind.detector]): max_steps=900 " in said
    assert "repeat_threshold=4" not in said


def test_a_fleet_read_in_many_small_batches_replays_as_one_read_whole(fleet, monkeypatch):
    from engine.fleet import queries

    engine, _ = fleet
    for i in range(4):
        s = engine.session(f"extra-{i}")
        for page in range(i + 2):
            with s.step("read", {"page": page}) as call:
                call.ok(f"page {page}")
    whole = engine.replay({"repeat_threshold": 4}).as_dict()
    calls: list[list[str]] = []
    read = engine.store.replay_histories
    monkeypatch.setattr(engine.store, "replay_histories",
                        lambda sids: calls.append(list(sids)) or read(sids))
    monkeypatch.setattr(queries, "REPLAY_BATCH_STEPS", 4)
    monkeypatch.setattr(queries, "REPLAY_BATCH_SESSIONS", 2)
    assert engine.replay({"repeat_threshold": 4}).as_dict() == whole
    assert len(calls) > 3 and all(1 <= len(batch) <= 2 for batch in calls)
    assert [sid for batch in calls for sid in batch] == [r["session"] for r in whole["sessions"]]
    assert any(r["before"] for r in whole["sessions"])  # the looping session's flag
