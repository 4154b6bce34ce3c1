"""The real console, started with `streamlit run` on a free port against a seeded SQLite store,
and a headless Chromium to drive it (see `support.console`).

The tests' screenshots go to $REWIND_SCREENSHOTS (else a temp dir); the README's come from the
demo fleet: `.venv/bin/python scripts/screenshots.py`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from support.console import (
    ACCOUNTS,
    CHROMIUM,
    Console,
    chromium,
    fresh_page,
    start_console,
    stop_console,
    write_secrets,
)
from support.fleet import seed_fleet


@pytest.fixture(scope="package")
def console(tmp_path_factory) -> Console:
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        pytest.skip("no Chromium at /usr/bin/chromium (apt-get install -y chromium)")
    workdir = tmp_path_factory.mktemp("console")
    store = f"sqlite:///{workdir}/rewind.db"
    seed_fleet(store)
    secrets = workdir / "secrets.toml"
    write_secrets(secrets, ACCOUNTS)
    running = start_console(workdir, store, secrets)
    yield running
    stop_console(running.process)


@pytest.fixture(scope="session")
def shots(tmp_path_factory) -> Path:
    """Where screenshots go: $REWIND_SCREENSHOTS, else a temp dir (not docs/: see the README)."""
    target = os.environ.get("REWIND_SCREENSHOTS")
    path = Path(target) if target else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


# Package scope, not session: Playwright's sync API keeps an event loop running in the main
# thread while it is open, which breaks every later test that calls asyncio.run().
@pytest.fixture(scope="package")
def browser():
    with chromium() as launched:
        yield launched




@pytest.fixture
def page(browser):
    pg = fresh_page(browser)
    yield pg
    pg.context.close()
