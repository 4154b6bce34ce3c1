"""The integration examples under examples/ run as a user runs them (a fresh interpreter, the
command line of their docstring) and do what the README says."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.paths import ROOT

from engine import Engine

ROOT = str(ROOT)
ENV = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


def run_example(name: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", name), *args],
        env=ENV,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_openai_agents_example(tmp_path):
    pytest.importorskip("agents", reason="needs the openai-agents extra")
    store = f"sqlite:///{tmp_path}/agents.db"
    out = run_example("openai_agents_loop.py", store, "--session", "agents-example")
    assert "LoopDetected (exact_repeat)" in out
    assert "answer: The total on the receipt is 42.00 EUR." in out
    with Engine.open(store) as engine:
        steps = engine.get_session("agents-example").steps()
        assert [(s.tool, s.status, s.on_live_line) for s in steps] == [
            ("image_crop", "error", False)
        ] * 3 + [("read_total", "ok", True)]


def test_mcp_proxy_example(tmp_path):
    pytest.importorskip("mcp", reason="needs the mcp extra")
    store = f"sqlite:///{tmp_path}/mcp.db"
    out = run_example("mcp_proxy_loop.py", store, "--session", "mcp-example")
    assert "image_crop #4: is_error=True: Rewind refused this call" in out
    assert "read_total: 42.00 EUR" in out
    with Engine.open(store) as engine:
        steps = engine.get_session("mcp-example").steps()
        assert [s.tool for s in steps] == ["image_crop"] * 4 + ["read_total"]
        assert steps[3].error.startswith("refused by Rewind")
        assert engine.get_session("mcp-example").info().rollbacks == 1
