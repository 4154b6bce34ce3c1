"""`scripts/install`, the first thing a newcomer runs: a good install says one line per step and
keeps pip's warnings (setuptools' "Editable installation" block) in a log; a failed one shows
them. Run against a stand-in for `.venv/bin/python` that answers like pip, so no package is
downloaded."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARNING_BLOCK = """  /tmp/pip-build-env-x/overlay/lib/python3.11/site-packages/setuptools/command/\
editable_wheel.py:354: BuildBackendWarning: Editable installation.
  !!
          ********************************************************************************
          Please be careful with folders in your working directory with the same
          name as your package as they may take precedence during imports.
          ********************************************************************************
  !!
"""


def project(tmp_path: Path, pip_fails: bool) -> Path:
    """A copy of the project's install script and pyproject.toml, with a stand-in venv python."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "install", tmp_path / "scripts" / "install")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "warning.txt").write_text(WARNING_BLOCK)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    outcome = ("echo 'ERROR: No matching distribution found for redis' >&2; exit 1"
               if pip_fails else "exit 0")
    python.write_text(f"""#!/usr/bin/env bash
case "$*" in
  *"pip install -q --upgrade pip"*) exit 0 ;;
  *"pip install -q -e"*) echo "$*" >>"{tmp_path}/pip-args.txt"
    cat "{tmp_path}/warning.txt" >&2; {outcome} ;;
  *) exit 0 ;;
esac
""")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def run_install(root: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(root / "scripts" / "install"), *flags], cwd=root,
                          text=True, capture_output=True, timeout=60, env=dict(os.environ))


def test_a_good_install_keeps_setuptools_warning_block_in_a_log_not_on_screen(tmp_path):
    done = run_install(project(tmp_path, pip_fails=False))
    assert done.returncode == 0, done.stderr
    shown = done.stdout + done.stderr
    assert "Editable installation" not in shown and "!!" not in shown
    assert "installing into .venv" in shown
    assert "Editable installation" in (tmp_path / ".venv" / "pip-install.log").read_text()
    again = run_install(tmp_path)  # nothing changed: pip does not run again
    assert again.returncode == 0 and "dependencies up to date" in again.stdout


def test_a_failed_install_shows_pips_messages_and_writes_no_stamp(tmp_path):
    done = run_install(project(tmp_path, pip_fails=True))
    assert done.returncode == 1
    assert "No matching distribution found for redis" in done.stderr
    assert "pip could not install agent-rewind" in done.stderr
    assert not (tmp_path / ".venv" / ".rewind-install-stamp").exists()


def test_the_engine_installs_alone_and_the_console_is_asked_for(tmp_path):
    root = project(tmp_path, pip_fails=False)
    assert run_install(root).returncode == 0
    assert run_install(root, "--console").returncode == 0
    installed = [line.rsplit(" ", 1)[-1] for line in
                 (tmp_path / "pip-args.txt").read_text().splitlines()]
    assert installed == [".", ".[console]"]
    refused = run_install(root, "--consle")
    assert refused.returncode == 2 and "usage: scripts/install" in refused.stderr


def test_the_run_script_installs_the_console():
    assert "./scripts/install --console" in (ROOT / "scripts" / "run").read_text()


def test_the_console_stack_is_an_extra_that_the_tests_install():
    project_table = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    def names(requirements: list[str]) -> set[str]:
        return {re.split(r"[\[<>=!~ ;]", r, maxsplit=1)[0].lower() for r in requirements}
    console = {"streamlit", "plotly", "pandas"}
    assert not console & names(project_table["dependencies"])
    extras = project_table["optional-dependencies"]
    assert console <= names(extras["console"])
    test_extra = next(r for r in extras["test"] if r.startswith("agent-rewind["))
    assert "console" in test_extra.split("[", 1)[1].rstrip("]").split(",")
