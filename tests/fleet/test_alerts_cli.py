"""`rewind alert` as on-call starts it: a first run pages what happens from now
on, not the backlog of the feed, unless asked (`--since`); `--once` says with its exit code
whether the webhooks took the alerts (1 when one could not be reached; see `--help`)."""

from __future__ import annotations

import datetime as dt

import pytest
from test_alerts import _loop, made_hooks

from engine import Engine
from engine.cli.parser import main
from engine.fleet.alerts import NAMESPACE


@pytest.fixture
def hooks():
    yield from made_hooks()


@pytest.fixture
def url(tmp_path, open_engine) -> str:
    store = f"sqlite:///{tmp_path}/rewind.db"
    _loop(open_engine(store), "before")  # the backlog: a loop and its rollback
    return store


def _alert(capsys, url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--store", url, "alert", "--once", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _sessions(hook) -> list[str]:
    return sorted({body["session"] for body in hook.received})


def test_a_first_run_starts_from_now_and_a_restart_resumes(url, hooks, capsys, open_engine):
    hook = hooks()
    code, out, _ = _alert(capsys, url, "--webhook", hook.url)
    assert code == 0 and hook.received == []  # the backlog does not page
    assert "first run" in out and "newest event" in out
    _loop(open_engine(url), "after")
    code, out, _ = _alert(capsys, url, "--webhook", hook.url)
    assert code == 0 and _sessions(hook) == ["after"] and len(hook.received) == 2
    assert "resuming" in out


def test_since_a_duration_or_a_time_reads_back_that_far(url, hooks, capsys, open_engine):
    engine: Engine = open_engine(url)
    between = dt.datetime.now(dt.UTC)
    _loop(engine, "after")
    everything, recent = hooks(), hooks()
    code, _, _ = _alert(capsys, url, "--webhook", everything.url, "--since", "1h",
                        "--name", "all")
    assert code == 0 and _sessions(everything) == ["after", "before"]
    code, _, _ = _alert(capsys, url, "--webhook", recent.url, "--since",
                        between.isoformat(), "--name", "recent")
    assert code == 0 and _sessions(recent) == ["after"]
    # --since only places a first run; a pager with a saved cursor resumes from it.
    _loop(engine, "later")
    code, out, _ = _alert(capsys, url, "--webhook", recent.url, "--since", "1h",
                          "--name", "recent")
    assert code == 0 and _sessions(recent) == ["after", "later"]
    assert set(recent.keys().values()) == {1}
    assert "--since applies to a first run only" in out


def test_since_refuses_what_is_neither_a_duration_nor_a_time(url, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--store", url, "alert", "--once", "--webhook", "http://127.0.0.1:9/x",
              "--since", "yesterday-ish"])
    assert exited.value.code == 2
    assert "--since" in capsys.readouterr().err


def test_once_exits_1_when_no_webhook_could_be_reached(url, hooks, capsys, open_engine):
    dead = hooks()
    dead_url = dead.url
    dead.close()
    code, _, err = _alert(capsys, url, "--webhook", dead_url, "--since", "1h")
    assert code == 1
    assert "127.0.0.1" in err and "outbox" in err and "/hook" not in err
    state = open_engine(url).documents.fleet(NAMESPACE)["default"]
    assert sum(len(box) for box in state["outbox"].values()) == 2  # kept for the next run
    # The next run, with the webhook still down and its retry not yet due, still says so.
    code, _, err = _alert(capsys, url, "--webhook", dead_url)
    assert code == 1 and "outbox" in err


def test_once_exits_1_when_one_of_two_webhooks_failed(url, hooks, capsys):
    healthy, failing = hooks(), hooks(fail_first=100)
    code, _, err = _alert(capsys, url, "--webhook", healthy.url, "--webhook", failing.url,
                          "--since", "1h")
    assert code == 1 and len(healthy.received) == 2
    assert "HTTP 500" in err and "1 of 2 webhooks" in err


def test_a_webhook_secret_stays_out_of_what_rewind_alert_prints(url, hooks, capsys):
    dead = hooks()
    secret_url = dead.url.replace("http://", "http://pager:s3cr3t@").replace(
        "/hook", "/services/tok3n")
    dead.close()
    code, out, err = _alert(capsys, url, "--webhook", secret_url, "--since", "1h")
    assert code == 1
    for secret in ("s3cr3t", "tok3n"):
        assert secret not in out + err


def test_the_pager_serves_the_open_incident_count_to_prometheus(tmp_path, hooks, open_engine):
    """`rewind alert --metrics-port` exports rewind_incidents_open as of its last round: the
    one process that reads the fleet's incidents every second."""
    import os
    import signal
    import subprocess
    import sys
    import urllib.request

    from support.paths import ROOT
    from support.ports import free_port
    from test_alerts import _until

    store = f"sqlite:///{tmp_path}/rewind.db"
    engine = open_engine(store)
    _loop(engine, "crop", tool="image_crop")
    _loop(engine, "fetch", tool="fetch_page")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "--store", store, "alert", "--interval", "0.2",
         "--webhook", hooks().url, "--metrics-port", str(port)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []

    def exported() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
                seen[:] = [line for line in resp.read().decode().splitlines()
                           if line.startswith("rewind_incidents_open ")]
        except OSError:
            return False
        return seen == ["rewind_incidents_open 2.0"]

    try:
        _until(exported, 60)
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    assert f"metrics at http://127.0.0.1:{port}/metrics" in output
    assert proc.returncode == 0


def test_a_metrics_port_that_cannot_be_bound_is_a_usage_error(url, hooks, capsys):
    code, _, err = _alert(capsys, url, "--webhook", hooks().url, "--metrics-port", "99999")
    assert code == 2 and "cannot serve metrics on 127.0.0.1:99999" in err
