"""`rewind mcp-proxy`: an MCP server that fronts MCP servers and guards their tools with Rewind.

    rewind mcp-proxy --store sqlite:///.rewind/rewind.db -- python my_server.py
    rewind mcp-proxy --upstream http://127.0.0.1:9000/mcp --http 8765 --token $TOKEN
    rewind mcp-proxy --config mcp.json          # {"mcpServers": {name: {command, args} | {url}}}

Any MCP client (a desktop assistant, an IDE agent) talks to the proxy instead of the server; the
proxy forwards ``tools/list`` and ``tools/call`` (and resources and prompts) to the upstream
servers, built on the official ``mcp`` SDK, and records every tool call as a step of a Rewind
session, so the client shows in the console with no code change. When an upstream says its tool
list changed, the proxy tells its clients (``notifications/tools/list_changed``, or the event on
a 2026-07-28 client's ``subscriptions/listen`` stream), so they list the tools again.

**Sessions.** One per client connection: on stdio the proxy process serves one client, and its
session is ``mcp-<random>`` unless ``--session`` names it; on streamable HTTP a stateful
(handshake-era) connection gets ``mcp-<its Mcp-Session-Id>``, while stateless requests (the
2026-07-28 protocol has no connection) share the proxy's session. A call whose ``_meta`` carries
``rewind/session`` (or ``rewind_session``) is recorded in that session instead, so a client that
knows its conversation id keeps one session across connections and proxies.

Only sessions an MCP proxy created can be named in ``_meta`` (or, when the operator allows it
with ``--session-prefix P``, sessions whose id starts with P); another id gets a refusal.

**Loops.** The session's loop detector sees every call. The call that completes a loop has
already run: its result goes back with Rewind's explanation appended, and the proxy acts as the
loop policy in effect says (`engine.recovery.policy`): it rolls the session back to the snapshot
before the loop (or pauses it, when the remedy is to stop) with a notice that says what
happened and what the client should do, and blocks the loop's calls for the session: a call
that would continue the loop (the same tool with the same arguments) is answered at once with
an ``isError`` result saying plainly what to do instead, and the upstream tool is not called.
Such refusals are recorded on the timeline but are never evidence of a loop. MCP does not say
which model response issued a call, but overlap does: calls of one session that are in flight
together were issued together (a client that waits for each result never overlaps two), so
they share a turn (``StepRecord.turn``) and the detector judges them as one attempt.
Arguments over the engine's size limit (a large file an agent writes) are recorded by their
digest and size: the call goes through, and a repeat of it is still seen. A quarantined tool
(``engine.ToolQuarantined``) is refused the same way.

**On-call.** Under the ``flag`` policy (the session's or a declared freeze's) the call that
completes a loop goes back with a note that the conversation now waits for on-call, and every
later call of the session is answered with a plain ``isError`` result ("waiting for on-call
since …") without reaching the upstream, until an operator rolls the session back, releases or
stops it (`engine.recovery.oncall`); after a rollback or a release the calls go through again.

**A broken or hostile upstream** never wedges the proxy: every step it opens ends (ok, error or
cancelled); a result over the engine's size limit, or an answer that is not UTF-8 or holds a
lone surrogate, becomes an error result saying so; each request waits at most ``--timeout``
seconds (default 120); a server that exits ends its own connection only, and its calls say
what happened. Each upstream inherits the proxy's environment.

**The store.** When it cannot be reached before a call, the call is refused with the store's
own error and the tool is not called (an unrecorded call would escape the guard); when it fails
after the tool ran, the result goes back saying that the records miss the call. A session that
retention removed while its client stayed connected starts again.

**HTTP** needs a bearer token (``--token`` or $REWIND_MCP_TOKEN) on any address but loopback.

**Rollback for clients that own their history.** The proxy cannot rewrite what an MCP client
keeps in its own context. A rollback (by the detector, or by an operator from the console or the
CLI) moves the session's recorded state: its steps leave the live line and the console shows the
session as rolled back. The client learns about it from the notice, returned with the next tool
result of that session (an extra text block ``Rewind notice: …``).
"""

from __future__ import annotations

from engine.integrations.mcp.proxy import (
    BLOCKED_DOCS,
    DEFAULT_TIMEOUT_S,
    LOOP_NOTE,
    META_SESSION_KEYS,
    PAUSED_NOTICE,
    QUARANTINED,
    REFUSAL,
    ROLLED_BACK_NOTICE,
    McpProxy,
    UpstreamUnavailable,
)
from engine.integrations.mcp.serve import TOKEN_ENV, describe, main, serve
from engine.integrations.mcp.upstream import Upstream, load_config

__all__ = [
    "BLOCKED_DOCS", "DEFAULT_TIMEOUT_S", "LOOP_NOTE", "META_SESSION_KEYS", "PAUSED_NOTICE",
    "QUARANTINED", "REFUSAL", "ROLLED_BACK_NOTICE", "TOKEN_ENV", "McpProxy", "Upstream",
    "UpstreamUnavailable", "describe", "load_config", "main", "serve",
]
