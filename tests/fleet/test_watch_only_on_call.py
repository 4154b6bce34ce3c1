"""A session Rewind only watches (OpenTelemetry, `rewind otlp`) cannot be held: under "flag" its
loop is flagged and paged but its agent keeps running. The engine, the CLI, the alert and the
console say so plainly instead of offering a release that cannot reach the agent."""

from __future__ import annotations

import json

import pytest
from support.loop_steps import REPEAT, _record, _watched

from engine import DecisionRefused
from engine.cli.parser import main
from engine.fleet.alerts import AlertConfig, AlertWorker

PER_SESSION = ("loop", "rollback", "compensation_failed", "loop_spike")


def _watched_loop(engine, sid: str = "otel-conv-1"):
    s = _watched(engine, sid)
    _record(s, [REPEAT] * 4)
    info = s.info()
    assert info.status == "looping" and not info.waiting  # flagged, never held
    return info


def _written(engine, sid: str):
    info = engine.session_info(sid)
    return info.status, info.last_verdict, info.messages, len(engine.audit(session=sid))


def test_a_decision_on_a_watched_session_is_refused_saying_why(engine):
    _watched_loop(engine)
    before = _written(engine, "otel-conv-1")
    for decide in (lambda: engine.fleet.release("otel-conv-1", actor="alice", reason="go"),
                   lambda: engine.fleet.stop("otel-conv-1", actor="alice", reason="halt")):
        with pytest.raises(DecisionRefused, match="watch-only.*nothing holds it.*where it runs"):
            decide()
    assert _written(engine, "otel-conv-1") == before


def test_the_cli_refuses_to_release_a_watched_session(tmp_path, open_engine, capsys):
    url = f"sqlite:///{tmp_path}/r.db"
    engine = open_engine(url)
    _watched_loop(engine)
    assert main(["--store", url, "release", "otel-conv-1", "--actor", "alice",
                 "--reason", "go"]) == 1
    assert "is watch-only" in capsys.readouterr().err
    assert engine.audit(session="otel-conv-1") == []


@pytest.mark.parametrize("rules", [PER_SESSION, None], ids=["per-session", "default"])
def test_the_page_of_a_watched_loop_says_nothing_holds_it(engine, rules):
    _watched_loop(engine)
    sent: list[dict] = []
    worker = AlertWorker(engine, ["https://hooks.example/x"],
                         AlertConfig(rules) if rules else AlertConfig(),
                         post=lambda u, b, t: sent.append(json.loads(b)) or 200)
    try:
        worker.run_once()
    finally:
        worker.close()
    [page] = [b for b in sent if b["rule"] in ("loop", "incident")]
    assert "watch-only (OpenTelemetry)" in page["text"]
    assert "nothing holds" in page["text"] and "nothing to release" in page["text"]
    assert "waits for on-call" not in page["text"] and "release it" not in page["text"]


def test_the_console_says_a_watched_loop_cannot_be_held(engine):
    from dashboard.views import fleet as fleet_views
    from dashboard.views import incidents as incident_views
    from dashboard.views.session import header as header_views

    _watched_loop(engine)
    frame = fleet_views.sessions_frame(engine.sessions())
    [item] = fleet_views.needs_you(frame[frame["status"] == "looping"], [], now=2e9)
    assert fleet_views.WATCH_ONLY_NEEDS in item.text and fleet_views.WAITING not in item.text
    assert "nothing to release or stop" in header_views.WATCH_ONLY_NOTE
    assert "does not wait for on-call" in header_views.WATCH_ONLY_LOOPING
    [inc] = engine.incidents()
    infos = {sid: engine.session_info(sid) for sid in inc.sessions}
    assert incident_views.watch_only_count(infos) == 1
    assert "no remedy here releases" in incident_views.watch_only_text(1, 1)
