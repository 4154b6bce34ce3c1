"""Loops written the way a watched agent's arrive: shared by the loop-cost tests of the engine
and of the console."""

from __future__ import annotations


def _watched(engine, sid: str):
    """A session Rewind only watches (flagged again at every repeat, never held or rolled
    back), so the loop runs on as long as its agent does."""
    return engine.session(sid, meta={"tenant": "acme", "watch_only": True}, on_loop="flag")


def _record(s, specs, budget: int | None = None) -> list:
    calls = []
    for tool, args, ok in specs:
        call = s.step(tool, args, snapshot=False,
                      context=None if budget is None else {"total": budget, "system": 1})
        call.ok("fine") if ok else call.fail("invalid slice")
        calls.append(call)
    return s.record_steps(calls)


HEALTHY = [("search", {"q": i}, True) for i in range(3)]
REPEAT = ("image_crop", {"x": 10}, False)
