"""The saga: compensations for side effects that a rollback took off the live line.

A rollback queues one compensation per side-effecting step it abandons, newest first, in the
store's durable outbox. Any process that registered the handler claims it under a lease and runs
it once: the handler gets (args, idempotency_key), and the key is stable across retries, crashes
and processes (it names the session incarnation and the step), so a handler that stores it can
refuse to act twice. A handler that keeps raising is tried `compensation_attempts` times, with a
growing wait between tries (`compensation_backoff`: 2 s, 8 s, 32 s, 128 s by default; the next
try's time is the compensation's `next_attempt_at`), then stays failed, visible to operators as
needing manual action.

Operators then retry it (back to pending, attempts reset: the next process with the handler runs
it again) or mark it resolved by hand (`engine.fleet.actions.retry_compensation`,
`resolve_compensation`). Retrying helps only if some process has the handler, so every process
that registers handlers announces them in the store (a worker heartbeat, at registration and at
most every `HEARTBEAT_S` while it runs compensations); `live_handlers` reads who was seen in the
last `LIVE_S` seconds, which the console shows next to each compensation.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from engine.errors import StoreError, UnknownCompensation
from engine.records import Compensation
from engine.runtime import CompensationHandler, Runtime
from engine.types import CompensationStatus

log = logging.getLogger("rewind")

HEARTBEAT_S = 30.0
"""A process that runs compensations renews its heartbeat at most this often."""
LIVE_S = 120.0
"""A handler is live when a process that registered it was seen within this many seconds."""
FORGET_S = 3600.0
"""Heartbeats older than this are removed by the next heartbeat of any process (bounded)."""
MAX_HANDLERS = 500
"""Most handler names one heartbeat carries."""


def register(rt: Runtime, name: str, handler: CompensationHandler) -> None:
    """Register the handler for compensation `name` in this process.

    Raises:
        ValueError: empty name. TypeError: handler not callable.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("a compensation name must be a non-empty string")
    if not callable(handler):
        raise TypeError(f"the handler for {name!r} is not callable")
    rt.handlers[name] = handler
    heartbeat(rt)


def heartbeat(rt: Runtime) -> None:
    """Tell the store which handlers this process has (its worker heartbeat), when they changed
    or the last heartbeat is `HEARTBEAT_S` old. Liveness is advice for operators, so a store
    failure here is logged, never raised: registering a handler must not fail on it."""
    names = tuple(sorted(n for n in rt.handlers if len(n) <= rt.limits.name_chars))
    names = names[:MAX_HANDLERS]
    now = rt.clock()
    if names == rt.announced and (not names or now - rt.announced_at < HEARTBEAT_S):
        return
    try:
        rt.store.heartbeat_worker(rt.worker_id, list(names), now, now - FORGET_S)
    except StoreError as exc:
        log.warning("could not announce compensation handlers to the store: %s", exc)
        return
    rt.announced, rt.announced_at = names, now


def live_handlers(rt: Runtime, within_s: float = LIVE_S) -> dict[str, float]:
    """Handler name -> time of the newest heartbeat of a process that registered it, for the
    processes seen in the last `within_s` seconds (engine clock)."""
    out: dict[str, float] = {}
    for worker in rt.store.compensation_workers(rt.clock() - within_s):
        for name in worker.handlers:
            out[name] = max(out.get(name, worker.seen_at), worker.seen_at)
    return out


def run_pending(rt: Runtime, limit: int = 100, lease_s: float = 60.0) -> list[Compensation]:
    """Run pending compensations this process has handlers for, each once.

    Returns:
        The compensations processed, with their final status.
    """
    heartbeat(rt)
    done: list[Compensation] = []
    names = sorted(rt.handlers)
    for _ in range(limit):
        comp = rt.store.claim_compensation(names, rt.worker_id, lease_s, rt.clock())
        if comp is None:
            break
        handler = rt.handlers.get(comp.name)
        if handler is None:  # pragma: no cover - the claim filters by name
            raise UnknownCompensation(f"no handler registered for {comp.name!r}")
        done.append(_run_one(rt, comp, handler))
    return done


def _run_one(rt: Runtime, comp: Compensation, handler: CompensationHandler) -> Compensation:
    try:
        handler(comp.args, comp.idempotency_key)
    except Exception as exc:  # noqa: BLE001 - a handler's failure is data here
        final = comp.attempts >= rt.compensation_attempts
        error = f"{type(exc).__name__}: {exc}"
        log.warning("compensation %s for %s failed: %s", comp.name, comp.session, error)
        now = rt.clock()
        retry_at = None if final else now + backoff(rt.compensation_backoff, comp.attempts)
        rt.store.finish_compensation(comp.id, rt.worker_id, False, error, now, final, retry_at)
        status = CompensationStatus.FAILED if final else CompensationStatus.PENDING
        return dataclasses.replace(comp, status=status, error=error, lease_until=retry_at)
    rt.store.finish_compensation(comp.id, rt.worker_id, True, None, rt.clock(), True)
    return dataclasses.replace(comp, status=CompensationStatus.DONE)


def backoff(policy: tuple[float, float, float], attempts: int) -> float:
    """Seconds to wait after the `attempts`-th failed try: first wait x factor^(attempts-1),
    at most the longest wait."""
    first, factor, longest = policy
    return min(longest, first * factor ** max(attempts - 1, 0))


def list_compensations(rt: Runtime, **filters: Any) -> list[Compensation]:
    """Compensations in the outbox, newest first. Filters: session, status, limit.

    Raises:
        ValueError: a status no compensation has (`status="failing"` would list none, and
        read as "nothing failed").
    """
    status = filters.get("status")
    if status is not None and status not in tuple(CompensationStatus):
        raise ValueError(f"status must be one of {', '.join(CompensationStatus)}, not {status!r}")
    return rt.store.compensations(**filters)
