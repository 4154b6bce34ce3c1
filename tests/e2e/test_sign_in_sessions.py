"""A local account stays signed in across reloads and tabs (an HttpOnly session cookie that only
the console's server side sets), and only while its session holds: sign-out, a forged or expired
cookie, a deleted account all get the sign-in form.

The console runs on its own (serve.py, as `rewind dashboard` serves it) with a secrets file these
tests rewrite; each test has a fresh browser context, so no cookie crosses from one to another.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from support.console import ACCOUNTS, sign_in, start_console, stop_console, write_secrets
from support.fleet import LOOPING, seed_fleet

from dashboard.signin.access import SESSION_COOKIE

pytestmark = pytest.mark.browser


def edit(secrets_path: Path, change) -> None:
    """Rewrite the secrets file as `change(text)` says, keeping every other line (the accounts'
    password hashes too), with a modification time the console cannot mistake for the old one."""
    before = secrets_path.stat().st_mtime_ns
    secrets_path.write_text(change(secrets_path.read_text(encoding="utf-8")), encoding="utf-8")
    os.utime(secrets_path, ns=(before + 2_000_000_000, before + 2_000_000_000))


def without_account(text: str, name: str) -> str:
    """`text` without the `[rewind.users.<name>]` table (write_secrets ends each with a blank
    line)."""
    start = text.index(f"[rewind.users.{name}]")
    end = text.find("\n\n", start)
    return text[:start] + (text[end + 2:] if end >= 0 else "")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("sessions")
    store = f"sqlite:///{workdir}/rewind.db"
    seed_fleet(store, background=4)
    secrets_path = workdir / "secrets.toml"
    write_secrets(secrets_path, ACCOUNTS, freeze=False)
    running = start_console(workdir, store, secrets_path)
    yield running, secrets_path
    stop_console(running.process)


@pytest.fixture
def secrets_restored(served):
    """Put the secrets file back as it was after a test that edits it."""
    original = served[1].read_text(encoding="utf-8")
    yield
    edit(served[1], lambda _: original)


def session_cookie(page: Page) -> dict | None:
    found = [c for c in page.context.cookies() if c["name"] == SESSION_COOKIE]
    return found[0] if found else None


def signed_in_as(page: Page, name: str) -> None:
    expect(page.get_by_text(f"{name} · {ACCOUNTS[name][0]}")).to_be_visible()
    expect(page.get_by_role("textbox", name="Password")).to_have_count(0)


def shows_sign_in_form(page: Page) -> None:
    expect(page.get_by_role("textbox", name="Password")).to_be_visible()
    expect(page.get_by_text("Active sessions")).to_have_count(0)


def _wait_for(page: Page, present: bool) -> None:
    """Wait until the browser holds the session cookie (or no longer does). The cookie is
    HttpOnly, so the page's `document.cookie` never shows it: the browser's jar is asked."""
    for _ in range(200):
        if (session_cookie(page) is not None) is present:
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"the session cookie is {'missing' if present else 'still there'}")


def wait_for_cookie(page: Page) -> None:
    _wait_for(page, True)


def wait_for_cookie_gone(page: Page) -> None:
    _wait_for(page, False)


def test_a_reload_and_a_second_tab_stay_signed_in_with_the_same_role(served, page):
    console, _ = served
    sign_in(page, console.url, "victor")
    wait_for_cookie(page)
    cookie = session_cookie(page)
    assert cookie is not None and cookie["sameSite"] == "Strict" and cookie["path"] == "/"
    assert cookie["httpOnly"]  # no page script can read it
    assert cookie["expires"] > 0  # kept when the browser restarts, until the session's end
    token = cookie["value"]
    assert len(token) >= 40
    assert token not in page.content()
    assert SESSION_COOKIE not in page.evaluate("document.cookie")

    page.reload()
    signed_in_as(page, "victor")
    expect(page.get_by_text("Active sessions")).to_be_visible()
    assert not page.get_by_role("button", name="Roll back").count()  # still a viewer

    shared = page.context.new_page()  # a shared deep link opened in a second tab
    shared.goto(f"{console.url}/session?session={LOOPING}")
    signed_in_as(shared, "victor")
    expect(shared.get_by_role("heading", name=LOOPING).first).to_be_visible()

    # the token travels only in the cookie: never in an address, the page or the server log
    for tab in (page, shared):
        assert token not in tab.url
        assert token not in tab.content()
    assert token not in console.log.read_text(errors="replace")


def test_sign_out_ends_the_session_for_every_reload(served, page):
    console, _ = served
    sign_in(page, console.url, "olivia")
    wait_for_cookie(page)
    token = session_cookie(page)["value"]

    page.get_by_role("button", name="Sign out").click()
    shows_sign_in_form(page)
    wait_for_cookie_gone(page)
    page.reload()
    shows_sign_in_form(page)

    # the token was revoked on the server: a browser that kept a copy gets the form too
    page.context.add_cookies([{"name": SESSION_COOKIE, "value": token, "url": console.url,
                               "sameSite": "Strict"}])
    page.reload()
    shows_sign_in_form(page)
    wait_for_cookie_gone(page)


def test_a_forged_cookie_gets_the_sign_in_form_and_is_deleted(served, page):
    console, _ = served
    page.context.add_cookies([{"name": SESSION_COOKIE, "value": secrets.token_urlsafe(32),
                               "url": console.url, "sameSite": "Strict"}])
    page.goto(console.url)
    shows_sign_in_form(page)
    wait_for_cookie_gone(page)
    sign_in(page, console.url, "olivia")  # and signing in still works after it
    signed_in_as(page, "olivia")


def test_an_expired_session_gets_the_sign_in_form(served, page, secrets_restored):
    console, secrets_path = served
    sign_in(page, console.url, "olivia")
    wait_for_cookie(page)
    # sessions end after a millisecond without use now: the one above has expired
    edit(secrets_path, lambda text: text.replace(
        "[rewind]\n", "[rewind]\nsession_idle_minutes = 0.00001\n", 1))
    page.reload()
    shows_sign_in_form(page)
    wait_for_cookie_gone(page)


def test_an_account_deleted_after_sign_in_is_signed_out_on_the_next_run(served, page,
                                                                         secrets_restored):
    console, secrets_path = served
    sign_in(page, console.url, "victor")
    wait_for_cookie(page)
    token = session_cookie(page)["value"]
    original = secrets_path.read_text(encoding="utf-8")
    edit(secrets_path, lambda text: without_account(text, "victor"))

    page.get_by_role("link", name="Audit").click()  # the next run of this tab
    shows_sign_in_form(page)
    wait_for_cookie_gone(page)

    # the account comes back as it was (same password): the ended session does not
    edit(secrets_path, lambda _: original)
    page.context.add_cookies([{"name": SESSION_COOKIE, "value": token, "url": console.url,
                               "sameSite": "Strict"}])
    page.reload()
    shows_sign_in_form(page)
