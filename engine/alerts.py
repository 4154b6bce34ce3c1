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
    a rollback, automatic or by an operator. Key ``rollback:<session>:<epoch>``.
``compensation_failed``
    a saga compensation ended failed for good. Key ``compensation_failed:<id>:<event>``: an
    operator's retry that fails for good again pages again.
``loop_spike``
    loops (episodes) of one prompt version, or of one tool, reach ``spike_threshold`` within
    ``spike_window_s`` seconds of event time. Key ``loop_spike:<prompt_version|tool>:<value>``,
    sent at most once per window.

Every key is sent once per ``dedup_s`` (keys of spikes: once per window). Each alert body holds
``text`` (what a Slack-compatible incoming webhook shows), ``rule``, ``key``, ``session``,
``prompt_version``, ``tenant``, ``scenario``, ``tool``, ``link`` (the console's session page when
``console_url`` is set, else null), ``at`` and ``event`` (the feed cursor).

Delivery: a new alert is first written to the outbox of every webhook, in the same state write
that moves the cursor past its event; so a worker killed and restarted neither skips an alert
(it is in the outbox or after the cursor) nor alerts twice (its key is remembered). Then each
webhook's outbox is sent in order, the webhooks in parallel threads: a 2xx removes the alert, a
failure (connection refused, timeout, a non-2xx answer) keeps it for a retry after
``backoff_s`` doubling per attempt (at most ``max_backoff_s``), given up after ``attempts``
tries; a dead or slow webhook never holds back the others. A webhook sends at most
``rate_per_minute`` alerts a minute; the rest wait in its outbox. Delivery is at least once:
a worker killed after a POST and before it saved the outcome sends that alert again, with the
same ``key`` for the receiver to drop.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

from engine.engine import Engine
from engine.records import Event

log = logging.getLogger("rewind.alerts")

NAMESPACE = "alerts"
"""Fleet document namespace of the workers' states."""
RULES = ("loop", "rollback", "compensation_failed", "loop_spike")
"""Every rule, in the order they are checked."""

Poster = Callable[[str, bytes, float], int]
"""Sends one POST (url, JSON body, timeout seconds) and returns the HTTP status; raises OSError
when the webhook cannot be reached."""


@dataclass(frozen=True)
class AlertConfig:
    """What pages and how hard the worker tries. Defaults suit a freeze on-call rota."""

    rules: tuple[str, ...] = RULES
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
    """Seconds a webhook may take to answer one POST."""
    rate_per_minute: int = 60
    """Alerts one webhook receives at most per minute (the rest wait in its outbox)."""
    outbox_limit: int = 1000
    """Alerts kept per webhook while it is down; the oldest are dropped (logged) past it."""

    def __post_init__(self) -> None:
        unknown = [r for r in self.rules if r not in RULES]
        if unknown:
            raise ValueError(f"unknown alert rule {unknown[0]!r}; rules are {', '.join(RULES)}")
        if self.spike_threshold < 1 or self.spike_window_s <= 0 or self.attempts < 1:
            raise ValueError("spike_threshold and attempts must be >= 1, the window > 0")


def http_post(url: str, body: bytes, timeout: float) -> int:
    """POST `body` as JSON to `url`; returns the HTTP status (raises OSError when unreachable)."""
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def check_webhook(url: str) -> str:
    """`url` when it is an http(s) URL with a host.

    Raises:
        ValueError: another scheme or no host.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("a webhook must be an http:// or https:// URL, "
                         f"not {Engine.redact_url(url)!r}")
    return url


def webhook_label(url: str) -> str:
    """What logs say about a webhook: scheme, host and id, never its path or query (an incoming
    webhook's path is its secret)."""
    parts = urlsplit(url)
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.hostname}{port}/… ({webhook_id(url)})"


def webhook_id(url: str) -> str:
    """Stable short id of a webhook in the state (its URL may hold a secret token)."""
    return hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]


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
    """webhook id -> pending deliveries {key, body, attempts, next_at}."""
    sent: dict[str, list[float]] = field(default_factory=dict)
    """webhook id -> times of the POSTs of the last minute (rate limit)."""

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
        )

    def dump(self) -> dict[str, Any]:
        return {
            "cursor": self.cursor,
            "seen": self.seen,
            "looping": self.looping,
            "recent": self.recent,
            "outbox": self.outbox,
            "sent": self.sent,
        }


class AlertWorker:
    """Follows the feed of `engine` and pages `webhooks`; `run()` loops, `run_once()` is one
    round (read new events, queue their alerts, deliver what is due).

    Args:
        engine: an `Engine` (anything with ``events``, ``get_session``, ``fleet_documents``,
            ``put_fleet_documents``).
        webhooks: the URLs to POST to.
        config: rules, thresholds, retries.
        name: the state's key: two workers with different names page independently.
        post: sends one POST (tests pass their own); default `http_post`.

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
    ) -> None:
        if not webhooks:
            raise ValueError("give at least one webhook URL")
        self.engine = engine
        self.webhooks = {webhook_id(check_webhook(u)): u for u in webhooks}
        self.config = config or AlertConfig()
        self.name = name
        self.post = post
        self.page = page
        self._pool = ThreadPoolExecutor(max_workers=len(self.webhooks), thread_name_prefix="alert")
        self._stop = threading.Event()
        self._meta: dict[str, dict[str, Any]] = {}

    # -- state ----------------------------------------------------------------------------------
    def _load(self) -> _State:
        return _State.load(self.engine.fleet_documents(NAMESPACE).get(self.name))

    def _save(self, state: _State) -> None:
        self.engine.put_fleet_documents(NAMESPACE, {self.name: state.dump()})

    # -- one round --------------------------------------------------------------------------------
    def run_once(self) -> dict[str, int]:
        """Read the events after the cursor, queue their alerts, deliver what is due.

        Returns:
            ``events`` read, ``queued`` alerts, ``delivered`` and ``failed`` POSTs.
        """
        state = self._load()
        read = queued = 0
        while True:
            events = self.engine.events(since=state.cursor, limit=self.page)
            for ev in events:
                queued += self._queue(state, self._alerts(state, ev))
                state.cursor = ev.id
            read += len(events)
            if events:
                self._prune(state)
                self._save(state)  # alerts queued and cursor moved: one write
            if len(events) < self.page:
                break
        delivered, failed = self._deliver(state)
        return {"events": read, "queued": queued, "delivered": delivered, "failed": failed}

    def run(self, interval_s: float = 1.0, rounds: int | None = None) -> None:
        """Run rounds every `interval_s` seconds until `stop()` (or `rounds` rounds)."""
        done = 0
        while not self._stop.is_set() and (rounds is None or done < rounds):
            try:
                self.run_once()
            except Exception as exc:  # noqa: BLE001 - a store hiccup must not end the pager
                log.warning("alert round failed: %s", exc)
            done += 1
            self._stop.wait(interval_s)

    def stop(self) -> None:
        """Ask `run` to return after the current round."""
        self._stop.set()

    def close(self) -> None:
        self.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- rules ----------------------------------------------------------------------------------
    def _alerts(self, state: _State, ev: Event) -> list[dict[str, Any]]:
        rules = self.config.rules
        sid, data = ev.session, ev.data or {}
        out: list[dict[str, Any]] = []
        if sid is None:
            return out
        if ev.type == "step" and not data.get("late"):
            if data.get("looping"):
                if sid in state.looping:
                    return out
                state.looping[sid] = ev.id
                meta, tool, verdict = self._loop_facts(sid, data.get("n"))
                state.recent.append([ev.at, meta.get("prompt_version"), tool])
                if "loop" in rules:
                    rule = (verdict or {}).get("rule") or "loop"
                    why = (verdict or {}).get("explanation") or "the detector flagged a loop"
                    policy = (verdict or {}).get("policy")
                    if policy:  # e.g. "; policy flag (freeze: National Day change freeze)"
                        reason = (verdict or {}).get("policy_reason")
                        why += f"; policy {policy}" + (f" ({reason})" if reason else "")
                    out.append(
                        self._alert(
                            "loop",
                            f"loop:{sid}:{ev.id}",
                            ev,
                            meta,
                            tool,
                            f"Loop detected in session {sid} ({rule}): {why}",
                        )
                    )
                if "loop_spike" in rules:
                    out += self._spikes(state, ev, meta, tool)
            elif data.get("status") == "ok":
                state.looping.pop(sid, None)
        elif ev.type == "rollback":
            state.looping.pop(sid, None)
            if "rollback" in rules:
                meta = self._meta_of(sid)
                who = data.get("actor") or "someone"
                batch = f" (bulk {data['batch']})" if data.get("batch") else ""
                out.append(
                    self._alert(
                        "rollback",
                        f"rollback:{sid}:{data.get('epoch')}",
                        ev,
                        meta,
                        None,
                        f"Session {sid} was rolled back to {data.get('target')} by {who}{batch}; "
                        f"{data.get('steps', 0)} step(s) left the live line",
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
                        f"Compensation {data.get('name')} (#{data.get('id')}) of session "
                        f"{sid} failed for good: its side effect is NOT undone",
                    )
                )
        return out

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
            count = sum(1 for r in state.recent if r[index] == value)
            if count >= cfg.spike_threshold:
                key = f"loop_spike:{label}:{value}"
                minutes = cfg.spike_window_s / 60
                out.append(
                    self._alert(
                        "loop_spike",
                        key,
                        ev,
                        meta,
                        tool,
                        f"{count} loops of {label.replace('_', ' ')} {value} in the last "
                        f"{minutes:g} minutes (threshold {cfg.spike_threshold})",
                        ttl=cfg.spike_window_s,
                    )
                )
        return out

    def _loop_facts(self, sid: str, n: Any) -> tuple[dict[str, Any], str | None, dict | None]:
        meta = self._meta_of(sid)
        tool, verdict = None, None
        try:
            steps = self.engine.get_session(sid).steps(last=20)
        except KeyError:  # deleted since
            return meta, None, None
        for rec in steps:
            if rec.n == n:
                tool, verdict = rec.tool, rec.verdict
        return meta, tool, verdict

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
    ) -> dict[str, Any]:
        link = None
        if self.config.console_url and ev.session is not None:
            link = f"{self.config.console_url.rstrip('/')}/session?session={quote(ev.session)}"
        body = {
            "text": f"[Rewind] {text}" + (f" <{link}>" if link else ""),
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
                box.append({"key": key, "body": alert["body"], "attempts": 0, "next_at": 0.0})
                if len(box) > self.config.outbox_limit:
                    dropped = box.pop(0)
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

    def _deliver(self, state: _State) -> tuple[int, int]:
        due = {wid: box for wid, box in state.outbox.items() if wid in self.webhooks and box}
        if not due:
            return 0, 0
        futures = {
            wid: self._pool.submit(self._send_due, wid, box, state.sent.get(wid, []))
            for wid, box in due.items()
        }
        delivered = failed = 0
        for wid, future in futures.items():
            box, sent, ok, bad = future.result()
            state.outbox[wid] = box
            state.sent[wid] = sent
            delivered += ok
            failed += bad
        self._save(state)
        return delivered, failed

    def _send_due(
        self, wid: str, box: list[dict[str, Any]], sent: list[float]
    ) -> tuple[list[dict[str, Any]], list[float], int, int]:
        """Send one webhook's due alerts in order; stop at its first failure (order kept)."""
        cfg = self.config
        url = self.webhooks[wid]
        now = time.time()
        sent = [t for t in sent if t > now - 60.0]
        keep: list[dict[str, Any]] = []
        ok = bad = 0
        blocked = False
        for item in box:
            if blocked or item["next_at"] > now or len(sent) >= cfg.rate_per_minute:
                keep.append(item)
                blocked = blocked or item["next_at"] > now
                continue
            body = json.dumps(item["body"], ensure_ascii=False).encode("utf-8")
            try:
                status = self.post(url, body, cfg.timeout_s)
                error = None if 200 <= status < 300 else f"HTTP {status}"
            except Exception as exc:  # noqa: BLE001 - unreachable, TLS, a garbled answer, …
                error = f"{type(exc).__name__}: {exc}"
            sent.append(time.time())
            if error is None:
                ok += 1
                continue
            bad += 1
            attempts = int(item["attempts"]) + 1
            if attempts >= cfg.attempts:
                log.error(
                    "webhook %s: gave up alert %s after %d tries (%s)",
                    webhook_label(url),
                    item["key"],
                    attempts,
                    error,
                )
                continue
            delay = min(cfg.backoff_s * 2 ** (attempts - 1), cfg.max_backoff_s)
            log.warning(
                "webhook %s: alert %s failed (%s); retry in %.1f s",
                webhook_label(url),
                item["key"],
                error,
                delay,
            )
            keep.append({**item, "attempts": attempts, "next_at": time.time() + delay})
            blocked = True  # keep this webhook's alerts in order
        return keep, sent, ok, bad
