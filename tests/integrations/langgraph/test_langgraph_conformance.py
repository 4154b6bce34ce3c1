"""LangGraph's own checkpointer conformance suite against `RewindSaver`, on every store backend.

One test per (backend, capability), so a failure names both. `validate` comes from the
``langgraph-checkpoint-conformance`` package; each capability suite gets a fresh saver on the
backend's store, the way the package's own runner does it.
"""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langgraph.checkpoint.conformance",
                    reason="needs the langgraph extra and langgraph-checkpoint-conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES  # noqa: E402

from engine.integrations.langgraph import RewindSaver  # noqa: E402

CAPABILITIES = sorted(c.value for c in ALL_CAPABILITIES)


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_conformance(engine, store_url, capability):
    @checkpointer_test(name=f"RewindSaver[{store_url.split(':', 1)[0]}]")
    async def rewind_saver():
        yield RewindSaver(engine)

    report = asyncio.run(validate(rewind_saver, capabilities={capability}))
    result = report.results[capability]
    assert result.detected, f"RewindSaver does not implement {capability}"
    assert result.tests_failed == 0, "\n".join(result.failures)
    assert result.tests_passed > 0
