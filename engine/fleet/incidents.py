"""Incidents: loop verdicts grouped by cause, so on-call sees one line (and gets one page) per
broken tool instead of one per session.

The *cause* of a loop verdict is its tool, its normalised error signature (`signature`: the
detector's `error_signature`, then every number but an HTTP status, every absolute path and
every id masked) and the rule that fired. Every loop verdict a session handle stores joins the
open incident of its cause, or opens one (`note_loop`, called by the session handle right after
the step and its verdict are written).

Storage: fleet documents of namespace ``incidents`` (`Store.fleet_doc_get`,
`Store.fleet_doc_swap`), so every process and the console see the same incidents:

- ``open:<cause>``: the open incident of that cause (at most one: the key is the cause);
- ``closed:<id>``: a closed incident, kept as evidence (nothing here deletes one);
- ``settings``: fleet settings (``quiet_s``).

A verdict joins by compare-and-set on the ``open:`` document: two processes that open the same
cause at once make one incident (the loser reads the winner's and joins it), and two joins never
lose each other's session. An incident closes when an operator closes it (with a reason) or when
no session has looped on its cause for ``quiet_s`` seconds (`DEFAULT_QUIET_S`; a setting of the
fleet, `set_quiet`): a quiet incident reads as closed at once, and the next loop of its cause,
or `close_quiet` (the alert worker runs it every round), writes the close and its audit row.

Feed events (each in the same write as the change; the alert worker pages on them):
``incident_open``, ``incident_grow`` (the incident reached one of `GROWTH_SIZES` sessions, or a
tenant it had not touched) and ``incident_close``. Those the engine writes itself (open, grow, a
quiet close) are bookkeeping, not actions: feed events only. An operator's close and each remedy
(``incident_<remedy>``) are audited too, with the operator as actor.

Remedies (`act`) work on the whole group: ``rollback`` every session (the bulk rollback),
``quarantine`` the tool, ``release`` or ``stop`` the sessions that wait for on-call (only where
the engine has the waiting-for-on-call verbs), ``notice`` every session, ``close``. Each is
previewed (``dry_run``), refused with nothing written for bad input (an unknown or closed
incident, a viewer, an empty reason), checks the actor's role when it acts, and first *claims*
the incident: the remedy is appended to the incident's ``actions`` with its audit row in one
compare-and-set, so of two operators acting at once one wins and the other is told who did what.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import random
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine import metrics
from engine.errors import IncidentConflict, RewindError, UnknownIncident
from engine.identity import Actor, checked_actor, checked_reason, require_operator
from engine.limits import cut_text
from engine.loops.normalize import error_signature
from engine.records import BulkRollbackItem
from engine.runtime import Runtime
from engine.store.base import AuditEntry
from engine.types import StoredVerdict

log = logging.getLogger("rewind.incidents")

NAMESPACE = "incidents"
"""Fleet document namespace of the incidents."""
DEFAULT_QUIET_S = 1800.0
"""Seconds without a new loop of its cause after which an incident closes by itself."""
GROWTH_SIZES = (50, 100, 250, 500, 1000)
"""Session counts whose crossing is audited (``incident_grow``) and paged; past the last one,
every further thousand."""
ACTIONS = ("rollback", "quarantine", "release", "stop", "notice", "close")
"""The remedies `act` carries out on a whole incident."""
AUTOMATIC_ACTOR = "rewind"
"""Actor of the incident rows the engine writes itself (open, grow, a quiet close)."""
NO_TOOL = "(agent turn)"
"""What an incident of loops without a tool call (agent message turns) shows as its tool."""
_TRIES = 200
"""Compare-and-set attempts before a join gives up (each one lost to another writer)."""

_STATUS_CODE = re.compile(r"\b(https?(?:/[\d.]+)?|status|code)([\s:=#]*)(\d{3})\b")
_PATH = re.compile(r"(?<![\w<])(?:[a-z]:)?(?:[/\\][\w.@+\-]+){2,}[/\\]?")
_DIGITS = re.compile(r"[\w.\-]*\d[\w.\-]*")
_HEX_TO_LETTERS = str.maketrans("0123456789", "ghijklmnop")
_LETTERS_TO_HEX = str.maketrans("ghijklmnop", "0123456789")
_MARK = re.compile("\x01([a-p]+)\x01")


def signature(error: str | None, args: Any = None) -> str:
    """The normalised error of a loop verdict, the part of its cause that is text: the
    detector's `error_signature` (informative lines, the agent's own argument values, ids,
    times and counters masked), then absolute paths as ``<path>`` and every word holding a
    digit, like the argument values, as ``<v>`` (``order A-1234`` and ``order B-77`` are one
    cause, whether or not the agent passed the id), but an HTTP status (``http 503``,
    ``status: 404``), which names the failure.
    "" for a step that did not fail (a loop of repeated answers)."""
    if not error or not error.strip():
        return ""
    text = error_signature(error, args)
    kept: list[str] = []

    def keep(m: re.Match[str]) -> str:  # a marker without digits, put back below
        kept.append(m.group(3))
        index = f"{len(kept) - 1:x}".translate(_HEX_TO_LETTERS)
        return f"{m.group(1)}{m.group(2)}\x01{index}\x01"

    text = _STATUS_CODE.sub(keep, text)
    text = _PATH.sub("<path>", text)
    text = _DIGITS.sub("<v>", text).replace("<arg>", "<v>")
    return _MARK.sub(lambda m: kept[int(m.group(1).translate(_LETTERS_TO_HEX), 16)], text)


def cause_key(tool: str | None, sig: str, rule: str) -> str:
    """The key of a cause: a digest of its tool, signature and rule (safe in any store key)."""
    raw = "\x1f".join((tool or "", sig, rule))
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True)
class Incident:
    """One cause of loops and the sessions that looped on it."""

    id: str
    tool: str | None
    """The tool that looped (None: agent message turns without a tool call)."""
    signature: str
    """The normalised error ("" for loops that did not fail)."""
    rule: str
    status: str
    """``open`` or ``closed`` (also an incident quiet for longer than the quiet period)."""
    first_seen: float
    last_seen: float
    sessions: list[str]
    """Session ids in the order they joined."""
    counts: dict[str, int]
    """Sessions by their state now (`state_of`: looping, waiting, rolled_back, released,
    healthy, stopped; ``deleted`` for one deleted since)."""
    error: str = ""
    """One error text as a session saw it (cut), for people."""
    cause: str = ""
    tenants: list[str] = field(default_factory=list)
    prompt_versions: list[str] = field(default_factory=list)
    scenarios: list[str] = field(default_factory=list)
    loops: int = 0
    """Loop verdicts joined (a session that keeps looping adds one per verdict)."""
    steps: int = 0
    """Steps spent in the loops (each verdict's evidence, counted once per session and step)."""
    tokens: int = 0
    """Context tokens of the looping steps that recorded a token breakdown."""
    joined: dict[str, float] = field(default_factory=dict)
    """Session id -> unix time it joined (the blast radius over time)."""
    actions: list[dict[str, Any]] = field(default_factory=list)
    """Remedies taken, oldest first: action, actor, reason, at, sessions."""
    closed_at: float | None = None
    closed_by: str | None = None
    close_reason: str | None = None

    @property
    def revision(self) -> int:
        """How many remedies were taken: a console passes the one it showed (`act`'s `seen`), so
        an operator acting on a stale page is told what changed."""
        return len(self.actions)

    def as_json(self) -> dict[str, Any]:
        """The `rewind incidents --json` form (the contract's keys first)."""
        return {
            "id": self.id, "tool": self.tool, "signature": self.signature, "rule": self.rule,
            "status": self.status, "first_seen": self.first_seen, "last_seen": self.last_seen,
            "sessions": list(self.sessions), "counts": dict(self.counts),
            "tenants": list(self.tenants), "prompt_versions": list(self.prompt_versions),
            "scenarios": list(self.scenarios), "loops": self.loops, "steps": self.steps,
            "tokens": self.tokens, "error": self.error, "actions": list(self.actions),
            "closed_at": self.closed_at, "closed_by": self.closed_by,
            "close_reason": self.close_reason,
        }


@dataclass(frozen=True)
class IncidentAction:
    """What `act` did (or, previewed, would do) to an incident."""

    incident: Incident
    action: str
    sessions: list[str]
    """The sessions the remedy touches (none for quarantine and close)."""
    dry_run: bool
    tool: str | None = None
    results: list[Any] = field(default_factory=list)
    """Per session: `BulkRollbackItem` (rollback), or (session id, error or None) pairs."""
    quarantine: Any = None
    """The `Quarantine` set (quarantine)."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Sessions of the incident left alone and why (e.g. not waiting)."""

    @property
    def failed(self) -> dict[str, str]:
        """Session id -> why the remedy failed for it."""
        out: dict[str, str] = {}
        for r in self.results:
            if isinstance(r, BulkRollbackItem):
                if not r.ok:
                    out[r.session] = r.error or "failed"
            elif r[1] is not None:
                out[r[0]] = r[1]
        return out


# -- storage ---------------------------------------------------------------------------------
def _open_key(cause: str) -> str:
    return f"open:{cause}"


def _closed_key(iid: str) -> str:
    return f"closed:{iid}"


def quiet_period(docs: Mapping[str, Any]) -> float:
    """The fleet's quiet period from the ``settings`` document (`DEFAULT_QUIET_S` without)."""
    value = (docs.get("settings") or {}).get("quiet_s")
    return float(value) if isinstance(value, (int, float)) and value > 0 else DEFAULT_QUIET_S


def _quiet(doc: Mapping[str, Any], now: float, quiet_s: float) -> bool:
    return doc.get("status") == "open" and now - float(doc["last_seen"]) > quiet_s


def _closed_doc(doc: Mapping[str, Any], at: float, by: str, reason: str) -> dict[str, Any]:
    return {**doc, "status": "closed", "closed_at": at, "closed_by": by, "close_reason": reason}


def _quiet_reason(quiet_s: float) -> str:
    return f"no session looped on this cause for {_span(quiet_s)}"


def _span(seconds: float) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)} min"
    return f"{seconds:g} s"


def _backoff(attempt: int) -> None:
    time.sleep(min(0.05, 0.001 * (attempt + 1)) * random.random())


def _summary(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": doc["id"], "tool": doc.get("tool"), "signature": doc.get("signature", ""),
            "rule": doc.get("rule", ""), "sessions": len(doc.get("sessions") or {}),
            "tenants": list(doc.get("tenants") or [])}


# -- joining ---------------------------------------------------------------------------------
def tokens_of(budget: Mapping[str, Any] | None) -> int:
    """Tokens of the context a step was built with (system, dialogue and memories of its token
    breakdown; 0 without one)."""
    if not budget:
        return 0
    return sum(int(budget.get(k) or 0) for k in ("system", "dialogue", "memories"))


def note_loop(rt: Runtime, sid: str, tool: str | None, error: str | None, args: Any,
              verdict: StoredVerdict, tokens: int = 0) -> str:
    """Join session `sid`'s loop verdict to the open incident of its cause, or open one;
    returns the incident id. Called once per stored loop verdict, after it was written.

    Raises:
        StoreUnavailable: the store cannot be reached. RewindError: every attempt lost to
        other writers (the store is far too busy).
    """
    rule = verdict.get("rule") or "loop"
    sig = signature(error, args)
    cause = cause_key(tool, sig, rule)
    key = _open_key(cause)
    info = rt.store.get_session(sid)
    meta = dict(info.meta) if info is not None else {}
    steps = len(verdict.get("evidence_steps") or []) or 1
    for attempt in range(_TRIES):
        now = rt.clock()
        docs = rt.store.fleet_doc_get(NAMESPACE, [key, "settings"])
        quiet_s = quiet_period(docs)
        doc = docs.get(key)
        if doc is not None and _quiet(doc, now, quiet_s):
            _close_quiet_doc(rt, key, doc, quiet_s, now)
            continue
        audit: AuditEntry | None
        if doc is None:
            iid = f"inc-{uuid.uuid4().hex[:12]}"
            new: dict[str, Any] = {
                "id": iid, "cause": cause, "tool": tool, "signature": sig, "rule": rule,
                "error": cut_text(error or "", 300), "status": "open", "first_seen": now,
                "last_seen": now, "sessions": {}, "tenants": [], "prompt_versions": [],
                "scenarios": [], "loops": 0, "steps": 0, "tokens": 0, "actions": [],
                "paged": 1,
            }
            _add(new, sid, meta, steps, tokens, now)
            audit = AuditEntry(AUTOMATIC_ACTOR, "incident_open",
                               f"{len(new['sessions'])} session looping on "
                               f"{tool or NO_TOOL}", {**_summary(new), "session": sid})
        else:
            new = {**doc, "sessions": dict(doc["sessions"]), "tenants": list(doc["tenants"]),
                   "prompt_versions": list(doc["prompt_versions"]),
                   "scenarios": list(doc["scenarios"])}
            tenants_before = set(new["tenants"])
            _add(new, sid, meta, steps, tokens, now)
            audit = None
            size = len(new["sessions"])
            crossed = _crossed(int(doc.get("paged") or 1), size)
            spread = [t for t in new["tenants"] if t not in tenants_before]
            if crossed or (spread and tenants_before):
                if crossed:
                    new["paged"] = crossed
                why = (f"reached {size} sessions" if crossed else
                       f"spread to tenant {', '.join(spread)}")
                audit = AuditEntry(AUTOMATIC_ACTOR, "incident_grow", why, {
                    **_summary(new), "session": sid, "size": crossed or None,
                    "new_tenants": spread})
        if rt.store.fleet_doc_swap(NAMESPACE, {key: doc}, {key: new}, now, audit,
                                   feed_only=True):
            if doc is None:
                metrics.record_incident_opened(tool, rule)
            return str(new["id"])
        _backoff(attempt)
    raise RewindError(f"could not record session {sid}'s loop in its incident: the incident "
                      f"changed under every one of {_TRIES} attempts")


def _crossed(paged: int, size: int) -> int:
    """The largest growth size in (paged, size], or 0."""
    sizes = [s for s in GROWTH_SIZES if paged < s <= size]
    if size > GROWTH_SIZES[-1]:
        top = (size // 1000) * 1000
        if top > paged and top > GROWTH_SIZES[-1]:
            sizes.append(top)
    return max(sizes, default=0)


def _add(doc: dict[str, Any], sid: str, meta: Mapping[str, Any], steps: int, tokens: int,
         now: float) -> None:
    rec = doc["sessions"].get(sid)
    if rec is None:
        doc["sessions"][sid] = {"at": now}
        doc["steps"] = int(doc["steps"]) + steps
        for facet, field_ in (("tenant", "tenants"), ("prompt_version", "prompt_versions"),
                              ("scenario", "scenarios")):
            value = meta.get(facet)
            if isinstance(value, str) and value and value not in doc[field_]:
                doc[field_].append(value)
    else:
        doc["steps"] = int(doc["steps"]) + 1
    doc["loops"] = int(doc["loops"]) + 1
    doc["tokens"] = int(doc["tokens"]) + max(int(tokens), 0)
    doc["last_seen"] = max(float(doc["last_seen"]), now)


def _close_quiet_doc(rt: Runtime, key: str, doc: Mapping[str, Any], quiet_s: float,
                     now: float) -> bool:
    at = float(doc["last_seen"]) + quiet_s
    closed = _closed_doc(doc, at, AUTOMATIC_ACTOR, _quiet_reason(quiet_s))
    ckey = _closed_key(str(doc["id"]))
    return rt.store.fleet_doc_swap(
        NAMESPACE, {key: doc, ckey: None}, {key: None, ckey: closed}, now,
        AuditEntry(AUTOMATIC_ACTOR, "incident_close", closed["close_reason"],
                   {**_summary(doc), "by": AUTOMATIC_ACTOR}), feed_only=True)


def open_incident_of(store: Any, cause: str, now: float) -> str | None:
    """The id of the open incident of `cause` (`cause_key`), or None (none, or a quiet one,
    which reads as closed). One read of two documents."""
    docs = store.fleet_doc_get(NAMESPACE, [_open_key(cause), "settings"])
    doc = docs.get(_open_key(cause))
    if doc is None or doc.get("status") != "open" or _quiet(doc, now, quiet_period(docs)):
        return None
    return str(doc["id"])


def close_quiet(rt: Runtime) -> list[str]:
    """Write the close of every open incident quiet for longer than the quiet period (a feed
    event ``incident_close`` by ``rewind``); returns their ids. What a long-running writer (the
    alert worker) does each round, so a quiet incident pages its close without a new loop."""
    docs = rt.store.fleet_docs(NAMESPACE)
    quiet_s, now = quiet_period(docs), rt.clock()
    closed, still_open = [], 0
    for key, doc in docs.items():
        if key.startswith("open:") and _quiet(doc, now, quiet_s):
            if _close_quiet_doc(rt, key, doc, quiet_s, now):
                closed.append(str(doc["id"]))
        elif key.startswith("open:"):
            still_open += 1
    metrics.set_open_incidents(still_open)
    return closed


def set_quiet(rt: Runtime, seconds: float, *, actor: str | Actor, reason: str) -> float:
    """Set the fleet's quiet period (seconds without a loop after which an incident closes),
    audited (``incident_settings``).

    Raises:
        PermissionDenied: not an operator (now). ValueError: not a positive number, or no
        reason.
    """
    who = checked_actor(rt.limits, actor)
    require_operator(who, "change the incident settings")
    reason = checked_reason(rt.limits, reason, "changing the quiet period needs a reason")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds > 0 \
            or seconds != seconds or seconds == float("inf"):
        raise ValueError(f"the quiet period must be a positive number of seconds, not "
                         f"{seconds!r}")
    settings = rt.store.fleet_doc_get(NAMESPACE, ["settings"]).get("settings") or {}
    rt.store.fleet_doc_put(NAMESPACE, {"settings": {**settings, "quiet_s": float(seconds)}},
                           rt.clock(), AuditEntry(who.name, "incident_settings", reason,
                                                  {"quiet_s": float(seconds)}))
    return float(seconds)


# -- reading ---------------------------------------------------------------------------------
StateOf = Callable[[str], str]


def state_of(info: Any) -> str:
    """A session's state in an incident: ``waiting`` while it waits for on-call (its status is
    looping and its last verdict made it wait, with no decision yet), ``released`` after an
    operator released it (and it has not looped again), else its status; ``deleted`` for None."""
    if info is None:
        return "deleted"
    status = str(info.status)
    verdict: dict[str, Any] = dict(info.last_verdict or {})
    decision: dict[str, Any] = dict(verdict.get("decision") or {})
    if status == "looping" and verdict.get("waiting") and not decision:
        return "waiting"
    if status != "looping" and decision.get("kind") == "released":
        return "released"
    return status


def session_state(rt: Runtime) -> StateOf:
    """Session id -> its state now (`state_of`), each session read once per reader (a session
    can be in several incidents: it looped on several causes)."""
    seen: dict[str, str] = {}

    def state(sid: str) -> str:
        if sid not in seen:
            seen[sid] = state_of(rt.store.get_session(sid))
        return seen[sid]

    return state


def _record(doc: Mapping[str, Any], now: float, quiet_s: float, state: StateOf) -> Incident:
    sessions = doc.get("sessions") or {}
    order = sorted(sessions, key=lambda s: (float(sessions[s].get("at") or 0.0), s))
    counts: dict[str, int] = {}
    for sid in order:
        st = state(sid)
        counts[st] = counts.get(st, 0) + 1
    status, closed_at = str(doc.get("status") or "open"), doc.get("closed_at")
    closed_by, reason = doc.get("closed_by"), doc.get("close_reason")
    if _quiet(doc, now, quiet_s):  # closed by the rule already; the next writer records it
        status, closed_at = "closed", float(doc["last_seen"]) + quiet_s
        closed_by, reason = AUTOMATIC_ACTOR, _quiet_reason(quiet_s)
    return Incident(
        id=str(doc["id"]), tool=doc.get("tool"), signature=str(doc.get("signature") or ""),
        rule=str(doc.get("rule") or ""), status=status,
        first_seen=float(doc["first_seen"]), last_seen=float(doc["last_seen"]),
        sessions=order, counts=dict(sorted(counts.items())), error=str(doc.get("error") or ""),
        cause=str(doc.get("cause") or ""), tenants=list(doc.get("tenants") or []),
        prompt_versions=list(doc.get("prompt_versions") or []),
        scenarios=list(doc.get("scenarios") or []), loops=int(doc.get("loops") or 0),
        steps=int(doc.get("steps") or 0), tokens=int(doc.get("tokens") or 0),
        joined={s: float(sessions[s].get("at") or 0.0) for s in order},
        actions=list(doc.get("actions") or []),
        closed_at=None if closed_at is None else float(closed_at), closed_by=closed_by,
        close_reason=reason,
    )


def _when_arg(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()
    if isinstance(value, dt.timedelta):
        raise TypeError("since takes a time (unix seconds or a datetime), not a duration")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"since must be unix seconds or a datetime, not {value!r}")


def incidents(rt: Runtime, since: Any = None, status: str | None = None, *,
              state: StateOf | None = None) -> list[Incident]:
    """Incidents seen (last loop) at or after `since` (unix seconds or a datetime; None: all)
    whose status is `status` (``open``, ``closed``; None: both): open ones first, then the most
    recently seen first. Reads only; writes nothing.

    Raises:
        ValueError: an unknown status. TypeError: `since` is no time.
    """
    if status not in (None, "open", "closed"):
        raise ValueError(f"status must be open or closed (or left out), not {status!r}")
    after = _when_arg(since)
    docs = rt.store.fleet_docs(NAMESPACE)
    quiet_s, now = quiet_period(docs), rt.clock()
    state = state or session_state(rt)
    found = []
    for key, doc in docs.items():
        if not (key.startswith("open:") or key.startswith("closed:")):
            continue
        if after is not None and float(doc["last_seen"]) < after:
            continue
        if status is not None:  # decide before counting states: that reads every session
            shown = "closed" if doc.get("status") == "closed" or _quiet(doc, now, quiet_s) \
                else "open"
            if shown != status:
                continue
        found.append(_record(doc, now, quiet_s, state))
    found.sort(key=lambda i: (i.status != "open", -i.last_seen, i.id))
    if status is None and after is None:
        metrics.set_open_incidents(sum(1 for i in found if i.status == "open"))
    return found


def _find(rt: Runtime, iid: str) -> tuple[str | None, dict[str, Any] | None, float]:
    """(its key, its document, the quiet period) of incident `iid`."""
    if not isinstance(iid, str) or not iid.strip():
        raise UnknownIncident("an incident id is needed (see `rewind incidents`)")
    docs = rt.store.fleet_docs(NAMESPACE)
    quiet_s = quiet_period(docs)
    for key, doc in docs.items():
        if key.startswith("open:") and doc.get("id") == iid:
            return key, doc, quiet_s
    # Read after the open ones: a close moves an incident from open to closed in one write,
    # so one that was not open any more is found closed here.
    closed = rt.store.fleet_doc_get(NAMESPACE, [_closed_key(iid)]).get(_closed_key(iid))
    if closed is not None:
        return _closed_key(iid), closed, quiet_s
    return None, None, quiet_s


def incident(rt: Runtime, iid: str) -> Incident:
    """Incident `iid`.

    Raises:
        UnknownIncident: no such incident.
    """
    _key, doc, quiet_s = _find(rt, iid)
    if doc is None:
        raise UnknownIncident(f"no incident {iid!r} in {rt.store.url}; list them with "
                              "`rewind incidents`")
    return _record(doc, rt.clock(), quiet_s, session_state(rt))


# -- remedies --------------------------------------------------------------------------------
Verb = Callable[..., Any]


def _refuse_closed(doc: Mapping[str, Any], iid: str) -> None:
    raise IncidentConflict(
        f"incident {iid} is closed (by {doc.get('closed_by')} at {_when(doc.get('closed_at'))}: "
        f"{doc.get('close_reason')}); nothing was done")


def _when(at: Any) -> str:
    if at is None:
        return "an unknown time"
    return dt.datetime.fromtimestamp(float(at), dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _describe(entry: Mapping[str, Any]) -> str:
    return (f"{entry.get('actor')} took {entry.get('action')} at {_when(entry.get('at'))} "
            f"({entry.get('reason')})")


def act(rt: Runtime, iid: str, action: str, *, actor: str | Actor, reason: str,
        dry_run: bool = False, seen: int | None = None, release: Verb | None = None,
        stop: Verb | None = None, notice: Verb | None = None,
        note: str | None = None) -> IncidentAction:
    """Carry out remedy `action` (`ACTIONS`) on every session of incident `iid`; see the module
    docstring. `release` / `stop` are the engine's verbs for one waiting session (None: this
    engine has no waiting-for-on-call state, and those remedies are refused); `seen` is the
    number of remedies the operator's page showed (`Incident.revision`).

    Raises:
        ValueError: an unknown action, an empty reason (not for a dry run), or a remedy this
        incident or engine cannot take (nothing written). PermissionDenied: not an operator
        now. UnknownIncident: no such incident. IncidentConflict: it is closed, or another
        operator took a remedy meanwhile (nothing written).
    """
    if action not in ACTIONS:
        raise ValueError(f"an incident remedy is one of {', '.join(ACTIONS)}, not {action!r}")
    who = checked_actor(rt.limits, actor)
    require_operator(who, f"{action} incidents")
    reason = checked_reason(rt.limits, reason, None if dry_run else
                            f"an incident {action} needs a reason: it is audited and "
                            "labels what it changes")
    key, doc, quiet_s = _find(rt, iid)
    if doc is None or key is None:
        raise UnknownIncident(f"no incident {iid!r} in {rt.store.url}; list them with "
                              "`rewind incidents`")
    now = rt.clock()
    if doc.get("status") == "closed" or _quiet(doc, now, quiet_s):
        if doc.get("status") != "closed":
            doc = _closed_doc(doc, float(doc["last_seen"]) + quiet_s, AUTOMATIC_ACTOR,
                              _quiet_reason(quiet_s))
        _refuse_closed(doc, iid)
    verb = {"release": release, "stop": stop}.get(action)
    if action in ("release", "stop") and verb is None:
        raise ValueError(f"{action} needs the waiting-for-on-call feature, which this engine "
                         "does not have; roll the sessions back or stop them one by one")
    if action == "quarantine" and doc.get("tool") is None:
        raise ValueError(f"incident {iid}'s loops are agent turns without a tool call: there "
                         "is no tool to quarantine")
    actions_seen = list(doc.get("actions") or [])
    if seen is not None and len(actions_seen) != seen:
        raise IncidentConflict(
            f"incident {iid} changed since you looked: {_describe(actions_seen[-1])}; "
            "look at it again" if actions_seen else
            f"incident {iid} changed since you looked; look at it again")
    state = session_state(rt)
    targets, skipped = _targets(doc, action, state)
    record = _record(doc, now, quiet_s, state)
    if dry_run:
        preview: list[Any] = []
        if action == "rollback" and targets:
            from engine.recovery import bulk

            preview = bulk.rollback_many(rt, {"session": targets}, actor=who, reason=reason,
                                         dry_run=True)
        return IncidentAction(record, action, targets, True, doc.get("tool"), preview,
                              skipped=skipped)
    # Claim: the remedy and its audit row are written in one compare-and-set on the incident.
    for attempt in range(_TRIES):
        require_operator(who, f"{action} incidents")  # rights at the moment of acting
        entry = {"action": action, "actor": who.name, "reason": reason, "at": now,
                 "sessions": len(targets)}
        claimed = {**doc, "actions": [*actions_seen, entry]}
        audit = AuditEntry(who.name, f"incident_{action}", reason,
                           {**_summary(doc), "action": action, "targets": len(targets)})
        if action == "close":
            ckey = _closed_key(iid)
            closed = _closed_doc(claimed, now, who.name, reason)
            audit = AuditEntry(who.name, "incident_close", reason, {**_summary(doc),
                                                                     "by": who.name})
            ok = rt.store.fleet_doc_swap(NAMESPACE, {key: doc, ckey: None},
                                         {key: None, ckey: closed}, now, audit)
        else:
            ok = rt.store.fleet_doc_swap(NAMESPACE, {key: doc}, {key: claimed}, now, audit)
        if ok:
            break
        fresh_key, fresh, _q = _find(rt, iid)
        if fresh is None or fresh_key is None:
            raise UnknownIncident(f"incident {iid} is gone from {rt.store.url}")
        if fresh.get("status") == "closed":
            _refuse_closed(fresh, iid)
        fresh_actions = list(fresh.get("actions") or [])
        if len(fresh_actions) != len(actions_seen):
            raise IncidentConflict(
                f"another operator acted on incident {iid} first: "
                f"{_describe(fresh_actions[-1])}; nothing was done, look at it again")
        # Only new loops joined meanwhile: act on the incident as it is now.
        key, doc, now = fresh_key, fresh, rt.clock()
        targets, skipped = _targets(doc, action, state)
        _backoff(attempt)
    else:
        raise IncidentConflict(f"incident {iid} kept changing; nothing was done, try again")
    return _carry_out(rt, record, action, targets, skipped, who, reason, doc, verb,
                      notice, note)


def _targets(doc: Mapping[str, Any], action: str, state: StateOf
             ) -> tuple[list[str], dict[str, str]]:
    sessions = doc.get("sessions") or {}
    order = sorted(sessions, key=lambda s: (float(sessions[s].get("at") or 0.0), s))
    if action in ("quarantine", "close"):
        return [], {}
    if action in ("release", "stop"):
        targets, skipped = [], {}
        for sid in order:
            st = state(sid)
            if st == "waiting":
                targets.append(sid)
            else:
                skipped[sid] = f"{st}, not waiting for on-call"
        return targets, skipped
    return order, {}


def _carry_out(rt: Runtime, record: Incident, action: str, targets: Sequence[str],
               skipped: dict[str, str], who: Actor, reason: str, doc: Mapping[str, Any],
               verb: Verb | None, notice: Verb | None, note: str | None) -> IncidentAction:
    tool = doc.get("tool")
    results: list[Any] = []
    q = None
    if action == "rollback" and targets:
        from engine.recovery import bulk

        results = bulk.rollback_many(rt, {"session": list(targets)}, actor=who, reason=reason)
    elif action == "quarantine":
        from engine.fleet import quarantine

        q = quarantine.quarantine(rt, str(tool), actor=who, reason=reason)
    elif action in ("release", "stop", "notice"):
        fn = verb if action != "notice" else notice
        assert fn is not None
        for sid in targets:
            try:
                if action == "release":
                    fn(sid, actor=who, reason=reason, note=note)
                elif action == "stop":
                    fn(sid, actor=who, reason=reason)
                else:
                    fn(sid, None, actor=who)
                results.append((sid, None))
            except Exception as exc:  # noqa: BLE001 - one session's failure never stops the rest
                results.append((sid, f"{type(exc).__name__}: {exc}"))
    return IncidentAction(record, action, list(targets), False, tool, results, q, skipped)
