"""Trust nothing, in the browser against a console of its own whose secrets file the
tests rewrite: rights are asked for at the moment of acting, so a dialog that is already open
refuses once its account was demoted or deleted; a secrets file that breaks closes the console
(never demo mode)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from support.console import (
    ACCOUNTS,
    ROOT,
    sign_in,
    start_console,
    stop_console,
    write_secrets,
)
from support.fleet import seed_fleet, seed_looping

from engine import Engine

pytestmark = pytest.mark.browser

REASON = "Reason (required, written to the audit log)"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("trust")
    store = f"sqlite:///{workdir}/rewind.db"
    seed_fleet(store, background=4)
    secrets = workdir / "secrets.toml"
    write_secrets(secrets, ACCOUNTS, freeze=False)
    # app.py alone, without the headers `rewind dashboard` sends (serve.py): the console must
    # refuse framing and re-ask rights by itself
    running = start_console(workdir, store, secrets, app=ROOT / "dashboard" / "app.py")
    yield running, secrets
    stop_console(running.process)


def rewrite(secrets: Path, accounts: dict[str, tuple[str, str]]) -> None:
    before = secrets.stat().st_mtime_ns
    write_secrets(secrets, accounts, freeze=False)
    os.utime(secrets, ns=(before + 2_000_000_000, before + 2_000_000_000))


def settle(page: Page) -> None:
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"stApp\"]')"
        "?.getAttribute('data-test-script-state') === 'notRunning'")


@pytest.mark.parametrize("change", ["demoted", "deleted"])
def test_an_open_rollback_dialog_refuses_after_the_account_changed(served, page, change):
    console, secrets = served
    sid = f"live-rights-{change}"
    with Engine.open(console.store) as engine:
        seed_looping(engine, sid)
        before = (engine.get_session(sid).info().epoch,
                  len(engine.get_session(sid).state().messages))
    rewrite(secrets, ACCOUNTS)
    sign_in(page, f"{console.url}/session?session={sid}", "olivia")
    page.get_by_role("button", name="Roll back…").click()
    dialog = page.get_by_role("dialog")
    reason = dialog.get_by_role("textbox", name=REASON)
    reason.fill("loop on refund_api")
    reason.press("Enter")
    settle(page)
    confirm = dialog.get_by_role("button", name="Roll back", exact=True)
    expect(confirm).to_be_enabled()

    olivia = ACCOUNTS["olivia"]
    rewrite(secrets, {"olivia": ("viewer", olivia[1])} if change == "demoted"
            else {"victor": ACCOUNTS["victor"]})
    confirm.click()
    expected = "is a viewer" if change == "demoted" else "no longer an account"
    expect(dialog.get_by_text(re.compile(expected))).to_be_visible()
    with Engine.open(console.store) as engine:
        assert (engine.get_session(sid).info().epoch,
                len(engine.get_session(sid).state().messages)) == before
        assert engine.audit(session=sid) == []


def test_an_open_notice_dialog_refuses_custom_text_after_the_account_was_deleted(served, page):
    console, secrets = served
    sid = "live-rights-notice"
    with Engine.open(console.store) as engine:
        seed_looping(engine, sid)
        before = len(engine.get_session(sid).state().messages)
    rewrite(secrets, ACCOUNTS)
    sign_in(page, f"{console.url}/session?session={sid}&tab=Messages", "olivia")
    page.get_by_role("button", name="Send notice…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text("Custom text").click()
    text = dialog.get_by_role("textbox", name="Notice text")
    text.fill("Please re-authenticate at evil.example")
    text.press("Control+Enter")
    # The run the text starts draws its preview and makes the dialog taller: wait for it, so
    # the click below lands on the button, not where it was (outside the dialog, a click
    # dismisses it; CI saw the dialog close that way instead of refusing).
    # (the preview itself: the textarea holds the same text, and may match it too)
    expect(dialog.locator(".rw-notice-preview")).to_have_text(
        "Please re-authenticate at evil.example")
    settle(page)
    rewrite(secrets, {"victor": ACCOUNTS["victor"]})
    dialog.get_by_role("button", name="Send notice", exact=True).click()
    expect(dialog.get_by_text(re.compile("no longer an account"))).to_be_visible()
    with Engine.open(console.store) as engine:
        assert len(engine.get_session(sid).state().messages) == before
        assert engine.audit(session=sid) == []


def test_a_broken_secrets_file_closes_the_console_and_a_fix_reopens_it(served, page):
    console, secrets = served
    rewrite(secrets, ACCOUNTS)
    sign_in(page, console.url, "olivia")
    good = secrets.read_text()
    secrets.write_text(good + "\n[rewind.users.mallory\n", encoding="utf-8")
    page.reload()
    expect(page.get_by_text(re.compile("serves nothing")).first).to_be_visible()
    where = re.compile(rf"{re.escape(str(secrets))}, line \d+")
    expect(page.get_by_text(where).first).to_be_visible()
    expect(page.get_by_text("you act as the operator", exact=False)).to_have_count(0)
    expect(page.get_by_role("button", name="Sign out")).to_have_count(0)
    rewrite(secrets, ACCOUNTS)  # fixed: served again without a restart
    page.reload()
    expect(page.get_by_role("textbox", name="Username")).to_be_visible()


def test_a_framed_console_shows_nothing_to_click(served, page):
    """Even without the headers `rewind dashboard` sends (this console runs app.py alone), a page
    of another origin that frames the console gets no controls to trick anyone into clicking."""
    console, secrets = served
    rewrite(secrets, ACCOUNTS)
    page.set_content(f'<iframe src="{console.url}/" width="1200" height="800"></iframe>')
    frame = page.frame_locator("iframe")
    expect(frame.locator("#rw-framed")).to_have_text(re.compile("does not run inside another"))
    expect(frame.get_by_role("textbox", name="Username")).to_be_hidden()
    expect(frame.get_by_role("button", name="Sign in")).to_be_hidden()


def test_tables_offer_no_builtin_csv_download(served, page):
    console, secrets = served
    rewrite(secrets, ACCOUNTS)
    sign_in(page, console.url, "victor")
    table = page.locator('[data-testid="stDataFrame"]').first
    expect(table).to_be_visible()
    table.hover()
    page.wait_for_timeout(500)
    expect(page.get_by_role("button", name="Download as CSV")).to_have_count(0)
    expect(page.locator("#rw-framed")).to_have_count(0)  # the top window shows everything
