"""The session page's "Why flagged" tab: the verdict's rule and evidence, the argument differences
between near-duplicates, what each rule saw (replayed by the engine) and the smallest setting
change that would not have flagged it; for a stop by the step budget, which task used it."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import streamlit as st

from dashboard import data, views
from dashboard.screens.session.page import Page
from dashboard.views.session import why_flagged as why
from engine import SessionStatus, StepRecord, StoredVerdict, WhyFlagged


def render_why_flagged(page: Page) -> None:
    verdict = page.verdict
    if not verdict:
        st.info("No loop verdict was recorded for this session.")
        return
    steps = page.bundle.steps
    # a stop by the hard step budget: no loop began, one task ran out of steps
    task = why.budget_task(verdict, steps, page.bundle.messages)
    render_verdict_figures(verdict, task)
    st.markdown(f"**Why:** {views.plain(verdict['explanation'])}")
    if task is not None:
        st.markdown(f"**Which task used the budget:** {views.plain(why.budget_sentence(task))}")
    st.markdown("**Evidence**")
    st.dataframe(why.evidence_frame(steps, verdict), hide_index=True)
    if task is None:  # a budget's evidence is its task's first and last step, not repeats
        render_near_duplicates(steps, set(verdict["evidence_steps"]))
    if verdict["details"]:
        with st.expander("Rule details"):
            st.json(verdict["details"])
    render_flag_explained(page)
    if page.watch_only:
        st.caption("Watch-only: Rewind cannot roll this agent back, so it suggests no target.")
        return
    st.markdown(f"**Suggested rollback target:** {views.plain(page.target_text)}")
    if page.bundle.info.status != SessionStatus.LOOPING:
        st.caption("The session is no longer looping; the target is where a rollback would go now.")


def render_verdict_figures(verdict: StoredVerdict, task: why.BudgetTask | None) -> None:
    """Rule, where the loop (or the task that used the budget) began, and the steps it rests on."""
    c1, c2, c3 = st.columns(3)
    c1.metric("Rule", views.plain(verdict["rule"] or "?"))
    if task is not None:
        c2.metric("Task began at step", task.first_step)
        used = task.used or task.last_step - task.first_step + 1
        c3.metric("Steps in the task", f"{used} steps",
                  help="From the task's first step to the one the budget ran out at.")
        c3.caption(f"steps {task.first_step}–{task.last_step}")
        return
    c2.metric("Loop began at step", verdict["loop_start_step"] or "?")
    evidence = sorted(verdict["evidence_steps"])
    c3.metric(
        "Steps in evidence",
        f"{len(evidence)} steps",
        help="The steps the rule looked at: " + why.step_list(evidence) if evidence else None,
    )
    if evidence:
        c3.caption(f"steps {why.step_list(evidence)}")


def render_near_duplicates(steps: Sequence[StepRecord], wanted: set[int]) -> None:
    groups = why.near_duplicate_groups([s for s in steps if s.n in wanted])
    if groups:
        st.markdown("**Argument differences between near-duplicates**")
        for group in groups:
            st.caption(f"{views.plain(group[0].tool)}: {len(group)} calls")
            st.dataframe(why.arg_diffs(group), hide_index=True)
    elif wanted:
        st.caption("The arguments are identical in every evidence step: an exact repeat.")


# Sessions with more steps explain their flag on request: the answer replays the session a few
# dozen times.
EXPLAIN_AT_ONCE_STEPS = 3000


@st.cache_data(ttl=300, max_entries=64, show_spinner="Replaying the session…")
def explain_flag(url: str | None, sid: str, updated_at: float) -> WhyFlagged | None:
    """`Engine.fleet.why_flagged`: what each rule saw at the session's first flag and the smallest
    setting change that would not have flagged it, from replays of its stored steps (which write
    nothing) under the settings that flagged it; None when they flag nothing. `updated_at` keys
    the cache: a session that moved is replayed again."""
    return data.engine_for(url).fleet.why_flagged(sid)


def render_flag_explained(page: Page) -> None:
    """What each rule saw at the flagged step, and by how much a setting would have to move."""
    info = page.bundle.info
    if info.steps > EXPLAIN_AT_ONCE_STEPS and not st.button(
            "What did each rule see?", key="explain-flag",
            help=f"Replays this session's {info.steps:,} steps a few dozen times."):
        return
    with data.store_errors():
        found = explain_flag(page.url, page.sid, info.updated_at)
    st.markdown("**What each rule saw**")
    if found is None:
        st.caption("Replayed under the detector settings that flagged it, this session is not "
                   "flagged: the verdict above came from steps or settings Rewind cannot "
                   "replay.")
        return
    step, rule = found.flag.step, found.flag.rule
    stored = page.verdict
    note = ""
    if stored and stored.get("rule") != rule:
        note = (f" The last verdict stored ({views.plain(stored.get('rule') or '?')}) named "
                "another rule: the session was flagged more than once.")
    st.caption(f"Replayed with one rule switched on at a time, under the detector settings that "
               f"flagged it: step {step} is flagged first, by {views.plain(rule)}.{note}")
    st.dataframe(
        pd.DataFrame(why.reading_rows(found), columns=why.READING_COLUMNS),
        hide_index=True,
        column_config={"at this step": st.column_config.TextColumn(width="large"),
                       "looks for": st.column_config.TextColumn(width="medium"),
                       "settings": st.column_config.TextColumn(width="medium")})
    batches = why.turns_sentence(found)
    if batches is not None:
        st.caption(views.plain(batches) + ".")
    sentence = why.change_sentence(found, page.bundle.info.steps)
    if sentence is None:
        st.markdown("**Smallest setting change that would not have flagged it:** "
                    + views.plain(why.no_change_sentence(found)) + ".")
        return
    st.markdown("**Smallest setting change that would not have flagged it:** "
                + views.plain(sentence) + ".")
    command = why.replay_command(found)
    if command is not None:
        st.caption(f"Try it on the whole fleet before changing it: `{command}` shows what it "
                   "does to every session.")
