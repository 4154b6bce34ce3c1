"""Sessions exempt from the change freeze: which sessions an agent opened with
``engine.session(sid, freeze_exempt=True)``.

A declared freeze's loop policy applies to every session but the exempt ones (`engine.freeze`).
The exemption belongs to a session handle, so the store would not know of it: `note` keeps, the
first time a session is opened exempt, a fleet document of namespace ``freeze_exempt`` (key: the
session id, value: when it was first opened so), and `exempt_sessions` reads them back, so the
console's freeze banner and `rewind freeze` count the sessions the freeze does not govern. A
session opened exempt once counts as exempt from then on (a handle is the agent's word, and an
agent that opens one exempt handle means it). Deleting or purging a session forgets its
exemption (`forget_gone`), so the namespace holds no more than the sessions that exist.
"""

from __future__ import annotations

import logging

from engine.runtime import Runtime

log = logging.getLogger("rewind.freeze")

NAMESPACE = "freeze_exempt"
"""Fleet document namespace of the sessions opened exempt from the freeze."""


def note(rt: Runtime, sid: str) -> None:
    """Remember that session `sid` was opened exempt from the freeze: one read, and one write
    the first time. A failure is logged, never turned into a failure to open the session."""
    try:
        if rt.store.fleet_doc_get(NAMESPACE, [sid]):
            return
        now = rt.clock()
        rt.store.fleet_doc_put(NAMESPACE, {sid: {"at": now}}, now)
    except Exception:  # noqa: BLE001 - bookkeeping for the banner, not the agent's business
        log.warning("session %s: could not record that it is exempt from the freeze", sid,
                    exc_info=True)


def exempt_sessions(rt: Runtime, active_since: float | None = None) -> list[str]:
    """Sessions opened exempt from the freeze that still exist, sorted; with `active_since`
    (unix time), only those changed at or after it (the freeze's start: the sessions it does
    not govern). Reads each such session's summary."""
    out = []
    for sid in rt.store.fleet_docs(NAMESPACE):
        info = rt.store.get_session(sid)
        if info is None or (active_since is not None and info.updated_at < active_since):
            continue
        out.append(sid)
    return sorted(out)


def forget_gone(rt: Runtime, sids: list[str] | None = None) -> int:
    """Drop the exemption of every session among `sids` (None: every exempt session) that no
    longer exists, in one write; how many were dropped. A failure is logged: the banner reads
    only sessions that exist, so a leftover costs a read, never a wrong count."""
    try:
        known = list(rt.store.fleet_docs(NAMESPACE)) if sids is None else [
            sid for sid in rt.store.fleet_doc_get(NAMESPACE, sids)]
        gone = [sid for sid in known if rt.store.get_session(sid) is None]
        if gone:
            rt.store.fleet_doc_put(NAMESPACE, dict.fromkeys(gone), rt.clock())
        return len(gone)
    except Exception:  # noqa: BLE001 - bookkeeping for the banner, never the purge's failure
        log.warning("could not forget the freeze exemptions of deleted sessions", exc_info=True)
        return 0
