"""What on-call reads in an alert: nothing a session carries
(its id, meta, tool names, the detector's explanation) can become Slack markup — a mention, a
link with a label of its own — and the texts read as sentences."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from test_alerts import _loop

from engine import Engine, FreezeWindow, LoopWaiting
from engine.fleet.alerts import AlertConfig, AlertWorker, slack_escape

HOSTILE_SESSION = "<!channel> urgent & <@U024BE7LH>"
HOSTILE_VERSION = "<https://evil.example|re-authenticate>"
HOSTILE_TOOL = "<!here>"


def _texts(engine: Engine, **config) -> list[str]:
    sent: list[bytes] = []

    def post(url: str, body: bytes, timeout: float) -> int:
        sent.append(body)
        return 200

    import json

    worker = AlertWorker(engine, ["https://hooks.example/x"], AlertConfig(**config), post=post)
    try:
        worker.run_once()
    finally:
        worker.close()
    return [json.loads(b)["text"] for b in sent]


def test_slack_escape_turns_the_three_control_characters_into_entities():
    assert slack_escape("a & <b> &amp;") == "a &amp; &lt;b&gt; &amp;amp;"
    assert slack_escape("plain *bold* text") == "plain *bold* text"


def test_nothing_from_a_session_becomes_slack_markup(engine):
    _loop(engine, HOSTILE_SESSION, prompt_version=HOSTILE_VERSION, tool=HOSTILE_TOOL)
    texts = _texts(engine, rules=("loop", "rollback", "loop_spike"),
                   console_url="https://rewind.example/console", spike_threshold=1)
    assert {t.split(" ", 2)[1] for t in texts} >= {"Loop", "Session"}
    assert any("loop of prompt version" in t for t in texts)  # the spike names the version
    for text in texts:
        for raw in ("<!channel>", "<@U024BE7LH>", "<https://evil.example", "<!here>"):
            assert raw not in text
        # The one piece of markup is the console link Rewind adds, its id percent-encoded.
        links = re.findall(r"<[^>]*>", text)
        assert links == [links[0]] and links[0].startswith(
            "<https://rewind.example/console/session?session=%3C%21channel%3E")
    loop = next(t for t in texts if t.startswith("[Rewind] Loop"))
    assert "session &lt;!channel&gt; urgent &amp; &lt;@U024BE7LH&gt;" in loop
    assert "&lt;!here&gt;" in loop  # the tool, in the detector's explanation
    spikes = [t for t in texts if "in the last 10 minutes" in t]
    assert any("&lt;https://evil.example|re-authenticate&gt;" in t for t in spikes)


def test_the_json_fields_keep_the_values_as_they_are(engine):
    """Only `text` is markup; receivers that read the fields get the exact values."""
    import json

    _loop(engine, HOSTILE_SESSION, prompt_version=HOSTILE_VERSION, tool=HOSTILE_TOOL)
    bodies: list[dict] = []
    worker = AlertWorker(engine, ["https://hooks.example/x"], AlertConfig(rules=("loop",)),
                         post=lambda u, b, t: bodies.append(json.loads(b)) or 200)
    try:
        worker.run_once()
    finally:
        worker.close()
    [body] = bodies
    assert (body["session"], body["prompt_version"], body["tool"]) == (
        HOSTILE_SESSION, HOSTILE_VERSION, HOSTILE_TOOL)


def _sentence_glitches(text: str) -> list[str]:
    return [g for g in (".;", "..", " ;", " .", "(s)", "None", ";;") if g in text]


def test_a_loop_under_a_freeze_reads_as_sentences(store_url):
    now = dt.datetime.now(dt.UTC)
    freeze = FreezeWindow(now - dt.timedelta(hours=1), now + dt.timedelta(hours=1),
                          "National Day change freeze", "flag")
    engine = Engine.open(store_url, freeze=freeze)
    try:
        s = engine.session("frozen")
        with pytest.raises(LoopWaiting):  # flagged: the session waits for on-call
            for _ in range(4):
                with s.step("image_crop", {"x": 1}) as call:
                    call.fail("invalid slice")
        [text] = _texts(engine, rules=("loop",))
    finally:
        engine.close()
    assert _sentence_glitches(text) == [], text
    assert text.endswith("; policy flag (freeze: National Day change freeze); it waits for "
                         "on-call: roll it back, release it or stop it.")


@pytest.mark.parametrize("steps", [1, 3])
def test_rollback_and_compensation_alerts_read_as_sentences(engine, steps):
    def broken(args, key):
        raise RuntimeError("refund service down")

    engine.compensations.register("charge.undo", broken)
    engine._runtime.compensation_attempts = 1
    s = engine.session("pay")
    start = s.snapshot("start")
    for n in range(steps):
        with s.step("charge", {"n": n}, side_effect=True,
                    compensation=("charge.undo", {"n": n})) as c:
            c.ok("charged")
    engine.rollback("pay", start, actor="alice", reason="wrong amount", notice=False)
    texts = _texts(engine, rules=("rollback", "compensation_failed"))
    assert texts, "nothing paged"
    for text in texts:
        assert _sentence_glitches(text) == [], text
        assert text.endswith(".")
    rollback = next(t for t in texts if "rolled back" in t)
    assert f"{steps} step{'s' if steps > 1 else ''} undone" in rollback
    assert "by alice" in rollback


def test_an_incident_page_carries_nothing_as_markup_and_reads_as_sentences(engine):
    """Under the default rules a loop pages as its incident: the page names the tool, the
    error, the session and its loop, all escaped, and one link (the incident's page)."""
    _loop(engine, HOSTILE_SESSION, prompt_version=HOSTILE_VERSION, tool=HOSTILE_TOOL)
    texts = _texts(engine, console_url="https://rewind.example/console")
    [page] = [t for t in texts if t.startswith("[Rewind] Incident")]
    for raw in ("<!channel>", "<@U024BE7LH>", "<!here>"):
        assert raw not in page
    assert "session &lt;!channel&gt; urgent &amp; &lt;@U024BE7LH&gt;" in page
    links = re.findall(r"<[^>]*>", page)
    assert len(links) == 1 and links[0].startswith(
        "<https://rewind.example/console/incident?incident=inc-")
    assert _sentence_glitches(page) == [], page
    assert not [t for t in texts if t.startswith("[Rewind] Loop")]  # folded into the incident
