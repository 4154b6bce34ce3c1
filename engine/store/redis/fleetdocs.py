"""Fleet documents on Redis: small fleet-wide JSON documents (tool quarantines, the alert
worker's cursor), one HASH per namespace under the fleet hash tag (`keys.fleet_docs`).

A write is one script (``lua/fleet_docs_swap.lua``; a put expects nothing), so several keys
change atomically, on a single Redis and on Redis Cluster (one key, one slot). `RedisStore`
holds one `FleetDocs` and hands these methods on.
"""

from __future__ import annotations

import json
from typing import Any

from engine.store.redis import keys
from engine.store.redis.client import RedisClient
from engine.store.redis.codec import dumps, num
from engine.store.redis.fleet import FleetViews
from engine.store.redis.scripts import SOURCES
from engine.store.requests import AuditEntry

_fleet_docs_key = keys.fleet_docs  # `fleet_doc_get`'s parameter is named keys, as the protocol's


class FleetDocs:
    """The fleet documents of `RedisStore`.

    Args:
        client: the store's client.
        fb: the fleet's key base (`keys.fleet_base`).
        views: the store's fleet views (the feed's bounds and the keys' TTL an audit row uses).
    """

    def __init__(self, client: RedisClient, fb: str, views: FleetViews) -> None:
        self._client = client
        self._fb = fb
        self._views = views

    def fleet_docs(self, ns: str) -> dict[str, Any]:
        """Every fleet document of namespace `ns`, in key order."""
        raw = self._client.call(self._client.r.hgetall, keys.fleet_docs(self._fb, ns))
        return {k: json.loads(raw[k]) for k in sorted(raw)}

    def fleet_doc_get(self, ns: str, keys: list[str]) -> dict[str, Any]:
        """The fleet documents of `ns` among `keys` that exist, in key order."""
        if not keys:
            return {}
        raw = self._client.call(self._client.r.hmget, _fleet_docs_key(self._fb, ns), keys)
        return {k: json.loads(v) for k, v in sorted(zip(keys, raw, strict=True))
                if v is not None}

    def fleet_doc_swap(self, ns: str, expect: dict[str, Any | None],
                       values: dict[str, Any | None], now: float,
                       audit: AuditEntry | None = None, feed_only: bool = False) -> bool:
        """Set `values` (and write `audit`) when every key of `expect` holds its value, in one
        script (`lua/fleet_docs_swap.lua`); False when one does not."""
        entry = "" if audit is None else dumps([
            audit.action, dumps(audit.actor), "null", dumps(audit.reason), dumps(audit.detail),
            dumps({"actor": audit.actor, **audit.detail})])
        args: list[str] = [*map(str, self._views._maxlens), num(now), str(self._views._ttl), entry,
                           ns, "1" if feed_only else "", str(len(expect))]
        for key, value in expect.items():
            args += [key, "" if value is None else dumps(value)]
        for key, value in values.items():
            args += [key, "" if value is None else dumps(value)]
        name = "fleet_docs_swap"
        return bool(self._client.script(name, [self._fb], args, SOURCES[name]))

    def fleet_doc_put(self, ns: str, values: dict[str, Any | None], now: float,
                      audit: AuditEntry | None = None) -> None:
        """Set fleet documents of `ns` (None deletes one), and write `audit`, in one script.
        Setting a value is idempotent; an audited write is not retried after a lost reply (the
        client's rule for every write that appends)."""
        if values or audit is not None:  # a swap that expects nothing always succeeds
            self.fleet_doc_swap(ns, {}, values, now, audit)
