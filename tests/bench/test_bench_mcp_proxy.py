"""bench/mcp_proxy.py writes its table into the results file: rewind mcp-proxy beside a plain
relay, both real stdio processes in front of a real upstream server."""

from __future__ import annotations

import pytest
from support.bench import run_bench

pytest.importorskip("mcp", reason="needs the mcp extra")


def test_the_mcp_bench_records_the_proxy_beside_a_plain_relay(tmp_path):
    section = run_bench("mcp_proxy.py", "--calls", "5", results=tmp_path / "RESULTS.md")
    lines = section.splitlines()
    for path in ("direct", "relay", "proxy"):
        assert any(line.startswith(f"{path} ") and line.endswith("x") for line in lines)
    assert "the proxy over the relay" in section and "a plain relay" in section
