"""The model response that issued a call (`Session.step(..., turn=...)`) is kept with the step on
every store, judged by the live detector and by replay alike, and shown by "Why flagged"."""

from __future__ import annotations

import os
import sqlite3

import pytest
from support.keep_stepping import keep_stepping  # noqa: F401 - used by the marker

from dashboard.views.session.timeline import timeline_frame
from engine import StepRecord
from engine.fleet.queries import session_history
from engine.loops.replay import first_flag, step_of, why_flagged

pytestmark = pytest.mark.usefixtures("keep_stepping")


def guesses(s, turn: str | None, names: list[str]) -> None:
    """A code-search agent asking for several guessed names in one response; all fail."""
    for name in names:
        with s.step("get_symbol_definition", {"symbol": name, "repo": "django"},
                    turn=turn) as call:
            call.fail(f"Symbol '{name}' not found in repository django")


def test_turn_round_trips_on_every_store(store_url, open_engine):
    engine = open_engine(store_url, on_loop="flag")
    s = engine.session("batched")
    guesses(s, "resp_1", ["parse_config", "parse_conf"])
    with s.step("search_code", {"query": "parse config"}, turn="chatcmpl-9x:2") as call:
        call.ok(["django/conf/__init__.py:88"])
    with s.step("search_code", {"query": "settings"}) as call:  # the runtime did not say
        call.ok([])
    s.agent_turn("The parser is in django/conf/__init__.py", turn="resp_3")
    assert [r.turn for r in s.steps()] == ["resp_1", "resp_1", "chatcmpl-9x:2", None, "resp_3"]
    assert step_of(s.steps()[0]).turn == "resp_1"
    if ":memory:" not in store_url:  # another process reading the store sees the same
        again = open_engine(store_url).session("batched")
        assert [r.turn for r in again.steps()][:3] == ["resp_1", "resp_1", "chatcmpl-9x:2"]


def test_a_watcher_records_turns_in_its_batches(store_url, open_engine):
    engine = open_engine(store_url)
    s = engine.session("watched", on_loop="flag")
    calls = []
    for name in ("Config", "LazySettings"):
        call = s.step("get_symbol_definition", {"symbol": name}, snapshot=False, turn="span-7")
        call.fail("not found")
        calls.append(call)
    s.record_steps(calls)
    assert [r.turn for r in s.steps()] == ["span-7", "span-7"]


def test_a_batch_of_guesses_is_one_attempt_live_and_in_replay(store_url, open_engine):
    engine = open_engine(store_url, on_loop="flag")
    s = engine.session("guesses")
    guesses(s, "resp_1", ["parse_config", "parse_conf", "parse_configs"])
    with s.step("search_code", {"query": "parse config"}, turn="resp_2") as call:
        call.ok(["django/conf/__init__.py:88"])
    assert s.info().last_verdict is None
    history = session_history(engine._runtime, "guesses")
    assert first_flag(history) is None  # replay judges the stored turns as the live one did
    # the same steps without turns: three failed tries in a row
    t = engine.session("no-turns")
    guesses(t, None, ["parse_config", "parse_conf", "parse_configs"])
    assert t.info().last_verdict["rule"] == "near_duplicate"


def test_why_flagged_shows_the_turns_of_the_repeated_batch(store_url, open_engine):
    engine = open_engine(store_url, on_loop="flag")
    s = engine.session("same-batch")
    names = ["Settings._setup", "LazySettings.configure"]
    guesses(s, "resp_1", names)
    guesses(s, "resp_2", names)
    verdict = s.info().last_verdict
    assert verdict["rule"] == "exact_repeat" and verdict["evidence_steps"] == [1, 2, 3, 4]
    found = why_flagged("same-batch", session_history(engine._runtime, "same-batch"), None)
    assert found is not None and found.flag.step == 4
    assert found.turns == {1: "resp_1", 2: "resp_1", 3: "resp_2", 4: "resp_2"}


def test_a_turn_that_is_not_a_string_is_refused_and_nothing_is_written(engine):
    s = engine.session("bad-turn")
    with pytest.raises(TypeError, match="turn must be the id of the model response"):
        s.step("search_code", {"query": "x"}, turn=42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="turn must be"):
        s.step("search_code", {"query": "x"}, turn="")
    assert s.steps() == []


def test_an_older_file_read_only_reads_no_turn(tmp_path, monkeypatch, open_engine):
    """A file written before steps kept their turn, opened by a user who may not upgrade it."""
    from engine.store.sqlite import tx

    path = tmp_path / "old.db"
    writer = open_engine(f"sqlite:///{path}", on_loop="flag")
    s = writer.session("old")
    with s.step("search_code", {"query": "x"}) as call:
        call.ok([1])
    writer.close()
    conn = sqlite3.connect(path)
    conn.execute("ALTER TABLE steps DROP COLUMN turn")
    conn.commit()
    conn.close()
    monkeypatch.setattr(tx.os, "access", lambda p, mode: mode != os.W_OK and os.path.exists(p))
    reader = open_engine(f"sqlite:///{path}")
    assert reader.store._db.read_only
    (record,) = reader.session("old").steps()
    assert isinstance(record, StepRecord) and record.turn is None and record.ok
    # its write-ahead snapshot is still found in the step's row
    assert [n.id for n in reader.store.snapshots("old")] == [record.snapshot]


def test_the_session_timeline_says_which_model_response_issued_each_call(engine):
    s = engine.session("timeline")
    guesses(s, "resp_1", ["parse_config", "parse_conf"])
    with s.step("search_code", {"query": "parse config"}) as call:
        call.ok([])
    tips = timeline_frame(s.steps())["tip"].tolist()
    assert [t.get("model response") for t in tips] == ["resp_1", "resp_1", None]
