"""A small, realistic fleet written through the engine API, for the console's tests.

- `img-crop-7` (zh): image_crop returns "invalid slice" for the same coordinates; the engine flags
  it and rolls it back on its own, with the Chinese notice. It has memories and records the token
  breakdown of each step (the dialogue swells during the loop, drops after the rollback).
- `refund-42` (en, policy "flag"): refund_api keeps failing with HTTP 500; the engine only flags
  it, so it is still looping for an operator to roll back. An earlier, completed points_debit
  (side effect with a compensation) lies between the "start" snapshot and the loop.
- Twenty-four background sessions over the last day, ten of them looping once, under three
  prompt versions and four scenarios, so the fleet table and the loops charts have content.
"""

from __future__ import annotations

import time

from engine import Engine, LoopDetected, LoopWaiting
from engine.memory.embeddings import HashingEmbedder
from engine.memory.session import MemoryConfig

LOOPING = "refund-42"
AUTO_ROLLED_BACK = "img-crop-7"
SCENARIOS = ("refund", "image_edit", "itinerary", "invoice")
PROMPTS = ("v6", "v7", "v8")
TENANTS = ("acme", "globex", "initech")


class StepClock:
    """A clock that starts `back_s` seconds ago and moves forward `tick_s` per reading, so seeded
    events keep increasing times (as a live store would write them)."""

    def __init__(self, back_s: float, tick_s: float = 1.0):
        self.t = time.time() - back_s
        self.tick_s = tick_s

    def __call__(self) -> float:
        self.t += self.tick_s
        return self.t


def fail_until_flagged(s, tool: str, args: dict, error: str, times: int) -> None:
    """Call `tool` with the same `args`, failing with `error`, up to `times` times or until the
    detector flags the loop (the session is then rolled back by the default policy)."""
    for _ in range(times):
        try:
            with s.step(tool, args) as call:
                call.fail(error)
        except LoopDetected:
            return


def seed_background(engine: Engine, count: int = 24, clock: StepClock | None = None) -> None:
    """`count` sessions spread over the last day (when `clock` is the engine's clock); ten of
    the 24 loop once, under every prompt version and scenario."""
    start = clock.t if clock is not None else 0.0
    for i in range(count):
        if clock is not None:
            clock.t = max(clock.t, start + i * 86400.0 / count)
        sid = f"bg-{i:03d}"
        on_loop = "rollback" if i % 2 else "flag"
        s = engine.session(sid, meta={"tenant": TENANTS[i % 3], "scenario": SCENARIOS[i % 4],
                                      "prompt_version": PROMPTS[i % 3], "locale": "en"},
                           on_loop=on_loop)
        s.holds_on_loops = False  # flagged ones are left alone, not held for on-call
        s.append_message("user", f"task {i}")
        s.snapshot("start")
        with s.step("search", {"q": f"task {i}"}) as call:
            call.ok({"hits": i})
        s.append_message("assistant", f"found {i} results")
        if i % 5 in (0, 2):
            fail_until_flagged(s, "fetch_page", {"url": f"https://example.com/{i}"}, "HTTP 502", 4)
            if on_loop == "flag":  # later it recovered; keep the fleet's looping count small
                with s.step("fetch_page", {"url": f"https://example.com/{i}?retry=1"}) as call:
                    call.ok("<html>")


def budget(dialogue: int, memories: int = 120) -> dict:
    """A token breakdown as a runtime records it with a step (window 8,192, 20 % reserve)."""
    return {"system": 400, "dialogue": dialogue, "memories": memories, "reserve": 1638,
            "dropped": 0, "total": 400 + dialogue + memories, "max_tokens": 8192}


def seed_auto_rolled_back(engine: Engine) -> None:
    s = engine.session(AUTO_ROLLED_BACK, meta={"tenant": "acme", "scenario": "image_edit",
                                               "prompt_version": "v7", "locale": "zh",
                                               "channel": "app"})
    s.append_message("user", "把这张照片裁成正方形")
    s.memory.add("The user wants a square crop of img-7.png", importance=0.9)
    s.memory.add("Points cost: 10 per edit", importance=0.5)
    s.snapshot("start")
    with s.step("points_debit", {"user": "u-7", "points": 10}, side_effect=True,
                compensation=("points_refund", {"user": "u-7", "points": 10}),
                context=budget(900)) as call:
        call.ok({"balance": 90})
    s.memory.recall("square crop", k=1)
    s.append_message("assistant", "Cropping the image now.")
    try:
        for attempt in range(5):
            with s.step("image_crop", {"image": "img-7.png", "box": [0, 0, 0, 512]},
                        context=budget(1400 + 900 * attempt)) as call:
                call.fail("invalid slice")
            s.append_message("assistant", "The crop failed, retrying with the same box.")
    except LoopDetected:
        pass
    with s.step("image_crop", {"image": "img-7.png", "box": [0, 0, 512, 512]},
                context=budget(1300)) as call:
        call.ok({"url": "https://cdn.example.com/img-7-square.png"})
    s.append_message("assistant", "Here is your square photo.")


def seed_looping(engine: Engine, sid: str = LOOPING) -> None:
    s = engine.session(sid, meta={"tenant": "globex", "scenario": "refund",
                                      "prompt_version": "v8", "locale": "en", "channel": "web"},
                       on_loop="flag")
    # flagged and left looping, as a watched agent's session is (nothing holds it for on-call):
    # the console's views of a session that keeps looping after its first flag
    s.holds_on_loops = False
    s.append_message("user", "Please refund order A-1, the parcel never arrived.")
    s.snapshot("start")
    with s.step("lookup_order", {"order": "A-1"}) as call:
        call.ok({"order": "A-1", "amount": 42.0, "status": "lost"})
    with s.step("points_debit", {"user": "u-42", "points": 5}, side_effect=True,
                compensation=("points_refund", {"user": "u-42", "points": 5})) as call:
        call.ok({"balance": 15})
    s.append_message("assistant", "I found the order; issuing the refund.")
    for _ in range(6):
        with s.step("refund_api", {"order": "A-1", "amount": 42.0}) as call:
            call.fail("HTTP 500: invalid amount")
        s.append_message("assistant", "The refund failed, trying again.")


def seed_fleet(url: str, background: int = 24) -> None:
    """Write the whole test fleet into the store at `url`."""
    clock = StepClock(back_s=86400.0, tick_s=20.0)
    with Engine.open(url, clock=clock) as engine:
        seed_background(engine, background, clock)
    # A hashing embedder: memory recall without loading the MiniLM model (seconds) in tests.
    with Engine.open(url, memory=MemoryConfig(embedder=HashingEmbedder())) as engine:
        seed_auto_rolled_back(engine)
        seed_looping(engine)


def seed_prompt_loops(url: str, prompt_version: str, count: int,
                      prefix: str | None = None) -> list[str]:
    """`count` sessions under `prompt_version`, each left looping (policy flag) for an operator
    to roll back: even ones re-issue the same refund (a side effect: rolling back queues a
    `refund_api.undo` per duplicate), odd ones re-send a crop that fails. Returns their ids."""
    ids = []
    with Engine.open(url) as engine:
        for n in range(count):
            sid = f"{prefix or 'loop-' + prompt_version}-{n}"
            s = engine.session(sid, meta={"tenant": TENANTS[n % 3], "scenario": "refund",
                                          "prompt_version": prompt_version, "locale": "en"},
                               on_loop="flag")
            s.append_message("user", f"refund order A-{n}")
            s.snapshot("start")
            with s.step("lookup_order", {"order": f"A-{n}"}) as call:
                call.ok({"amount": 5})
            for _ in range(6):
                flagged = False
                try:  # flagged: the session waits for on-call (policy flag)
                    if n % 2 == 0:
                        with s.step("refund_api", {"order": f"A-{n}"}, side_effect=True,
                                    compensation=("refund_api.undo",
                                                  {"order": f"A-{n}"})) as call:
                            call.ok({"status": "pending"})
                    else:
                        with s.step("image_crop", {"box": [0, 0, 0, n]}) as call:
                            call.fail("invalid slice")
                except LoopWaiting:
                    flagged = True
                s.append_message("assistant", "trying again")
                if flagged:
                    break
            assert s.info().status == "looping", sid
            ids.append(sid)
    return ids


# -- hostile text ---------------------------------------------------------------------------------
# What an attacker can put in front of an operator: a Markdown link that imitates a console
# message, an HTML anchor (plotly renders <a href> in labels), bare URLs and an address that
# Markdown would auto-link. None of it may ever reach the console as a link.
EVIL_LINK = "[Your session expired - sign in](https://evil.test)"
EVIL_ANCHOR = '<a href="https://evil.test">x</a>'
EVIL_BARE = "https://evil.test/x www.evil.test/w x@evil.test"
EVIL_TEXT = f"{EVIL_LINK} {EVIL_ANCHOR} {EVIL_BARE}"
HOSTILE_LOOPING = f"{EVIL_LINK} https://evil.test/x"
"""A looping session whose id, meta, tool, errors, memories and messages carry links."""
HOSTILE_ROLLED_BACK = EVIL_ANCHOR
"""A session an operator named like a link rolled back, with a reason full of links."""


def seed_hostile(url: str) -> None:
    """Write two sessions whose every free text field is hostile (HOSTILE_LOOPING,
    HOSTILE_ROLLED_BACK) into the store at `url`."""
    with Engine.open(url, memory=MemoryConfig(embedder=HashingEmbedder())) as engine:
        for sid in (HOSTILE_LOOPING, HOSTILE_ROLLED_BACK):
            s = engine.session(sid, meta={"tenant": EVIL_LINK, "scenario": EVIL_ANCHOR,
                                          "prompt_version": EVIL_BARE, "channel": EVIL_TEXT,
                                          "locale": "en"}, on_loop="flag")
            s.holds_on_loops = False  # left looping after its flag: every step's text shows
            s.append_message("user", EVIL_TEXT)
            s.memory.add(EVIL_TEXT, importance=0.9)
            s.memory.recall("evil", k=1)
            s.snapshot(EVIL_TEXT)
            with s.step(f"debit {EVIL_ANCHOR}", {"url": EVIL_TEXT}, side_effect=True,
                        compensation=(f"refund {EVIL_LINK}", {"note": EVIL_TEXT}),
                        context=budget(900)) as call:
                call.ok(EVIL_TEXT)
            for attempt in range(4):
                context = budget(1400 + 300 * attempt)
                with s.step(EVIL_ANCHOR, {"link": EVIL_LINK}, context=context) as call:
                    call.fail(EVIL_TEXT)
                s.append_message("assistant", EVIL_TEXT)
        first = engine.get_session(HOSTILE_ROLLED_BACK).tree()[0].id
        engine.rollback(HOSTILE_ROLLED_BACK, to=first, actor=EVIL_LINK, reason=EVIL_TEXT,
                        notice=EVIL_TEXT)
