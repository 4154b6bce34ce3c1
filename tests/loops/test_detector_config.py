"""One detector configuration for every process: ``[rewind.detector]`` of the
configuration file ($REWIND_CONFIG, else ./rewind.toml) reaches every engine `Engine.open` makes,
settings declared in the store win over it field by field, a bad file fails naming the file, the
field and the value, and each verdict records the settings that produced it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.keep_stepping import keep_stepping  # noqa: F401 - used by the marker
from support.paths import ROOT

from engine import ConfigError, LoopDetector
from engine.cli.parser import main
from engine.runtime import CONFIG_ENV, configured_detector

pytestmark = pytest.mark.usefixtures("keep_stepping")

AGENT = ROOT / "tests" / "workers" / "detector_agent.py"


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _flagged_at(engine, sid: str) -> int | None:
    s = engine.session(sid, on_loop="flag")
    for i in range(12):
        with s.step("image_crop", {"x": 1}) as call:
            call.fail("invalid slice")
        if s.info().status == "looping":
            return i + 1
    return None


def test_no_file_means_no_settings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert configured_detector({}) == {}
    _write(tmp_path / "rewind.toml", '[rewind.freeze]\nname = "x"\n')
    assert configured_detector({}) == {}  # a file without the table


def test_the_file_in_the_working_directory_or_the_one_the_environment_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "rewind.toml", "[rewind.detector]\nrepeat_threshold = 4\n")
    assert configured_detector({}) == {"repeat_threshold": 4}
    other = _write(tmp_path / "fleet.toml", '[rewind.detector]\nexempt_tools = ["wait_ci"]\n'
                                            "tool_breaker_failures = { flaky = 8 }\n")
    assert configured_detector({CONFIG_ENV: str(other)}) == {
        "exempt_tools": ["wait_ci"], "tool_breaker_failures": {"flaky": 8}}


@pytest.mark.parametrize(("table", "named"), [
    ("repeat_thresold = 4", ["repeat_thresold", "4", "not a detector setting"]),
    ('repeat_threshold = "four"', ["repeat_threshold", "'four'", "whole number"]),
    ("repeat_threshold = true", ["repeat_threshold", "True", "whole number"]),
    ("repeat_threshold = 1", ["repeat_threshold", "1", "from 2 to 10000"]),
    ('near_text_similarity = "high"', ["near_text_similarity", "'high'", "a number"]),
    ("exempt_tools = [1, 2]", ["exempt_tools", "[1, 2]", "list of names"]),
    ("window = 4", ["window", "4", "at least"]),
    ('tool_exemptions = { wait_ci = ["no_such_rule"] }', ["tool_exemptions", "no_such_rule"]),
])
def test_a_bad_field_or_value_names_the_file_the_field_and_the_value(tmp_path, table, named):
    path = _write(tmp_path / "rewind.toml", f"[rewind.detector]\n{table}\n")
    with pytest.raises(ConfigError) as caught:
        configured_detector({CONFIG_ENV: str(path)})
    message = str(caught.value)
    assert str(path.resolve()) in message and "[rewind.detector]" in message
    for part in named:
        assert part in message


def test_a_missing_or_broken_file_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"\$REWIND_CONFIG names .*nowhere.toml"):
        configured_detector({CONFIG_ENV: str(tmp_path / "nowhere.toml")})
    broken = _write(tmp_path / "rewind.toml", "[rewind.detector\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        configured_detector({CONFIG_ENV: str(broken)})
    odd = _write(tmp_path / "odd.toml", 'rewind = "x"\n')
    with pytest.raises(ConfigError, match="rewind must be a table"):
        configured_detector({CONFIG_ENV: str(odd)})


def test_engine_open_follows_the_file_and_the_store_wins_field_by_field(
        open_engine, tmp_path, monkeypatch):
    path = _write(tmp_path / "rewind.toml", "[rewind.detector]\nrepeat_threshold = 5\n"
                                            "breaker_failures = 9\n")
    monkeypatch.setenv(CONFIG_ENV, str(path))
    url = f"sqlite:///{tmp_path}/d.db"
    agent = open_engine(url)
    assert agent.fleet.detector_in_force() == ({"repeat_threshold": 5, "breaker_failures": 9},
                                         "config")
    assert _flagged_at(agent, "a") == 5
    assert agent.get_session("a").info().last_verdict["detector"] == {
        "repeat_threshold": 5, "breaker_failures": 9}
    agent.fleet.declare_detector({"repeat_threshold": 4}, actor="alice", reason="sooner")
    assert agent.fleet.detector_in_force() == ({"repeat_threshold": 4, "breaker_failures": 9},
                                         "store")
    assert _flagged_at(agent, "b") == 4
    assert agent.get_session("b").info().last_verdict["detector"] == {
        "repeat_threshold": 4, "breaker_failures": 9}
    # replay compares against the detector this process runs now: file and store together
    report = agent.replay({"repeat_threshold": 4})
    assert {r.session: r.change for r in report.sessions} == {"a": "same", "b": "same"}


def test_the_file_applies_over_a_factory_in_code_and_can_be_turned_off(
        open_engine, tmp_path, monkeypatch):
    path = _write(tmp_path / "rewind.toml", "[rewind.detector]\nrepeat_threshold = 4\n")
    monkeypatch.setenv(CONFIG_ENV, str(path))
    url = f"sqlite:///{tmp_path}/d.db"
    coded = open_engine(url, detector_factory=lambda: LoopDetector(repeat_threshold=5))
    assert _flagged_at(coded, "a") == 4
    plain = open_engine(url, detector_settings={})
    assert plain.fleet.detector_in_force() == ({}, "")
    assert _flagged_at(plain, "b") == 3
    assert "detector" not in plain.get_session("b").info().last_verdict
    with pytest.raises(ConfigError, match="do not fit"):
        open_engine(url, detector_factory=lambda: LoopDetector(window=20),
                    detector_settings={"cycle_max_period": 12})


def test_a_broken_file_stops_the_cli_with_its_name(open_engine, tmp_path, monkeypatch, capsys):
    url = f"sqlite:///{tmp_path}/d.db"
    open_engine(url)
    assert main(["--store", url, "sessions"]) == 0
    path = _write(tmp_path / "rewind.toml", "[rewind.detector]\nrepeat_threshold = 0\n")
    monkeypatch.setenv(CONFIG_ENV, str(path))
    capsys.readouterr()
    assert main(["--store", url, "sessions"]) == 2
    err = capsys.readouterr().err
    assert str(path.resolve()) in err and "repeat_threshold = 0" in err


def _agent(url: str, sid: str, env: dict[str, str], cwd: Path) -> dict:
    done = subprocess.run([sys.executable, str(AGENT), url, sid], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_process_builds_the_same_detector(open_engine, tmp_path):
    """Agent processes started with the same file, one reading it through $REWIND_CONFIG and
    one from its working directory, flag at the same step and record the same settings; a
    declaration in the store reaches every process over its file, and ending it hands each
    back to its file."""
    url = f"sqlite:///{tmp_path}/fleet.db"
    console = open_engine(url, detector_settings={})
    text = "[rewind.detector]\nrepeat_threshold = 5\n"
    named = _write(tmp_path / "fleet.toml", text)
    workdir = tmp_path / "agent"
    workdir.mkdir()
    _write(workdir / "rewind.toml", text)
    base = {k: v for k, v in os.environ.items() if k != CONFIG_ENV}
    base["PYTHONPATH"] = os.pathsep.join([str(ROOT), base.get("PYTHONPATH", "")])
    by_env = _agent(url, "p1", {**base, CONFIG_ENV: str(named)}, tmp_path)
    by_cwd = _agent(url, "p2", base, workdir)
    assert by_env == by_cwd == {"flagged_at": 5, "detector": {"repeat_threshold": 5}}

    console.fleet.declare_detector({"repeat_threshold": 4}, actor="alice", reason="sooner")
    assert _agent(url, "p3", {**base, CONFIG_ENV: str(named)}, tmp_path) == {
        "flagged_at": 4, "detector": {"repeat_threshold": 4}}
    assert _agent(url, "p4", base, tmp_path) == {  # no file at all: the store alone
        "flagged_at": 4, "detector": {"repeat_threshold": 4}}
    console.fleet.declare_detector({}, actor="alice", reason="back")
    assert _agent(url, "p5", base, workdir)["flagged_at"] == 5
