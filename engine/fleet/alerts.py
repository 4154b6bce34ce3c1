"""Alerts that page: follow the change feed and POST JSON to webhooks (`rewind alert`).

Vocabulary: an *alert* is one message about one thing that happened, named by its *key* (the
same thing seen twice has the same key, so it is sent once). A *webhook* is a URL that receives
alerts as JSON POSTs. The *state* is the worker's durable memory, one fleet document (namespace
``alerts``, key: the worker's name) in the store: the feed cursor, the keys already alerted,
the open loop episodes, the recent loops of the spike rule, and each webhook's outbox.

Rules, in the order an event is checked (enable a subset with ``rules``):

``loop``
    a step event flags a loop and the session is not already inside a loop episode (an episode
    ends when a step of the session ends ok, or the session is rolled back), so the detector
    repeating its verdict under the ``flag`` policy pages once. Key ``loop:<session>:<event>``.
``rollback``
    a rollback, automatic or by an operator. Key ``rollback:<session>:<epoch>``. The rollbacks
    of one bulk rollback (`Engine.rollback_many`) page once, with a summary, when the batch's
    closing audit event arrives (or ``bulk_wait_s`` after its start when it never does: a run
    killed midway): rule ``rollback_many``, key ``rollback_many:<batch>``, with ``batch``,
    ``count`` (rolled back), ``failed`` and a ``link`` to the console's audit page of the batch.
``compensation_failed``
    a saga compensation ended failed for good. Key ``compensation_failed:<id>:<event>``: an
    operator's retry that fails for good again pages again.
``loop_spike``
    loops (episodes) of one prompt version, or of one tool, reach ``spike_threshold`` within
    ``spike_window_s`` seconds of event time. Key ``loop_spike:<prompt_version|tool>:<value>``,
    sent at most once per window. With the ``incident`` rule on, it counts causes, not
    sessions: forty sessions looping on one broken tool are one incident, paged as one.
``incident``
    loops grouped by cause (`engine.fleet.incidents`): one page when an incident opens (key
    ``incident_open:<id>``), one when it grows past a set size (50, 100, 250, …) or reaches a
    new tenant (``incident_grow:<id>:<size>:<tenants>``), one when it closes
    (``incident_close:<id>``), each with the incident as it stands when the page is written
    (a page read after a burst tells its whole size once). While it is on, a session's ``loop``
    page is folded into its incident's: a loop of a cause whose incident this worker knows
    pages nothing more; one whose incident has not shown up waits ``fold_wait_s`` for it, then
    pages on its own (its incident was never recorded); one whose incident opened before the
    worker's first event pages that incident once. On by default (`DEFAULT_RULES`).

Every key is sent once per ``dedup_s`` (keys of spikes: once per window). Each alert body holds
``text`` (what a Slack-compatible incoming webhook shows), ``rule``, ``key``, ``session``,
``prompt_version``, ``tenant``, ``scenario``, ``tool``, ``link`` (the console's session page when
``console_url`` is set, else null), ``at`` and ``event`` (the feed cursor).

Where a first run starts: a worker with no state yet begins at ``start`` (see `AlertWorker`):
the whole feed by default, the newest event (``"now"``, what `rewind alert` does unless given
``--since``), or the first event at or after a unix time. It saves that cursor at once, so what
happens after it pages even if it dies before its first round ends. A worker with a state resumes
from its cursor; ``start`` is ignored then.

Delivery: a new alert is first written to the outbox of every webhook, in the same state write
that moves the cursor past its event; so a worker killed and restarted neither skips an alert
(it is in the outbox or after the cursor) nor alerts twice (its key is remembered). The state is
saved after every page of the feed it reads, whatever the webhooks are doing. Each webhook has a
sender thread of its own that sends its outbox in order: a 2xx removes the alert, a failure
(connection refused, the deadline passed, a non-2xx answer, a redirect: redirects are never
followed) keeps it for a retry after ``backoff_s`` doubling per attempt (at most
``max_backoff_s``), jittered to between half and all of that, and never sooner than the
webhook's own ``Retry-After`` (Slack sends one with a 429; honoured up to an hour), given up
after ``attempts`` tries. POSTs go through httpx, with proxies from the environment
(``HTTPS_PROXY``, ``NO_PROXY``, …). So a dead, failing or slow webhook holds
back only its own alerts, never the feed or the other webhooks. Each POST has a total deadline
(``timeout_s``, for connecting, sending and the answer's status line), so a webhook that
trickles bytes is cut off too. A webhook sends at most ``rate_per_minute`` alerts a minute; the
rest wait in its outbox. Alerts that need someone now (``loop``, ``loop_spike``,
``compensation_failed``, an incident's opening and growth) have a budget of their own and are
sent before notices (``rollback``, ``rollback_many``, an incident's close): a wave of notices
never holds a new loop back. Delivery is at least
once: a worker killed after a POST and before it saved the outcome sends that alert again,
with the same ``key`` for the receiver to drop.

Markup and secrets: the ``text`` is Slack markup, so every ``&``, ``<`` and ``>`` that comes from
a session (its id, meta, tool names, the detector's explanation) is escaped as Slack asks
(`slack_escape`): ``<!channel>`` arrives as text, not as a mention; the one link is the console's,
with the session id percent-encoded. A webhook URL with credentials (``https://user:pw@host/…``)
is sent with basic authorization. Logs and error messages name a webhook by scheme, host and
id only (`webhook_label`): its credentials, path and query (an incoming webhook's path is its
secret) never appear.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

from engine.fleet import incidents
from engine.fleet.webhooks import (
    Poster,
    check_webhook,
    http_post,
    redact_webhook,
    retry_delay,
    webhook_id,
    webhook_label,
)
from engine.records import Event

log = logging.getLogger("rewind.alerts")

NAMESPACE = "alerts"
"""Fleet document namespace of the workers' states."""
RULES = ("loop", "rollback", "compensation_failed", "loop_spike", "incident")
"""Every rule, in the order they are checked."""
DEFAULT_RULES = RULES
"""The rules a worker given none follows: all of them. With ``incident`` on, a session's loop
pages through its incident (one page per cause), not on its own (see the module docstring)."""

_INCIDENT_EVENTS = ("incident_open", "incident_grow", "incident_close")
WATCH_ONLY_TEXT = ("watch-only (OpenTelemetry): Rewind does not run this agent, so nothing "
                   "holds it and there is nothing to release; stop or fix it where it runs")
"""What a loop page says of a session Rewind only watches (`rewind otlp`)."""


def _cut_text(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"

URGENT = frozenset({"loop", "loop_spike", "compensation_failed", "incident"})
"""Rules whose alerts need someone now: sent before notices, with a rate budget of their own
(an incident's close is a notice)."""

Start = float | Literal["now"] | None
"""Where a worker without a state begins: None the whole feed, "now" the newest event, a unix
time the first event at or after it."""


@dataclass(frozen=True)
class AlertConfig:
    """What pages and how hard the worker tries. Defaults suit a freeze on-call rota."""

    rules: tuple[str, ...] = DEFAULT_RULES
    """Enabled rules (see the module docstring)."""
    console_url: str | None = None
    """Base URL of the console; alerts about a session link to its session page."""
    spike_threshold: int = 5
    """Loops of one prompt version (or tool) within the window that make a spike."""
    spike_window_s: float = 600.0
    """The spike rule's window, in seconds of event time."""
    dedup_s: float = 86400.0
    """A key is sent at most once in this many seconds."""
    attempts: int = 8
    """Tries per alert and webhook before it is given up (logged)."""
    backoff_s: float = 1.0
    """Wait before the first retry; doubles per attempt."""
    max_backoff_s: float = 300.0
    """Longest wait between retries."""
    timeout_s: float = 5.0
    """Seconds one POST may take in all (connecting, sending, the answer's status line)."""
    rate_per_minute: int = 60
    """Alerts one webhook receives at most per minute (the rest wait in its outbox)."""
    outbox_limit: int = 1000
    """Alerts kept per webhook while it is down; the oldest are dropped (logged) past it,
    notices before urgent alerts."""
    bulk_wait_s: float = 600.0
    """A bulk rollback whose closing audit event has not arrived this long after its start
    (a run killed midway) pages its summary anyway."""
    fold_wait_s: float = 30.0
    """With the ``incident`` rule on, a session's loop waits this long (seconds) for its
    incident to be seen; past it, the loop pages on its own (its incident was never recorded:
    the agent died between its step and the incident's write, or it runs an older release)."""

    def __post_init__(self) -> None:
        unknown = [r for r in self.rules if r not in RULES]
        if unknown:
            raise ValueError(f"unknown alert rule {unknown[0]!r}; rules are {', '.join(RULES)}")
        if self.spike_threshold < 1 or self.spike_window_s <= 0 or self.attempts < 1:
            raise ValueError("spike_threshold and attempts must be >= 1, the window > 0")
        if not self.timeout_s > 0:
            raise ValueError("timeout_s must be > 0: it is the deadline of one POST")
        if not self.fold_wait_s >= 0:
            raise ValueError("fold_wait_s must be >= 0 seconds")


# -- text -------------------------------------------------------------------------------------
def slack_escape(text: str) -> str:
    """`text` with ``&``, ``<`` and ``>`` as the entities Slack asks for, so nothing in it is
    read as markup (a mention like ``<!channel>``, a link with a label of its own)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _clause(text: str) -> str:
    """`text` without the full stop it may end with, to go on with ``;`` or end with ``.``."""
    return text.rstrip().rstrip(".").rstrip()


# -- the worker's state -----------------------------------------------------------------------
@dataclass
class _State:
    cursor: int = 0
    seen: dict[str, float] = field(default_factory=dict)
    """key -> unix time until which it is not sent again."""
    looping: dict[str, int] = field(default_factory=dict)
    """session -> event id that opened its loop episode."""
    recent: list[list[Any]] = field(default_factory=list)
    """[at, prompt_version, tool] of recent loop episodes (the spike window)."""
    outbox: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """webhook id -> pending deliveries {key, body, attempts, next_at, error}."""
    sent: dict[str, list[float]] = field(default_factory=dict)
    """webhook id -> times of the POSTs of notices in the last minute (rate limit); the key
    ``<webhook id>!`` holds those of urgent alerts (their own budget)."""
    batches: dict[str, dict[str, Any]] = field(default_factory=dict)
    """bulk rollback id -> what its events said so far (start, actor, planned, rolled back)."""
    causes: dict[str, str] = field(default_factory=dict)
    """cause key -> id of its open incident, as the feed told (the ``incident`` rule)."""
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    """session -> its loop page waiting for the session's incident to be seen: {cause, at,
    alert}; dropped when the incident shows up, sent after ``fold_wait_s`` otherwise."""

    @classmethod
    def load(cls, doc: Any) -> _State:
        if not isinstance(doc, dict):
            return cls()
        return cls(
            cursor=int(doc.get("cursor") or 0),
            seen=dict(doc.get("seen") or {}),
            looping=dict(doc.get("looping") or {}),
            recent=list(doc.get("recent") or []),
            outbox={k: list(v) for k, v in (doc.get("outbox") or {}).items()},
            sent={k: list(v) for k, v in (doc.get("sent") or {}).items()},
            batches={k: dict(v) for k, v in (doc.get("batches") or {}).items()},
            causes=dict(doc.get("causes") or {}),
            pending={k: dict(v) for k, v in (doc.get("pending") or {}).items()},
        )

    def dump(self) -> dict[str, Any]:
        return {
            "cursor": self.cursor,
            "seen": self.seen,
            "looping": self.looping,
            "recent": self.recent,
            "outbox": self.outbox,
            "sent": self.sent,
            "batches": self.batches,
            "causes": self.causes,
            "pending": self.pending,
        }


def _urgent(item: dict[str, Any]) -> bool:
    """Whether an outbox item needs someone now (see `URGENT`; an incident's close does not)."""
    rule = (item.get("body") or {}).get("rule")
    return rule in URGENT and not str(item.get("key") or "").startswith("incident_close:")


class _Sender:
    """One webhook's sender thread: it sends that webhook's outbox when asked (a *pass*), so a
    slow or dead webhook holds back only its own alerts. Counters are guarded by the worker's
    lock; passes by the condition."""

    def __init__(self, worker: AlertWorker, wid: str) -> None:
        self.worker = worker
        self.wid = wid
        self.url = worker.webhooks[wid]
        self.label = webhook_label(self.url)
        self.delivered = self.failed = 0
        self.last_error = ""
        self._asked = self._done = 0
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def ask(self) -> int:
        """Ask for a pass over the outbox; returns its ticket for `wait`."""
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name=f"rewind-alert-{self.wid[:8]}", daemon=True)
                self._thread.start()
            self._asked += 1
            self._cond.notify_all()
            return self._asked

    def wait(self, ticket: int) -> None:
        """Until the pass of `ticket` is done, or the worker is stopped."""
        with self._cond:
            while self._done < ticket and not self.worker.stopped:
                # A short wait, so a stop asked by a signal handler is seen promptly.
                self._cond.wait(0.1)

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._done >= self._asked and not self.worker.stopped:
                    self._cond.wait(1.0)
                if self.worker.stopped:
                    return
                ticket = self._asked
            try:
                self.worker._send_due(self)
            except Exception:  # noqa: BLE001 - the sender must outlive any one bad alert
                log.exception("webhook %s: sending failed", self.label)
            with self._cond:
                self._done = ticket
                self._cond.notify_all()


class AlertWorker:
    """Follows the feed of `engine` and pages `webhooks`; `run()` loops, `run_once()` is one
    round (read new events, queue their alerts, deliver what is due, and wait for that).

    Args:
        engine: an `Engine` (anything with ``events``, ``get_session``, ``fleet_documents``,
            ``put_fleet_documents``, ``clock``).
        webhooks: the URLs to POST to.
        config: rules, thresholds, retries.
        name: the state's key: two workers with different names page independently.
        post: sends one POST (tests pass their own); default `http_post`.
        page: events read per query of the feed.
        start: where a worker without a state begins (see `Start`); ignored when it has one.

    Raises:
        ValueError: no webhook, or one that is not http(s).
    """

    def __init__(
        self,
        engine: Any,
        webhooks: Sequence[str],
        config: AlertConfig | None = None,
        *,
        name: str = "default",
        post: Poster = http_post,
        page: int = 500,
        start: Start = None,
    ) -> None:
        if not webhooks:
            raise ValueError("give at least one webhook URL")
        self.engine = engine
        self.webhooks = {webhook_id(check_webhook(u)): u for u in webhooks}
        self.config = config or AlertConfig()
        self.name = name
        self.post = post
        self.page = page
        self.start = start
        self.failures: dict[str, str] = {}
        """After `run_once`: webhook label -> what went wrong, for each webhook that failed in
        the round or still holds alerts that failed (redacted)."""
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the state: the feed reader and the senders share it
        self._state: _State | None = None
        self._resumed = False
        self._dirty = False
        self._senders = {wid: _Sender(self, wid) for wid in self.webhooks}
        self._meta: dict[str, dict[str, Any]] = {}
        self._incidents_told: dict[str, tuple[int, set[str]]] = {}
        """Incident id -> (size, tenants) the last page about it told."""

    @property
    def stopped(self) -> bool:
        """True once `stop` or `close` was called."""
        return self._stop.is_set()

    # -- state ----------------------------------------------------------------------------------
    def start_point(self) -> tuple[int, bool]:
        """Load the state, or on a first run place the cursor at `start` and save it.

        Returns:
            The cursor (the feed is read after that event id) and whether a saved state was
            resumed (False: a first run).
        """
        state = self._loaded()
        return state.cursor, self._resumed

    def _loaded(self) -> _State:
        if self._state is None:
            doc = self.engine.documents.fleet(NAMESPACE).get(self.name)
            self._resumed = doc is not None
            if doc is None:
                first = self.start
                at = math.inf if first == "now" else first
                state = _State(cursor=0 if at is None else self._cursor_before(float(at)))
            else:
                state = _State.load(doc)
            self._state = state
            if doc is None:
                self._save()  # from here on, what happens pages even if this run dies
        return self._state

    def _cursor_before(self, at: float) -> int:
        """The cursor after which every event is at or after unix time `at` (the last id for
        infinity), found by bisecting the ids: O(log n) one-event queries."""

        def earlier(cursor: int) -> bool:  # is the first event after `cursor` before `at`?
            ahead = self.engine.events(since=cursor, limit=1)
            return bool(ahead) and ahead[0].at < at

        if not earlier(0):
            return 0
        low, high = 0, 1
        while earlier(high):
            low, high = high, high * 2
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if earlier(middle) else (low, middle)
        return high

    def _save(self) -> None:
        with self._lock:
            assert self._state is not None
            doc = copy.deepcopy(self._state.dump())
            self._dirty = False
        try:
            self.engine.documents.put_fleet(NAMESPACE, {self.name: doc})
        except Exception:
            with self._lock:
                self._dirty = True
            raise

    def _save_if_dirty(self) -> None:
        if self._dirty:
            self._save()

    # -- rounds ---------------------------------------------------------------------------------
    def run_once(self) -> dict[str, int]:
        """Read the events after the cursor, queue their alerts, deliver what is due (each
        webhook on its own thread, each POST within ``timeout_s``) and wait for that.

        Returns:
            ``events`` read, ``queued`` alerts, ``delivered`` and ``failed`` POSTs, ``waiting``
            alerts kept in the outboxes of webhooks that failed (for a retry): every alert
            there, also those queued behind the one that failed and not tried yet. `failures`
            says which webhooks failed and why.
        """
        if "incident" in self.config.rules:
            self._close_quiet_incidents()
        read, queued = self._read_feed()
        before = {wid: (s.delivered, s.failed) for wid, s in self._senders.items()}
        tickets = {wid: s.ask() for wid, s in self._senders.items()}
        for wid, sender in self._senders.items():
            sender.wait(tickets[wid])
        with self._lock:
            delivered = sum(s.delivered - before[w][0] for w, s in self._senders.items())
            failed = sum(s.failed - before[w][1] for w, s in self._senders.items())
            failures = {s.label: s.last_error for w, s in self._senders.items()
                        if s.failed > before[w][1]}
            waiting = 0
            state = self._state  # loaded by _read_feed (loading here would take the lock)
            for wid, box in (state.outbox if state else {}).items():
                kept = [item for item in box if item.get("attempts")]
                # a webhook that failed holds back what is queued behind the failed alert too
                waiting += len(box) if kept and wid in self.webhooks else 0
                if kept and wid in self.webhooks:
                    failures.setdefault(self._senders[wid].label,
                                        kept[0].get("error") or "an earlier try failed")
        self.failures = failures
        self._save_if_dirty()
        return {"events": read, "queued": queued, "delivered": delivered, "failed": failed,
                "waiting": waiting}

    def _close_quiet_incidents(self) -> None:
        """Write the close of quiet incidents, so their close pages without a new loop."""
        close = getattr(getattr(self.engine, "fleet", None), "close_quiet_incidents", None)
        if close is None:
            return
        try:
            close()
        except Exception as exc:  # noqa: BLE001 - paging goes on; the next round tries again
            log.warning("could not close quiet incidents: %s", exc)

    def run(self, interval_s: float = 1.0, rounds: int | None = None) -> None:
        """Read the feed every `interval_s` seconds until `stop()` (or `rounds` rounds); each
        round asks the senders to deliver what is due and does not wait for them."""
        done = 0
        try:
            while not self._stop.is_set() and (rounds is None or done < rounds):
                try:
                    if "incident" in self.config.rules:
                        self._close_quiet_incidents()
                    self._read_feed()
                    for sender in self._senders.values():
                        sender.ask()
                    self._save_if_dirty()
                except Exception as exc:  # noqa: BLE001 - a store hiccup must not end the pager
                    log.warning("alert round failed: %s", exc)
                done += 1
                self._stop.wait(interval_s)
        finally:  # stopped, or Ctrl-C: keep the outcomes of the last deliveries
            try:
                self._save_if_dirty()
            except Exception as exc:  # noqa: BLE001 - at least once: a lost outcome is resent
                log.warning("saving the alert state failed: %s", exc)

    def stop(self) -> None:
        """Ask `run` (and a `run_once` waiting for its webhooks) to return soon; safe in a
        signal handler."""
        self._stop.set()

    def close(self) -> None:
        """Stop, and let the sender threads end (a POST under way is abandoned: its alert is
        sent again by the next run, at least once)."""
        self.stop()
        for sender in self._senders.values():
            sender.wake()

    def _read_feed(self) -> tuple[int, int]:
        state = self._loaded()
        read = queued = 0
        while not self._stop.is_set():
            events = self.engine.events(since=state.cursor, limit=self.page)
            alerts = []
            for ev in events:
                alerts += self._alerts(state, ev)
            if len(events) < self.page:  # caught up: bulk runs that never closed, loops
                alerts += self._stale_batches(state)  # whose incident never showed up
                alerts += self._unfolded_loops(state)
            with self._lock:
                queued += self._queue(state, alerts)
                if events:
                    state.cursor = events[-1].id
                    self._prune(state)
            read += len(events)
            if events:
                self._save()  # alerts queued and cursor moved: one write, page by page
            if len(events) < self.page:
                break
        return read, queued

    # -- rules ----------------------------------------------------------------------------------
    def _alerts(self, state: _State, ev: Event) -> list[dict[str, Any]]:
        rules = self.config.rules
        sid, data = ev.session, ev.data or {}
        out: list[dict[str, Any]] = []
        if ev.type in _INCIDENT_EVENTS:
            sentence = self._note_incident(state, ev, data)
            if "incident" in rules:
                out += self._incident_alerts(ev, data, sentence)
            return out
        if ev.type in ("rollback_many.start", "rollback_many") and data.get("batch"):
            return self._batch_event(state, ev, data)
        if sid is None:
            return out
        if ev.type == "step" and not data.get("late"):
            if data.get("looping"):
                if sid in state.looping:
                    return out
                state.looping[sid] = ev.id
                meta, tool, verdict, cause = self._loop_facts(sid, data.get("n"))
                grouped = "incident" in rules
                state.recent.append([ev.at, meta.get("prompt_version"), tool,
                                     cause if grouped else None])
                if "loop" in rules:
                    alert, sentence = self._loop_alert(ev, meta, tool, verdict)
                    if not grouped:
                        out.append(alert)
                    elif cause not in state.causes:  # folded at once into a known incident
                        state.pending[sid] = {"cause": cause, "at": self.engine.clock(),
                                              "alert": alert, "sentence": sentence}
                if "loop_spike" in rules:
                    out += self._spikes(state, ev, meta, tool)
            elif data.get("status") == "ok":
                state.looping.pop(sid, None)
        elif ev.type == "rollback":
            state.looping.pop(sid, None)
            if data.get("batch"):  # one of a bulk rollback: its summary pages, not each one
                bulk = state.batches.setdefault(str(data["batch"]), {"at": ev.at})
                bulk["rolled"] = int(bulk.get("rolled") or 0) + 1
                bulk.setdefault("actor", data.get("actor"))
                return out
            if "rollback" in rules:
                meta = self._meta_of(sid)
                who = data.get("actor") or "someone"
                batch = f" (bulk {data['batch']})" if data.get("batch") else ""
                target = data.get("target")
                to = f"snapshot {target}" if target else "an earlier snapshot"
                undone = _count(int(data.get("steps") or 0), "step")
                out.append(
                    self._alert(
                        "rollback",
                        f"rollback:{sid}:{data.get('epoch')}",
                        ev,
                        meta,
                        None,
                        f"Session {sid} was rolled back to {to} by {who}{batch}: {undone} "
                        "undone.",
                    )
                )
        elif ev.type == "compensation" and data.get("status") == "failed":
            if "compensation_failed" in rules:
                meta = self._meta_of(sid)
                out.append(
                    self._alert(
                        "compensation_failed",
                        f"compensation_failed:{data.get('id')}:{ev.id}",
                        ev,
                        meta,
                        None,
                        f"Compensation {data.get('name') or 'unnamed'} (#{data.get('id')}) of "
                        f"session {sid} failed for good: its side effect is NOT undone.",
                    )
                )
        return out

    def _batch_event(self, state: _State, ev: Event, data: dict[str, Any]
                     ) -> list[dict[str, Any]]:
        """A bulk rollback's start (remember it) or its closing summary (page it once)."""
        bid = str(data["batch"])
        batch = state.batches.setdefault(bid, {"at": ev.at})
        batch.setdefault("actor", data.get("actor"))
        if ev.type == "rollback_many.start":
            batch["at"] = min(float(batch["at"]), ev.at)
            batch["planned"] = data.get("sessions")
            return []
        state.batches.pop(bid, None)
        failed = data.get("failed") or {}
        return self._batch_alert(ev, bid, data.get("actor"), int(data.get("rolled_back") or 0),
                                 len(failed), data.get("sessions"), ended=True)

    def _stale_batches(self, state: _State) -> list[dict[str, Any]]:
        """Summaries of bulk rollbacks whose closing event is overdue (a run killed midway)."""
        now = self.engine.clock()
        out = []
        for bid, batch in list(state.batches.items()):
            if float(batch.get("at") or 0.0) + self.config.bulk_wait_s <= now:
                del state.batches[bid]
                ev = Event(id=state.cursor, at=now, session=None, type="rollback_many",
                           data={})
                out += self._batch_alert(ev, bid, batch.get("actor"),
                                         int(batch.get("rolled") or 0), 0,
                                         batch.get("planned"), ended=False)
        return out

    def _batch_alert(self, ev: Event, bid: str, actor: Any, rolled: int, failed: int,
                     planned: Any, *, ended: bool) -> list[dict[str, Any]]:
        """The one page of bulk rollback `bid`: how many, by whom, the batch id, a link."""
        if "rollback" not in self.config.rules:
            return []
        who = actor or "someone"
        text = (f"Bulk rollback {bid} by {who}: {_count(rolled, 'session')} rolled back"
                + (f", {failed} failed" if failed else ""))
        if not ended:
            text += (f" so far, of {planned} planned; no end on record" if planned is not None
                     else " so far; no end on record")
        link = None
        if self.config.console_url:
            link = (f"{self.config.console_url.rstrip('/')}/audit?batch="
                    f"{quote(bid, safe='')}")
        alert = self._alert("rollback_many", f"rollback_many:{bid}", ev, {}, None, text + ".",
                            link=link)
        alert["body"].update({"batch": bid, "count": rolled, "failed": failed})
        return [alert]

    def _spikes(
        self, state: _State, ev: Event, meta: dict[str, Any], tool: str | None
    ) -> list[dict[str, Any]]:
        cfg = self.config
        start = ev.at - cfg.spike_window_s
        state.recent = [r for r in state.recent if r[0] >= start]
        out = []
        for index, label, value in (
            (1, "prompt_version", meta.get("prompt_version")),
            (2, "tool", tool),
        ):
            if value is None:
                continue
            same = [r for r in state.recent if r[index] == value]
            if "incident" in cfg.rules:  # loops of one cause are one incident, paged as one
                count = len({(r[3] if len(r) > 3 and r[3] else f"#{n}")
                             for n, r in enumerate(same)})
            else:
                count = len(same)
            if count >= cfg.spike_threshold:
                key = f"loop_spike:{label}:{value}"
                minutes = cfg.spike_window_s / 60
                window = _count(int(minutes), "minute") if minutes.is_integer() else (
                    f"{minutes:g} minutes")
                what = (f"Loops of {_count(count, 'cause')}" if "incident" in cfg.rules
                        else _count(count, 'loop'))
                out.append(
                    self._alert(
                        "loop_spike",
                        key,
                        ev,
                        meta,
                        tool,
                        f"{what} of {label.replace('_', ' ')} {value} in the "
                        f"last {window} (threshold {cfg.spike_threshold}).",
                        ttl=cfg.spike_window_s,
                    )
                )
        return out

    def _incident_alerts(self, ev: Event, data: dict[str, Any], sentence: str = ""
                         ) -> list[dict[str, Any]]:
        """The page for an incident event (see the ``incident`` rule), with the incident as it
        stands now: a page read after a burst tells its whole size once. `sentence`: the loop
        page of the session that opened it, folded into the opening page."""
        iid = str(data.get("id") or "")
        now: Any = None
        try:
            now = self.engine.incident(iid)
        except (KeyError, AttributeError):  # unknown since, or an engine without incidents
            now = None
        tool = (now.tool if now else data.get("tool")) or "(agent turn)"
        size = len(now.sessions) if now else int(data.get("sessions") or 0)
        tenants = list(now.tenants) if now else list(data.get("tenants") or [])
        sig = (now.signature if now else data.get("signature")) or "(no error)"
        states = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in now.counts.items()) \
            if now else ""
        told = self._incidents_told.get(iid)
        watched = sum(1 for sid in (now.sessions[:200] if now else [])
                      if self._meta_of(sid).get("watch_only"))
        about = (f"{tool} loops ({(now.rule if now else data.get('rule')) or 'loop'}) on "
                 f"\"{_cut_text(sig, 160)}\": {_count(size, 'session')}"
                 + (f" ({states})" if states else "")
                 + (f", tenants {', '.join(tenants)}" if tenants else "")
                 + (f"; {watched} of them watch-only (OpenTelemetry): Rewind does not run "
                    "those agents, so nothing holds them and there is nothing to release; stop "
                    "or fix them where they run" if watched else ""))
        opener = data.get("session") if ev.type == "incident_open" else None
        if ev.type == "incident_open":
            first = f" (first: session {opener})" if opener and size > 1 else (
                f" (session {opener})" if opener else "")
            key, text = f"incident_open:{iid}", f"Incident {iid} opened{first}: {about}."
            if sentence:
                text += f" {sentence}"
        elif ev.type == "incident_grow":
            if told is not None and size <= told[0] and set(tenants) <= told[1]:
                return []
            new = [t for t in tenants if told is None or t not in told[1]]
            spread = f"; spread to tenant {', '.join(new)}" if new and told else ""
            key = f"incident_grow:{iid}:{size}:{','.join(sorted(tenants))}"
            text = f"Incident {iid} grew: {about}{spread}."
        else:
            by = data.get("by") or data.get("actor") or "someone"
            why = _clause(str((now.close_reason if now else None) or ""))
            key = f"incident_close:{iid}"
            text = f"Incident {iid} closed by {by}" + (f" ({why})" if why else "") + \
                f": {about}."
        self._incidents_told[iid] = (size, set(tenants))
        if len(self._incidents_told) > 10000:
            self._incidents_told.clear()
        alert = self._alert("incident", key, ev, {}, None if tool == "(agent turn)" else tool,
                            text)
        body = alert["body"]
        body["incident"] = iid
        body["session"] = opener
        body["tenant"] = ", ".join(tenants) or None
        if self.config.console_url:
            link = (f"{self.config.console_url.rstrip('/')}/incident?incident="
                    f"{quote(iid, safe='')}")
            body["link"] = link
            body["text"] += f" <{slack_escape(link).replace('|', '%7C')}>"
        return [alert]

    def _loop_facts(self, sid: str, n: Any
                    ) -> tuple[dict[str, Any], str | None, dict | None, str]:
        """(the session's meta, the looping step's tool, its verdict, the loop's cause key as
        `incidents.note_loop` computes it)."""
        meta = self._meta_of(sid)
        try:
            steps = self.engine.get_session(sid).steps(last=20)
        except KeyError:  # deleted since
            return meta, None, None, ""
        for rec in steps:
            if rec.n == n:
                verdict = dict(rec.verdict or {})
                rule = verdict.get("rule") or "loop"
                return meta, rec.tool, rec.verdict, incidents.cause_key(
                    rec.tool, incidents.signature(rec.error, rec.args), rule)
        return meta, None, None, ""

    def _loop_alert(self, ev: Event, meta: dict[str, Any], tool: str | None,
                    verdict: dict | None) -> tuple[dict[str, Any], str]:
        """The ``loop`` page of session ``ev.session`` and its sentence: the rule, why, the
        policy, and what on-call can do (a session waiting for on-call; one Rewind only
        watches)."""
        found = verdict or {}
        rule = found.get("rule") or "loop"
        why = _clause(found.get("explanation") or "") or "the detector flagged a loop"
        policy = found.get("policy")
        if policy:  # e.g. "; policy flag (freeze: National Day change freeze)"
            reason = found.get("policy_reason")
            why += f"; policy {policy}" + (f" ({reason})" if reason else "")
        if meta.get("watch_only"):
            why += f"; {WATCH_ONLY_TEXT}"
        elif found.get("waiting"):
            why += "; it waits for on-call: roll it back, release it or stop it"
        sentence = f"Loop detected in session {ev.session} ({rule}): {why}."
        return self._alert("loop", f"loop:{ev.session}:{ev.id}", ev, meta, tool,
                           sentence), sentence

    # -- loops folded into their incident (the ``incident`` rule) -----------------------------
    def _note_incident(self, state: _State, ev: Event, data: dict[str, Any]) -> str:
        """Follow which causes have an open incident; a loop page waiting for its incident is
        folded into the incident's page once the incident shows up. Returns the loop sentence
        of the session that opened it ("" when none waited)."""
        iid = str(data.get("id") or "")
        if not iid:
            return ""
        cause = incidents.cause_key(data.get("tool"), str(data.get("signature") or ""),
                                    str(data.get("rule") or "loop"))
        if ev.type == "incident_close":
            if state.causes.get(cause) == iid:
                del state.causes[cause]
            return ""
        state.causes[cause] = iid
        if len(state.causes) > 5000:  # the oldest first: dicts keep their order
            for old in list(state.causes)[:1000]:
                del state.causes[old]
        opener, sentence = data.get("session"), ""
        for sid, wait in list(state.pending.items()):
            if wait.get("cause") == cause or sid == opener:
                if sid == opener and ev.type == "incident_open":
                    sentence = str(wait.get("sentence") or "")
                del state.pending[sid]
        return sentence

    def _unfolded_loops(self, state: _State) -> list[dict[str, Any]]:
        """Settle the loop pages waiting for their incident (the feed is caught up): one whose
        incident is known is dropped (folded into its page); one whose cause has an open
        incident in the store that this worker never paged (it opened before the worker's
        first event) pages that incident once; one whose incident has not shown up within
        ``fold_wait_s`` pages on its own."""
        out: list[dict[str, Any]] = []
        now = self.engine.clock()
        for sid, wait in list(state.pending.items()):
            cause = str(wait.get("cause") or "")
            if cause in state.causes:
                del state.pending[sid]
                continue
            iid = self.engine.fleet.open_incident_of(cause) if cause else None
            if iid is not None:
                state.causes[cause] = iid
                data = {"id": iid, "session": sid}
                out += self._incident_alerts(
                    Event(id=state.cursor, at=now, session=None, type="incident_open",
                          data=data), data, str(wait.get("sentence") or "")
                ) if "incident" in self.config.rules else []
                del state.pending[sid]
            elif now - float(wait.get("at") or 0.0) >= self.config.fold_wait_s:
                out.append(wait["alert"])
                del state.pending[sid]
        return out

    def _meta_of(self, sid: str) -> dict[str, Any]:
        meta = self._meta.get(sid)
        if meta is None:
            try:
                meta = dict(self.engine.get_session(sid).info().meta)
            except KeyError:  # deleted since
                meta = {}
            if len(self._meta) > 10000:
                self._meta.clear()
            self._meta[sid] = meta
        return meta

    def _alert(
        self,
        rule: str,
        key: str,
        ev: Event,
        meta: dict[str, Any],
        tool: str | None,
        text: str,
        ttl: float | None = None,
        link: str | None = None,
    ) -> dict[str, Any]:
        if link is None and self.config.console_url and ev.session is not None:
            link = (f"{self.config.console_url.rstrip('/')}/session?session="
                    f"{quote(ev.session, safe='')}")
        # Everything in `text` is plain text but the console link Rewind adds ("|" would end
        # the link's address and start a label of its own).
        shown = f" <{slack_escape(link).replace('|', '%7C')}>" if link else ""
        body = {
            "text": f"[Rewind] {slack_escape(text)}{shown}",
            "rule": rule,
            "key": key,
            "session": ev.session,
            "prompt_version": meta.get("prompt_version"),
            "tenant": meta.get("tenant"),
            "scenario": meta.get("scenario"),
            "tool": tool,
            "link": link,
            "at": ev.at,
            "event": ev.id,
        }
        return {"key": key, "body": body, "ttl": ttl}

    # -- queue and delivery -----------------------------------------------------------------------
    def _queue(self, state: _State, alerts: Iterable[dict[str, Any]]) -> int:
        now = self.engine.clock()
        queued = 0
        for alert in alerts:
            key = alert["key"]
            if state.seen.get(key, 0.0) > now:
                continue
            state.seen[key] = now + (alert["ttl"] or self.config.dedup_s)
            for wid in self.webhooks:
                box = state.outbox.setdefault(wid, [])
                box.append({"key": key, "body": alert["body"], "attempts": 0, "next_at": 0.0,
                            "error": None})
                if len(box) > self.config.outbox_limit:
                    notices = [i for i, x in enumerate(box) if not _urgent(x)]
                    dropped = box.pop(notices[0] if notices else 0)
                    log.warning(
                        "webhook %s: outbox full, dropped alert %s",
                        webhook_label(self.webhooks[wid]),
                        dropped["key"],
                    )
            queued += 1
        return queued

    def _prune(self, state: _State) -> None:
        now = self.engine.clock()
        state.seen = {k: until for k, until in state.seen.items() if until > now}
        for wid in list(state.outbox):
            if wid not in self.webhooks and not state.outbox[wid]:
                del state.outbox[wid]

    def _send_due(self, sender: _Sender) -> None:
        """Send one webhook's due alerts in order, outside the lock; stop at its first failure
        (order kept: the alerts behind it wait for its retry)."""
        cfg = self.config
        while not self._stop.is_set():
            with self._lock:
                state = self._state
                if state is None:  # asked before the feed was read: nothing queued yet
                    return
                now = time.time()
                box = state.outbox.get(sender.wid) or []
                item, budget = None, ""
                # Urgent alerts first, each kind within its own budget; in each kind, in order.
                for urgent, name in ((True, sender.wid + "!"), (False, sender.wid)):
                    sent = [t for t in state.sent.get(name, []) if t > now - 60.0]
                    state.sent[name] = sent
                    first = next((x for x in box if _urgent(x) is urgent), None)
                    if first is not None and len(sent) < cfg.rate_per_minute:
                        item, budget = first, name
                        break
                if item is None or item["next_at"] > now:
                    return
                body = json.dumps(item["body"], ensure_ascii=False).encode("utf-8")
            error, asked = self._post(sender.url, body)
            with self._lock:
                self._dirty = True
                state.sent.setdefault(budget, []).append(time.time())
                box = state.outbox.get(sender.wid) or []
                # The reader may have dropped it meanwhile (a full outbox).
                index = next((i for i, x in enumerate(box) if x is item), None)
                if error is None:
                    sender.delivered += 1
                    if index is not None:
                        del box[index]
                    continue
                sender.failed += 1
                sender.last_error = error
                attempts = int(item["attempts"]) + 1
                if attempts >= cfg.attempts:
                    log.error("webhook %s: gave up alert %s after %s (%s)", sender.label,
                              item["key"], _count(attempts, "try"), error)
                    if index is not None:
                        del box[index]
                    continue
                delay = retry_delay(attempts, cfg.backoff_s, cfg.max_backoff_s, asked)
                log.warning("webhook %s: alert %s failed (%s); retry in %.1f s", sender.label,
                            item["key"], error, delay)
                if index is not None:
                    box[index] = {**item, "attempts": attempts, "next_at": time.time() + delay,
                                  "error": error}
                return

    def _post(self, url: str, body: bytes) -> tuple[str | None, float | None]:
        """(None when `url` took `body`, else what went wrong, without the webhook's secrets;
        the seconds it asked to wait before the next POST, its ``Retry-After``, or None)."""
        try:
            status = self.post(url, body, self.config.timeout_s)
        except Exception as exc:  # noqa: BLE001 - unreachable, TLS, a garbled answer, …
            return redact_webhook(f"{type(exc).__name__}: {exc}", url), None
        asked = getattr(status, "retry_after", None)
        if 200 <= status < 300:
            return None, None
        if 300 <= status < 400:
            return (f"HTTP {status}: a redirect, which is not followed (a webhook must take the "
                    "POST itself); give its final URL"), asked
        if status == 429 and asked is not None:
            return f"HTTP 429: rate limited, asked to wait {asked:g} s", asked
        return f"HTTP {status}", asked
