"""Incidents in the browser: the fleet's first screen leads with the open incident of a broken
tool; its page lists the sessions, each linked, and rolls them all back after a preview.

Its own console and store: the sessions here loop on one broken tool, and other tests count the
sessions of the package's fleet.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import uuid
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from support.console import (
    ACCOUNTS,
    CHROMIUM,
    fresh_page,
    sign_in,
    start_console,
    stop_console,
    write_secrets,
)

from engine import Engine, LoopWaiting

pytestmark = pytest.mark.browser

SESSIONS = [f"refund-{n}" for n in range(6)]


@pytest.fixture(scope="module")
def broken_tool(tmp_path_factory):
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip("no Chromium at /usr/bin/chromium (apt-get install -y chromium)")
    workdir = tmp_path_factory.mktemp("incident")
    store = f"sqlite:///{workdir}/rewind.db"
    with Engine.open(store) as engine:
        for n, sid in enumerate(SESSIONS):
            s = engine.session(sid, meta={"tenant": "acme", "scenario": "refund"},
                               on_loop="flag")
            s.append_message("user", "refund please")
            s.snapshot("start")
            with contextlib.suppress(LoopWaiting):  # under flag the agent waits for on-call
                for _ in range(3):
                    with s.step("refund_api", {"order": f"A-{n}"}) as call:
                        call.fail(f"HTTP 503 for order A-{n} (request {uuid.uuid4()})")
        [inc] = engine.incidents()
    secrets = workdir / "secrets.toml"
    write_secrets(secrets, ACCOUNTS, freeze=False)
    running = start_console(workdir, store, secrets)
    yield running, inc.id
    stop_console(running.process)


@pytest.fixture
def page(browser):
    pg = fresh_page(browser, height=900)
    yield pg
    pg.context.close()


def test_the_incident_leads_the_fleet_and_one_remedy_rolls_all_its_sessions_back(
        broken_tool, page: Page):
    console, iid = broken_tool
    sign_in(page, console.url, "olivia")
    expect(page.get_by_text("1 open incident: loops grouped by cause")).to_be_visible()
    line = page.get_by_role("link", name=re.compile(r"refund_api · .*503.* · 6 sessions: "
                                                    r"6 waiting"))
    expect(line).to_be_visible()
    line.click()

    expect(page.get_by_role("heading", name="Incident", exact=True)).to_be_visible()
    expect(page).to_have_url(re.compile(rf"/incident\?incident={iid}$"))
    expect(page.get_by_text("By state now: 6 waiting.", exact=False)).to_be_visible()
    page.get_by_role("textbox", name=re.compile("^Reason")).fill("refund_api answers 503")
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_text("Roll back 6 of the incident's 6 sessions.")).to_be_visible()
    page.get_by_role("button", name="Confirm: Roll back every session").click()
    expect(page.get_by_text("Rolled back 6 of 6 sessions.")).to_be_visible()
    expect(page.get_by_text("By state now: 6 rolled back.", exact=False)).to_be_visible()

    with Engine.open(console.store) as engine:
        assert {sid: engine.session_info(sid).status for sid in SESSIONS} == {
            sid: "rolled_back" for sid in SESSIONS}
        [claim] = engine.audit(action="incident_rollback")
        assert claim.actor == "olivia"
