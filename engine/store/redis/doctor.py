"""The Redis store's doctor (``rewind doctor``): rebuild the fleet views from the sessions
themselves, and check the invariants of one session's keys.

The sessions are the source of truth; the fleet keys (indexes, branch index) are views of them
that a killed client or a lost fleet node can leave behind. Both functions are safe to run while
agents write.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from engine.store.redis import codec, keys
from engine.store.redis.client import RedisClient


def rebuild_indexes(
    client: RedisClient,
    prefix: str,
    fleet: Callable[[str, list[Any]], Any],
    apply_outbox: Callable[[Iterable[str]], object],
    fetch_sessions: Callable[[list[str]], list[dict[str, str]]],
) -> dict[str, int]:
    """Rebuild the fleet indexes from the sessions.

    Applies every fleet outbox entry a killed client left (Redis Cluster), re-indexes every
    session by last activity, status, tenant, scenario and prompt version, re-registers
    abandoned branches for retention, and drops index entries of sessions that no longer exist.

    Args:
        client: the store's client.
        prefix: the store's key prefix.
        fleet: runs fleet script ``fleet_<name>`` with its arguments.
        apply_outbox: applies fleet outbox entries.
        fetch_sessions: the session hashes of some session ids ({} when gone).

    Returns:
        Counts: sessions, outbox_entries, branches, stale_removed.
    """
    r, fb = client.r, keys.fleet_base(prefix)
    counts = {"sessions": 0, "outbox_entries": 0, "branches": 0, "stale_removed": 0}
    seen = set()
    for key in client.call(
        lambda: list(r.scan_iter(match=keys.session_pattern(prefix), count=1000))
    ):
        sid = keys.sid_of_session_hash(key)
        base = keys.session_base(sid, prefix)
        pipe = r.pipeline(transaction=False)
        pipe.hgetall(keys.session_hash(base))
        pipe.lrange(keys.fleet_outbox(base), 0, -1)
        pipe.hgetall(keys.branches(base))
        pipe.ttl(keys.session_hash(base))
        d, outbox, branch_flat, ttl = client.call(pipe.execute)
        if not d:
            continue
        seen.add(sid)
        if outbox:
            apply_outbox(outbox)
            counts["outbox_entries"] += len(outbox)
        entry = "st:" + d["status"] + ("\n" + d["ix"] if d.get("ix") else "")
        fleet("index", [sid, entry, d["updated"], max(int(ttl), 0)])
        counts["sessions"] += 1
        enc = keys.encode(sid)
        for branch in codec.branch_infos([x for kv in branch_flat.items() for x in kv]).values():
            client.call(r.zadd, keys.branch_index(fb), {f"{enc}/{branch.id}": branch.created_at})
            counts["branches"] += 1
    indexed = client.call(r.zrange, keys.session_index(fb), 0, -1)
    stale = [sid for sid in indexed if sid not in seen]
    if stale:
        still = fetch_sessions(stale)
        gone = [
            x
            for sid, d in zip(stale, still, strict=True)
            if not d
            for x in (sid, keys.encode(sid), "")
        ]
        if gone:
            counts["stale_removed"] = fleet("forget", ["missing", *gone])
    return counts


def session_problems(sid: str, check: list[Any]) -> list[str]:
    """The invariants a session's keys break, from the reply of the ``read_check`` script;
    none: []."""
    s_json, live, live_steps, live_snaps, snap_flat, step_fields = check
    s = json.loads(s_json)
    if not s:
        return [f"session {sid!r} does not exist"]
    problems = []
    records = [json.loads(r) for r in live]
    if [r[1] for r in records] != list(range(len(records))):
        problems.append("live message positions are not 0..n-1")
    if len(records) != int(s["msgs"]):
        problems.append(f"msg count {s['msgs']} != {len(records)} live messages")
    seqs = [r[0] for r in records]
    if seqs != sorted(seqs) or (seqs and seqs[-1] > int(s["seq"])):
        problems.append("live message seqs are not increasing or exceed the session seq")
    snaps = dict(zip(snap_flat[::2], snap_flat[1::2], strict=True))
    if s["head"]:
        head_seq = s["head"].removeprefix("snap-")
        if head_seq not in live_snaps or head_seq + "b" in snaps:
            problems.append(f"head {s['head']} is not on the live line")
    numbers = [int(n) for n in live_steps]
    if numbers != sorted(set(numbers)):
        problems.append("live steps are not strictly increasing")
    existing = {int(f) for f in step_fields if f.isdigit()}
    if any(n not in existing for n in numbers):
        problems.append("a live step has no record")
    if existing and max(existing) > int(s["steps"]):
        problems.append("a step number exceeds the session's step count")
    return problems
