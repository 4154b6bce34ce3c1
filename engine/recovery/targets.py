"""Where a rollback should go, what it would do, and when there is nothing to roll back.

All three read the store only; the rollback itself is `engine.recovery.verbs.rollback`.
"""

from __future__ import annotations

from engine.errors import NothingToRollBack, UnknownSnapshot
from engine.records import RollbackPreview, SessionInfo, SnapshotNode, loop_first_step
from engine.recovery.notices import NOTICE_FLAG
from engine.runtime import Runtime
from engine.types import SessionStatus, StepStatus


def suggested_target(rt: Runtime, sid: str, info: SessionInfo | None = None) -> str | None:
    """The last healthy snapshot of session `sid`: before the flagged loop's first step if the
    session is looping (None when no restorable snapshot is that old: never one inside the
    loop), else before the trailing run of failed steps (within the detector's horizon), else
    the head. None when no snapshot is restorable."""
    info = info or rt.require_session(sid)
    before = None
    if info.status == SessionStatus.LOOPING and info.last_verdict:
        # the loop's first step, not the latest verdict's window: a session flagged again and
        # again slides that window along, and a target inside the loop would keep most of it
        before = loop_first_step(info.last_verdict)
    if before is None:
        recent = rt.store.steps(sid, live_only=True, last=rt.detector_horizon)
        for rec in reversed(recent):
            if rec.status == StepStatus.ERROR:
                before = rec.n
            elif rec.status == StepStatus.OK:
                break
    return rt.store.restorable_snapshot(sid, before)


def checked_target(to: object) -> str | None:
    """`to` as a rollback target: a snapshot id (a string) or None for the suggested one.

    Raises:
        TypeError: anything else (`to=5`, a `SnapshotNode`), named, before the store is asked.
    """
    if to is None or isinstance(to, str):
        return to
    hint = " (pass its .id)" if isinstance(to, SnapshotNode) else ""
    raise TypeError(f"a rollback target must be a snapshot id (a string such as 'snap-4') or "
                    f"None for the suggested one, not {type(to).__name__}{hint}")


def preview_rollback(rt: Runtime, sid: str, to: str | None = None) -> RollbackPreview:
    """What a rollback of `sid` to `to` (None: the suggested target) would take off the live
    line and which compensations it would queue, newest step first.

    Raises:
        UnknownSession, NothingToRollBack, UnknownSnapshot. TypeError: `to` is not a string.
    """
    target = checked_target(to) or suggested_target(rt, sid)
    if target is None:
        raise NothingToRollBack(f"session {sid!r} has no restorable snapshot")
    node = rt.store.snapshot(sid, target)
    if node is None:
        raise UnknownSnapshot(f"session {sid!r} has no snapshot {target!r}")
    return _preview(rt, sid, node)


def _preview(rt: Runtime, sid: str, node: SnapshotNode,
             info: SessionInfo | None = None) -> RollbackPreview:
    """What leaves the live line going back to `node`: read from the snapshot on, so the cost
    is what a rollback there would undo, not the session's history."""
    target = node.id
    info = info or rt.require_session(sid)
    # live steps numbered from node.next_step to the session's step count: at most this many
    newest = max(info.steps - node.next_step + 1, 0)
    leaving = [s for s in rt.store.steps(sid, live_only=True, last=newest)
               if s.n >= node.next_step] if newest else []
    comps = [
        (s.n, s.compensation[0], s.compensation[1])
        for s in reversed(leaving)
        if s.side_effect and s.compensation and s.status == StepStatus.OK
    ]
    return RollbackPreview(
        session=sid,
        target=target,
        messages=rt.store.live_messages(sid, since=node.messages),
        steps=leaving,
        compensations=comps,
    )


def only_notices_would_leave(preview: RollbackPreview) -> bool:
    """The one definition of "nothing to roll back": no step and no message but recovery notices
    would leave the live line, so the session was rolled back already (by a loop's own rollback,
    an operator, a first bulk run) and going back again would only take the user's notice away.
    """
    return not preview.steps and all(m.get(NOTICE_FLAG) for m in preview.messages)


def rolled_back_already(rt: Runtime, sid: str, target: str, info: SessionInfo) -> bool:
    """True when session `sid` (summary `info`) stands rolled back and going back to `target`
    would take nothing but recovery notices off the live line. False also when `target` is
    unknown, abandoned or no longer restorable, or nothing at all was written after it: the
    store refuses those with the error that says so."""
    if info.status != SessionStatus.ROLLED_BACK:
        return False
    node = rt.store.snapshot(sid, target)
    if node is None or not node.on_live_line or not node.restorable:
        return False
    return only_notices_would_leave(_preview(rt, sid, node, info))


def refuse_if_rolled_back(sid: str, preview: RollbackPreview | None = None) -> None:
    """Raises NothingToRollBack, saying why, when `only_notices_would_leave(preview)` (always
    when no preview is given: the caller found `rolled_back_already`)."""
    if preview is None or only_notices_would_leave(preview):
        raise NothingToRollBack(
            f"session {sid!r}: no step and no message but recovery notices would leave the live "
            "line; it was rolled back already. Pick an earlier snapshot, or force the rollback "
            "(the CLI: --force) to go back anyway"
        )
