"""The MCP example, run as a newcomer runs it (no store given, from a folder of their own), writes
to the store the console reads by default from that folder, so `rewind dashboard` shows it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.paths import ROOT

from engine import Engine

ROOT = str(ROOT)


def test_the_mcp_example_writes_where_the_console_reads_by_default(tmp_path):
    pytest.importorskip("mcp", reason="needs the mcp extra")
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("REWIND_STORE", None)
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "mcp_proxy_loop.py")],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    console_default = tmp_path / ".rewind" / "rewind.db"  # resolve_url(None) from there
    assert sorted(p.name for p in (tmp_path / ".rewind").glob("*.db")) == ["rewind.db"]
    with Engine.open(f"sqlite:///{console_default}", create=False) as engine:
        steps = engine.get_session("mcp-receipts").steps()
        assert [s.tool for s in steps] == ["image_crop"] * 4 + ["read_total"]
