"""First run: the README's run command on a fresh clone brings up the console with a live fleet.

This clones the committed repository, runs `./scripts/run` exactly as a newcomer would (it creates
its own virtual environment, installs, starts the demo fleet and the console), waits for the
console's health endpoint and then finds live sessions on the fleet page in Chromium.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from support.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"

# Its own waits (install up to 600 s, then the console and the fleet) outlast the suite's
# 300 s timeout when a fresh virtual environment has to be installed on a busy machine.
pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.timeout(900)]


def readme_run_command() -> str:
    """The first command of the README's first code block."""
    block = re.search(r"```bash\n(.*?)```", README.read_text(), re.S)
    assert block, "README.md lost its code block with the run command"
    return block.group(1).strip().splitlines()[0]


def wait_for(url: str, seconds: float, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the run command exited early:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise AssertionError(f"{url} never answered:\n{log.read_text()[-3000:]}")


def test_readme_run_command_serves_a_live_fleet(tmp_path, browser):
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"],
                      capture_output=True).returncode != 0:
        pytest.skip("not a git checkout")
    clone = tmp_path / "rewind"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    command = readme_run_command()
    assert command.startswith("./scripts/run")
    port = free_port()
    # A newcomer has no REWIND_*, no active virtual environment and no PYTHONPATH (which would
    # make the clone run this checkout's console instead of its own).
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("REWIND_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env.update(PORT=str(port), DEMO_SESSIONS="6")
    log = tmp_path / "run.log"
    with log.open("w") as out:
        proc = subprocess.Popen(command, shell=True, cwd=clone, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for(f"http://127.0.0.1:{port}/_stcore/health", 600, proc, log)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.goto(f"http://127.0.0.1:{port}/", wait_until="domcontentloaded")
        page.get_by_text("Demo mode").first.wait_for(timeout=60_000)
        active = page.locator('[data-testid="stMetric"]').filter(has_text="Active sessions")
        deadline = time.time() + 180
        value = 0
        while time.time() < deadline:
            text = active.locator('[data-testid="stMetricValue"]').inner_text(timeout=60_000)
            value = int(re.sub(r"\D", "", text) or 0)
            if value > 0:
                break
            time.sleep(2)
        assert value > 0, f"no live sessions on the fleet page:\n{log.read_text()[-3000:]}"
        assert (clone / ".rewind" / "rewind.db").exists()
        page.close()
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
