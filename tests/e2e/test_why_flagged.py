"""The session page's "Why flagged" and "Was this a loop?" in the browser: what each rule saw at
the flagged step and the smallest setting change, checked against the engine's own replay; an
operator's label, stored, audited and counted by the fleet's detector precision; a viewer who
cannot label; and a stop by the hard step budget that names the task that used it.

Every session here is seeded through the public engine API on the package's console store, with
ids of its own (the store is shared with the other browser tests)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Page, expect
from support.console import sign_in
from support.fleet import seed_looping

from engine import Engine, LoopDetected

pytestmark = pytest.mark.browser

DESKTOP = {"width": 1440, "height": 900}


def settle(page: Page) -> None:
    page.wait_for_function(
        "() => document.querySelector('[data-testid=\"stApp\"]')"
        "?.getAttribute('data-test-script-state') === 'notRunning'")


def open_session(page: Page, url: str, sid: str, tab: str, user: str = "olivia") -> None:
    page.set_viewport_size(DESKTOP)
    sign_in(page, f"{url}/session?session={sid}&tab={tab.replace(' ', '+')}", user)
    expect(page.get_by_role("tab", name=tab)).to_have_attribute("aria-selected", "true")
    settle(page)


def grid_row(page: Page, first_cell: str):
    """The row of the page's data frames whose first cell is `first_cell` (the grid draws on a
    canvas and mirrors the rows in view into a hidden table for screen readers: check them with
    `to_have_count` / `to_contain_text`, not `to_be_visible`)."""
    cell = page.locator('[role="gridcell"]').filter(
        has_text=re.compile(f"^{re.escape(first_cell)}$"))
    return page.locator('[role="row"]').filter(has=cell)


def precision_card(page: Page):
    return page.locator('[data-testid="stMetric"]').filter(has_text="Detector precision")


def precision_shown(engine: Engine) -> tuple[str, str | None]:
    """The fleet card's value and note, computed here from the engine's labels and each labelled
    session's loop count (a session counts as flagged when it was flagged at least once)."""
    labels = engine.fleet.labels()
    flagged = {sid: lab for sid, lab in labels.items()
               if engine.get_session(sid).info().loops > 0}
    if not flagged:
        return "n/a", None
    right = sum(lab == "loop" for lab in flagged.values())
    return f"{right / len(flagged):.2f}", f"on {len(flagged)} labelled"


def expect_precision(page: Page, shown: tuple[str, str | None]) -> None:
    page.get_by_role("link", name="Fleet", exact=True).click()
    card = precision_card(page)
    expect(card.locator('[data-testid="stMetricValue"]')).to_have_text(shown[0])
    if shown[1] is not None:
        expect(card.locator('[data-testid="stMetricDelta"]')).to_have_text(shown[1])


def label_in_browser(page: Page, url: str, sid: str, answer: str, reason: str) -> None:
    """On `sid`'s page, answer "Was this a loop?" with `answer` (the button's name)."""
    open_session(page, url, sid, "Timeline")
    block = page.locator(".st-key-loop-label")
    expect(block).to_contain_text("No operator has said yet whether this was a loop.")
    block.get_by_role("textbox", name="Reason (optional)").fill(reason)
    block.get_by_role("button", name=answer).click()
    said = "a loop" if answer == "Yes, a loop" else "not a loop"
    expect(page.get_by_text(f"Labelled {said};")).to_be_visible()
    expect(block).to_contain_text(re.compile(
        f"Labelled {said} by olivia at .*{re.escape(reason)}"))


def test_why_flagged_shows_what_each_rule_saw_and_the_smallest_change(console, page: Page):
    sid = "why-refund-1"
    with Engine.open(console.store, detector_settings={}) as engine:
        seed_looping(engine, sid)
        found = engine.fleet.why_flagged(sid)
        assert found is not None and found.change is not None
        step, rule, change = found.flag.step, found.flag.rule, found.change
        # the engine's replay, independently: under the settings in force the flagged step is
        # the first flag; one unit looser and it is not flagged there (nor earlier)
        now = engine.replay({}, where={"session": sid}).sessions[0]
        assert (now.before.step, now.before.rule) == (step, rule)
        assert change.before == getattr(engine.config.detector_factory().config, change.field)
        looser = engine.replay({change.field: change.after}, where={"session": sid}).sessions[0]
        assert looser.after is None or looser.after.step > step
        assert change.flag == looser.after
        assert isinstance(change.after, int) and abs(change.after - change.before) == 1
    open_session(page, console.url, sid, "Why flagged")
    expect(page.get_by_text("What each rule saw", exact=True)).to_be_visible()
    row = grid_row(page, rule)
    expect(row).to_have_count(1)
    expect(row).to_contain_text(f"flagged step {step}")
    expect(row).to_contain_text(f"{change.field}={change.before}")
    then = ("the session would not be flagged at all" if looser.after is None else
            f"the first flag would move to step {looser.after.step} ({looser.after.rule})")
    expect(page.get_by_text(re.compile(
        r"Smallest setting change that would not have flagged it: "
        + re.escape(f"{change.field} {change.before} → {change.after}: {then}.")))).to_be_visible()
    expect(page.get_by_text(f"rewind replay --set {change.field}={change.after}")).to_be_visible()


def test_an_operator_label_is_stored_audited_and_moves_the_precision_card(console, page: Page):
    loop, false_alarm = "why-label-loop", "why-label-false"
    with Engine.open(console.store) as engine:
        for sid in (loop, false_alarm):
            seed_looping(engine, sid)
            assert engine.get_session(sid).info().loops > 0
    label_in_browser(page, console.url, loop, "Yes, a loop", "six identical 500s")
    with Engine.open(console.store) as engine:
        before = precision_shown(engine)
    expect_precision(page, before)

    label_in_browser(page, console.url, false_alarm, "No, not a loop",
                     "the amount was wrong, not a loop")
    with Engine.open(console.store) as engine:
        assert engine.fleet.labels()[loop] == "loop"
        assert engine.fleet.labels()[false_alarm] == "not_loop"
        rows = engine.audit(action="label", session=false_alarm)
        assert [(r.actor, r.reason, r.detail) for r in rows] == [
            ("olivia", "the amount was wrong, not a loop", {"label": "not_loop"})]
        after = precision_shown(engine)
    assert after[0] != before[0], (before, after)
    expect_precision(page, after)


def test_a_viewer_cannot_label_and_nothing_is_stored(console, page: Page):
    sid = "why-viewer-1"
    with Engine.open(console.store) as engine:
        seed_looping(engine, sid)
    open_session(page, console.url, sid, "Timeline", user="victor")
    block = page.locator(".st-key-loop-label")
    expect(block).to_contain_text("No operator has said yet whether this was a loop.")
    expect(block).to_contain_text("Operators answer it")
    expect(page.get_by_role("button", name=re.compile(r"^(Yes, a loop|No, not a loop)$"))
           ).to_have_count(0)
    expect(page.get_by_role("textbox", name="Reason (optional)")).to_have_count(0)
    with Engine.open(console.store) as engine:
        assert sid not in engine.fleet.labels()
        assert engine.audit(action="label", session=sid) == []


def test_a_budget_stop_names_the_task_that_used_the_budget(console, page: Page):
    sid = "why-budget-1"
    with Engine.open(console.store, detector_settings={"max_steps": 8}) as engine:
        s = engine.session(sid, on_loop="flag")
        for task, size in enumerate([5, 5, 12]):  # three requests; the third runs away
            s.append_message("user", f"request {task}: export the ledger for region {task}")
            try:
                for i in range(size):
                    with s.step("export_rows", {"region": task, "page": i}) as call:
                        call.ok({"rows": 100})
            except LoopDetected:  # the budget stops the runaway task under every policy
                break
        verdict = s.info().last_verdict
        assert verdict["rule"] == "step_budget"
        stopped = max(verdict["evidence_steps"])
        # independently of the verdict's evidence: the task began with the newest user message
        # before the stopped step, at the first step after it
        steps = {st.n: st for st in s.steps()}
        said = max((m for m in s.messages() if m.message["role"] == "user"
                    and m.created_at <= steps[stopped].started_at), key=lambda m: m.created_at)
        began = min(n for n, st in steps.items() if st.started_at >= said.created_at)
        assert stopped - began + 1 == 8
        # the budget stopped the task at its 8th step: nothing was recorded after it, so a
        # looser budget flags nothing in the record, and the page must not read that as "never"
        assert s.info().steps == stopped
        looser = engine.replay({"max_steps": 9}, where={"session": sid}).sessions[0]
        assert looser.after is None
        still = engine.replay({"max_steps": 8}, where={"session": sid}).sessions[0].after
        assert still is not None and still.step == stopped
    open_session(page, console.url, sid, "Why flagged")
    card = page.locator('[data-testid="stMetric"]').filter(has_text="Task began at step")
    expect(card.locator('[data-testid="stMetricValue"]')).to_have_text(str(began))
    used = page.locator('[data-testid="stMetric"]').filter(has_text="Steps in the task")
    expect(used.locator('[data-testid="stMetricValue"]')).to_have_text("8 steps")
    expect(page.get_by_text(re.compile(re.escape(
        f"Which task used the budget: The task that began at step {began}, when the user wrote "
        f"“{said.message['content']}”, used 8 steps of a budget of 8 (steps {began}–{stopped})."
    )))).to_be_visible()
    row = grid_row(page, "step_budget")
    expect(row).to_contain_text(f"flagged step {stopped}")
    expect(row).to_contain_text("max_steps=8")
    expect(page.get_by_text(re.compile(re.escape(
        f"max_steps 8 → 9: no flag in the steps recorded, which end at step {stopped}, where the "
        "flag stopped the session (what it would have done next is not recorded).")))
    ).to_be_visible()
    expect(page.get_by_text("the session would not be flagged at all")).to_have_count(0)
    # the task's first and last steps are not near-duplicate calls
    expect(page.get_by_text("Argument differences between near-duplicates")).to_have_count(0)
