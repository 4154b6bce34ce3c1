"""What the pages read: one engine per store (cached), engine queries with short TTLs.

Only the engine's public API is called here; no page touches the engine directly for reading.
Where a session recorded nothing (no memories, no token breakdowns), loaders return None or an
empty frame and the page says "not recorded" instead of inventing numbers.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import pandas as pd
import streamlit as st

from dashboard import secrets_file, settings, views
from dashboard.views import fleet as fleet_views
from dashboard.views import whatif as whatif_views
from engine import (
    LABEL_ACTION,
    AuditEvent,
    BranchInfo,
    Engine,
    FreezeWindow,
    LoopTally,
    MessageRecord,
    SessionInfo,
    SessionStatus,
    SnapshotNode,
    StepRecord,
    StoreError,
    StoreNotFound,
    StoreUnavailable,
)

T = TypeVar("T")

FLEET_TTL = 5
SESSION_TTL = 3

SESSION_STEPS = 2_000
"""Steps the session page reads and draws at most, the newest: an MCP client connected all day
makes tens of thousands, and the loop, its evidence and the rollbacks that matter are recent (at
10,000 steps, reading and drawing all of them cost about 0.8 s and 1.4 MB of chart)."""
FACETS_TTL = 60
FLEET_CAP = 20_000
"""Most sessions the fleet table loads for one filter; beyond it the table says so."""


# -- engine -----------------------------------------------------------------------------------
@st.cache_resource(show_spinner=False)
def engine_for(url: str | None) -> Engine:
    """One engine (and store connection pool) per store URL for the whole console process."""
    # The console runs no sessions, so its engine needs no freeze; the frame reads the freeze
    # from secrets and the environment (`settings.freeze_window`) and shows a malformed one as a
    # warning, where the engine's own reading would refuse to open.
    # create=False: a store that does not exist is refused (StoreNotFound names its absolute
    # path), never created empty to show "Nothing needs you now"; only agents create stores.
    return Engine.open(url, freeze=None, create=False)


def store_url() -> str | None:
    """The store the console reads: `rewind dashboard --store`, else `[rewind] store`, else
    $REWIND_STORE, else the default (`settings.store_url`)."""
    return settings.store_url(secrets_file.current_secrets())


def engine() -> Engine:
    return engine_for(store_url())


@contextmanager
def store_errors() -> Iterator[None]:
    """Show a store failure as a readable error instead of a traceback, and stop the page."""
    try:
        yield
    except StoreUnavailable as exc:
        st.error(f"The store cannot be reached: {views.plain(exc)}")
        st.stop()
    except StoreNotFound as exc:  # never created here: only agents create a store
        st.error(f"There is no store to show: {views.plain(exc)}")
        st.stop()
    except StoreError as exc:  # wrong password, schema from a newer version, …
        st.error(f"The store refused the request: {views.plain(exc)}")
        st.stop()


# -- fleet ------------------------------------------------------------------------------------
@st.cache_data(ttl=FLEET_TTL, show_spinner=False)
def fleet_stats(url: str | None, window_s: float = 3600.0) -> dict:
    return engine_for(url).fleet.stats(window_s=window_s)


def sessions(url: str | None, status: SessionStatus | str | None = None,
             tenant: str | None = None, scenario: str | None = None,
             prompt_version: str | None = None) -> pd.DataFrame:
    """Sessions matching the engine-side filters, as the fleet table frame (up to FLEET_CAP);
    `status` as the enum or its text (the engine takes either). One cache entry per filter,
    however the call is written (a cache key is the arguments as passed)."""
    return _sessions(url, None if status is None else str(status), tenant, scenario,
                     prompt_version)


@st.cache_data(ttl=FLEET_TTL, show_spinner=False)
def _sessions(url: str | None, status: str | None, tenant: str | None, scenario: str | None,
              prompt_version: str | None) -> pd.DataFrame:
    infos = engine_for(url).sessions(status=status, tenant=tenant, scenario=scenario,
                                     prompt_version=prompt_version, limit=FLEET_CAP)
    return views.sessions_frame(infos)


TABLE_SORTS = (views.DEFAULT_SORT, "Last activity")
"""Orders the store's indexes give (status, then last activity; last activity): for these the
unfiltered table reads only the rows it shows (`table_page`), whatever the fleet's size."""


@st.cache_data(ttl=FLEET_TTL, show_spinner=False)
def table_page(url: str | None, sort: str, limit: int) -> pd.DataFrame:
    """The first `limit` sessions of the whole fleet in `sort` (one of TABLE_SORTS), as the
    fleet table frame: for "Needs you first" each status in turn (looping first), most
    recently active first, each read through the (status, last activity) index until `limit`
    rows are in; for "Last activity" one LIMITed read of the last-activity index. Reads at most
    `limit` sessions, never the fleet."""
    eng = engine_for(url)
    if sort != views.DEFAULT_SORT:
        return views.sessions_frame(eng.sessions(limit=limit))
    infos: list = []
    for status in views.STATUS_ORDER:
        if len(infos) >= limit:
            break
        infos += eng.sessions(status=str(status), limit=limit - len(infos))
    return views.sessions_frame(infos)


@st.cache_data(ttl=FLEET_TTL, show_spinner=False)
def looping(url: str | None) -> pd.DataFrame:
    """The sessions looping now (read through the status index, up to FLEET_CAP), as the fleet
    table frame: the "needs you" band."""
    return sessions(url, SessionStatus.LOOPING)


FACETS_WINDOW = 5000
"""The filter menus offer the tenants, scenarios and prompt versions of this many of the most
recently active sessions (what is active is what on-call filters by)."""


FACET_KEYS = ("tenant", "scenario", "prompt_version")
FACETS_FULL_S = 600.0
"""How often the menus' window is read whole: sessions that left it (or were purged) drop
out of the menus within this; in between, each refresh reads only the sessions active since the
last one."""
FACET_CLOCK_SKEW_S = 300.0
"""How far behind this console's clock an agent's may be and its session still reach the
menus at the next refresh (beyond it, at the next whole read)."""


@dataclass
class _FacetWindow:
    """The FACETS_WINDOW most recently active sessions' facet values, as last read."""

    read_at: float
    """This console's time of the last whole read."""
    rows: dict[str, tuple[float, dict[str, Any]]]
    """Session id -> (last activity, its meta's facet values)."""


_facet_windows: dict[str | None, _FacetWindow] = {}
_facet_lock = threading.Lock()


def _facet_rows(infos: Iterable[SessionInfo]) -> dict[str, tuple[float, dict[str, Any]]]:
    return {i.id: (i.updated_at, {k: (i.meta or {}).get(k) for k in FACET_KEYS}) for i in infos}


def facet_window(url: str | None, now: float | None = None) -> list[dict[str, Any]]:
    """The facet values of the FACETS_WINDOW most recently active sessions.

    Why not one read of that window each time: decoding 5,000 sessions costs about 100 ms, a
    cost that grows with the fleet up to the window's size. Kept between refreshes, the window
    takes in only the sessions active since the newest one seen (less FACET_CLOCK_SKEW_S):
    an index range of the few that moved. It is read whole on this process's first refresh and
    every FACETS_FULL_S, so a session that left the window, or was purged, leaves the menus."""
    now = time.time() if now is None else now
    eng = engine_for(url)
    with _facet_lock:
        window = _facet_windows.get(url)
        if window is None or now - window.read_at >= FACETS_FULL_S:
            window = _FacetWindow(now, _facet_rows(eng.sessions(limit=FACETS_WINDOW)))
        else:
            newest = max((at for at, _ in window.rows.values()), default=0.0)
            moved = eng.sessions(updated_since=newest - FACET_CLOCK_SKEW_S,
                                 limit=FACETS_WINDOW)
            if len(moved) >= FACETS_WINDOW:  # the whole window moved
                window = _FacetWindow(now, _facet_rows(moved))
            else:
                window.rows.update(_facet_rows(moved))
                if len(window.rows) > FACETS_WINDOW:
                    keep = sorted(window.rows.items(), key=lambda kv: (kv[1][0], kv[0]),
                                  reverse=True)[:FACETS_WINDOW]
                    window.rows = dict(keep)
        _facet_windows[url] = window
        return [meta for _, meta in window.rows.values()]


@st.cache_data(ttl=FACETS_TTL, show_spinner=False)
def facets(url: str | None) -> dict[str, list[str]]:
    """Tenants, scenarios and prompt versions seen in the FACETS_WINDOW most recently active
    sessions, for the filter menus (`facet_window`: a LIMITed read, then what moved since)."""
    return views.facets(facet_window(url))


@st.cache_resource(show_spinner=False)
def _tally(url: str | None) -> LoopTally:
    return LoopTally(engine_for(url))


@st.cache_data(ttl=FLEET_TTL, show_spinner=False)
def loop_episodes(url: str | None, window_s: float) -> pd.DataFrame:
    """Loop episodes in the last `window_s` seconds (at, session, tenant, scenario, prompt)."""
    tally = _tally(url)
    tally.refresh(horizon_s=window_s)
    return views.loop_episodes_frame(tally.episodes(since=time.time() - window_s))


@st.cache_data(ttl=FLEET_TTL, show_spinner=False)
def compensations(url: str | None, status: str | None = None, limit: int = 1000) -> list:
    """Compensations in the outbox, newest first (`Engine.compensations`), read-only."""
    filters: dict = {"limit": limit}
    if status:
        filters["status"] = status
    return engine_for(url).compensations(**filters)


@st.cache_data(ttl=FLEET_TTL, show_spinner=False)
def compensation_handlers(url: str | None) -> dict[str, float]:
    """Handler name -> last heartbeat of a live process that registered it
    (`Engine.compensations.handlers`)."""
    return engine_for(url).compensations.handlers()


def attention_compensations(url: str | None, stats: dict) -> list:
    """Failed and pending compensations for the "needs you" band; no query when the KPIs say
    there are none (the common case on a healthy fleet)."""
    out: list = []
    if stats.get("compensations_failed", 0):
        out += compensations(url, "failed", 50)
    if stats.get("compensations_pending", 0):
        out += compensations(url, "pending", 50)
    return out


@st.cache_data(ttl=FLEET_TTL, show_spinner=False)
def quarantines(url: str | None) -> list:
    """Tool quarantines in force, oldest first (`Engine.quarantines`)."""
    return engine_for(url).quarantines()


@st.cache_data(ttl=FLEET_TTL, show_spinner=False)
def incidents(url: str | None, status: str | None = "open") -> list:
    """Incidents (loops grouped by cause), open ones by default (`Engine.incidents`)."""
    return engine_for(url).incidents(status=status)


def incident(url: str | None, iid: str) -> Any:
    """Incident `iid` as it stands now (not cached: an operator acts on what it shows)."""
    return engine_for(url).incident(iid)


def session_infos(url: str | None, ids: list[str]) -> dict[str, Any]:
    """Session id -> `SessionInfo` (None for one deleted since)."""
    eng = engine_for(url)
    return {sid: eng.session_info(sid) for sid in ids}


def forget_incidents() -> None:
    """Drop the cached incidents after a remedy."""
    incidents.clear()
    audit.clear()


def forget_quarantines() -> None:
    """Drop the cached quarantine list after setting or lifting one."""
    quarantines.clear()
    audit.clear()


LABELS_TTL = 60
"""How long the precision card may miss a flag on a session labelled before it (new labels show
at once: see `label_agreement`)."""
LABELS_CHECKED = 2000
"""Most labelled sessions the fleet's precision reads."""


LABEL_CLOCK_SKEW_S = 300.0
"""How far behind this console's clock another labelling process's (the CLI on another host)
may be and its label still show at once; beyond it, within LABELS_TTL."""

_newest_label: dict[str | None, tuple[int, float]] = {}
"""Per store: id and time of the newest label this process has seen (see `label_version`)."""


def label_version(url: str | None) -> int:
    """The id of the newest operator label (audit row of action ``label``), read now; 0 before
    the first. A label set from the CLI or another tab changes it at once, so every fleet run
    asks.

    Why not simply the newest label: on SQLite that query sorts every label row (the index is
    by action and time), 65 ms at 100,000 labels. Asked for the labels since the newest one
    seen (less LABEL_CLOCK_SKEW_S), it reads an index range of the few written since: one
    query of a fraction of a millisecond. The whole read runs only on this process's first
    run, and when the row seen was purged by retention.
    """
    eng = engine_for(url)
    seen = _newest_label.get(url)
    rows = [] if seen is None else eng.audit(
        action=LABEL_ACTION, since=seen[1] - LABEL_CLOCK_SKEW_S, limit=1)
    if not rows:
        rows = eng.audit(action=LABEL_ACTION, limit=1)
    if not rows:
        _newest_label.pop(url, None)
        return 0
    _newest_label[url] = (rows[0].id, rows[0].at)
    return rows[0].id


def label_agreement(url: str | None) -> fleet_views.LabelAgreement:
    """How the live detector's flags agree with the operators' labels (`Engine.fleet.labels`): a
    session counts as flagged when it was flagged at least once.

    Cached on the newest label's id (`label_version`): a new label, from anywhere, shows on
    the next run, and the labels are read again only then. A flag on a session labelled before
    it, or labels purged by retention, show within LABELS_TTL."""
    return _label_agreement(url, label_version(url))


@st.cache_data(ttl=LABELS_TTL, max_entries=8, show_spinner=False)
def _label_agreement(url: str | None, version: int) -> fleet_views.LabelAgreement:
    """`label_agreement` as of label `version` (the cache key; not read here). Reads the
    labelled sessions (at most LABELS_CHECKED) one by one: the cost of the labels, not of the
    fleet."""
    eng = engine_for(url)
    labels = eng.fleet.labels()
    if not labels:
        return fleet_views.label_agreement({}, {})
    loops: dict[str, int] = {}
    for sid in list(labels)[:LABELS_CHECKED]:
        try:
            loops[sid] = eng.get_session(sid).info().loops
        except KeyError:  # UnknownSession: purged since it was labelled
            continue
    return fleet_views.label_agreement(labels, {s: bool(n) for s, n in loops.items()})


# -- what if ----------------------------------------------------------------------------------
# Short: another operator's declaration (or the CLI's) shows within seconds; this console's
# own clears them at once (`forget_detector`).
@st.cache_data(ttl=FLEET_TTL, show_spinner=False)
def detector_now(url: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The settings of `whatif.SETTINGS` the detector runs now (this console's engine's over
    those declared in the store, as replay compares with), and the declared settings."""
    eng = engine_for(url)
    declared = eng.fleet.detector_settings()
    return whatif_views.current_settings(eng.config.detector_factory().config, declared), declared


def detector_defaults(url: str | None) -> dict[str, Any]:
    """The settings of `whatif.SETTINGS` with nothing declared in the store: this console's
    own detector configuration (no store read)."""
    return whatif_views.current_settings(engine_for(url).config.detector_factory().config)


@st.cache_data(ttl=FLEET_TTL, show_spinner=False)
def detector_declaration(url: str | None) -> whatif_views.Declaration:
    """The settings declared in the store, and who declared them, when and why (the newest
    ``detector`` audit row)."""
    eng = engine_for(url)
    return whatif_views.declaration(eng.fleet.detector_settings(),
                                    eng.audit(action="detector", limit=1))


def detector_declared_now(url: str | None) -> dict[str, Any]:
    """The detector settings declared in the store, read now: neither this console's cache nor
    the engine's second-long one (`Engine.fleet.detector_settings`) may hide another operator's
    declaration from a dialog about to replace it. The engine writes each declaration and its
    ``detector`` audit row in one transaction, so the newest row holds them; without one
    (purged by retention) the engine's reading."""
    eng = engine_for(url)
    last = eng.audit(action="detector", limit=1)
    if last and isinstance(last[0].detail.get("settings"), dict):
        return dict(last[0].detail["settings"])
    return eng.fleet.detector_settings()


def forget_detector() -> None:
    """Drop the cached detector settings after declaring them (or going back to the defaults),
    so the next run shows the change."""
    detector_now.clear()
    detector_declaration.clear()
    replay.clear()
    audit.clear()


@st.cache_data(ttl=FLEET_TTL, show_spinner=False)
def replay_scope(url: str | None, window_s: float, status: str | None, tenant: str | None,
                 scenario: str | None, prompt_version: str | None) -> list:
    """The sessions a what-if replay covers: active in the last `window_s` seconds and matching
    the filters, most recently active first, at most SESSION_CAP + 1 (one more says "capped")."""
    return engine_for(url).sessions(status=status, tenant=tenant, scenario=scenario,
                                    prompt_version=prompt_version,
                                    updated_since=time.time() - window_s,
                                    limit=whatif_views.SESSION_CAP + 1)


@st.cache_data(ttl=300, max_entries=16, show_spinner=False)
def replay(url: str | None, settings: dict, ids: tuple[str, ...]):
    """`Engine.replay` of sessions `ids` with detector `settings` (field -> value, over the
    settings declared in the store, as the engine takes them); never writes. Cached on the
    settings and the sessions, so reading the result again costs nothing.

    Raises:
        ConfigError: a value the detector refuses.
    """
    return engine_for(url).replay(settings, where={"session": list(ids)})


# -- one session ------------------------------------------------------------------------------
class Memo:
    """What the page builds from one read of a session's history (the timeline's figure, say),
    built once per read and kept with it: a later run over the same history reuses it."""

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}
        self._lock = threading.Lock()

    def get(self, name: str, build: Callable[[], T]) -> T:
        with self._lock:
            if name in self._built:
                return self._built[name]
        value = build()
        with self._lock:
            return self._built.setdefault(name, value)


@dataclass(frozen=True)
class SessionBundle:
    """Everything the session page shows, read in one go."""

    info: SessionInfo
    steps: list[StepRecord]
    tree: list[SnapshotNode]
    messages: list[MessageRecord]
    branches: list[BranchInfo]
    suggested: str | None
    memo: Memo = field(default_factory=Memo, compare=False, repr=False)
    """Built from this bundle's history (steps, tree, messages, branches), shared by every
    bundle over the same read (`session_bundle`)."""


@dataclass(frozen=True)
class _History:
    """One read of a session's history, and what it was read against."""

    version: tuple
    """The session summary's fields that every write of the history moves (`_version`)."""
    first_seen: float
    """This console's time when it first saw `version`: the write that made it came before."""
    read_at: float
    settled: bool
    """Read when the session had been quiet for HISTORY_QUIET_S and had no step under way:
    any later write moves `version` (`_settled`)."""
    bundle: SessionBundle


HISTORY_QUIET_S = 2.0
"""A session quiet for this long moves its summary at its next write (the store moves last
activity at most once a second, `SessionInfo.updated_at`)."""
HISTORY_QUIET_BY_CLOCK_S = 30.0
"""A session whose last activity is this much older than this console's clock is taken as quiet
at once: an agent's clock this far behind the console's would be needed to be wrong."""
HISTORY_MAX_AGE_S = 60.0
"""A settled history is read again after this even if the summary did not move: a change that
moves no summary field (retention purging old steps) shows within it."""
HISTORY_ENTRIES = 64

_histories: OrderedDict[tuple[str | None, str], _History] = OrderedDict()
_histories_lock = threading.Lock()


def _version(info: SessionInfo) -> tuple:
    # A step's start moves `steps`, a message `messages`, a snapshot `head`, a rollback `epoch`
    # and `rollbacks`, a verdict `loops` and `status`, and each moves `updated_at` once quiet.
    return (info.epoch, info.updated_at, info.steps, info.messages, info.head, info.status,
            info.loops, info.rollbacks)


def _settled(info: SessionInfo, steps: Sequence[StepRecord], first_seen: float,
             now: float) -> bool:
    """Whether a history read `now` can miss no write that leaves the summary as it is: the
    session has been quiet for HISTORY_QUIET_S, by this console's own clock (it saw the summary
    that long ago) or by a wide margin of its last activity, and has no step under way (a step
    a rollback left behind ends without moving the summary)."""
    quiet = (now - first_seen >= HISTORY_QUIET_S
             or now - info.updated_at >= HISTORY_QUIET_BY_CLOCK_S)
    return quiet and not any(step.status == "running" for step in steps)


def session_bundle(url: str | None, sid: str, now: float | None = None) -> SessionBundle:
    """The session's summary (read now), and its steps (the newest SESSION_STEPS), snapshot
    tree, messages, branches and suggested target.

    The history is read again when the summary moved, and otherwise within SESSION_TTL while
    the session is busy (a step ending within a second of the last write moves no summary
    field), or within HISTORY_MAX_AGE_S once it is quiet with no step under way: on-call
    looking at a session stuck in a loop, or waiting for them, reads one summary row per visit,
    not 2,000 steps and 5,000 snapshots.

    Raises:
        UnknownSession: no such session.
    """
    now = time.time() if now is None else now
    s = engine_for(url).get_session(sid)
    info = s.info()
    version = _version(info)
    with _histories_lock:
        seen = _histories.get((url, sid))
        if seen is not None:
            _histories.move_to_end((url, sid))
    if seen is not None and seen.version == version and now - seen.read_at < (
            HISTORY_MAX_AGE_S if seen.settled else SESSION_TTL):
        return replace(seen.bundle, info=info)
    first_seen = seen.first_seen if seen is not None and seen.version == version else now
    steps = s.steps(last=SESSION_STEPS)
    bundle = SessionBundle(info=info, steps=steps, tree=s.tree(), messages=s.messages(),
                           branches=s.branches(), suggested=s.suggested_target())
    with _histories_lock:
        _histories[(url, sid)] = _History(version, first_seen, now,
                                          _settled(info, steps, first_seen, now), bundle)
        _histories.move_to_end((url, sid))
        while len(_histories) > HISTORY_ENTRIES:
            _histories.popitem(last=False)
    return bundle


def forget_histories() -> None:
    """Drop every session history read (`session_bundle`)."""
    with _histories_lock:
        _histories.clear()


def rollback_preview(url: str | None, sid: str, target: str):
    """What rolling `sid` back to `target` would take off the live line (never cached)."""
    return engine_for(url).get_session(sid).preview_rollback(target)


def session_epoch(url: str | None, sid: str) -> int:
    """The session's rollback epoch, read now (uncached)."""
    return engine_for(url).get_session(sid).info().epoch


@st.cache_data(ttl=SESSION_TTL, show_spinner=False)
def session_audit(url: str | None, sid: str, limit: int = 200) -> list[AuditEvent]:
    """The session's audit events (rollbacks, notices, …), newest first."""
    return engine_for(url).audit(session=sid, limit=limit)


def forget_session(sid: str | None = None) -> None:
    """Drop cached reads after an action, so the next run shows its effect."""
    forget_histories()
    session_audit.clear()
    compensations.clear()
    compensation_handlers.clear()
    fleet_stats.clear()
    _sessions.clear()
    table_page.clear()
    looping.clear()
    _label_agreement.clear()
    loop_episodes.clear()
    audit.clear()


# -- audit ------------------------------------------------------------------------------------
@st.cache_data(ttl=FLEET_TTL, show_spinner=False)
def audit(url: str | None, session: str | None = None, actor: str | None = None,
          action: str | None = None, since: float | None = None,
          limit: int = 1000) -> pd.DataFrame:
    events = engine_for(url).audit(session=session, actor=actor, action=action, since=since,
                                   limit=limit)
    return views.audit_frame(events)


# -- memory ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryView:
    """A session's memories as the Memory tab's table shows them (the chart: `decay_view`)."""

    items: pd.DataFrame
    """One row per memory (valid and invalidated)."""
    log: pd.DataFrame
    """Lifecycle events (promote, evict, prune) and contradiction fixes, oldest first."""


@st.cache_data(ttl=SESSION_TTL, show_spinner=False)
def memory_view(url: str | None, sid: str) -> MemoryView | None:
    """The session's memories and their lifecycle; None when none are recorded (or the
    engine has no memory module)."""
    session = engine_for(url).get_session(sid)
    # Every Session has `.memory` (typed in the engine), so no AttributeError is expected here,
    # and catching one would show a bug in the memory module as "no memories". What can fail is
    # the first use loading the retrieval stack: without it the tab shows no memories.
    try:
        memory = session.memory
        items = memory.items(include_invalid=True)
    except ImportError:
        return None
    if not items:
        return None
    return MemoryView(items=views.memory_table(items),
                      log=views.memory_log_frame([*memory.log(), *memory.corrections()],
                                                 {m.id: m.text for m in items}))


@st.cache_data(ttl=SESSION_TTL, show_spinner=False)
def decay_view(url: str | None, sid: str) -> tuple[pd.DataFrame, pd.DataFrame, float | None,
                                                   float] | None:
    """The decay chart's frames (`views.decay_frames`) and now in seconds since the first
    memory: the session's valid memories' curves (`SessionMemory.curves`, the engine's decay),
    one decade of time at a time from the first memory until every memory falls under the
    forget threshold; None without valid memories."""
    memory = engine_for(url).get_session(sid).memory
    try:
        items = memory.items()
    except ImportError:  # no retrieval stack: memory_view shows no memories either
        return None
    if not items:
        return None
    start, now = min(m.created_at for m in items), time.time()
    curves = []
    for a, b in views.decay_windows(items, start):
        curves.append(memory.curves(a, b, points=views.DECAY_POINTS))
        if views.decay_done(curves[-1], b, now):
            break
    return (*views.decay_frames(items, curves, start, now), now - start)


@st.cache_data(ttl=FLEET_TTL, show_spinner=False)
def exempt_sessions(url: str | None, active_since: float) -> list[str]:
    """Sessions opened exempt from the freeze (``freeze_exempt=True``) and active since the
    freeze began."""
    return engine_for(url).fleet.exempt_sessions(active_since)


def fleet_freeze(configured: FreezeWindow | None) -> tuple[FreezeWindow | None, str]:
    """The freeze to show, and where it comes from: the one declared in the store
    (``"store"``: every process on it follows it), else this console's configuration
    (``"config"``: agents follow it only if they were configured alike), else none."""
    declared, source = engine().fleet.freeze_in_force()
    if source == "store":
        return declared, "store"
    return (configured, "config") if configured is not None else (None, "")
