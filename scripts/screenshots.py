"""The README's screenshots, taken from the demo fleet that the README's run command starts.

    ./scripts/install --test                  # Playwright, Chromium and the CJK/emoji fonts
    .venv/bin/python scripts/screenshots.py   # writes docs/console-*.png

It runs `./scripts/run` (the README's first command: the demo fleet on the embedded store and the
console) with its store and log in a temporary directory and the console on a free port, so a
`.rewind/` of yours is never read or written; with an empty secrets file, so the console is in demo
mode (the local user is operator `demo`) whatever `.streamlit/secrets.toml` holds. It waits until
the demo has sessions looping and waiting for on-call (the run command's `--hold` share), then, in
headless Chromium at 1440x900:

- console-fleet.png: the fleet's first screen, with the "needs you" band;
- console-session.png: a looping session (a Chinese-speaking user's when there is one): the
  verdict, since when and how bad;
- console-rollback-dialog.png: the Roll back… dialog with a reason given;
- console-session-rolled-back.png: the session after the rollback, its messages as the user sees
  them, with the notice in the user's language.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import Engine, SessionStatus  # noqa: E402
from engine.recovery.notices import TEMPLATES  # noqa: E402

CHROMIUM = os.environ.get("REWIND_CHROMIUM", "/usr/bin/chromium")
VIEWPORT = {"width": 1440, "height": 900}
WAIT_MS = 60_000
REASON = "Loop confirmed by on-call; rolled back to the suggested snapshot."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_run(work: Path, port: int) -> tuple[subprocess.Popen, str, Path]:
    """`./scripts/run` in its own process group, on a store in `work`; (process, store, log)."""
    store = f"sqlite:///{work / 'rewind.db'}"
    secrets = work / "secrets.toml"
    secrets.write_text("# no accounts: demo mode on localhost\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REWIND_", "STREAMLIT_"))}
    env.update(REWIND_STORE=store, PORT=str(port), REWIND_DEMO_LOG=str(work / "demo.log"),
               STREAMLIT_SECRETS_FILES=str(secrets))
    log = work / "run.log"
    with log.open("w") as out:
        proc = subprocess.Popen(["./scripts/run"], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    return proc, store, log


def stop_run(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGINT)  # as Ctrl-C would: the run script stops the demo too
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"./scripts/run exited early:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"the console never answered at {url}:\n{log.read_text()[-3000:]}")


def wait_looping(store: str, want: int, seconds: float, proc: subprocess.Popen, log: Path) -> str:
    """Wait until `want` sessions loop waiting for on-call; the id of the one to show (a
    Chinese-speaking user's when one loops, so the notice after the rollback is in Chinese)."""
    deadline = time.monotonic() + seconds
    found: list = []
    with Engine.open(store) as engine:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"./scripts/run exited early:\n{log.read_text()[-3000:]}")
            found = [i for i in engine.sessions(status=SessionStatus.LOOPING, limit=50)
                     if i.last_verdict and i.head]
            if len(found) >= want:
                break
            time.sleep(3)
    if not found:
        raise SystemExit(f"no session looped within {seconds:.0f} s; see {log}")
    zh = [i for i in found if str(i.meta.get("locale", "")).startswith("zh")]
    chosen = (zh or found)[0]
    print(f"{len(found)} sessions looping; showing {chosen.id} "
          f"({chosen.meta.get('scenario')}, locale {chosen.meta.get('locale')})", flush=True)
    return chosen.id


def settle(page, ms: int = 1500) -> None:
    """Let Streamlit finish its rerun and the charts their transitions before a screenshot."""
    page.wait_for_load_state("networkidle")
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden", timeout=WAIT_MS)
    page.wait_for_timeout(ms)


def shoot(url: str, sid: str, out: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"])
        context = browser.new_context(viewport=VIEWPORT, device_scale_factor=1,
                                      color_scheme="light", locale="en-US")
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)

        page.goto(url)
        expect(page.get_by_text(re.compile(r"^Needs you: \d+ looping"))).to_be_visible()
        expect(page.locator('[data-testid="stVegaLiteChart"] svg.marks').first).to_be_visible()
        expect(page.get_by_text(re.compile(r"matching sessions"))).to_be_visible()
        page.get_by_text(re.compile("^Live: refresh every")).click()  # hold the page still
        expect(page.get_by_text(re.compile(r"matching sessions .* paused"))).to_be_visible()
        settle(page)
        page.screenshot(path=str(out / "console-fleet.png"))
        print("console-fleet.png", flush=True)

        page.goto(f"{url}/session?session={sid}")
        expect(page.get_by_role("heading", name=sid)).to_be_visible()
        expect(page.get_by_text("Suggested rollback target:")).to_be_visible()
        # the Timeline tab's chart (Vega-Lite)
        expect(page.locator('[data-testid="stVegaLiteChart"] svg.marks').first).to_be_visible()
        settle(page)
        page.screenshot(path=str(out / "console-session.png"))
        print("console-session.png", flush=True)

        page.get_by_role("button", name="Roll back…").click()
        dialog = page.get_by_role("dialog")
        expect(dialog.get_by_text("Taken out of the conversation:")).to_be_visible()
        dialog.get_by_role("textbox", name=re.compile(r"^Reason")).fill(REASON)
        confirm = dialog.get_by_role("button", name="Roll back", exact=True)
        expect(confirm).to_be_enabled()
        settle(page, 800)
        page.screenshot(path=str(out / "console-rollback-dialog.png"))
        print("console-rollback-dialog.png", flush=True)

        confirm.click()
        expect(page.get_by_role("dialog")).to_have_count(0)
        expect(page.get_by_text(re.compile(r"^Rolled back to "))).to_be_visible()
        tab = page.get_by_role("tab", name="Messages")
        tab.click()
        expect(tab).to_have_attribute("aria-selected", "true")
        heading = page.get_by_text("As the user sees it:", exact=False)
        expect(heading).to_be_visible()
        # The user's view of the conversation, ending with the notice the rollback sent.
        notice = page.locator(".rw-chat .rw-bubble").filter(
            has_text=re.compile("|".join(re.escape(t[:12]) for t in TEMPLATES.values()))).last
        expect(notice).to_be_visible()
        for top in (tab, heading):  # the tabs on top when all of it fits below them
            top.evaluate("e => e.scrollIntoView({block: 'start'})")
            box = notice.bounding_box()
            if box is not None and box["y"] + box["height"] <= VIEWPORT["height"]:
                break
        else:
            notice.evaluate("e => e.scrollIntoView({block: 'end'})")
        settle(page)
        page.screenshot(path=str(out / "console-session-rolled-back.png"))
        print("console-session-rolled-back.png", flush=True)
        browser.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="default: docs/")
    parser.add_argument("--looping", type=int, default=2,
                        help="sessions waiting for on-call before the shots (default 2)")
    parser.add_argument("--wait", type=float, default=900.0,
                        help="seconds to wait for them (default 900)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary store and logs (their path is printed)")
    args = parser.parse_args(argv)
    if not Path(CHROMIUM).exists():
        raise SystemExit(f"no Chromium at {CHROMIUM}: run ./scripts/install --test")
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rewind-screenshots-"))
    port = free_port()
    proc, store, log = start_run(work, port)
    url = f"http://127.0.0.1:{port}"
    try:
        print(f"./scripts/run on {store}, console {url}; waiting for the demo…", flush=True)
        wait_healthy(url, proc, log, 900)
        sid = wait_looping(store, args.looping, args.wait, proc, log)
        shoot(url, sid, args.out)
    finally:
        stop_run(proc)
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    for name in sorted(args.out.glob("console-*.png")):
        print(f"{name.relative_to(ROOT) if name.is_relative_to(ROOT) else name}: "
              f"{name.stat().st_size // 1024} KB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
