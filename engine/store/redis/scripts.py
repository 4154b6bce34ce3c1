"""Loads the Lua scripts of the Redis store from ``lua/*.lua`` next to this module.

One script per state-changing operation, so each operation is atomic on a single Redis and on
Redis Cluster (all keys of a session share one hash tag). The sources are ``.lua`` files so that
editors, linters and reviewers read them as Lua; this module only assembles them, once, at
import.

Every script is, in this order: the ``K_<name>`` key functions generated from
`engine.store.redis.keys` (`keys.lua_prelude`, so Python and Lua key layouts can never
disagree), ``SESSION_KEY_FUNCTIONS``, ``lua/lib/common.lua``, the prologue of its kind, and its
own file. The kind follows from the file name:

==================  ===================  ==================================================
file                prologue             KEYS
==================  ===================  ==================================================
``read_<x>.lua``    ``lib/read.lua``     the session base
``fleet_<x>.lua``   ``lib/fleet.lua``    the fleet base
``<x>.lua``         ``lib/session.lua``  the session base, and the fleet base on a single
                                         Redis
==================  ===================  ==================================================

Records are JSON texts that Python builds; Lua only concatenates them with the numbers it
decides (seq, epoch, positions) and never re-encodes user data, so no float or string is altered
by Lua's number formatting.

Calling convention of the session scripts:

- ``KEYS[1]`` the session base ``<prefix>:{<enc>}:``; ``KEYS[2]`` the fleet base on a single
  Redis (fleet views change in the same script), absent on Redis Cluster.
- ``ARGV[1..8]``: request id, now, ttl seconds, session id, encoded id, mode, events MAXLEN,
  session events MAXLEN. Mode ``i`` applies fleet changes inline; ``c<incarnation>:<acked>``
  (Cluster) appends them to the session's fleet outbox and returns the outbox backlog, of which
  the caller says it already applied everything up to ``<acked>``.
- ``ARGV[9..]``: the operation's arguments (each file's first comment lists them).
- Reply: ``{result, extra, outbox entries…}``; errors are ``REWIND <CODE> <detail>``.

A write whose reply was lost (connection reset after the script ran) is retried with the same
request id; the script then returns the remembered reply instead of writing twice.
"""

from __future__ import annotations

from importlib import resources
from importlib.abc import Traversable

from engine.store.redis import keys

OUTBOX_BATCH = 200
"""Outbox entries a session script returns at most, oldest first."""

_PROLOGUES = {"read_": "read.lua", "fleet_": "fleet.lua", "": "session.lua"}


def _lua_dir() -> Traversable:
    return resources.files("engine.store.redis").joinpath("lua")


def _session_key_functions() -> str:
    names = ", ".join(f"K_{fn.__name__}" for fn in keys.SESSION_KEYS)
    return f"local SESSION_KEY_FUNCTIONS = {{{names}}}"


def _load() -> dict[str, str]:
    lua = _lua_dir()
    lib = lua.joinpath("lib")
    head = [
        keys.lua_prelude() + _session_key_functions(),
        lib.joinpath("common.lua").read_text(encoding="utf-8"),
    ]
    prologues = {
        kind: lib.joinpath(name)
        .read_text(encoding="utf-8")
        .replace("@OUTBOX_BATCH@", str(OUTBOX_BATCH))
        for kind, name in _PROLOGUES.items()
    }
    out: dict[str, str] = {}
    for entry in sorted(lua.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".lua"):
            continue
        name = entry.name.removesuffix(".lua")
        kind = next(k for k in _PROLOGUES if name.startswith(k))
        out[name] = "\n".join([*head, prologues[kind], entry.read_text(encoding="utf-8")])
    if not out:
        raise RuntimeError(
            f"no Lua scripts found in {lua}: the package was installed without "
            "its .lua files; reinstall agent-rewind"
        )
    return out


SOURCES: dict[str, str] = _load()
"""Full Lua source of every script, by name (the file name without ``.lua``)."""


def sources() -> dict[str, str]:
    """Full Lua source of every script, by name."""
    return dict(SOURCES)
