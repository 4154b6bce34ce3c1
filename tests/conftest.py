"""Shared fixtures.

- `store_url` runs a test once per store backend (the conformance suite). Backends register in
  BACKENDS: name -> factory(tmp_path, request) returning the URL of a fresh, empty store. The
  Redis backends (`support.redis_servers`) start real servers on free loopback ports and skip the
  test when redis-server is not installed.
- `open_engine(url, **options)` opens an engine as `Engine.open` does; `engine` is one on
  `store_url`.
- Under CI (``CI=true``) a skipped test fails: a missing redis-server, Redis Cluster, Chromium,
  extra or data file must turn the run red, never quietly shrink it. Only a skip whose reason
  starts with ``n/a:`` (the test does not apply to this parameter, e.g. a second process on an
  in-memory store) stays a skip.
- No engine outlives its test: every engine opened with `Engine.open` while a test runs, by the
  test or by the code it calls, is closed at the test's teardown (`opened_engines`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator

import pytest
from support.redis_servers import REDIS_BACKENDS

from engine import Engine


def _sqlite_memory(tmp_path, request):
    return "sqlite:///:memory:"


def _sqlite_file(tmp_path, request):
    return f"sqlite:///{tmp_path}/rewind.db"


BACKENDS = {"sqlite-memory": _sqlite_memory, "sqlite-file": _sqlite_file, **REDIS_BACKENDS}


@pytest.fixture(
    params=[
        pytest.param(name, marks=pytest.mark.redis) if name.startswith("redis") else name
        for name in sorted(BACKENDS)
    ]
)
def store_url(request, tmp_path):
    """A fresh, empty store URL for each backend."""
    return BACKENDS[request.param](tmp_path, request)


NOT_APPLICABLE = "n/a:"
"""Reason prefix of a skip that says the test does not apply here, not that a part is missing."""


def _under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _skip_reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _fail_missing_part(report: pytest.CollectReport | pytest.TestReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if reason.startswith(NOT_APPLICABLE):
        return
    report.outcome = "failed"
    report.longrepr = (f"skipped under CI=true, where every part the suite needs must be present "
                       f"(a skip would hide it): {reason}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if _under_ci():
        _fail_missing_part(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    if _under_ci():
        _fail_missing_part(outcome.get_result())


def pytest_collection_modifyitems(config, items):
    """Keep the browser tests that share a console on one pytest-xdist worker.

    `./scripts/test` runs the suite on several workers (`--dist loadgroup`); the browser tests
    that share the package's seeded console form one group, so a second console is never
    started beside the first. The others (a fresh clone's run command, the fonts) go to any
    worker. Without xdist the mark does nothing.
    """
    for item in items:
        if "e2e" in item.path.parts and "console" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group("console"))


@pytest.fixture(autouse=True)
def main_module_restored() -> Iterator[None]:
    """Put `sys.modules["__main__"]` back after each test.

    Streamlit's AppTest runs the page as `__main__` and leaves it there; a process spawned later
    in the same pytest run (the demo's workers, multiprocessing tests) would then re-run the
    console page as its main module and crash.
    """
    main = sys.modules["__main__"]
    yield
    sys.modules["__main__"] = main


@pytest.fixture(autouse=True)
def opened_engines(monkeypatch) -> Iterator[list[Engine]]:
    """Every engine opened with `Engine.open` during the test, closed at teardown, newest first.

    Autouse, because the code under test opens engines the test never sees: a CLI command, the
    console's cached engine, the demo fleet. Closing is idempotent, so an engine the test closed
    itself (`with Engine.open(...)`) is no trouble. Engines opened by module- or package-scoped
    fixtures are set up before this fixture and stay open for the tests that share them.
    """
    opened: list[Engine] = []
    open_unwatched = Engine.open.__func__  # the function under the classmethod

    def open_watched(cls, url=None, **options):
        engine = open_unwatched(cls, url, **options)
        opened.append(engine)
        return engine

    monkeypatch.setattr(Engine, "open", classmethod(open_watched))
    yield opened
    for engine in reversed(opened):
        engine.close()


@pytest.fixture
def open_engine(opened_engines) -> Callable[..., Engine]:
    """`open_engine(url, **options)`: an engine as `Engine.open` gives it, closed at teardown."""
    return Engine.open


@pytest.fixture
def engine(store_url, open_engine) -> Engine:
    return open_engine(store_url)


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path}/rewind.db"
