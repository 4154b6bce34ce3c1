"""Fleet documents on Redis: small fleet-wide JSON documents (tool quarantines, the alert
worker's cursor), one HASH per namespace under the fleet hash tag (`keys.fleet_docs`).

A write is one script (``lua/fleet_docs_put.lua``), so several keys change atomically, on a
single Redis and on Redis Cluster (one key, one slot). `RedisStore` mixes this class in.
"""

from __future__ import annotations

import json
from typing import Any

from engine.store.redis import keys
from engine.store.redis.client import RedisClient
from engine.store.redis.codec import dumps
from engine.store.redis.scripts import SOURCES


class FleetDocs:
    """`Store.fleet_docs` and `Store.fleet_doc_put` for `RedisStore`."""

    _client: RedisClient
    _fb: str

    def fleet_docs(self, ns: str) -> dict[str, Any]:
        """Every fleet document of namespace `ns`, in key order."""
        raw = self._client.call(self._client.r.hgetall, keys.fleet_docs(self._fb, ns))
        return {k: json.loads(raw[k]) for k in sorted(raw)}

    def fleet_doc_put(self, ns: str, values: dict[str, Any | None], now: float) -> None:
        """Set fleet documents of `ns` (None deletes one) in one script. Setting a value is
        idempotent, so a retried call after a lost reply changes nothing more."""
        if not values:
            return
        args: list[str] = [ns]
        for key, value in values.items():
            args += [key, "" if value is None else dumps(value)]
        name = "fleet_docs_put"
        self._client.script(name, [self._fb], args, SOURCES[name])
