"""A session waiting for on-call, in the browser: its page says since when and offers the three
decisions (release with a note its agent then reads, stop, roll back), each audited with the
operator; a viewer sees the wait but cannot act; a decision without a reason cannot be sent, and
a second decision on one wait is refused with nothing written.

Its own console and store (SQLite), served as `rewind dashboard` serves it, driven by Debian's
Chromium through Playwright (`support.console`).
"""

from __future__ import annotations

import re
import shutil
import threading
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from support.console import (
    ACCOUNTS,
    CHROMIUM,
    chromium,
    fresh_page,
    sign_in,
    start_console,
    stop_console,
    write_secrets,
)

from engine import Engine, LoopWaiting, SessionStopped
from engine.recovery.oncall import NOTE_PREFIX

pytestmark = pytest.mark.browser

REASON = "Reason (required, written to the audit log)"
WAITING = ("wait-release", "wait-stop", "wait-rollback", "wait-twice")


def _wait_for_on_call(engine: Engine, sid: str) -> None:
    s = engine.session(sid, meta={"tenant": "acme", "scenario": "receipts"}, on_loop="flag")
    s.append_message("user", "crop the receipt")
    s.snapshot("start")
    with pytest.raises(LoopWaiting):
        for _ in range(4):
            with s.step("image_crop", {"x": 10, "height": -20}) as call:
                call.fail("invalid slice: height must be positive")
    assert s.info().waiting


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip("no Chromium at /usr/bin/chromium (apt-get install -y chromium)")
    workdir = tmp_path_factory.mktemp("waiting")
    store = f"sqlite:///{workdir}/rewind.db"
    with Engine.open(store, freeze=None) as engine:
        for sid in WAITING:
            _wait_for_on_call(engine, sid)
    secrets = workdir / "secrets.toml"
    write_secrets(secrets, ACCOUNTS, freeze=False)
    running = start_console(workdir, store, secrets)
    yield running
    stop_console(running.process)


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


@pytest.fixture
def new_page(browser):
    """Pages in fresh browser contexts (one per signed-in person), closed afterwards."""
    pages: list[Page] = []

    def make() -> Page:
        pages.append(fresh_page(browser))
        return pages[-1]

    yield make
    for pg in pages:
        pg.context.close()


def _open(page: Page, console, sid: str, who: str) -> None:
    sign_in(page, f"{console.url}/session?session={sid}", who)
    expect(page.get_by_role("heading", name=sid)).to_be_visible()


def _audit(store: str, sid: str) -> list[tuple[str, str, str]]:
    with Engine.open(store, freeze=None) as engine:
        return [(r.action, r.actor, r.reason or "") for r in engine.audit(session=sid)]


def test_a_viewer_sees_the_wait_but_cannot_decide(console, new_page):
    page = new_page()
    _open(page, console, "wait-release", "victor")
    expect(page.get_by_text("Waiting for on-call", exact=False)).to_be_visible()
    expect(page.get_by_text("You are signed in as a viewer", exact=False)).to_be_visible()
    for name in ("Release…", "Stop…", "Roll back…", "Send notice…"):
        expect(page.get_by_role("button", name=name)).to_have_count(0)
    assert _audit(console.store, "wait-release") == []


def test_release_with_a_note_reaches_the_waiting_agent(console, new_page):
    """The agent blocks in `wait_for_decision`; the operator releases it from the page with a
    note; the agent gets the decision, reads the note as its last message and runs on."""
    seen: dict = {}

    def agent() -> None:
        with Engine.open(console.store, freeze=None) as engine:
            s = engine.session("wait-release", on_loop="flag")
            seen["decision"] = s.wait_for_decision(timeout=120)
            seen["last"] = s.state().messages[-1]
            with s.step("image_crop", {"x": 10, "height": 20}) as call:
                call.ok("cropped")
            seen["status"] = s.info().status

    waiting = threading.Thread(target=agent, daemon=True)
    waiting.start()
    page = new_page()
    _open(page, console, "wait-release", "olivia")
    expect(page.get_by_text("Waiting for on-call", exact=False)).to_be_visible()
    page.get_by_role("button", name="Release…").click()
    dialog = page.get_by_role("dialog")
    release = dialog.get_by_role("button", name="Release", exact=True)
    expect(release).to_be_disabled()  # no reason yet: nothing can be sent
    dialog.get_by_role("textbox", name="Note for the agent (optional)").fill(
        "use height 20, not -20")
    dialog.get_by_role("textbox", name=REASON).fill("the crop box is fixed upstream")
    expect(release).to_be_enabled()
    release.click()
    expect(page.get_by_text("Released: the agent may continue.")).to_be_visible()
    expect(page.get_by_role("button", name="Release…")).to_have_count(0)

    waiting.join(60)
    assert not waiting.is_alive(), "the agent never got the decision"
    decision = seen["decision"]
    assert (decision.kind, decision.actor, decision.note) == (
        "released", "olivia", "use height 20, not -20")
    assert seen["last"]["content"] == f"{NOTE_PREFIX}: use height 20, not -20"
    assert seen["status"] == "healthy"
    assert _audit(console.store, "wait-release") == [
        ("release", "olivia", "the crop box is fixed upstream")]


def test_stop_ends_the_session_and_is_audited(console, new_page):
    page = new_page()
    _open(page, console, "wait-stop", "olivia")
    page.get_by_role("button", name="Stop…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("textbox", name=REASON).fill("nothing it can do until Monday")
    dialog.get_by_role("button", name="Stop", exact=True).click()
    expect(page.get_by_text("Stopped: the agent runs no more steps.")).to_be_visible()
    with Engine.open(console.store, freeze=None) as engine:
        s = engine.session("wait-stop", on_loop="flag")
        assert s.info().status == "stopped"
        assert s.wait_for_decision(timeout=0).kind == "stopped"
        with pytest.raises(SessionStopped):
            with s.step("image_crop", {"x": 1}) as call:
                call.ok("never runs")
    assert _audit(console.store, "wait-stop") == [
        ("stop", "olivia", "nothing it can do until Monday")]


def test_a_rollback_is_the_third_decision(console, new_page):
    page = new_page()
    _open(page, console, "wait-rollback", "olivia")
    page.get_by_role("button", name="Roll back…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_role("textbox", name=REASON).fill("back to before the crop")
    dialog.get_by_role("textbox", name=REASON).press("Enter")
    confirm = dialog.get_by_role("button", name="Roll back", exact=True)
    expect(confirm).to_be_enabled()
    confirm.click()
    expect(page.get_by_role("dialog")).to_have_count(0)
    expect(page.get_by_text(re.compile(r"^Rolled back to snap-"))).to_be_visible()
    with Engine.open(console.store, freeze=None) as engine:
        s = engine.session("wait-rollback", on_loop="flag")
        decision = s.wait_for_decision(timeout=0)
        assert (decision.kind, decision.actor) == ("rolled_back", "olivia")
        assert not s.info().waiting
    rows = _audit(console.store, "wait-rollback")  # the rollback, and the notice it sent
    assert sorted(rows) == [("notice", "olivia", "back to before the crop"),
                            ("rollback", "olivia", "back to before the crop")]


def test_a_second_decision_on_one_wait_is_refused_and_writes_nothing(console, new_page):
    """Two operators open the Stop… dialog of one waiting session; the first stops it; the
    second is told someone decided already and cannot send a second decision."""
    first, second = new_page(), new_page()
    for page in (first, second):
        _open(page, console, "wait-twice", "olivia")
        page.get_by_role("button", name="Stop…").click()
        expect(page.get_by_role("dialog").get_by_role("textbox", name=REASON)).to_be_visible()
    dialog = first.get_by_role("dialog")
    dialog.get_by_role("textbox", name=REASON).fill("halt it")
    dialog.get_by_role("button", name="Stop", exact=True).click()
    expect(first.get_by_text("Stopped: the agent runs no more steps.")).to_be_visible()

    late = second.get_by_role("dialog")
    late.get_by_role("textbox", name=REASON).fill("halt it too")
    late.get_by_role("textbox", name=REASON).press("Enter")
    refused = late.get_by_text(re.compile(
        r"no longer waits for on-call|stopped already by olivia"))
    expect(refused.first).to_be_visible()
    button = late.get_by_role("button", name="Stop", exact=True)
    if button.is_enabled():  # the page had not seen the decision: the engine refuses it
        button.click()
        expect(late.get_by_text(re.compile("stopped already by olivia"))).to_be_visible()
    assert _audit(console.store, "wait-twice") == [("stop", "olivia", "halt it")]
