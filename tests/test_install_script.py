"""`scripts/install`, the first thing a newcomer runs: a good install says one line per step and
keeps pip's warnings (setuptools' "Editable installation" block) in a log; a failed one shows
them. Run against a stand-in for `.venv/bin/python` that answers like pip, so no package is
downloaded."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
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
  *"pip install -q -e"*) cat "{tmp_path}/warning.txt" >&2; {outcome} ;;
  *) exit 0 ;;
esac
""")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def run_install(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(root / "scripts" / "install")], cwd=root, text=True,
                          capture_output=True, timeout=60, env=dict(os.environ))


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
