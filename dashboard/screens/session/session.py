"""Session: status and verdict, actions, and the tabs. Deep link: `session?session=<id>`.

The page Streamlit runs: `main` reads the session once and renders what is above the tabs (the
header with the loop's cost, the actions, the operator's label); each tab's render function lives
in the module of the same name beside this one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from dashboard import data, dialogs, views
from dashboard.screens.session.budget import render_token_budget
from dashboard.screens.session.memory import render_memory
from dashboard.screens.session.messages import render_messages
from dashboard.screens.session.page import Page
from dashboard.screens.session.snapshots import render_snapshot_tree
from dashboard.screens.session.timeline import render_timeline
from dashboard.screens.session.why_flagged import render_why_flagged
from dashboard.signin import access
from dashboard.views.session import header as header_views
from dashboard.views.session import snapshots as snapshot_views
from engine import (
    InvalidSessionId,
    SessionInfo,
    SessionStatus,
    StoredVerdict,
    UnknownSession,
)


# -- above the tabs -----------------------------------------------------------------------------
def render_picker(column: DeltaGenerator) -> str:
    """The session id box (bound to `?session=`); returns the id exactly as given.

    Never trimmed: "sess-1 " and "sess-1" are two sessions, and a rollback must hit the one the
    link named.
    """
    return column.text_input(
        "Session id", key="session", bind="query-params", placeholder="paste a session id"
    )


def render_no_session(head: DeltaGenerator, url: str | None) -> None:
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
            "screens/session/session.py",
            label=views.plain(label),
            query_params={"session": row.session},
            icon="🔴",
        )


def render_header(head: DeltaGenerator, page: Page) -> None:
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
                *([header_views.WATCH_ONLY_BADGE] if page.watch_only else []),
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
            + (header_views.WATCH_ONLY_LOOPING
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


def _loop_flags(info: SessionInfo) -> int | None:
    """Verdicts of the loop the session is in now (None when not looping or not recorded)."""
    if info.status != SessionStatus.LOOPING or not info.last_verdict:
        return None
    episode = info.last_verdict.get("episode")
    return int(episode["flags"]) if episode else None


def render_loop_cost(page: Page) -> None:
    """Since when and how bad: the latest loop's start, length, waste and side effects."""
    info = page.bundle.info
    looping = info.status == SessionStatus.LOOPING
    cost = header_views.loop_cost(page.bundle.steps, page.verdict, looping, time.time(),
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
        st.info(header_views.WATCH_ONLY_NOTE, icon=":material/visibility:")
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
        seen = header_views.current_label(data.session_audit(page.url, page.sid))
    with st.container(key="loop-label"):
        st.markdown(f"**Was this a loop?** {views.plain(header_views.label_text(seen))}")
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


# -- the tabs: one module each ----------------------------------------------------------------
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
        else snapshot_views.snapshot_caption(nodes[suggested])
        if suggested in nodes
        else suggested
    )
    verdict: StoredVerdict | None = bundle.info.last_verdict
    page = Page(url, sid, user, bundle, verdict, target_text)
    render_header(head, page)
    render_actions(page)
    render_label(page)
    st.html(header_views.TABS_CSS)
    for tab, render in zip(
        st.tabs(list(TABS), key="tab", bind="query-params"), TABS.values(), strict=True
    ):
        if tab.open is None or tab.open:  # None: state not tracked, render everything
            with tab:
                render(page)


main()
