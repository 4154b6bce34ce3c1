"""Start and stop the real console (`streamlit run dashboard/serve.py`, as `rewind dashboard`
runs it) for tests and benchmarks, and the headless Chromium that drives it (Debian's
/usr/bin/chromium; browsers are never downloaded).

Like Streamlit's own end-to-end tests: start the server on a free port, poll /_stcore/health.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dashboard.signin.passwords import hash_password
from support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "dashboard" / "serve.py"
"""What `rewind dashboard` (and so `./scripts/run`) serves: app.py behind the console's guard."""
CHROMIUM = os.environ.get("REWIND_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ACCOUNTS = {"olivia": ("operator", "olivia-on-call"), "victor": ("viewer", "victor-reads")}
"""The console's test accounts: name -> (role, password)."""


WAIT_MS = 20_000
"""How long actions and `expect` checks wait for the console. Playwright's `expect` gives up after
5 s by default, and on a loaded machine the fleet's first charts take longer than that; a check
that holds returns at once, so a generous wait costs nothing when the console is quick."""


def fresh_page(browser: Any, width: int = 1440, height: int = 1000) -> Any:
    """A page in a new browser context (its own cookies) whose actions and `expect` checks wait
    `WAIT_MS`; close it with ``page.context.close()``."""
    from playwright.sync_api import expect

    expect.set_options(timeout=WAIT_MS)
    page = browser.new_context(viewport={"width": width, "height": height}).new_page()
    page.set_default_timeout(WAIT_MS)
    return page


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """Debian's headless Chromium under Playwright's sync API, closed at the end of the block."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def write_secrets(path: Path, accounts: dict[str, tuple[str, str]], freeze: bool = True) -> None:
    """secrets.toml with local accounts (scrypt hashes) and, optionally, a running freeze."""
    lines = ["[rewind]", "refresh_seconds = 2", ""]
    if freeze:
        now = dt.datetime.now(dt.UTC)
        lines += ["[rewind.freeze]",
                  f'start = "{(now - dt.timedelta(hours=2)).isoformat()}"',
                  f'end = "{(now + dt.timedelta(days=3)).isoformat()}"',
                  'name = "Holiday change freeze"', ""]
    for name, (role, password) in accounts.items():
        lines += [f"[rewind.users.{name}]", f'role = "{role}"',
                  f'password_hash = "{hash_password(password)}"', ""]
    path.write_text("\n".join(lines), encoding="utf-8")


@dataclass
class Console:
    url: str
    store: str
    process: subprocess.Popen
    log: Path


def start_console(workdir: Path, store: str, secrets: Path | None, port: int | None = None,
                  timeout: float = 60.0, app: Path = APP, tree: Path | None = None) -> Console:
    """Start `streamlit run dashboard/serve.py` as `rewind dashboard` does (or another `app`)
    and wait until /_stcore/health answers. `tree`: another checkout whose console runs, from
    that checkout and importing it (default: this one, its `dashboard/serve.py`)."""
    if tree is not None:
        app = tree / "dashboard" / "serve.py"
    port = port or free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(port),
           "--server.address", "127.0.0.1", "--server.headless", "true",
           "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    if secrets is not None:
        cmd += ["--secrets.files", str(secrets)]
    log = workdir / f"streamlit-{port}.log"
    env = {**os.environ, "REWIND_STORE": store, "PYTHONUNBUFFERED": "1"}
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    with open(log, "wb") as out:
        process = subprocess.Popen(cmd, cwd=tree or ROOT, env=env, stdout=out,
                                   stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"streamlit exited early:\n{log.read_text(errors='replace')}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return Console(url, store, process, log)
        except OSError:
            time.sleep(0.2)
    stop_console(process)
    raise RuntimeError(f"streamlit did not become healthy in {timeout:.0f} s")


def stop_console(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def sign_in(page, url: str, name: str) -> None:
    """Open `url` in Playwright's `page` and sign in as `name` (one of ACCOUNTS); returns once
    the sidebar names the user. A browser the console already knows as `name` (its session
    cookie) is signed in on arrival; one signed in as someone else signs out first."""
    from playwright.sync_api import expect

    page.goto(url)
    form = page.get_by_role("textbox", name="Username")
    signed_in = page.get_by_role("button", name="Sign out")
    expect(form.or_(signed_in)).to_be_visible()
    if not form.is_visible():  # the sidebar names the user before it draws Sign out
        if page.get_by_text(f"{name} · {ACCOUNTS[name][0]}").is_visible():
            return
        signed_in.click()
    form.fill(name)
    page.get_by_role("textbox", name="Password").fill(ACCOUNTS[name][1])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_text(f"{name} · {ACCOUNTS[name][0]}")).to_be_visible()


WATCH_RUNS = """() => {
    window.rwRan = false;
    new MutationObserver((changes) => {
        for (const c of changes) {
            if (c.target.getAttribute('data-test-script-state') === 'running') window.rwRan = true;
        }
    }).observe(document.body, {attributes: true, subtree: true,
                               attributeFilter: ['data-test-script-state']});
}"""
"""Browser-side: `window.rwRan` turns true once the server runs the page's script again (the
state 'running', which only the server's word sets: 'rerunRequested' is the browser's own, and
a request made during a run is dropped)."""

SCRIPT_STATE = ("() => document.querySelector('[data-testid=\"stApp\"]')"
                "?.getAttribute('data-test-script-state')")


def wait_for_run_to_end(page, timeout_ms: int = 60_000) -> None:
    """Wait until the run `WATCH_RUNS` saw has started and the page is idle again (a run of a
    loaded machine's console can take many seconds: the wait is long, the check exact)."""
    page.wait_for_function("() => window.rwRan && document.querySelector("
                           "'[data-testid=\"stApp\"]').getAttribute('data-test-script-state')"
                           " === 'notRunning'", timeout=timeout_ms)


RERUN = """() => {
    // Streamlit's rerun shortcut, sent to the document itself, so that whatever holds the focus
    // (an open menu, the button a closed dialog gave the focus back to) keeps it. Down and up:
    // the shortcut library ignores a key it still thinks held, so a second try after a lone
    // keydown did nothing.
    for (const type of ['keydown', 'keyup']) {
        document.body.dispatchEvent(new KeyboardEvent(type, {key: 'r', code: 'KeyR',
                                                             keyCode: 82, bubbles: true}));
    }
}"""


def rerun_the_page(page, tries: int = 4) -> None:
    """A full run of the page that on-call did not ask for (Streamlit's rerun shortcut, standing
    for the page's first runs finishing or any other run), to its end.

    With a dialog open the shortcut is a key pressed in the dialog, out of its text fields (the
    modal keeps keys sent to the document from the page); otherwise it is sent to the document.
    It is sent again when the server has not started a run within a few seconds: the console
    ignores the shortcut while a run is under way (the one closing a dialog, say, which can
    start after the page looked idle), which is not what the tests using this are about."""
    page.evaluate(WATCH_RUNS)
    for attempt in range(tries):
        heading = page.get_by_role("dialog").get_by_role("heading").first
        if heading.count():
            heading.click()  # out of the dialog's text fields: there "r" is typed, not a shortcut
            page.keyboard.press("r")
        else:
            page.evaluate(RERUN)
        try:
            page.wait_for_function("() => window.rwRan", timeout=5_000)
            break
        except Exception:
            if attempt == tries - 1:
                raise AssertionError(
                    f"the console ran no script after {tries} rerun requests (script state "
                    f"{page.evaluate(SCRIPT_STATE)!r})") from None
    wait_for_run_to_end(page)
