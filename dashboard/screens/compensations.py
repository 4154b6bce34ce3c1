"""Compensations: the saga outbox (pending, running, failed; done and resolved on request).

A compensation stays pending until a process that registered its handler runs
`Engine.compensations.run`; the console runs none. Processes with handlers leave a heartbeat in
the store, so each row says whether a live process has its handler, and the page warns per
handler that none has. Operators tick rows and retry them (back to pending, attempts reset) or
mark them resolved by hand, with a reason; the engine checks the role and audits both, so a
viewer, who sees no buttons, would be refused there too.
"""

from __future__ import annotations

import time

import streamlit as st

from dashboard import actions, data, views
from dashboard.signin import access
from engine import LIVE_S, PermissionDenied

STATUSES = ["needs attention", "pending", "running", "failed", "done", "resolved", "all"]
ATTENTION = views.OPEN_COMPENSATIONS
FLASH = "comp-flash"
# Bumped after an action: the table and the reason start fresh, so a selection made before the
# rows moved can never be applied to other rows.
GENERATION = "comp-generation"
SHOWN_HANDLERS = 5

user = access.require_user()
url = data.store_url()
gen = st.session_state.get(GENERATION, 0)

st.title("Compensations")
kind, lines = st.session_state.pop(FLASH, (None, []))
if lines:
    text = "  \n".join(views.plain(line) for line in lines)
    (st.success if kind == "success" else st.error)(text)
f = st.columns([1, 1, 3], vertical_alignment="bottom")
status = f[0].selectbox("Status", STATUSES, key="comp-status", bind="query-params")
limit = f[1].selectbox("Rows", [200, 1000, 5000], key="comp-limit")
if f[2].button("Refresh", icon=":material/refresh:", key="comp-refresh",
               help="Read the outbox again (reads are cached for a few seconds)"):
    data.forget_session()

now = time.time()
with data.store_errors():
    if status == "needs attention":
        comps = [c for s in ATTENTION for c in data.compensations(url, s, limit)]
    else:
        comps = data.compensations(url, None if status == "all" else status, limit)
    live = data.compensation_handlers(url)
frame = views.compensations_frame(comps, now, live)

missing = views.handlers_without_process(frame)
if missing:
    window = f"in the last {LIVE_S / 60:g} minutes"
    advice = ("Start the agent runtime (or worker) that registers {}, or undo by hand and mark "
              "resolved.")
    if len(missing) == 1:
        name, waiting = missing[0]
        text = (f"No running process has registered {views.literal(name)} {window}; retrying "
                f"will not help until one does ({waiting} waiting). {advice.format('it')}")
    else:
        text = (f"No running process has registered these handlers {window}; retrying will "
                f"not help until one does. {advice.format('each')}\n"
                + "".join(f"\n- {views.literal(name)} ({waiting} waiting)"
                          for name, waiting in missing[:SHOWN_HANDLERS])
                + (f"\n- … and {len(missing) - SHOWN_HANDLERS} more"
                   if len(missing) > SHOWN_HANDLERS else ""))
    st.warning(text, icon=":material/hourglass_top:")
failed = frame[frame["status"] == "failed"]
if not failed.empty:
    st.error(
        f"{len(failed)} failed: side effects not undone. "
        + ("Fix the cause and retry, or undo by hand and mark resolved."
           if user.can_act else "An operator can retry them or mark them resolved."),
        icon=":material/error:",
    )

if frame.empty:
    st.success(
        "No compensation here."
        if status != "needs attention"
        else "No compensation is pending, running or failed."
    )
else:
    config = {
        "state": st.column_config.MultiselectColumn(
            "status",
            options=list(views.COMPENSATION_COLORS),
            color=list(views.COMPENSATION_COLORS.values()),
        ),
        "live": st.column_config.TextColumn(
            "handler live",
            help=f"yes: a process seen in the last {LIVE_S / 60:g} minutes registered this "
            "handler and will run the compensation on its next pass",
        ),
        "link": st.column_config.LinkColumn("session", display_text=r"session\?session=(.*)"),
        "next_try": st.column_config.TextColumn(
            "next try", help="When a process with the handler tries a failed compensation "
            "again (retries wait longer each time); blank when none is planned"),
        "last_error": st.column_config.TextColumn("last error", width="large"),
        "resolved": st.column_config.TextColumn("resolved by"),
        "created": st.column_config.DatetimeColumn("created", format="YYYY-MM-DD HH:mm:ss"),
        "updated": st.column_config.DatetimeColumn("updated", format="YYYY-MM-DD HH:mm:ss"),
    }
    order = ["state", "handler", "live", "link", "step", "attempts", "next_try", "age",
             "last_error",
             "resolved", "created", "updated", "args", "id"]
    if user.can_act:
        event = st.dataframe(frame, hide_index=True, column_order=order, column_config=config,
                             on_select="rerun", selection_mode="multi-row",
                             key=f"comp-table-{gen}")
        chosen = [comps[i] for i in event.selection.rows if i < len(comps)]
    else:
        st.dataframe(frame, hide_index=True, column_order=order, column_config=config)
        chosen = []

    if user.can_act:
        with st.container(border=True, key="comp-actions"):
            if chosen:
                picked = ", ".join(f"#{c.id} {c.name} ({c.status})" for c in chosen[:20])
                more = f" and {len(chosen) - 20} more" if len(chosen) > 20 else ""
                st.markdown(f"**{len(chosen)} selected:** {views.plain(picked + more)}")
            else:
                st.caption("Tick rows in the table to retry them or mark them resolved.")
            preset = st.pills("Reason", views.COMPENSATION_REASONS, key=f"comp-preset-{gen}",
                              label_visibility="collapsed")
            typed = st.text_input("Reason (required, written to the audit log)",
                                  key=f"comp-reason-{gen}",
                                  placeholder=preset or "why, for the audit log", live=True)
            reason = (typed or "").strip() or (preset or "")
            ready = bool(chosen and reason)
            why = None if ready else ("Select rows first." if not chosen else
                                      "Give a reason first.")
            with st.container(horizontal=True):
                retry = st.button("Retry", type="primary", key="comp-retry", disabled=not ready,
                                  help=why or "Back to pending with attempts reset; a process "
                                  "with the handler runs it on its next pass.")
                resolve = st.button("Mark resolved", key="comp-resolve", disabled=not ready,
                                    help=why or "Undone by hand (or nothing to undo): no "
                                    "process will run it.")
        if retry or resolve:
            action = "retry" if retry else "resolve"
            act = actions.retry_compensations if retry else actions.resolve_compensations
            try:
                with data.store_errors():
                    outcomes = act(data.engine(), user, chosen, reason)
            except (actions.ActionRefused, PermissionDenied) as exc:
                st.error(views.plain(exc))
            else:
                result_kind, result = views.compensation_outcomes_text(action, outcomes)
                if action == "retry":
                    data.compensation_handlers.clear()
                    alive = data.compensation_handlers(url)
                    result += [f"No running process has registered {name}: it stays pending "
                               "until one does."
                               for name in sorted({o.name for o in outcomes if o.ok})
                               if name not in alive]
                st.session_state[FLASH] = (result_kind, result)
                st.session_state[GENERATION] = gen + 1
                data.forget_session()
                st.rerun()
    else:
        st.caption("Only operators can retry compensations or mark them resolved.")
st.caption(
    f"{len(frame):,} compensations · read {time.strftime('%H:%M:%S')} · the outbox is "
    "run by the agent processes that registered each handler, never by the console"
)
