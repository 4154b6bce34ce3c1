"""Every Redis key Rewind uses, as tiny pure functions: the layout at a glance, changed in one
place.

Two families of keys:

**Session keys** all start with ``<prefix>:{<enc>}:`` where ``<enc>`` is the session id's UTF-8
bytes in unpadded base64url (alphabet ``A-Z a-z 0-9 - _``). The braces make ``<enc>`` the hash
tag, so every key of a session lives in one Redis Cluster slot and one Lua script can change the
whole session atomically. Because the encoding holds no ``{``, ``}``, ``:``, ``*``, ``?``, ``[`` or
``]``, nothing in a session id can move a key to another slot, collide with another session's
keys or turn a SCAN pattern into a wildcard.

======================  ========  ============================================================
function                type      holds
======================  ========  ============================================================
session_hash            HASH      id, meta, status, head, epoch, seq, counters, timestamps,
                                  ``keep`` (evidence: its keys never expire)
live_messages           LIST      live message records ``[seq,pos,created_at,message]``
abandoned_messages      HASH      seq -> ``<branch> <record>`` (moved here by a rollback)
steps                   HASH      ``<n>`` begin record, ``<n>e`` end record, ``<n>b`` branch,
                                  ``<n>c`` compensation with its eligibility mark
live_steps              LIST      step numbers on the live line, ascending
snapshots               HASH      ``<seq>`` snapshot record, ``<seq>b`` branch when abandoned
live_snapshots          LIST      seqs of the snapshots on the live line, ascending
restorable(kind)        ZSET      restorable snapshots of a kind (step: score next_step,
                                  others: score seq); retired or abandoned ones leave it
kv_values(ns)           HASH      current values of namespace ``ns`` (``var``, ``mem``)
kv_versions(ns)         HASH      key -> field in kv_writes of its current version
doc_values(ns)          HASH      unversioned documents of namespace ``ns`` (integrations)
doc_keys(ns)            ZSET      the same document keys, score 0 (key order for prefix scans)
kv_writes               HASH      ``<seq>:<i>`` -> ``<previous version field>|<value>``,
                                  ``<seq>`` -> the group's namespace and keys (undo log)
live_kv_writes          LIST      seqs of the kv write groups on the live line, ascending
branches                HASH      ``<id>`` branch record
branch_items            HASH      ``<id>`` -> the items the branch holds (for purging)
branches_by_epoch       ZSET      branch id, score = the epoch the branch ended
requests                HASH      request id -> reply of a recent write (retries are no-ops)
request_order           LIST      request ids, oldest first (bounds `requests`)
fleet_outbox            LIST      fleet-view changes not yet applied (Redis Cluster only)
======================  ========  ============================================================

A rollback to snapshot S pops from the tails of the four live lists whatever is newer than S, so
it costs what leaves the live line; taking a snapshot writes one record and one list entry.

**Fleet keys** start with ``<prefix>:{~fleet}:`` (``~`` is outside base64url, so no session can
share the tag). On a single Redis they change in the same script as the session; on Redis
Cluster they live in another slot and are brought up to date from the session's
``fleet_outbox`` by a second call (see `engine.store.redis.outbox`), and
`RedisStore.rebuild_indexes` rebuilds the session indexes from the sessions themselves.

======================  ========  ============================================================
session_index           ZSET      session id -> updated_at (every session, by last activity)
status_index(status)    ZSET      session id -> updated_at, one per status
meta_index(field, v)    ZSET      session id -> updated_at per tenant / scenario /
                                  prompt_version value
index_entries           HASH      session id -> what the indexes hold for it (to move it)
expiry_index            ZSET      session id -> server time (ms) its keys expire
outbox_marks            HASH      session id -> ``<incarnation>:<seq>`` of the last applied
                                  fleet_outbox entry (applying twice is a no-op)
branch_index            ZSET      ``<enc>/<branch>`` -> created_at (for purge_branches)
event_counter           STRING    cursor of the newest event
events                  STREAM    the live feed, ids ``<cursor>-0``, capped with MAXLEN ~
session_events(enc)     STREAM    the same events of one session, capped, expires with it
loops                   ZSET      the feed's ``loop`` events (episode starts) by time:
                                  ``<16-digit cursor> <data JSON><newline><session id>`` -> at,
                                  capped like ``events``
loops_from              STRING    time of the newest event when a release that writes
                                  ``loop`` events first opened the store (``-inf``: all)
audit_counter           STRING    id of the newest audit event
audit_records           HASH      id -> audit record
audit_all               ZSET      audit ids (score = id)
audit_by_action(a)      ZSET      audit ids of one action
audit_by_session(enc)   ZSET      audit ids of one session
audit_by_time           ZSET      audit id -> at (the `since` filter)
comp_counter            STRING    id of the newest compensation
compensation(id)        HASH      one compensation: session, step, name, args, status, lease…
comp_keys               HASH      idempotency key -> compensation id (queued once, forever)
comp_all                ZSET      compensation ids
comp_by_status(s)       ZSET      compensation ids with that status
comp_by_session(enc)    ZSET      compensation ids of one session
comp_pending(name)      ZSET      pending ids of one handler name (score = id)
comp_running(name)      ZSET      running ids of one handler name (score = lease end)
workers                 HASH      worker id -> JSON list of its compensation handler names
workers_seen            ZSET      worker id -> its last heartbeat (old ones are pruned by the
                                  next heartbeat, so both stay as small as the live fleet)
fleet_docs(ns)          HASH      key -> JSON fleet document of namespace ``ns`` (quarantines,
                                  the alert cursor)
======================  ========  ============================================================

The Lua scripts build the same names: `lua_prelude` turns every function below into a Lua
function, so this module stays the only description of the layout.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Iterable

DEFAULT_PREFIX = "rewind"

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")

FLEET_TAG = "{~fleet}"


def check_prefix(prefix: str) -> str:
    """Return `prefix` when it is a valid key prefix (letters, digits, ``_ . -``).

    Raises:
        ValueError: the prefix holds other characters (braces would change the hash tag).
    """
    if not isinstance(prefix, str) or not _PREFIX_RE.match(prefix):
        raise ValueError(
            f"a Redis key prefix must be 1-64 characters of A-Z a-z 0-9 _ . -, not {prefix!r}"
        )
    return prefix


def encode(text: str) -> str:
    """The unpadded base64url form of `text`'s UTF-8 bytes (never holds braces or colons)."""
    return base64.urlsafe_b64encode(text.encode("utf-8")).rstrip(b"=").decode("ascii")


def decode(enc: str) -> str:
    """Inverse of `encode`."""
    return base64.urlsafe_b64decode(enc + "=" * (-len(enc) % 4)).decode("utf-8")


# -- session keys ----------------------------------------------------------------------------
def session_base(sid: str, prefix: str = DEFAULT_PREFIX) -> str:
    """``<prefix>:{<enc>}:`` — every key of session `sid` starts with it (one hash tag)."""
    return f"{prefix}:{{{encode(sid)}}}:"


def session_pattern(prefix: str = DEFAULT_PREFIX) -> str:
    """SCAN pattern matching the hash of every session."""
    return f"{prefix}:{{*}}:s"


def sid_of_session_hash(key: str) -> str:
    """The session id from a `session_hash` key name."""
    start = key.index("{") + 1
    return decode(key[start : key.index("}", start)])


def session_hash(base: str) -> str:
    return base + "s"


def live_messages(base: str) -> str:
    return base + "ml"


def abandoned_messages(base: str) -> str:
    return base + "ma"


def steps(base: str) -> str:
    return base + "t"


def live_steps(base: str) -> str:
    return base + "tl"


def snapshots(base: str) -> str:
    return base + "p"


def live_snapshots(base: str) -> str:
    return base + "pl"


def restorable(base: str, kind: str) -> str:
    return base + "pz:" + kind


def kv_values(base: str, ns: str) -> str:
    return base + "kv:" + ns


def kv_versions(base: str, ns: str) -> str:
    return base + "kvv:" + ns


def doc_values(base: str, ns: str) -> str:
    return base + "d:" + ns


def doc_keys(base: str, ns: str) -> str:
    return base + "dk:" + ns


def kv_writes(base: str) -> str:
    return base + "kw"


def live_kv_writes(base: str) -> str:
    return base + "kl"


def branches(base: str) -> str:
    return base + "b"


def branch_items(base: str) -> str:
    return base + "bi"


def branches_by_epoch(base: str) -> str:
    return base + "bz"


def requests(base: str) -> str:
    return base + "rq"


def request_order(base: str) -> str:
    return base + "ro"


def fleet_outbox(base: str) -> str:
    return base + "fx"


SESSION_KEYS = (
    session_hash,
    live_messages,
    abandoned_messages,
    steps,
    live_steps,
    snapshots,
    live_snapshots,
    kv_writes,
    live_kv_writes,
    branches,
    branch_items,
    branches_by_epoch,
    requests,
    request_order,
    fleet_outbox,
)
"""Session keys without a parameter; with `restorable(kind)`, `kv_values(ns)`,
`kv_versions(ns)`, `doc_values(ns)` and `doc_keys(ns)` for each snapshot kind, kv namespace and
document namespace in use (the session hash lists them) they are all the keys of a session."""


def all_session_keys(
    base: str, kinds: Iterable[str], namespaces: Iterable[str], doc_namespaces: Iterable[str] = ()
) -> list[str]:
    """Every key a session with those snapshot kinds and namespaces may have."""
    keys = [fn(base) for fn in SESSION_KEYS]
    keys += [restorable(base, k) for k in kinds]
    for ns in namespaces:
        keys += [kv_values(base, ns), kv_versions(base, ns)]
    for ns in doc_namespaces:
        keys += [doc_values(base, ns), doc_keys(base, ns)]
    return keys


# -- fleet keys ------------------------------------------------------------------------------
def fleet_base(prefix: str = DEFAULT_PREFIX) -> str:
    """``<prefix>:{~fleet}:`` — every fleet-wide key starts with it (one slot)."""
    return f"{prefix}:{FLEET_TAG}:"


def session_index(fb: str) -> str:
    return fb + "ss"


def status_index(fb: str, status: str) -> str:
    return fb + "ss:st:" + status


def meta_index(fb: str, suffix: str) -> str:
    """`suffix` is `meta_index_suffix(field, value)`."""
    return fb + "ss:" + suffix


def meta_index_suffix(field: str, value_json: str) -> str:
    """Index suffix of one meta value: ``t:`` / ``c:`` / ``v:`` (tenant, scenario,
    prompt_version) and the base64url of the value's canonical JSON."""
    return {"tenant": "t:", "scenario": "c:", "prompt_version": "v:"}[field] + encode(value_json)


def index_entries(fb: str) -> str:
    return fb + "ss:ix"


def expiry_index(fb: str) -> str:
    return fb + "ss:exp"


def outbox_marks(fb: str) -> str:
    return fb + "fxw"


def branch_index(fb: str) -> str:
    return fb + "br"


def event_counter(fb: str) -> str:
    return fb + "ev:n"


def events(fb: str) -> str:
    return fb + "ev"


def session_events(fb: str, enc: str) -> str:
    return fb + "ev:s:" + enc


def loops(fb: str) -> str:
    return fb + "lp"


def loops_from(fb: str) -> str:
    return fb + "lp:from"


def audit_counter(fb: str) -> str:
    return fb + "au:n"


def audit_records(fb: str) -> str:
    return fb + "au"


def audit_all(fb: str) -> str:
    return fb + "au:all"


def audit_by_action(fb: str, action: str) -> str:
    return fb + "au:a:" + action


def audit_by_session(fb: str, enc: str) -> str:
    return fb + "au:s:" + enc


def audit_by_time(fb: str) -> str:
    return fb + "au:at"


def comp_counter(fb: str) -> str:
    return fb + "co:n"


def compensation(fb: str, cid: str) -> str:
    return fb + "co:" + cid


def comp_keys(fb: str) -> str:
    return fb + "co:k"


def comp_all(fb: str) -> str:
    return fb + "co:all"


def comp_by_status(fb: str, status: str) -> str:
    return fb + "co:st:" + status


def comp_by_session(fb: str, enc: str) -> str:
    return fb + "co:s:" + enc


def comp_pending(fb: str, name: str) -> str:
    return fb + "co:p:" + name


def comp_running(fb: str, name: str) -> str:
    return fb + "co:r:" + name


def workers(fb: str) -> str:
    return fb + "wk"


def workers_seen(fb: str) -> str:
    return fb + "wk:at"


def fleet_docs(fb: str, ns: str) -> str:
    return fb + "fd:" + ns


FLEET_KEYS = (
    session_index,
    status_index,
    meta_index,
    index_entries,
    expiry_index,
    outbox_marks,
    branch_index,
    event_counter,
    events,
    session_events,
    loops,
    loops_from,
    audit_counter,
    audit_records,
    audit_all,
    audit_by_action,
    audit_by_session,
    audit_by_time,
    comp_counter,
    compensation,
    comp_keys,
    comp_all,
    comp_by_status,
    comp_by_session,
    comp_pending,
    comp_running,
    workers,
    workers_seen,
    fleet_docs,
)

_BASE_MARK, _ARG_MARK = "\x00", "\x01"


def _lua_function(fn: Callable[..., str]) -> str:
    """``local function K_<name>(b, a) return b .. "<suffix>" [.. a] end`` for one key
    function, built by calling it with markers (so Lua and Python cannot disagree)."""
    import inspect

    params = len(inspect.signature(fn).parameters)
    name = fn(_BASE_MARK, _ARG_MARK) if params == 2 else fn(_BASE_MARK)
    assert name.startswith(_BASE_MARK) and name.count(_ARG_MARK) <= 1
    body = name[len(_BASE_MARK) :]
    if params == 2:
        assert body.endswith(_ARG_MARK)
        return f"local function K_{fn.__name__}(b, a) return b .. {_lua_string(body[:-1])} .. a end"
    return f"local function K_{fn.__name__}(b) return b .. {_lua_string(body)} end"


def _lua_string(text: str) -> str:
    assert all(c.isalnum() or c in ":_." for c in text)
    return '"' + text + '"'


def lua_prelude() -> str:
    """Lua definitions of every key function (``K_session_hash(base)``, …)."""
    fns: list[Callable[..., str]] = [
        *SESSION_KEYS,
        restorable,
        kv_values,
        kv_versions,
        doc_values,
        doc_keys,
        *FLEET_KEYS,
    ]
    return "\n".join(_lua_function(fn) for fn in fns) + "\n"
