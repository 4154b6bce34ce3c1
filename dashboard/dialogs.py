"""The operator dialogs: Roll back…, Send notice… and the fleet's bulk rollback, the session
page's "Was this a loop?" label, and the What-if page's "Use these settings for the whole fleet…"
and "Go back to the defaults…". UI only; the work is in `dashboard.actions` (and, for a label,
`label_session`), which goes through the engine with the operator as actor."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import streamlit as st

from dashboard import actions, data, views
from dashboard.signin.access import User
from dashboard.views import dialogs as dialog_views
from dashboard.views import whatif as whatif_views
from engine import Engine, RewindError, SessionStatus

FLASH_KEY = "rewind_flash"
NO_NOTICE = "No notice"
OPEN_KEY = "rewind_open_dialog"
"""The session page's dialog the operator opened and has not closed: (kind, session, target)."""


def ask(kind: Literal["rollback", "notice", "release", "stop"], sid: str,
        target: str | None = None) -> None:
    """Button callback: open the session page's `kind` dialog for `sid` and keep it open.

    A dialog stays open only while each full run of the page calls it again, and a run can come
    that the operator did not ask for (the page's first runs finishing, a chart's first state):
    `open_asked` calls it on every run until it is closed (Cancel, confirm, X, Escape).
    """
    st.session_state[OPEN_KEY] = (kind, sid, target)


def _closed() -> None:
    st.session_state.pop(OPEN_KEY, None)


def open_asked(sid: str, user: User) -> None:
    """Open (again) the dialog `ask` asked for on this session page; forget one asked for
    another session. Call it from one place on the page, on every run."""
    asked = st.session_state.get(OPEN_KEY)
    if asked is None:
        return
    kind, for_sid, target = asked
    if for_sid != sid:
        _closed()
    elif kind == "rollback":
        rollback_dialog(sid, user, target=target)
    elif kind == "release":
        release_dialog(sid, user)
    elif kind == "stop":
        stop_dialog(sid, user)
    else:
        notice_dialog(sid, user)


def flash(kind: str, text: str) -> None:
    """Keep a message to show at the top of the page after the dialog closes."""
    st.session_state[FLASH_KEY] = (kind, text)


def show_flash() -> None:
    """Show (once) the message left by a dialog."""
    kind, text = st.session_state.pop(FLASH_KEY, (None, None))
    if kind == "success":
        st.success(views.plain(text), icon="✅")
    elif kind == "error":
        st.error(views.plain(text))


def _notice_preview(text: str | None) -> None:
    if not text:
        st.caption("No notice will be sent.")
        return
    st.caption("The user will see exactly this:")
    with st.chat_message("assistant"):
        st.html(f"<div class='rw-notice-preview'>{views.escape_text(text)}</div>")


@overload
def _notice_picker(locale: str, key: str, allow_none: Literal[False],
                   rolled_back: bool = True) -> str | None: ...
@overload
def _notice_picker(locale: str, key: str, allow_none: bool,
                   rolled_back: bool = True) -> str | None | Literal[False]: ...
def _notice_picker(locale: str, key: str, allow_none: bool,
                   rolled_back: bool = True) -> str | None | Literal[False]:
    """Radio + text area; returns the exact text, None for an empty custom text, False for none
    (only offered when `allow_none`)."""
    options = [*views.NOTICE_CHOICES, *([NO_NOTICE] if allow_none else [])]
    choice = st.radio("Notice to the user", options, horizontal=True, key=f"{key}-choice",
                      index=options.index(views.default_notice_choice(locale)))
    if choice == NO_NOTICE:
        _notice_preview(None)
        return False
    custom = ""
    if choice == "Custom text":
        custom = st.text_area("Notice text", key=f"{key}-custom", height=100)
    text = views.notice_text(choice, custom, rolled_back)
    _notice_preview(text)
    return text


def _reason(key: str) -> str:
    """Preset reasons as pills and a text field (typing wins); returns the reason, stripped.

    The text field commits while typing, so the confirm button comes alive as soon as there is
    a reason, not only after the field loses focus.
    """
    preset = st.pills("Reason", views.PRESET_REASONS, key=f"{key}-preset",
                      label_visibility="collapsed")
    typed = st.text_input("Reason (required, written to the audit log)", key=f"{key}-text",
                          placeholder=preset or "why, for the audit log", live=True)
    return (typed or "").strip() or (preset or "")


def _last_notice_note(sid: str) -> views.NoticeSeen | None:
    """Show the newest notice the user got (when, by whom, text); return it."""
    url = data.store_url()
    bundle = data.session_bundle(url, sid)
    seen = views.last_notice(bundle.messages, data.session_audit(url, sid))
    if seen is None:
        return None
    who = seen.actor or "unknown sender"
    st.warning(
        f"**The user already got a notice** {views.duration_text(time.time() - seen.at)} ago "
        f"({views.when(seen.at):%H:%M:%S}) from **{views.plain(who)}**"
        + ("" if seen.live else ", later taken back by a rollback")
        + f":  \n{views.plain(seen.text[:300])}",
        icon=":material/mark_chat_read:")
    return seen


def label_session(engine: Engine, user: User, sid: str, label: str,
                  reason: str | None = None) -> None:
    """Record `user`'s answer to "was this a loop?" (``loop`` / ``not_loop``) for `sid`,
    through the engine with the user's actor: the engine checks the account's role at this
    moment and writes the label as an audit row. A blank reason is none.

    Raises:
        PermissionDenied: not an operator now. ValueError: another label. UnknownSession.
    """
    engine.label(sid, label, actor=user.actor(), reason=(reason or "").strip() or None)


def save_label(sid: str, user: User, label: str, reason: str | None) -> None:
    """`label_session` from the session page: a flash and a rerun, or the refusal in place."""
    try:
        label_session(data.engine(), user, sid, label, reason)
    except (RewindError, PermissionError, ValueError) as exc:
        st.error(views.plain(exc))
        return
    data.forget_session(sid)
    flash("success", f"Labelled {'a loop' if label == 'loop' else 'not a loop'}; replay and the "
                     "detector's precision count it from now on.")
    st.rerun()


@st.dialog("Roll back session", width="large", on_dismiss=_closed)
def rollback_dialog(sid: str, user: User, target: str | None = None) -> None:
    if not user.can_act:
        st.error("Only operators can roll sessions back.")
        return
    url = data.store_url()
    bundle = data.session_bundle(url, sid)
    nodes = {n.id: n for n in bundle.tree}
    choices, index = views.rollback_choices(bundle.tree, target or bundle.suggested)
    if not choices:
        st.warning("This session has no snapshot left to roll back to.")
        return
    looping = bundle.info.status == SessionStatus.LOOPING
    if target is None and choices[index] == bundle.info.head and len(choices) > 1:
        index += 1  # the head itself removes nothing: offer the one before it
    st.markdown(f"Session **{views.plain(sid)}** · {views.status_markdown(bundle.info.status)}")
    chosen = st.selectbox("Target snapshot", choices, index=index, key=f"rb-target-{sid}",
                          format_func=lambda i: views.snapshot_caption(nodes[i], bundle.suggested))
    preview = data.rollback_preview(url, sid, chosen)
    taken_back = views.notices_leaving(preview)
    if not looping:
        st.warning(
            f"This session is not looping ({views.plain(views.status_label(bundle.info.status))})."
            f" Rolling back would remove {len(preview.steps)} steps and "
            f"{len(preview.messages)} messages from its conversation"
            + (f", including {taken_back} notice(s) the user already got" if taken_back else "")
            + ".", icon=":material/warning:")
    # A confirm is refused when another rollback happened after the preview the operator read.
    # New steps of a still-looping agent are fine: they come after the target and leave too.
    state = data.session_epoch(url, sid)
    seen_key = f"rb-seen-{sid}"
    seen = st.session_state.get(seen_key)
    st.session_state[seen_key] = (chosen, state)
    steps, comps = views.preview_frames(preview)
    st.markdown(f"**Taken out of the conversation:** {len(preview.messages)} messages"
                + (f" ({taken_back} notices)" if taken_back else "")
                + f" and {len(preview.steps)} steps (kept on an abandoned branch, nothing is "
                f"deleted) · **{len(comps)} compensations** queued.")
    _last_notice_note(sid)
    with st.container(key=dialog_views.NOTICE_KEY):
        notice = _notice_picker(bundle.info.locale, f"rb-notice-{sid}", allow_none=True)
    # Reason and buttons before the long tables, and stuck to the bottom of the screen while
    # the preview scrolls (DIALOG_CSS), so they are always on screen; on a phone they come
    # before the notice (DIALOG_CSS reorders), so they never cover its preview.
    st.html(views.DIALOG_CSS)
    with st.container(key=views.DECIDE_KEY):
        reason = _reason(f"rb-reason-{sid}")
        with st.container(horizontal=True):
            confirm = st.button("Roll back", type="primary", key=f"rb-confirm-{sid}",
                                disabled=not reason,
                                help=None if reason else "Give a reason first.")
            cancel = st.button("Cancel", key=f"rb-cancel-{sid}")
    with st.container(key=dialog_views.DETAILS_KEY):
        if not steps.empty:
            with st.expander(f"Steps leaving ({len(steps)})", expanded=len(steps) <= 8):
                st.dataframe(steps.head(500), hide_index=True)
        if comps.empty:
            st.caption("Compensations: none (no completed side-effecting step is taken out).")
        else:
            st.markdown(f"**Compensations that will be queued ({len(comps)}):**")
            st.dataframe(comps, hide_index=True)
    if cancel:
        _closed()
        st.rerun()
    if not confirm:
        return
    if notice is None:
        st.error("The custom notice is empty: write it, or pick a template or no notice.")
        return
    if seen is not None and seen != (chosen, state):
        st.warning("Someone rolled this session back while this dialog was open; the preview "
                   "above is now current. Check it and confirm again.")
        return
    try:
        result = actions.roll_back(data.engine(), user, sid, chosen, reason, notice=notice,
                                   expect_epoch=seen[1] if seen else state)
    except (actions.ActionRefused, RewindError, PermissionError) as exc:
        st.error(views.plain(exc))
        return
    data.forget_session(sid)
    flash("success", actions.describe_rollback(result))
    _closed()
    st.rerun()


@st.dialog("Send notice", width="medium", on_dismiss=_closed)
def notice_dialog(sid: str, user: User) -> None:
    if not user.can_act:
        st.error("Only operators can send notices.")
        return
    bundle = data.session_bundle(data.store_url(), sid)
    st.markdown(f"Session **{views.plain(sid)}** · locale "
                f"**{views.plain(bundle.info.locale)}**")
    seen = _last_notice_note(sid)
    # A notice on its own tells the user what happened: "reset" only after a rollback.
    text = _notice_picker(bundle.info.locale, f"nt-{sid}", allow_none=False,
                          rolled_back=bundle.info.status == SessionStatus.ROLLED_BACK)
    again = True
    if seen is not None:
        again = st.checkbox("Send another notice anyway", key=f"nt-again-{sid}",
                            help="The user sees every notice; a second one is rarely wanted.")
    st.html(views.DIALOG_CSS)
    with st.container(key=views.DECIDE_KEY, horizontal=True):
        send = st.button("Send notice", type="primary", key=f"nt-send-{sid}", disabled=not again)
        cancel = st.button("Cancel", key=f"nt-cancel-{sid}")
    if cancel:
        _closed()
        st.rerun()
    if not send:
        return
    if not text:
        st.error("The notice is empty: write it or pick a template.")
        return
    try:
        actions.send_notice(data.engine(), user, sid, text)
    except (actions.ActionRefused, RewindError, PermissionError) as exc:
        st.error(views.plain(exc))
        return
    data.forget_session(sid)
    flash("success", "Notice sent; it is now the last message of the conversation.")
    _closed()
    st.rerun()


def _decision(sid: str, user: User, kind: Literal["release", "stop"]) -> None:
    """The body of the Release… and Stop… dialogs of a session waiting for on-call."""
    if not user.can_act:
        st.error("Only operators can release or stop a session.")
        return
    bundle = data.session_bundle(data.store_url(), sid)
    since = bundle.info.waiting_since
    if since is None:
        st.info("The session no longer waits for on-call: someone decided already.")
    else:
        st.markdown(f"Session **{views.plain(sid)}** waits for on-call since "
                    f"{views.when(since):%H:%M:%S}.")
    st.caption("Release: its agent may continue (your note is appended to its messages). "
               if kind == "release" else
               "Stop: its agent runs no more steps; the session stays readable.")
    reason = _reason(f"{kind}-{sid}")
    note = (st.text_area("Note for the agent (optional)", key=f"{kind}-note-{sid}")
            if kind == "release" else None)
    st.html(views.DIALOG_CSS)
    with st.container(key=views.DECIDE_KEY, horizontal=True):
        go = st.button("Release" if kind == "release" else "Stop", type="primary",
                       key=f"{kind}-go-{sid}", disabled=not reason or since is None)
        cancel = st.button("Cancel", key=f"{kind}-cancel-{sid}")
    if cancel:
        _closed()
        st.rerun()
    if not go:
        return
    try:
        actions.decide(data.engine(), user, sid, kind, reason, note)
    except (actions.ActionRefused, RewindError, PermissionError) as exc:
        st.error(views.plain(exc))
        return
    data.forget_session(sid)
    flash("success", "Released: the agent may continue." if kind == "release"
          else "Stopped: the agent runs no more steps.")
    _closed()
    st.rerun()


@st.dialog("Release session", width="medium", on_dismiss=_closed)
def release_dialog(sid: str, user: User) -> None:
    _decision(sid, user, "release")


@st.dialog("Stop session", width="medium", on_dismiss=_closed)
def stop_dialog(sid: str, user: User) -> None:
    _decision(sid, user, "stop")


# -- bulk rollback (fleet page) -----------------------------------------------------------------
BULK_NOTICES = ("Template in each session's language", "No notice")


@dataclass(frozen=True)
class BulkRequest:
    """What the fleet page asks the bulk rollback dialog to take."""

    token: str
    """Identifies one opening of the dialog: its preview and result are kept under it."""
    what: str
    """Plain text for the header, e.g. "3 selected sessions"."""
    where: dict[str, Any]
    """`Engine.rollback_many` filters: the fleet filters and/or ``session`` ids."""
    rows: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Fleet rows of the sessions the operator saw (session -> status, tenant, …), for display."""


def _bulk_result(items: list, left_alone: list[str], key: str) -> None:
    done = sum(i.ok for i in items)
    failed = len(items) - done
    text = f"**Rolled back {done} of {len(items)} sessions**"
    if failed:
        st.error(f"{text} · {failed} failed; the others were rolled back. Each failure says "
                 "why below.", icon=":material/error:")
    else:
        st.success(text + ".", icon=":material/check_circle:")
    if left_alone:
        st.caption(f"{len(left_alone)} previewed sessions no longer matched when you confirmed "
                   "and were left alone.")
    if items:
        batch = items[0].batch
        st.markdown(f"Batch {views.literal(batch)}: every rollback of it is audited with this id.")
        st.page_link("screens/audit.py", label="Open the batch in the audit log",
                     query_params={"batch": batch}, icon=":material/receipt_long:")
    if st.button("Done", key=f"{key}-done", type="primary"):
        st.rerun()
    st.dataframe(views.bulk_result_frame(items, left_alone), hide_index=True,
                 column_config={"back_to": "back to", "steps": "steps taken out",
                                "compensations": "compensations queued",
                                "error": st.column_config.TextColumn("error", width="large")})


@st.dialog("Roll back sessions", width="large")
def bulk_rollback_dialog(user: User, request: BulkRequest) -> None:
    """Preview (a dry run), one reason, confirm; then the per-session result."""
    if not user.can_act:
        st.error("Only operators can roll sessions back.")
        return
    key = f"bulk-{request.token}"
    finished = st.session_state.get(f"{key}-result")
    if finished is not None:
        results, left_alone = finished  # as stored below, after the rollbacks
        _bulk_result(results, left_alone, key=key)
        return
    engine = data.engine()
    preview = st.session_state.get(f"{key}-preview")
    if preview is None:  # once per opening: typing the reason reruns this dialog
        try:
            with st.spinner("Previewing every session…"):
                preview = actions.preview_many(engine, user, request.where)
        except (actions.ActionRefused, RewindError, PermissionError, ValueError) as exc:
            st.error(views.plain(exc))
            return
        st.session_state[f"{key}-preview"] = preview
    ready = [i.session for i in preview if i.ok]
    totals = views.bulk_totals(preview)
    st.markdown(f"**{views.plain(request.what)}**: {len(preview)} match · "
                f"**{len(ready)} will be rolled back**, each to its last healthy snapshot"
                + (f" · {totals.skipped} skipped (see why below)" if totals.skipped else "")
                + f" · at most {actions.BULK_CAP} at once.")
    not_looping = [sid for sid in ready
                   if request.rows.get(sid, {}).get("status") not in (None, SessionStatus.LOOPING)]
    if not_looping:
        st.warning(f"{len(not_looping)} of these sessions are not looping; rolling them back "
                   "takes work out of their conversations too.", icon=":material/warning:")
    comps = totals.compensations_text()
    st.markdown(f"**Taken out of the conversations:** {totals.steps} steps and "
                f"{totals.messages} messages"
                + (f" ({views.counted(totals.notices, 'notice')})" if totals.notices else "")
                + " (kept on abandoned branches, nothing is deleted) · "
                + (f"**compensations queued:** {views.plain(comps)}" if comps
                   else "no compensation"))
    choice = st.radio("Notice to each user", BULK_NOTICES, horizontal=True,
                      key=f"{key}-notice")
    # Reason and buttons before the long table, so they are on screen without scrolling.
    reason = _reason(f"{key}-reason")
    with st.container(horizontal=True):
        confirm = st.button(f"Roll back {views.counted(len(ready), 'session')}", type="primary",
                            key=f"{key}-confirm", disabled=not reason or not ready,
                            help=None if reason else "Give a reason first.")
        cancel = st.button("Cancel", key=f"{key}-cancel")
    st.dataframe(views.bulk_preview_frame(preview, request.rows), hide_index=True,
                 height=min(38 + 35 * len(preview), 420),
                 column_config={"prompt_version": "prompt", "back_to": "back to",
                                "steps": "steps leaving", "messages": "messages leaving",
                                "compensations": "compensations to queue",
                                "note": st.column_config.TextColumn("note", width="large")})
    if cancel:
        st.rerun()
    if not confirm:
        return
    # Only the sessions the operator saw, and only while they still match the filters.
    where = {**request.where, "session": ready}
    try:
        items = actions.roll_back_many(engine, user, where, reason,
                                       notice=choice == BULK_NOTICES[0])
    except (actions.ActionRefused, RewindError, PermissionError, ValueError) as exc:
        st.error(views.plain(exc))
        return
    data.forget_session()
    taken = {i.session for i in items}
    st.session_state.pop(f"{key}-preview", None)
    st.session_state[f"{key}-result"] = (items, [sid for sid in ready if sid not in taken])
    flash("success" if all(i.ok for i in items) else "error", actions.describe_bulk(items))
    st.rerun(scope="fragment")


# -- the fleet's detector settings (What-if page) -----------------------------------------------
DETECTOR_OPEN_KEY = "rewind_open_detector_dialog"
"""The What-if page's dialog the operator opened and has not closed: ``declare`` or
``defaults``."""


DETECTOR_CHANGES_KEY = "rewind_detector_changes"
"""How often this browser session changed the fleet's detector settings."""


def detector_changes() -> int:
    """How often this browser session changed the fleet's detector settings (declared them, or
    went back to the defaults): the What-if page starts its inputs again after each."""
    return int(st.session_state.get(DETECTOR_CHANGES_KEY, 0))


def ask_detector(kind: Literal["declare", "defaults"]) -> None:
    """Button callback: open the What-if page's `kind` dialog and keep it open across runs
    (see `ask`) until it is closed."""
    st.session_state[DETECTOR_OPEN_KEY] = kind


def detector_asked() -> str | None:
    """The What-if page's dialog asked for and not closed yet, if any."""
    return st.session_state.get(DETECTOR_OPEN_KEY)


def _detector_closed() -> None:
    st.session_state.pop(DETECTOR_OPEN_KEY, None)


def _change_list(rows: Sequence[whatif_views.SettingChange]) -> None:
    st.markdown("\n".join(f"- {views.plain(r.label)} · {views.literal(r.field)}: "
                          f"**{views.plain(r.now)} → {views.plain(r.new)}**" for r in rows))


def _declare_now(user: User, settings: Mapping[str, Any], reason: str, done: str,
                 forget: Sequence[str]) -> None:
    """Declare `settings` for the fleet; on success drop the cached reads and the page state in
    `forget`, leave `done` as the flash, close the dialog and run the page again."""
    try:
        actions.declare_detector(data.engine(), user, settings, reason)
    except (actions.ActionRefused, RewindError, PermissionError, ValueError, TypeError) as exc:
        st.error(views.plain(exc))
        return
    data.forget_detector()
    st.session_state[DETECTOR_CHANGES_KEY] = detector_changes() + 1
    for key in forget:
        st.session_state.pop(key, None)
    flash("success", done)
    _detector_closed()
    st.rerun()


def _declared_moved(replayed: Mapping[str, Any]) -> bool:
    """True (and says so) when the settings declared in the store are no longer those the
    operator's replay ran over: another operator or the CLI changed them meanwhile."""
    if data.detector_declared_now(data.store_url()) == dict(replayed):
        return False
    data.forget_detector()  # the next replay runs over the new ones
    st.warning("The fleet's detector settings changed in the store since your replay "
               "(another operator, or `rewind`): replay again to see what these settings do "
               "over the new ones.", icon=":material/sync_problem:")
    return True


@st.dialog("Use these settings for the whole fleet", width="large", on_dismiss=_detector_closed)
def declare_detector_dialog(user: User, changes: Mapping[str, Any], replayed: Mapping[str, Any],
                            current: Mapping[str, Any], forget: Sequence[str] = ()) -> None:
    """The settings a replay tried (`changes`, over the declared settings it ran with,
    `replayed`), old → new, a required reason, confirm: declared in the store for every
    process (`actions.declare_detector`)."""
    if not user.can_act:
        st.error("Only operators can change the fleet's detector settings.")
        return
    if not changes:
        st.info("These are the settings the detector runs now: there is nothing to change.")
        return
    st.markdown("Every process on the store (agents, the demo, the MCP proxy, the "
                "integrations) builds its new session handles with these settings within a "
                "second, and each verdict records them. What changes:")
    _change_list(whatif_views.declare_rows(current, changes))
    kept = {k: v for k, v in replayed.items() if k not in changes}
    if kept:
        st.caption("Still declared, unchanged: "
                   + views.plain(whatif_views.settings_text(dict(sorted(kept.items())))))
    moved = _declared_moved(replayed)
    reason, confirm = _detector_decision("whatif-declare", "Use for the whole fleet",
                                         "why the fleet should run these settings", moved)
    if confirm and not moved:
        settings = whatif_views.declared_after(replayed, changes)
        _declare_now(user, settings, reason,
                     "The whole fleet now runs these detector settings: "
                     f"{whatif_views.settings_text(dict(sorted(settings.items())))}.", forget)


def _detector_decision(key: str, label: str, placeholder: str,
                       blocked: bool = False) -> tuple[str, bool]:
    """The detector dialogs' sticky bar: a required reason (committed while typing), the
    confirm button `label` (disabled without a reason, or when `blocked`) and Cancel, which
    closes the dialog. Returns the reason, stripped, and whether confirm was pressed."""
    st.html(views.DIALOG_CSS)
    with st.container(key=views.DECIDE_KEY):
        reason = (st.text_input("Reason (required, written to the audit log)",
                                key=f"{key}-reason", live=True, placeholder=placeholder) or ""
                  ).strip()
        with st.container(horizontal=True):
            confirm = st.button(label, type="primary", key=f"{key}-confirm",
                                disabled=not reason or blocked,
                                help=None if reason else "Give a reason first.")
            cancel = st.button("Cancel", key=f"{key}-cancel")
    if cancel:
        _detector_closed()
        st.rerun()
    return reason, confirm


@st.dialog("Go back to the default detector settings", width="large",
           on_dismiss=_detector_closed)
def detector_defaults_dialog(user: User, declared: Mapping[str, Any],
                             current: Mapping[str, Any], defaults: Mapping[str, Any],
                             forget: Sequence[str] = ()) -> None:
    """The settings declared in the store, now → default, a required reason, confirm: the
    declaration is taken out of the store and every process goes back to its own
    configuration."""
    if not user.can_act:
        st.error("Only operators can change the fleet's detector settings.")
        return
    if not declared:
        st.info("No detector settings are declared in the store: every process already runs "
                "its own configuration.")
        return
    st.markdown("The settings declared in the store are taken out: every process on the store "
                "goes back to its own configuration (its detector factory and "
                "`[rewind.detector]`) for new session handles within a second. What changes "
                "(the defaults as this console's configuration has them):")
    _change_list(whatif_views.default_rows(current, declared, defaults))
    reason, confirm = _detector_decision("whatif-defaults", "Go back to the defaults",
                                         "why the fleet goes back to the defaults")
    if confirm:
        _declare_now(user, {}, reason, "The fleet's detector is back to its defaults: every "
                     "process runs its own configuration.", forget)
