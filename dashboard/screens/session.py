"""Session: status and verdict, actions, and the tabs. Deep link: `session?session=<id>`.

One render function per tab; `main` reads the session once and wires them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import streamlit as st

from dashboard import charts, data, dialogs, views
from dashboard.signin import access
from dashboard.signin.access import User
from dashboard.views.session import header as session_views
from dashboard.views.session import memory as memory_views
from dashboard.views.session import why_flagged as why
from engine import (
    InvalidSessionId,
    SessionStatus,
    StoredVerdict,
    UnknownSession,
    WhyFlagged,
)

MESSAGE_WINDOWS = {"last 100": 100, "last 500": 500, "all": None}


@dataclass(frozen=True)
class Page:
    """What every tab of one session page reads."""

    url: str | None
    """Store URL the console reads."""
    sid: str
    """Session id, exactly as asked for."""
    user: User
    bundle: data.SessionBundle
    verdict: StoredVerdict | None
    """The session's latest loop verdict, if any."""
    target_text: str
    """How the suggested rollback target is named ("no restorable snapshot" when none)."""

    @property
    def nodes(self) -> dict:
        return {n.id: n for n in self.bundle.tree}

    @property
    def watch_only(self) -> bool:
        """Rewind watches this session's agent (OpenTelemetry) but does not run it."""
        return session_views.is_watch_only(self.bundle.info)


# -- above the tabs -----------------------------------------------------------------------------
def render_picker(column) -> str:
    """The session id box (bound to `?session=`); returns the id exactly as given.

    Never trimmed: "sess-1 " and "sess-1" are two sessions, and a rollback must hit the one the
    link named.
    """
    return column.text_input(
        "Session id", key="session", bind="query-params", placeholder="paste a session id"
    )


def render_no_session(head, url: str | None) -> None:
    """No id given: point to the fleet and list the sessions looping now."""
    head.title("Session")
    st.caption(
        "Open a session from the fleet table or paste its id; the address of this page "
        "can be shared."
    )
    with data.store_errors():
        looping = data.sessions(url, SessionStatus.LOOPING).head(20)
    if looping.empty:
        st.info("No session is looping right now.")
    for row in looping.itertuples():
        label = f"{row.session} · {row.scenario or '-'} · {row.explanation or ''}"[:160]
        st.page_link(
            "screens/session.py",
            label=views.plain(label),
            query_params={"session": row.session},
            icon="🔴",
        )


def render_header(head, page: Page) -> None:
    """Title, the session's meta and counters, and the verdict box."""
    info = page.bundle.info
    head.title(views.plain(page.sid), anchor=False)
    if page.sid != page.sid.strip() or not page.sid.isprintable():
        st.caption(
            f"Exact id: {views.literal(repr(page.sid))}: the spaces at its ends or its "
            "invisible characters are part of it."
        )
    meta = info.meta or {}
    st.caption(
        " · ".join(
            [
                views.status_markdown(info.status),
                *([session_views.WATCH_ONLY_BADGE] if page.watch_only else []),
                *(
                    f"{k.replace('_', ' ')} **{views.plain(str(meta[k]))}**"
                    for k in ("tenant", "scenario", "prompt_version", "locale", "channel")
                    if meta.get(k)
                ),
                # "hold" says the session waits for a person: true only while it loops
                *([f"**{views.plain(str(meta['hold']))}**"]
                  if meta.get("hold") and info.status == SessionStatus.LOOPING else []),
                f"{info.steps:,} steps",
                f"{info.messages:,} messages in the conversation now",
                views.loops_text(info.loops, _loop_flags(info)),
                views.rollbacks_text(info.rollbacks),
                f"last activity {views.when(info.updated_at):%Y-%m-%d %H:%M:%S}",
            ]
        )
    )
    verdict = page.verdict
    why = (
        f"{views.plain(verdict['rule'] or '?')}: {views.plain(verdict['explanation'])}"
        if verdict
        else "none"
    )
    since = info.waiting_since
    if info.status == SessionStatus.LOOPING and verdict:
        st.error(
            f"**Looping** ({views.plain(verdict['rule'] or '?')}): "
            f"{views.plain(verdict['explanation'])}  \n"
            + (f"**Waiting for on-call** since {views.when(since):%H:%M:%S} "
               f"({views.duration_text(time.time() - since)}): its agent runs no step until "
               "someone rolls it back, releases it or stops it.  \n"
               if since is not None else "")
            + (session_views.WATCH_ONLY_LOOPING
               if page.watch_only else
               f"Suggested rollback target: **{views.plain(page.target_text)}**"),
            icon=":material/autorenew:",
        )
    elif info.status == SessionStatus.ROLLED_BACK:
        st.warning(f"**Rolled back.** Last verdict: {why}", icon=":material/undo:")
    elif verdict:
        st.info(
            f"Last verdict ({views.plain(verdict['rule'] or '?')}): "
            f"{views.plain(verdict['explanation'])}"
        )
    else:
        st.success("No loop verdict for this session.")
    render_loop_cost(page)


def _loop_flags(info) -> int | None:
    """Verdicts of the loop the session is in now (None when not looping or not recorded)."""
    if info.status != SessionStatus.LOOPING or not info.last_verdict:
        return None
    episode = info.last_verdict.get("episode")
    return int(episode["flags"]) if episode else None


def render_loop_cost(page: Page) -> None:
    """Since when and how bad: the latest loop's start, length, waste and side effects."""
    info = page.bundle.info
    looping = info.status == SessionStatus.LOOPING
    cost = views.loop_cost(page.bundle.steps, page.verdict, looping, time.time(),
                           page.bundle.branches)
    if cost is None:
        return
    # a stop by the step budget is a task that ran too long, not a loop: say so
    budget = page.verdict is not None and page.verdict.get("rule") == "step_budget"
    what = "Task" if budget else "Loop"
    # A row that wraps (not columns, which stack one per line on a phone): two or three
    # figures a line on a narrow screen.
    with st.container(horizontal=True, key="loop-cost"):
        st.metric(
            f"{what} began",
            f"{views.when(cost.started_at):%H:%M:%S}",
            help=f"{views.when(cost.started_at):%Y-%m-%d %H:%M:%S %Z}, at step {cost.start_step}.",
        )
        st.metric(
            ("Task running for" if budget else "Looping for") if cost.ongoing
            else f"{what} lasted",
            views.duration_text(cost.duration_s),
            help=None if cost.rolled_back_at is None else "From its first step until the "
            f"rollback at {views.when(cost.rolled_back_at):%H:%M:%S}.",
        )
        st.metric(
            "Steps used" if budget else "Steps wasted",
            f"{cost.steps:,}",
            help=f"Steps {cost.start_step}–{cost.end_step}, "
            + ("of the task that used the step budget." if budget else "spent inside the loop."),
        )
        st.metric(
            "Context tokens in the loop",
            "not recorded" if cost.tokens is None else f"{cost.tokens:,}",
            help="Sum of the context each loop step sent to the model (its token budget).",
        )
        st.metric(
            "Side effects in the loop",
            f"{len(cost.side_effects)}",
            help="Side-effecting steps that completed while the agent was stuck"
            + (" (among the steps this page shows)." if cost.partial else "."),
        )
        if cost.flags is not None and not budget:
            st.metric("Flagged in this loop", f"{cost.flags:,}",
                      help="Verdicts of this loop; one loop left running is flagged again every "
                           "few steps. The session's header counts every verdict it ever had.")
        if cost.snapshots is not None:
            st.metric("Snapshots in the loop", f"{cost.snapshots:,}",
                      help="Write-ahead snapshots taken for the loop's steps; a repeat of a "
                           "call that just failed takes none.")
    if cost.side_effects:
        st.caption(
            "Side effects during the loop: "
            + ", ".join(f"{views.plain(tool)} (step {n})" for n, tool in cost.side_effects[:10])
        )


def render_audit_link(page: Page) -> None:
    """To the session's audit trail: a button, not an <a href>, so the (foreign) id never
    becomes a URL in the page's markup."""
    if st.button("Audit trail", key="open-audit", type="tertiary", icon=":material/receipt_long:"):
        st.switch_page("screens/audit.py", query_params={"audit-session": page.sid})


def render_actions(page: Page) -> None:
    """Roll back… and Send notice… for operators; a note for viewers; on a watch-only session,
    what Rewind can and cannot do there instead of actions it would refuse."""
    if page.watch_only:
        st.info(session_views.WATCH_ONLY_NOTE, icon=":material/visibility:")
        render_audit_link(page)
        return
    if not page.user.can_act:
        st.caption(
            "You are signed in as a viewer: rolling back and sending notices are for operators."
        )
        render_audit_link(page)
        return
    looping = page.bundle.info.status == SessionStatus.LOOPING
    with st.container(horizontal=True):
        st.button(
            "Roll back…" if looping else "Roll back anyway…",
            type="primary" if looping else "secondary",
            key="open-rollback",
            icon=":material/undo:",
            disabled=not any(n.restorable for n in page.bundle.tree),
            help=None
            if looping
            else "The session is not looping: a rollback would take steps and messages off "
            "its conversation, including notices the user already got. The dialog shows what.",
            on_click=dialogs.ask, args=("rollback", page.sid),
        )
        if page.bundle.info.waiting:  # the decisions besides a rollback
            st.button("Release…", key="open-release", icon=":material/play_arrow:",
                      help="Let the agent continue, with a note it reads.",
                      on_click=dialogs.ask, args=("release", page.sid))
            st.button("Stop…", key="open-stop", icon=":material/stop:",
                      help="The agent runs no more steps; the session stays readable.",
                      on_click=dialogs.ask, args=("stop", page.sid))
        st.button("Send notice…", key="open-notice", icon=":material/chat:",
                  on_click=dialogs.ask, args=("notice", page.sid))
        render_audit_link(page)
    # Opened by the buttons' callbacks (the snapshot tree's too), before this run: here on every
    # run until closed, so a run the operator did not ask for does not close it.
    dialogs.open_asked(page.sid, page.user)


def render_label(page: Page) -> None:
    """Was this a loop? The current operator label and who set it; Yes / No (a reason is
    optional) for operators. The engine checks the role again when the label is saved."""
    with data.store_errors():
        seen = session_views.current_label(data.session_audit(page.url, page.sid))
    with st.container(key="loop-label"):
        st.markdown(f"**Was this a loop?** {views.plain(session_views.label_text(seen))}")
        if not page.user.can_act:
            st.caption("Operators answer it; replay and the detector's precision count the "
                       "answers.")
            return
        with st.container(horizontal=True, vertical_alignment="bottom"):
            reason = st.text_input("Reason (optional)", key="label-reason",
                                   placeholder="what you saw, for the audit log")
            yes = st.button("Yes, a loop", key="label-loop")
            no = st.button("No, not a loop", key="label-not-loop")
    if yes or no:
        dialogs.save_label(page.sid, page.user, "loop" if yes else "not_loop", reason)


# -- the tabs -----------------------------------------------------------------------------------
def render_timeline(page: Page) -> None:
    steps, branches = page.bundle.steps, page.bundle.branches
    frame = views.timeline_frame(steps)
    fig = charts.timeline(
        frame,
        views.lane_order(frame),
        views.loop_windows(steps),
        views.rollback_markers(steps, branches),
    )
    st.plotly_chart(fig, key="timeline")
    st.caption(
        "● ok · ✕ error · ⊠ refused (quarantined tool) · hollow: abandoned by a rollback · "
        "red band: loop window · "
        "dashed line: rollback. Hover a step for its tool, arguments and error."
        + views.steps_shown(len(steps), page.bundle.info.steps)
    )


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
    st.dataframe(views.evidence_frame(steps, verdict), hide_index=True)
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
        help="The steps the rule looked at: " + views.step_list(evidence) if evidence else None,
    )
    if evidence:
        c3.caption(f"steps {views.step_list(evidence)}")


def render_near_duplicates(steps: list, wanted: set[int]) -> None:
    groups = views.near_duplicate_groups([s for s in steps if s.n in wanted])
    if groups:
        st.markdown("**Argument differences between near-duplicates**")
        for group in groups:
            st.caption(f"{views.plain(group[0].tool)}: {len(group)} calls")
            st.dataframe(views.arg_diffs(group), hide_index=True)
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
    sentence = why.change_sentence(found)
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


def render_snapshot_tree(page: Page) -> None:
    bundle, nodes, suggested = page.bundle, page.nodes, page.bundle.suggested
    show_retired = st.toggle("Show the older per-step snapshots", key="tree-retired")
    layout, edges = views.tree_layout(bundle.tree, bundle.branches, show_retired)
    lane_names = {i + 1: f"{b.id} ({b.actor})" for i, b in enumerate(bundle.branches)}
    event = st.plotly_chart(
        charts.snapshot_tree(layout, edges, lane_names),
        key="tree",
        on_select="rerun",
        selection_mode="points",
    )
    points = event.selection.points if event is not None else []
    clicked = next((p.get("customdata") for p in points if p.get("customdata")), None)
    if clicked and clicked != st.session_state.get("tree-last-click"):
        st.session_state["tree-last-click"] = clicked
        st.session_state["tree-node"] = clicked
    ids = layout["id"].tolist()[::-1]
    if not ids:
        return
    if st.session_state.get("tree-node") not in ids:
        st.session_state["tree-node"] = suggested if suggested in ids else ids[0]
    chosen = st.selectbox(
        "Snapshot (or click a node)",
        ids,
        key="tree-node",
        format_func=lambda i: views.snapshot_caption(nodes[i], suggested),
    )
    node = nodes[chosen]
    st.markdown(
        f"**{views.plain(node.id)}** · {views.plain(node.label or node.kind)} · "
        f"{views.plain(node.kind)} "
        f"snapshot before step {node.next_step} · {node.messages} messages · "
        + ("**latest: where the agent is now** · " if node.is_head else "")
        + ("can roll back here" if node.restorable else "cannot roll back here")
    )
    if node.abandoned_reason:
        st.caption(f"Taken out by a rollback: {views.plain(node.abandoned_reason)}")
    if node.restorable and node.on_live_line and page.user.can_act and not page.watch_only:
        # The dialog opens above, where the page's actions open theirs (`dialogs.open_asked`).
        st.button(f"Roll back to {node.id}…", key="tree-rollback", on_click=dialogs.ask,
                  args=("rollback", page.sid, node.id))


def render_memory(page: Page) -> None:
    memory = data.memory_view(page.url, page.sid)
    if memory is None:
        st.info("Memory: not recorded. This session wrote no memories.")
        return
    decay = data.decay_view(page.url, page.sid)
    if decay is not None:
        curves, recalls, threshold, now_s = decay
        st.plotly_chart(charts.decay_curves(curves, recalls, threshold, now_s), key="memory")
        st.caption(
            "How strongly each memory is kept, from the first memory on (log scale: the "
            "session's seconds and the weeks after it both show): solid up to now, dashed "
            "after (if it is not recalled again); diamonds mark recalls, which strengthen it; "
            "under the dotted line a memory is forgotten."
        )
    else:
        st.caption("No memory is valid any more: every one was replaced by a newer one.")
    table = memory.items
    st.markdown(views.plain(memory_views.invalidated_text(table)))
    st.dataframe(
        table, hide_index=True,
        column_config={"why": st.column_config.TextColumn(width="large"),
                       "confidence": st.column_config.NumberColumn(format="%.2f"),
                       "memory": st.column_config.TextColumn(width="large")})
    if not memory.log.empty:
        with st.expander(f"Lifecycle and contradictions ({len(memory.log)})"):
            st.dataframe(memory.log, hide_index=True)


def render_token_budget(page: Page) -> None:
    steps, branches = page.bundle.steps, page.bundle.branches
    history = views.budget_history(steps)
    current = views.current_budget(history)
    if current is None:
        st.info(
            "Token budget: not recorded. The agent runtime passed no context to "
            "`Session.step(..., context=ctx)` for this session's live steps."
        )
        return
    max_tokens = int(current["max_tokens"]) if pd.notna(current["max_tokens"]) else None
    st.markdown(f"**Context of step {int(current['step'])}** (the newest in the conversation now)")
    st.plotly_chart(
        charts.budget_now(views.budget_parts(current, max_tokens), max_tokens), key="budget-now"
    )
    st.plotly_chart(
        charts.budget_over_steps(history, views.rollback_markers(steps, branches)),
        key="budget-steps",
    )
    st.caption(
        "A loop shows as the dialogue swelling; a rollback (dashed line) as the drop after it."
    )


def render_messages(page: Page) -> None:
    items = views.messages_view(page.bundle.messages, page.bundle.branches)
    abandoned = sum(m.abandoned for m in items)
    c1, c2 = st.columns([3, 1])
    c1.caption(
        f"{len(items) - abandoned:,} live and {abandoned:,} abandoned messages, in the "
        "order they were written; abandoned ones are struck through."
    )
    window = c2.selectbox(
        "Show", list(MESSAGE_WINDOWS), key="msg-window", label_visibility="collapsed"
    )
    limit = MESSAGE_WINDOWS[window]
    shown = items[-limit:] if limit else items
    if not shown:
        st.info("No messages yet.")
        return
    forensic, user_side = st.columns([3, 2])
    with forensic:
        st.markdown("**Forensic:** every write, abandoned ones struck through")
        st.html(views.MESSAGES_CSS + views.messages_html(shown))
    with user_side:
        seen = views.user_view(shown)
        st.markdown("**As the user sees it:** live messages, notices as shown")
        if seen:
            st.html(views.USER_VIEW_CSS + views.user_view_html(seen))
        else:
            st.caption("The user sees no message yet.")


TABS: dict[str, Callable[[Page], None]] = {
    "Timeline": render_timeline,
    "Why flagged": render_why_flagged,
    "Snapshot tree": render_snapshot_tree,
    "Memory": render_memory,
    "Token budget": render_token_budget,
    "Messages": render_messages,
}


# -- the page -----------------------------------------------------------------------------------
def main() -> None:
    user = access.require_user()
    url = data.store_url()
    dialogs.show_flash()

    head, pick = st.columns([3, 1])
    sid = render_picker(pick)
    if not sid:  # "" only: an id of spaces is still an id, and gets its answer below
        render_no_session(head, url)
        return
    try:
        with data.store_errors():
            bundle = data.session_bundle(url, sid)
    except UnknownSession:
        head.title("Session")
        st.error(
            f"No session {views.literal(repr(sid))} in this store. Check the id (spaces and "
            "invisible characters count), or open the session from the fleet table."
        )
        return
    except InvalidSessionId as exc:
        head.title("Session")
        st.error(f"{views.literal(repr(sid))} is not a session id: {views.plain(exc)}.")
        return

    nodes = {n.id: n for n in bundle.tree}
    suggested = bundle.suggested
    target_text = (
        "no restorable snapshot"
        if suggested is None
        else views.snapshot_caption(nodes[suggested])
        if suggested in nodes
        else suggested
    )
    verdict: StoredVerdict | None = bundle.info.last_verdict
    page = Page(url, sid, user, bundle, verdict, target_text)
    render_header(head, page)
    render_actions(page)
    render_label(page)
    st.html(views.TABS_CSS)
    for tab, render in zip(
        st.tabs(list(TABS), key="tab", bind="query-params"), TABS.values(), strict=True
    ):
        if tab.open is None or tab.open:  # None: state not tracked, render everything
            with tab:
                render(page)


main()
