"""Console speed at fleet scale: navigation → first chart, in Chromium, as the store grows.

    .venv/bin/python bench/console.py                       # 10,000 sessions / 1,000,000 steps
    .venv/bin/python bench/console.py --sessions 2000 --steps 200000 --stages 0.5,1
    .venv/bin/python bench/console.py --scale               # 10,000 vs 100,000 sessions
    REWIND_BENCH_SCALE=1 .venv/bin/python bench/console.py  # the same
    .venv/bin/python bench/console.py --stages "" --against main  # demo-sized fleet, vs main

First, the demo-sized fleet (`--demo-sessions`, 207 by default, as `rewind demo` leaves it): the
time from the navigation's start until the fleet's title, its needs-you band, its KPIs, its first
chart and its table are drawn, each timed on its own in the page, so a first screen that arrives
piece by piece shows as a spread between title and table, and a chart drawn after the table as a
positive "chart - table". `--against REF` also runs the console of another commit (extracted
with `git archive` under --out) on the same store, visited in turn with this one, and prints
this checkout's times over that one's: a comparison that shares the machine's load.

`--scale` (or $REWIND_BENCH_SCALE=1; opt-in, for CI stays quick) measures 10,000 and 100,000
sessions, 1,000,000 steps at the larger size (ten per session, the same per session at both), and
reports the fleet's first chart and the session deep link at 100,000 against 10,000 (goal: at
most 1.5x), in the same run, in Chromium and in the data layer. The bulk of such a fleet is
seeded in one process per core through the public API's batch path (`_seed_small`: three store
writes a session), so seeding takes minutes, not hours, and is done once per store.

For each stage (a fraction of the full size, the smallest is the baseline) the bench writes a
fresh SQLite store through the engine's public API only (`Engine.session`, `Session.step`,
`append_message`, `snapshot`; several processes in parallel, `synchronous=OFF` while seeding),
spread over the last 7 days, with one 5,000-step session (`bench-long`) that loops and is rolled
back ten times. It then starts `streamlit run dashboard/app.py` in demo mode and times, in headless
Chromium, the way from `page.goto` to the first chart drawn (the fleet's loop charts and the
session's timeline are Vega-Lite):

- cold: first visit after the server started (engine opened, nothing cached), from a browser
  profile that never loaded the console (its JavaScript downloaded: Streamlit's vega chunks,
  0.86 MB; plotly's, 4.7 MB, only for the tabs that draw with it);
- steady: median of later visits from the same browser (HTTP cache warm), each after the
  console's query caches expired (their TTL is 5 s), so every engine query runs again; what the
  console keeps between refreshes is brought up to date by reading what moved since (the loop
  tally, the filter menus' window, a quiet session's history, read again when its summary
  moved).

It also times the console's data layer behind each page (`dashboard.data`, the calls the pages
make, `data_timings`), in a fresh process, cold and steady, to show the server's share,
and measures a bare Streamlit page holding one small chart the same way, drawn as each page
draws its first (Vega-Lite bars for the fleet, Vega-Lite points for the session): the floor that
Streamlit, the chart library and the browser cost on this machine before the console does
anything. It is measured first, in every run, and printed beside the demo-sized fleet's first
screen and each stage's first chart; a bare page with one small plotly chart is measured too,
for reference (the floor of a page whose first chart is plotly's, as the session's once was).
Stores are kept in bench/results/ (git-ignored) and seeded once: a later run measures a store an
earlier one finished seeding (`--reseed` seeds afresh).
Targets: fleet under 3 s, session under 2 s.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout, not an installed copy

from support.fleet import fail_until_flagged  # noqa: E402

from engine import Engine, LoopDetector  # noqa: E402

LONG = "bench-long"
LONG_STEPS = 5000
SPAN_S = 7 * 86400.0
TENANTS = ("acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne")
SCENARIOS = ("refund", "image_edit", "itinerary", "invoice", "support")
TOOLS = ("search", "fetch_page", "lookup_order", "summarize", "translate")
TARGETS = {"fleet": 3.0, "session": 2.0}
CACHE_TTL_S = 5.0
DEMO_SESSIONS, DEMO_STEPS = 207, 20_000
SCALE_GOAL = 1.5
"""At 100,000 sessions the fleet's first chart and the session deep link cost at most this
many times what they cost at 10,000 (`--scale`)."""


# -- seeding ------------------------------------------------------------------------------------
def steps_for(k: int, sessions: int, total_steps: int) -> int:
    """Steps of session k so that all sessions add up to `total_steps` exactly."""
    if k == 0:
        return min(LONG_STEPS, total_steps)
    rest, others = total_steps - min(LONG_STEPS, total_steps), sessions - 1
    base, extra = divmod(rest, others) if others else (0, 0)
    return base + (1 if k - 1 < extra else 0)


class SharedClock:
    """Simulated time shared by the seeding processes: it moves with the number of steps written
    by all of them, so event times grow with event ids, from 7 days ago to now."""

    def __init__(self, counter, total: int, end: float):
        self.counter, self.total, self.end = counter, max(total, 1), end

    def __call__(self) -> float:
        return self.end - SPAN_S + SPAN_S * min(self.counter.value / self.total, 1.0)


def _meta(k: int) -> dict[str, str]:
    """Session k's tenant, scenario, prompt version and locale (the console's filters)."""
    return {
        "tenant": TENANTS[k % len(TENANTS)],
        "scenario": SCENARIOS[k % len(SCENARIOS)],
        "prompt_version": f"v{5 + k % 4}",
        "locale": "zh" if k % 3 == 0 else "en",
    }


def _seed_session(engine: Engine, k: int, n_steps: int, counter, lock) -> None:
    long = k == 0
    sid = LONG if long else f"bench-{k:05d}"
    loops_once = k % 20 == 3
    policy = "rollback" if long or k % 40 == 3 else ("flag" if loops_once else "rollback")
    s = engine.session(
        sid, meta={**_meta(k), "channel": "app" if k % 2 else "web"}, on_loop=policy
    )
    s.holds_on_loops = False  # a flagged session goes on stepping: the fleet shows it looping
    s.append_message("user", f"Task {k}: please help with {SCENARIOS[k % len(SCENARIOS)]}.")
    s.snapshot("start")
    loop_at = {int(n_steps * 0.6)} if loops_once else set()
    if k % 80 == 23:  # stays looping: the loop is the last thing it did
        loop_at = {max(n_steps - 4, 0)}
    if long:
        loop_at = set(range(400, n_steps, 480))
    done = 0
    i = 0
    while done < n_steps:
        if i in loop_at and n_steps - done >= 4:
            box = {"image": f"{sid}.png", "box": [0, 0, 0, i]}
            fail_until_flagged(s, "image_crop", box, "invalid slice", 4)
            taken = 4
        else:
            tool = TOOLS[i % len(TOOLS)]
            with s.step(tool, {"q": f"{k}-{i}", "page": i % 3}) as call:
                call.ok({"n": i, "hits": (k * 31 + i) % 97})
            taken = 1
        done += taken
        i += 1
        with lock:
            counter.value += taken
        if i % 10 == 0:
            s.append_message("assistant", f"Step {i}: progress on task {k}.")


def _ended(s, tool: str, args: dict, *, result=None, error: str | None = None):
    """A step call that already ended, for `Session.record_steps`."""
    call = s.step(tool, args, snapshot=False)
    if error is None:
        call.ok(result)
    else:
        call.fail(error)
    return call


def _seed_small(engine: Engine, k: int, n_steps: int, counter, lock) -> None:
    """A short session (the bulk of a 100,000-session fleet): meta, one user message, a start
    snapshot, `n_steps` steps; one in 40 loops once and is flagged, and all but one in 400 of
    those recover (so the fleet has as many looping now, in proportion, at every size).

    The steps go through the batch path (`Session.record_steps` of a handle that only
    watches): judged one by one as `with` blocks would be, written in one transaction; the
    message and the snapshot go in one `Engine.documents.write_session`. A session costs three store
    writes (four when it loops), not two per step."""
    sid = f"bench-{k:06d}"
    s = engine.session(sid, meta=_meta(k), on_loop="flag")
    # The first message and the start snapshot in one atomic write.
    engine.documents.write_session(sid, messages=[{
        "role": "user", "content": f"Task {k}: please help with {SCENARIOS[k % len(SCENARIOS)]}."
    }], snapshot="start")
    done = 0
    if k % 40 == 3 and n_steps >= 4:
        box = {"image": f"{sid}.png", "box": [0, 0, 0, k]}
        s.record_steps([_ended(s, "image_crop", box, error="invalid slice") for _ in range(4)])
        done = 4
        if k % 400 == 3:  # stays looping: the loop is the last thing it did
            with lock:
                counter.value += done
            return
    calls = []
    if done and n_steps > done:  # the agent found the right coordinates: healthy again
        calls.append(_ended(s, "image_crop", {"image": f"{sid}.png", "box": [0, 0, 9, k]},
                            result={"url": f"{sid}-cropped.png"}))
    calls += [_ended(s, TOOLS[i % len(TOOLS)], {"q": f"{k}-{i}"}, result={"n": i})
              for i in range(done + len(calls), n_steps)]
    s.record_steps(calls)
    with lock:
        counter.value += n_steps


SMALL_AFTER = 10
"""Sessions of at most this many steps are seeded the short way (`_seed_small`)."""


def _seed_worker(
    url: str, ks: list[int], sessions: int, total: int, counter, lock, end: float
) -> None:
    # Long sessions are the point here: lift the detector's hard step budget (500 by default).
    # The settings are built (and checked) once: a detector per session then costs half as
    # much as one built from overrides, which a 100,000-session fleet notices.
    settings = LoopDetector(max_steps=None).config
    engine = Engine.open(
        url,
        clock=SharedClock(counter, total, end),
        detector_factory=lambda: LoopDetector(settings),
    )
    for k in ks:
        n = steps_for(k, sessions, total)
        if k and n <= SMALL_AFTER:
            _seed_small(engine, k, n, counter, lock)
        else:
            _seed_session(engine, k, n, counter, lock)
    engine.close()


def seed(path: Path, sessions: int, total_steps: int, workers: int) -> float:
    """Write a fresh store at `path`; returns the seconds it took."""
    for suffix in ("", "-wal", "-shm", ".seeded"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    url = f"sqlite:///{path}?synchronous=OFF"
    Engine.open(url).close()  # create the schema once, before the workers race for it
    ctx = mp.get_context("fork")
    counter, lock = ctx.Value("q", 0, lock=False), ctx.Lock()
    end = time.time()
    order = list(range(sessions))
    started = time.perf_counter()
    procs = [
        ctx.Process(
            target=_seed_worker,
            args=(url, order[w::workers], sessions, total_steps, counter, lock, end),
        )
        for w in range(workers)
    ]
    for p in procs:
        p.start()
    last = 0.0
    while any(p.is_alive() for p in procs):
        time.sleep(1.0)
        if time.perf_counter() - last > 15:
            last = time.perf_counter()
            rate = counter.value / max(last - started, 1e-9)
            print(
                f"    seeding {path.name}: {counter.value:,}/{total_steps:,} steps "
                f"({rate:,.0f} steps/s)",
                flush=True,
            )
    for p in procs:
        p.join()
        if p.exitcode:
            raise SystemExit(f"a seeding worker failed (exit code {p.exitcode})")
    Path(f"{path}.seeded").write_text(f"{sessions} {total_steps}\n")
    return time.perf_counter() - started


def seeded(path: Path, args) -> bool:
    """Whether the store at `path` is there to measure again: seeded to the end by an earlier
    run (unless `--reseed`), or any store there with `--reuse`."""
    if args.reseed or not path.exists():
        return False
    return args.reuse or Path(f"{path}.seeded").exists()


# -- measuring ----------------------------------------------------------------------------------
def _data_layer(url: str, queue) -> None:
    """In a fresh process: what the fleet's first screen and the session deep link cost in the
    console's data layer (`dashboard.data`, the functions the pages call, with the same
    arguments), cold and steady; puts {name: seconds} on `queue`."""
    import logging

    from dashboard import charts, data, views

    logging.disable(logging.WARNING)  # Streamlit's "no runtime found" for every cache

    from dashboard.screens.session.timeline import timeline_figure

    # The query caches with a TTL the pages read; not the engine's, nor what the console keeps
    # between refreshes and brings up to date by reading only what moved: the tally, the menus'
    # facet window, a session's history (read again when its summary moved).
    cached = (data.fleet_stats, data.looping, data.facets, data.table_page, data._sessions,
              data._label_agreement, data.loop_episodes, data.compensations, data.quarantines,
              data.session_audit)

    def fleet() -> None:  # as screens/fleet.py reads and draws its first screen
        now = time.time()
        stats = data.fleet_stats(url)
        if stats.get("looping", 0):
            data.looping(url)
        data.facets(url)
        data.attention_compensations(url, stats)
        data.quarantines(url)
        data.label_agreement(url)
        episodes, lookback = views.auto_episodes(lambda s: data.loop_episodes(url, s))
        window = views.fit_window(episodes["at"], now, lookback_s=lookback)
        for by in ("prompt_version", "scenario"):
            charts.loops_over_time(views.loop_buckets(episodes, by, window.since, window.until,
                                                      window.bucket_s), by,
                                   bucket_s=window.bucket_s)
        data.table_page(url, views.DEFAULT_SORT, 100)

    def session() -> None:  # as screens/session.py reads a deep link and draws its timeline
        bundle = data.session_bundle(url, LONG)
        bundle.memo.get("timeline", lambda: timeline_figure(bundle.steps, bundle.branches))
        data.session_audit(url, LONG)

    out = {}
    for name, read in (("fleet", fleet), ("session", session)):
        t = time.perf_counter()
        read()
        out[f"{name} cold"] = time.perf_counter() - t
        runs = []
        for _ in range(5):
            for f in cached:
                f.clear()  # as after the TTL: every query runs again (the tally reads what is new)
            t = time.perf_counter()
            read()
            runs.append(time.perf_counter() - t)
        out[f"{name} steady"] = statistics.median(runs)
    out["events scanned"] = data._tally(url).scanned
    queue.put(out)


def data_timings(path: Path) -> dict[str, float]:
    """Seconds the console's data layer takes for the fleet's first screen (KPIs, band, menus,
    precision, the loop charts' episodes and figures, the table's first 100 rows) and the
    session deep link (`bench-long`: its history and the timeline's figure): cold, in a fresh
    process (engine opened, the loop tally scanning the last day's events), and steady (median
    of 5, each after every query cache was cleared). The server's side of the page, without
    Streamlit and the browser."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_data_layer, args=(f"sqlite:///{path}", queue))
    proc.start()
    deadline = time.monotonic() + 1800
    while True:  # a child that failed puts nothing: stop waiting when it is gone
        try:
            out = queue.get(timeout=1.0)
            break
        except Exception:  # noqa: BLE001 - queue.Empty, from the context's queue module
            if not proc.is_alive() or time.monotonic() > deadline:
                raise SystemExit(f"the data layer's process failed (exit {proc.exitcode})"
                                 ) from None
    proc.join()
    return out


def first_chart(context, url: str) -> float:
    page = context.new_page()
    try:
        started = time.perf_counter()
        page.goto(url)
        page.wait_for_selector(CHART_DRAWN, state="visible", timeout=120_000)
        return time.perf_counter() - started
    finally:
        page.close()


CHART_DRAWN = ('[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg, '
               '[data-testid="stPlotlyChart"] .main-svg')
"""A chart drawn, whichever element draws it (Vega-Lite on the fleet and the session's timeline,
plotly on other tabs)."""
FIRST_SCREEN = {
    "title": 'h1:has-text("Fleet")',
    "needs you": ".st-key-needs-you",
    "KPIs": '[data-testid="stMetric"]',
    "first chart": CHART_DRAWN,
    "table": '[data-testid="stDataFrame"] canvas',
}
"""What the fleet's first screen shows, top to bottom, and how to see it (the demo-sized fleet
always has sessions looping now, so the needs-you band is there)."""


SEEN = """window.__seen = {};
new MutationObserver(() => {
  for (const [name, selector] of Object.entries(%s)) {
    if (!(name in window.__seen) && document.querySelector(selector)) {
      window.__seen[name] = performance.now() / 1000;
    }
  }
}).observe(document, {subtree: true, childList: true});"""
"""Notes, in the page, when each part of the first screen is first in it (seconds since the
navigation began), whichever comes first."""


def first_screen(context, url: str) -> dict[str, float]:
    """Seconds from the navigation's start to each part of the fleet's first screen being
    drawn, each timed on its own (a part drawn before an earlier one shows as earlier)."""
    import json

    page = context.new_page()
    try:
        css = {name: sel.split(":has-text")[0] for name, sel in FIRST_SCREEN.items()}
        page.add_init_script(SEEN % json.dumps(css))
        page.goto(url)
        for selector in FIRST_SCREEN.values():
            page.locator(selector).first.wait_for(state="visible", timeout=120_000)
        seen = page.evaluate("window.__seen")
        return {name: float(seen[name]) for name in FIRST_SCREEN}
    finally:
        page.close()


def tree_at(ref: str, out: Path) -> Path:
    """This repository's files at `ref` (a commit, branch or tag), extracted once under `out`
    (`git archive`: no worktree, nothing in the repository changes)."""
    import subprocess

    sha = subprocess.run(["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout.strip()
    dest = out / f"tree-{sha[:12]}"
    if not (dest / "dashboard" / "serve.py").exists():
        dest.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", sha], cwd=ROOT, check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def start_tree_console(tree: Path, work: Path, store: str, secrets: Path):
    """`support.console.start_console`, for the console of another checkout."""
    from support.console import start_console

    return start_console(work, store, secrets, tree=tree)


def measure_demo(path: Path, runs: int, out: Path,
                 trees: dict[str, Path]) -> dict[str, tuple[dict, dict]]:
    """Per console (label -> the checkout it runs from): (cold, steady median) seconds to each
    part of the fleet's first screen. The consoles run side by side on the same store and are
    visited in turn, so a comparison between them shares the machine's load. Cold visits go in
    the order given (this checkout first: the first visited is the slower, so the comparison
    does not flatter it); later ones alternate."""
    from playwright.sync_api import sync_playwright
    from support.console import CHROMIUM, CHROMIUM_ARGS, start_console, stop_console, write_secrets

    work = out / f"{path.stem}-run"
    work.mkdir(exist_ok=True)
    secrets = work / "secrets.toml"
    write_secrets(secrets, {}, freeze=False)
    consoles, contexts = {}, {}
    cold: dict[str, dict] = {}
    steady: dict[str, list[dict]] = {label: [] for label in trees}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            for label, tree in trees.items():
                consoles[label] = (start_console(work, f"sqlite:///{path}", secrets)
                                   if tree == ROOT else
                                   start_tree_console(tree, work, f"sqlite:///{path}", secrets))
                contexts[label] = browser.new_context(viewport={"width": 1440, "height": 900})
            for label in trees:
                cold[label] = first_screen(contexts[label], consoles[label].url + "/")
            for run in range(runs):
                time.sleep(CACHE_TTL_S + 1)
                # In turn, the first of a round alternating (the one visited first is slower).
                for label in list(trees)[:: 1 if run % 2 else -1]:
                    steady[label].append(first_screen(contexts[label], consoles[label].url + "/"))
        finally:
            for context in contexts.values():
                context.close()
            for console in consoles.values():
                stop_console(console.process)
            browser.close()
    return {label: (cold[label], {k: statistics.median(r[k] for r in steady[label])
                                  if steady[label] else cold[label][k] for k in cold[label]})
            for label in trees}


def demo_table(cold: dict, steady: dict, floor: tuple[float, float] | None = None) -> str:
    """The first screen's parts, cold and steady; with `floor` (cold, steady seconds to the chart
    of a bare Streamlit page), its rows under them."""
    headers = ["", *FIRST_SCREEN, "table - title", "chart - table"]
    rows = [[name, *(f"{t[k]:.2f} s" for k in FIRST_SCREEN),
             f"{t['table'] - t['title']:.2f} s", f"{t['first chart'] - t['table']:+.2f} s"]
            for name, t in (("cold", cold), ("steady", steady))]
    if floor is not None:
        rows += [[f"bare page, {name}", *(f"{seconds:.2f} s" if k == "first chart" else "-"
                                          for k in FIRST_SCREEN), "-", "-"]
                 for name, seconds in (("cold", floor[0]), ("steady", floor[1]))]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def ratio_table(now: tuple[dict, dict], then: tuple[dict, dict]) -> str:
    headers = ["", *FIRST_SCREEN]
    rows = [[name, *(f"{a[k] / b[k]:.2f}" for k in FIRST_SCREEN)]
            for name, a, b in (("cold", now[0], then[0]), ("steady", now[1], then[1]))]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


BASELINE_APP = """
import streamlit as st

st.title("Baseline")
chart = st.query_params.get("chart")
if chart == "bars":  # as the fleet draws its first chart
    st.vega_lite_chart({"data": {"values": [{"x": "a", "y": 1}, {"x": "b", "y": 3}]},
                        "mark": "bar", "encoding": {"x": {"field": "x", "type": "nominal"},
                                                    "y": {"field": "y", "type": "quantitative"}}})
elif chart == "points":  # as the session page draws its first chart (the timeline)
    st.vega_lite_chart({"layer": [{"data": {"values": [{"n": 1, "lane": "a"}, {"n": 2, "lane": "b"},
                                                       {"n": 3, "lane": "a"}]},
                                   "mark": "point", "encoding": {
                                       "x": {"field": "n", "type": "quantitative"},
                                       "y": {"field": "lane", "type": "nominal"}}}]},
                       width="stretch")
else:  # for reference: a page whose first chart is plotly's
    import plotly.graph_objects as go

    st.plotly_chart(go.Figure(go.Bar(x=["a", "b", "c"], y=[1, 3, 2])))
"""
FLOOR_PAGES = (("fleet", "/?chart=bars"), ("session", "/?chart=points"), ("plotly", "/"))
"""The bare pages: each page's first chart's kind, and plotly's for reference."""


def measure_pages(path: Path | None, runs: int, out: Path) -> dict[str, tuple[float, float]]:
    """(cold, steady median) seconds to the first chart for the fleet and the long session;
    with `path` None, for a bare Streamlit page holding one small chart of the kind each page
    draws first (the floor), under the same names."""
    from playwright.sync_api import sync_playwright
    from support.console import (
        APP,
        CHROMIUM,
        CHROMIUM_ARGS,
        start_console,
        stop_console,
        write_secrets,
    )

    work = out / (f"{path.stem}-run" if path else "baseline-run")
    work.mkdir(exist_ok=True)
    secrets = work / "secrets.toml"
    write_secrets(secrets, {}, freeze=False)  # no accounts: demo mode on localhost
    app, pages = APP, (("fleet", "/"), ("session", f"/session?session={LONG}"))
    if path is None:
        app = work / "baseline.py"
        app.write_text(BASELINE_APP)
        pages = FLOOR_PAGES
    store = f"sqlite:///{path or work / 'empty.db'}"
    results = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        for name, route in pages:
            # Cold: a server just started and a browser profile that never saw the console.
            # Steady: the same browser (its HTTP cache warm, as an on-call engineer's is), each
            # visit after the console's query caches expired.
            console = start_console(work, store, secrets, app=app)
            context = browser.new_context(viewport={"width": 1440, "height": 1000})
            try:
                cold = first_chart(context, console.url + route)
                steady = []
                for _ in range(runs):
                    time.sleep(CACHE_TTL_S + 1)
                    steady.append(first_chart(context, console.url + route))
            finally:
                context.close()
                stop_console(console.process)
            results[name] = (cold, statistics.median(steady) if steady else cold)
        browser.close()
    return results


def table(rows: list[dict], floor: dict[str, tuple[float, float]]) -> str:
    base = rows[0]
    headers = ["sessions", "steps", "store MB", "seed s", "fleet cold", "fleet steady", "×base",
               "session cold", "session steady", "×base", "targets"]
    lines = [["bare page", "-", "-", "-", f"{floor['fleet'][0]:.2f} s",
              f"{floor['fleet'][1]:.2f} s", "-", f"{floor['session'][0]:.2f} s",
              f"{floor['session'][1]:.2f} s", "-", "(floor)"],
             ["bare plotly page", "-", "-", "-", "-", "-", "-", f"{floor['plotly'][0]:.2f} s",
              f"{floor['plotly'][1]:.2f} s", "-", "(reference)"]]
    for r in rows:
        lines.append([
            f"{r['sessions']:,}", f"{r['steps']:,}", f"{r['mb']:.0f}",
            "-" if r["seed"] is None else f"{r['seed']:.0f}",
            f"{r['fleet'][0]:.2f} s", f"{r['fleet'][1]:.2f} s",
            f"{r['fleet'][1] / base['fleet'][1]:.2f}",
            f"{r['session'][0]:.2f} s", f"{r['session'][1]:.2f} s",
            f"{r['session'][1] / base['session'][1]:.2f}",
            ", ".join(f"{page} {'met' if r[page][1] < limit else 'MISSED'}"
                      for page, limit in TARGETS.items()),
        ])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    out = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    return "\n".join(out)


def data_table(rows: list[dict]) -> str:
    base = rows[0]["data"]
    headers = ["sessions", "fleet cold", "fleet steady", "×base", "session cold",
               "session steady", "×base", "events scanned (cold)"]
    lines = []
    for r in rows:
        d = r["data"]
        lines.append([f"{r['sessions']:,}", *(
            f"{d[f'{page} {k}'] * 1000:,.0f} ms" for page in ("fleet",) for k in ("cold",
                                                                                 "steady")),
            f"{d['fleet steady'] / base['fleet steady']:.2f}",
            f"{d['session cold'] * 1000:,.0f} ms", f"{d['session steady'] * 1000:,.0f} ms",
            f"{d['session steady'] / base['session steady']:.2f}", f"{d['events scanned']:,}"])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    out = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)),
           "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--stages", default="0.1,0.3,1",
                        help="fractions of the full size to measure; the first is the baseline "
                             "(empty: only the demo-sized fleet)")
    parser.add_argument("--workers", type=int, default=max(2, os.cpu_count() or 2))
    parser.add_argument("--runs", type=int, default=5, help="steady-state visits per page")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--reuse", action="store_true",
                        help="measure any store left by an earlier run, even one whose seeding "
                             "did not finish (a finished one is measured again by default)")
    parser.add_argument("--reseed", action="store_true",
                        help="seed every store afresh, even one an earlier run finished")
    parser.add_argument("--scale", action="store_true",
                        default=os.environ.get("REWIND_BENCH_SCALE", "") not in ("", "0"),
                        help="10,000 against 100,000 sessions (1,000,000 steps at the larger); "
                             "also $REWIND_BENCH_SCALE=1")
    parser.add_argument("--demo-sessions", type=int, default=DEMO_SESSIONS,
                        help="the demo-sized fleet measured first (0: skip it)")
    parser.add_argument("--demo-steps", type=int, default=DEMO_STEPS)
    parser.add_argument("--against", metavar="REF",
                        help="also run the console of this commit (branch, tag) on the demo-sized "
                             "fleet, side by side, and print this checkout's times over its own")
    args = parser.parse_args(argv)
    if args.scale:
        args.sessions, args.steps, args.stages = 100_000, 1_000_000, "0.1,1"
    args.out.mkdir(parents=True, exist_ok=True)
    floor = measure_pages(None, args.runs, args.out)
    print("baseline: a bare Streamlit page with one small chart: " + ", ".join(
        f"{kind} {floor[page][0]:.2f} s cold / {floor[page][1]:.2f} s steady"
        for page, kind in (("fleet", "Vega-Lite bars"), ("session", "Vega-Lite points"),
                           ("plotly", "plotly bars (reference)"))), flush=True)
    if args.demo_sessions:
        path = args.out / f"console-demo-{args.demo_sessions}-{args.demo_steps}.db"
        print(f"demo-sized fleet: {args.demo_sessions:,} sessions, {args.demo_steps:,} steps "
              f"-> {path.name}", flush=True)
        if not seeded(path, args):
            demo_took = seed(path, args.demo_sessions, args.demo_steps, args.workers)
            print(f"    seeded in {demo_took:.0f} s", flush=True)
        trees = {"this checkout": ROOT}
        if args.against:
            trees[args.against] = tree_at(args.against, args.out)
        timed = measure_demo(path, args.runs, args.out, trees)
        print("\nfleet page, demo-sized fleet: navigation -> each part of the first screen "
              "visible (1440x900; how long after the title the table came, and the chart after "
              "the table); bare page: the baseline's Vega-Lite chart, same run")
        for label, (cold, steady) in timed.items():
            if len(timed) > 1:
                print(f"{label}:")
            print(demo_table(cold, steady, floor["fleet"]), flush=True)
        if args.against:
            print(f"\nthis checkout / {args.against}, same run (below 1: sooner now)")
            print(ratio_table(timed["this checkout"], timed[args.against]), flush=True)
        print()
    if not args.stages.strip():  # only the demo-sized fleet
        return 0
    rows = []
    for fraction in (float(f) for f in args.stages.split(",")):
        sessions = max(2, round(args.sessions * fraction))
        steps = max(LONG_STEPS + sessions, round(args.steps * fraction))
        path = args.out / f"console-{sessions}-{steps}.db"
        print(f"stage: {sessions:,} sessions, {steps:,} steps -> {path.name}", flush=True)
        took: float | None = None
        if not seeded(path, args):
            took = seed(path, sessions, steps, args.workers)
            print(f"    seeded in {took:.0f} s ({steps / took:,.0f} steps/s)", flush=True)
        timings = data_timings(path)
        print("    data layer: " + ", ".join(
            f"{k} {v:,.0f}" if k == "events scanned" else f"{k} {v * 1000:,.0f} ms"
            for k, v in timings.items()), flush=True)
        pages = measure_pages(path, args.runs, args.out)
        mb = sum(Path(f"{path}{x}").stat().st_size for x in ("", "-wal")
                 if Path(f"{path}{x}").exists()) / 1e6
        rows.append({"sessions": sessions, "steps": steps, "mb": mb, "seed": took,
                     "data": timings, **pages})
        print(f"    fleet {pages['fleet'][0]:.2f} s cold / {pages['fleet'][1]:.2f} s steady, "
              f"session {pages['session'][0]:.2f} s cold / {pages['session'][1]:.2f} s steady",
              flush=True)
    print()
    print("navigation -> first chart drawn, headless Chromium "
          f"(targets: fleet < {TARGETS['fleet']:.0f} s, session < {TARGETS['session']:.0f} s; "
          "×base: steady time relative to the smallest stage; bare page: the same measure for "
          "a Streamlit page holding one small chart of the page's kind, Vega-Lite for both: the "
          "floor on this machine; bare plotly page: the same with a plotly chart, for "
          "reference)")
    print(table(rows, floor))
    print()
    print("data layer (dashboard.data, what the pages call; no Streamlit, no browser): "
          "cold / steady, ×base: steady relative to the smallest stage")
    print(data_table(rows))
    if len(rows) > 1:  # the goal is set for --scale: 10x the sessions
        base, top = rows[0], rows[-1]
        for page in ("fleet", "session"):
            for what, ratio in (("in Chromium", top[page][1] / base[page][1]),
                                ("data layer", top["data"][f"{page} steady"]
                                 / base["data"][f"{page} steady"])):
                verdict = "met" if ratio <= SCALE_GOAL else "MISSED"
                print(f"{page} at {top['sessions']:,} sessions vs {base['sessions']:,}, {what}: "
                      f"{ratio:.2f}x (goal <= {SCALE_GOAL}x: {verdict})")
    return 0


if __name__ == "__main__":
    from bench.common import run_recorded

    raise SystemExit(run_recorded(main))
