"""`rewind`: on-call work without the console. Every command goes through the engine API.

No command prints a traceback for something the user or the store did: each failure is one line
on stderr (store URLs with their passwords masked) and an exit code that says what happened; see
`EXIT_CODES`. Set REWIND_DEBUG=1 to get the traceback of an unexpected error. The commands are in
`engine.cli.commands`, what they share in `engine.cli.common`.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from typing import TYPE_CHECKING

from engine.cli.text import (  # noqa: F401 - parse_age, scrub: part of the CLI's API
    _days,
    _non_negative,
    _nonblank,
    _session_id,
    parse_age,
    parse_until,
    scrub,
)
from engine.errors import (
    ConfigError,
    RewindError,
    StoreNotFound,
    UnknownCompensation,
    UnknownIncident,
    UnknownQuarantine,
    UnknownSession,
    UnknownSnapshot,
)

if TYPE_CHECKING:
    pass

from engine.cli.commands import (
    _set_item,
    _since,
    _where_item,
    cmd_alert,
    cmd_audit,
    cmd_compensations,
    cmd_dashboard,
    cmd_demo,
    cmd_detector,
    cmd_doctor,
    cmd_freeze,
    cmd_hash_password,
    cmd_label,
    cmd_mcp_proxy,
    cmd_notice,
    cmd_purge,
    cmd_quarantine,
    cmd_release,
    cmd_replay,
    cmd_rollback,
    cmd_sessions,
    cmd_show,
    cmd_stop,
)
from engine.cli.common import (
    EXIT_CODES,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_STORE,
    EXIT_USAGE,
    CLIError,
    _store_failure,
)
from engine.cli.incidents import VERBS as INCIDENT_VERBS
from engine.cli.incidents import cmd_incident, cmd_incidents

EPILOG = "exit codes:\n" + "\n".join(
    textwrap.fill(text, 78, initial_indent=f"  {code:<4}", subsequent_indent=" " * 6)
    for code, text in EXIT_CODES.items()
)


class _CommandParser(argparse.ArgumentParser):
    """A command's parser that takes its options and positionals in any order.

    Plain argparse matches positionals greedily: in `rewind notice SESSION --actor alice "text"`
    it gives SESSION and an empty optional TEXT to the first run of positionals, then calls
    "text" an unrecognized argument, though the same words with --actor last work. Parsing
    intermixed (options first, then every positional that is left) takes both orders alike. A
    command with a `-- COMMAND …` remainder (mcp-proxy) keeps argparse's own order, where what
    follows `--` belongs to the command it runs, and so does a command line with `--` in it
    (`rewind show -- -h`: the user has said where the positionals are; intermixed parsing would
    drop the `--` and read them as options)."""

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):
        remainder = any(a.nargs in (argparse.REMAINDER, argparse.PARSER)
                        for a in self._get_positional_actions())
        if remainder or self._intermixing or "--" in (args or ()):
            return super().parse_known_args(args, namespace)
        # parse_known_intermixed_args parses twice through this method; the flag sends those
        # two passes to argparse's own parsing.
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rewind", description="Catch looping agent sessions and roll them back.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--store", default=None,
                        help="store URL (default: $REWIND_STORE, else sqlite:///.rewind/rewind.db)")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_CommandParser)
    actor = _nonblank("--actor")

    p = sub.add_parser("sessions", help="list sessions")
    p.add_argument("--status", choices=["healthy", "looping", "rolled_back", "stopped"])
    p.add_argument("--tenant")
    p.add_argument("--scenario")
    p.add_argument("--prompt-version")
    p.add_argument("--active", type=_non_negative("--active"), metavar="MINUTES",
                   help="only sessions active in the last MINUTES")
    p.add_argument("--limit", type=_non_negative("--limit", int), default=50)
    p.add_argument("--after", metavar="CURSOR",
                   help="the page after this cursor (the previous page prints it)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sessions)

    p = sub.add_parser("show", help="a session's verdict and snapshot tree")
    p.add_argument("session", type=_session_id)
    p.add_argument("--last", type=_non_negative("--last", int), default=20,
                   help="newest N snapshots")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser(
        "rollback", help="roll a session back (default: last healthy snapshot)",
        epilog="Refused (exit 1) when someone else rolled the session back after its epoch was "
        "read, and when nothing would leave the live line. With --where: a preview, then a "
        "confirmation (unless --yes; refused without a terminal), then each matching session "
        "is rolled back on its own under one batch id; exit 1 when any was refused.",
    )
    p.add_argument("session", type=_session_id, nargs="?",
                   help="the session (or --where filters for many)")
    p.add_argument("--where", type=_where_item, action="append", metavar="KEY=VALUE",
                   help="roll back every session matching all filters (repeatable): status, "
                   "tenant, scenario, prompt_version, tool")
    p.add_argument("--dry-run", action="store_true",
                   help="with --where: list what would leave each live line; change nothing")
    p.add_argument("--yes", "-y", action="store_true",
                   help="with --where: do not ask for confirmation")
    p.add_argument("--to", metavar="SNAPSHOT")
    p.add_argument("--actor", required=True, type=actor)
    p.add_argument("--reason", required=True, type=_nonblank("--reason"))
    p.add_argument("--no-notice", action="store_true", help="do not notify the user")
    p.add_argument("--expect-epoch", type=_non_negative("--expect-epoch", int), metavar="N",
                   help="the epoch you saw (`rewind show`); refuse if the session moved on "
                   "(default: the epoch read when the command starts)")
    p.add_argument("--force", action="store_true",
                   help="roll back even when no message or step would leave the live line")
    p.set_defaults(func=cmd_rollback)

    p = sub.add_parser(
        "quarantine", help="refuse a tool to every agent (or some), list or lift quarantines",
        epilog="While a quarantine applies, Session.step(TOOL) raises ToolQuarantined before "
        "the tool runs, in every process on the store (within a second).",
    )
    p.add_argument("tool", nargs="?", type=_nonblank("TOOL"), help="the tool to refuse")
    p.add_argument("--reason", type=_nonblank("--reason"), help="why (agents read it)")
    p.add_argument("--actor", type=actor)
    p.add_argument("--tenant", type=_nonblank("--tenant"), help="only this tenant's sessions")
    p.add_argument("--scenario", type=_nonblank("--scenario"))
    p.add_argument("--prompt-version", type=_nonblank("--prompt-version"))
    p.add_argument("--until", type=parse_until, metavar="WHEN",
                   help="+AGE (+2h) or an ISO time (UTC unless it has an offset); default: "
                   "until lifted")
    p.add_argument("--list", action="store_true", help="list quarantines in force")
    p.add_argument("--all", action="store_true", help="with --list: also expired ones")
    p.add_argument("--lift", metavar="ID", help="lift a quarantine (needs --reason)")
    p.set_defaults(func=cmd_quarantine)

    p = sub.add_parser(
        "freeze", help="show, declare or end the fleet's change freeze",
        epilog="A declared freeze lives in the store: every process on it (agents, the MCP "
        "proxy, the demo, the console) follows its window and loop policy, whatever its own "
        "$REWIND_FREEZE_* says. Declaring and ending are audited.")
    p.add_argument("--start", metavar="TIME", help="ISO 8601 start (declares a freeze)")
    p.add_argument("--end", dest="end_at", metavar="TIME", help="ISO 8601 end (exclusive)")
    p.add_argument("--name", help="what banners and verdicts call it")
    p.add_argument("--on-loop", choices=["rollback", "nudge_then_rollback", "flag", "off"],
                   help="what sessions do on a loop while it lasts (default: engine default)")
    p.add_argument("--lift", action="store_true", help="end the declared freeze")
    p.add_argument("--actor", type=actor, default=None, help="who declares or ends it")
    p.add_argument("--reason", help="why (required to declare or end)")
    p.set_defaults(func=cmd_freeze)

    p = sub.add_parser(
        "replay", help="re-run the fleet's stored steps under other detector settings",
        epilog="Replays every matching session (all branches, in time order) through the "
        "detector in force and through one with the --set changes, and says which flags "
        "appear, vanish, move earlier or later, with precision and recall against operator "
        "labels (rewind label). Writes nothing.")
    p.add_argument("--where", type=_where_item, action="append", metavar="KEY=VALUE",
                   help="only sessions matching (repeatable; status, tenant, scenario, "
                   "prompt_version, tool, session)")
    p.add_argument("--set", type=_set_item, action="append", metavar="FIELD=VALUE",
                   help="a DetectorConfig field to change (repeatable), e.g. repeat_threshold=5")
    p.add_argument("--json", action="store_true", help='{"sessions": [...], "summary": {...}}')
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser(
        "detector", help="show or declare the loop-detector settings every process follows",
        epilog="Declared settings live in the store: agents, the demo, the MCP proxy and the "
        "integrations on it build new session handles with them, and each verdict records "
        "them. Every process also reads the [rewind.detector] table of ./rewind.toml or of "
        "the file $REWIND_CONFIG names; a field declared in the store wins over the file. Try "
        "a change first with `rewind replay --set`.")
    p.add_argument("--set", type=_set_item, action="append", metavar="FIELD=VALUE",
                   help="a DetectorConfig field (repeatable), e.g. repeat_threshold=5")
    p.add_argument("--reset", action="store_true", help="back to each process's own settings")
    p.add_argument("--actor", type=actor)
    p.add_argument("--reason")
    p.set_defaults(func=cmd_detector)

    p = sub.add_parser(
        "incidents", help="loops grouped by cause (tool, normalised error, rule)",
        epilog="Open incidents first. --json prints {\"incidents\": [{id, tool, signature, "
        "rule, status, first_seen, last_seen, sessions, counts, …}]}.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--status", choices=["open", "closed"], help="only open or closed ones")
    p.set_defaults(func=cmd_incidents)

    p = sub.add_parser(
        "incident", help="show one incident, or take a remedy on all its sessions",
        epilog="Without --yes a remedy is only previewed. rollback: every session of the "
        "incident (bulk rollback); quarantine: its tool; release / stop: its sessions waiting "
        "for on-call; notice: the recovery notice to every session; close: the incident.")
    p.add_argument("id", type=_nonblank("ID"), help="incident id (see `rewind incidents`)")
    p.add_argument("action", nargs="?", choices=list(INCIDENT_VERBS))
    p.add_argument("--actor", type=actor)
    p.add_argument("--reason", help="why (audited; required to act)")
    p.add_argument("--yes", action="store_true", help="act, instead of previewing")
    p.set_defaults(func=cmd_incident)

    p = sub.add_parser(
        "release", help="let a session waiting for on-call continue (audited)",
        epilog="A session flagged under the 'flag' loop policy (its own or a freeze's) waits "
        "for a person: roll it back (rewind rollback), release it, or stop it. A release lets "
        "its agent go on; --note is appended to its messages for the agent to read.")
    p.add_argument("session", type=_session_id)
    p.add_argument("--actor", type=actor, required=True)
    p.add_argument("--reason", required=True)
    p.add_argument("--note", help="a note for the agent (appended to its messages)")
    p.set_defaults(func=cmd_release)

    p = sub.add_parser("stop", help="stop a session waiting for on-call (audited)",
                       epilog="The session stays readable; its agent's steps are refused.")
    p.add_argument("session", type=_session_id)
    p.add_argument("--actor", type=actor, required=True)
    p.add_argument("--reason", required=True)
    p.set_defaults(func=cmd_stop)

    p = sub.add_parser("label", help="say whether a session was a loop (audited)")
    p.add_argument("session", type=_session_id)
    p.add_argument("label", choices=["loop", "not-loop"])
    p.add_argument("--actor", type=actor, required=True)
    p.add_argument("--reason")
    p.set_defaults(func=cmd_label)

    p = sub.add_parser(
        "alert", help="page webhooks on incidents, loops, rollbacks, failed compensations",
        epilog="Follows the event feed from a cursor kept in the store: a restart neither "
        "skips nor repeats an alert. Each alert is a JSON POST whose `text` a Slack-compatible "
        "incoming webhook shows. Rules: loop, rollback, compensation_failed, loop_spike (loops "
        "of one prompt version or tool reaching --spike-threshold within --spike-window), "
        "incident (one page when loops of one cause open an incident, when it grows past 50, "
        "100, 250, ... sessions or reaches a new tenant, when it closes; a session's loop "
        "pages through its incident while this rule is on). "
        "A first run starts at the newest event (see --since); later runs resume. SIGTERM or "
        "Ctrl-C stops it within a second. Exit codes with --once: 0 every due alert was "
        "delivered (or none was due), 1 a webhook could not be reached, answered other than "
        "2xx (a redirect too: redirects are not followed) or still holds alerts that failed "
        "(they wait in its outbox for the next run).",
    )
    p.add_argument("--webhook", action="append", required=True, metavar="URL",
                   help="http(s) URL to POST alerts to (repeatable)")
    p.add_argument("--rule", action="append", metavar="NAME",
                   choices=["loop", "rollback", "compensation_failed", "loop_spike", "incident"],
                   help="enable only these rules (repeatable; default: all, so loops page "
                   "once per incident, not once per session; leave out incident to page each "
                   "looping session)")
    p.add_argument("--console-url", metavar="URL",
                   help="console base URL, for a link to the session in each alert")
    p.add_argument("--spike-threshold", type=_non_negative("--spike-threshold", int),
                   default=5, help="loops of one prompt version or tool that page (default 5)")
    p.add_argument("--spike-window", type=parse_age, default=600.0, metavar="AGE",
                   help="window of the spike rule: a number with s, m, h or d (default 10m)")
    p.add_argument("--interval", type=_non_negative("--interval"), default=1.0,
                   metavar="SECONDS", help="seconds between rounds (default 1)")
    p.add_argument("--name", default="default", type=_nonblank("--name"),
                   help="name of this pager's state in the store (default: default)")
    p.add_argument("--once", action="store_true",
                   help="one round, then exit (1 when a webhook failed; see below)")
    p.add_argument("--since", type=_since, metavar="AGE|TIME",
                   help="where a first run starts: an age (30m, 2h) or an ISO time (UTC unless "
                   "it has an offset); default: now. A pager that has run before resumes")
    p.add_argument("--timeout", type=_non_negative("--timeout"), default=5.0,
                   metavar="SECONDS", help="deadline of one POST, all included (default 5)")
    p.add_argument("--metrics-port", type=_non_negative("--metrics-port", int), metavar="PORT",
                   help="serve Prometheus metrics on 127.0.0.1:PORT/metrics while it runs, "
                   "with rewind_incidents_open as of each round")
    p.set_defaults(func=cmd_alert)

    p = sub.add_parser("notice", help="send the user a recovery notice")
    p.add_argument("session", type=_session_id)
    p.add_argument("text", nargs="?", type=_nonblank("the notice text"),
                   help="custom text (default: template for the locale)")
    p.add_argument("--actor", required=True, type=actor)
    p.set_defaults(func=cmd_notice)

    p = sub.add_parser("audit", help="operator and engine actions")
    p.add_argument("--session")
    p.add_argument("--actor")
    p.add_argument("--action")
    p.add_argument("--limit", type=_non_negative("--limit", int), default=50)
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser(
        "compensations", help="saga outbox: list, retry or mark resolved",
        epilog="LIVE says whether a process seen in the last 2 minutes registered the handler. "
        "--retry ID puts a failed (or stuck) compensation back to pending with its attempts "
        "reset; --resolve ID marks it resolved by hand (undone outside Rewind). Both need "
        "--actor and --reason, are audited, and are refused for done ones and while a worker "
        "holds the compensation's lease.",
    )
    p.add_argument("--session")
    p.add_argument("--status", choices=["pending", "running", "done", "failed", "resolved"])
    p.add_argument("--limit", type=_non_negative("--limit", int), default=50)
    acting = p.add_mutually_exclusive_group()
    acting.add_argument("--retry", type=_non_negative("--retry", int), metavar="ID",
                        help="run compensation ID again (back to pending, attempts reset)")
    acting.add_argument("--resolve", type=_non_negative("--resolve", int), metavar="ID",
                        help="mark compensation ID resolved by hand")
    p.add_argument("--actor", type=actor)
    p.add_argument("--reason", type=_nonblank("--reason"))
    p.set_defaults(func=cmd_compensations)

    p = sub.add_parser(
        "purge", help="apply retention: delete old abandoned branches (or idle sessions)",
        epilog="Asks for confirmation unless --yes; without a terminal and without --yes it "
        "refuses (exit 1). List what would go first with --dry-run.",
    )
    p.add_argument("--older-than", type=parse_age, metavar="AGE", default=None,
                   help="delete branches abandoned longer ago than AGE: days, or a number with "
                   "s, m, h, d or w (required: there is no default age)")
    p.add_argument("--days", type=_days, default=None, help="same as --older-than, in days")
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted; delete "
                   "nothing")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.add_argument("--idle-sessions", action="store_true",
                   help="delete whole sessions idle longer than the age that are not evidence "
                   "(no loop verdict, rollback, notice, compensation or audit row) instead of "
                   "abandoned branches")
    p.set_defaults(func=cmd_purge)

    p = sub.add_parser("doctor", help="check the store and rebuild fleet indexes")
    p.add_argument("--stuck-after", type=parse_age, metavar="AGE", default=300.0,
                   help="report steps running for longer than AGE: a number with s, m, h, d "
                   "or w (a bare number is days; default 5m)")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("hash-password", help="print a password hash for secrets.toml")
    p.add_argument("--password", help="(reads the terminal or stdin when omitted)")
    p.set_defaults(func=cmd_hash_password)

    p = sub.add_parser("demo", help="run the demo fleet against a store")
    from engine.demo import add_arguments

    add_arguments(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("dashboard", help="start the console")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--address", default="127.0.0.1")
    p.add_argument("--allowed-host", action="append", metavar="NAME",
                   help="a host name people open the console under (repeatable); only "
                   "localhost, 127.0.0.1 and [::1] are accepted otherwise")
    p.set_defaults(func=cmd_dashboard)

    p = sub.add_parser("otlp", help="watch agents through OpenTelemetry: an OTLP/HTTP receiver "
                       "(POST /v1/traces) whose sessions are flagged, never rolled back")
    from engine.integrations.otlp import server as otlp

    otlp.add_arguments(p)
    p.set_defaults(func=otlp.main)

    p = sub.add_parser("mcp-proxy", help="guard the tools of MCP servers (an MCP server itself)",
                       usage="rewind mcp-proxy [--store URL] [--session ID] [--upstream URL] "
                             "[--timeout S] [--session-prefix P] [--address A] [--token T] "
                             "[--config FILE] [--http PORT] [-- COMMAND [ARGS...]]")
    p.add_argument("--store", default=argparse.SUPPRESS, help="store URL (as for rewind)")
    p.add_argument("--session", help="Rewind session of the connection (default: mcp-<random>)")
    p.add_argument("--upstream", action="append", metavar="URL",
                   help="a streamable HTTP MCP server to front (repeatable)")
    p.add_argument("--config", metavar="FILE", help='servers to front: {"mcpServers": {…}}')
    p.add_argument("--http", type=int, metavar="PORT",
                   help="serve streamable HTTP on ADDRESS:PORT instead of stdio")
    p.add_argument("--address", default="127.0.0.1",
                   help="address --http listens on (default 127.0.0.1; any other needs a token)")
    p.add_argument("--token", default=None,
                   help="bearer token every HTTP request must carry (default: "
                   "$REWIND_MCP_TOKEN); required off loopback")
    p.add_argument("--timeout", type=_non_negative("--timeout"), default=120.0,
                   metavar="SECONDS", help="wait at most SECONDS for an upstream's answer "
                   "(default 120; 0: no limit)")
    p.add_argument("--session-prefix", metavar="PREFIX",
                   help="let _meta name sessions whose id starts with PREFIX even when no MCP "
                   "proxy created them (default: only the proxies' own sessions)")
    p.add_argument("upstream_command", nargs=argparse.REMAINDER,
                   help="-- COMMAND [ARGS...]: a stdio MCP server to front")
    p.set_defaults(func=cmd_mcp_proxy)
    _store_after_the_command(parser)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run a parsed command; every failure becomes one line on stderr and an exit code."""
    def fail(message: str, code: int) -> int:
        print(f"rewind: {scrub(message)}", file=sys.stderr)
        return code

    try:
        return args.func(args)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `rewind sessions | head -1`: the reader had enough. Not a failure; point stdout at
        # nothing so the interpreter's final flush does not complain either.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except CLIError as exc:
        return fail(str(exc), exc.code)
    except (UnknownSession, UnknownSnapshot, UnknownCompensation, UnknownQuarantine,
            UnknownIncident, StoreNotFound) as exc:
        return fail(str(exc), EXIT_NOT_FOUND)
    except ConfigError as exc:  # a malformed setting ($REWIND_FREEZE_*): the user's to fix
        return fail(str(exc), EXIT_USAGE)
    except Exception as exc:  # noqa: BLE001 - the one place that turns failures into exit codes
        if os.environ.get("REWIND_DEBUG"):
            raise
        store = _store_failure(exc)
        if store is not None:
            return fail(store, EXIT_STORE)
        if isinstance(exc, (RewindError, ValueError, TypeError, PermissionError)):
            return fail(str(exc), EXIT_REFUSED)
        return fail(f"unexpected {type(exc).__name__}: {exc} (set REWIND_DEBUG=1 for the "
                    "traceback, and please report it)", EXIT_REFUSED)


def _store_after_the_command(parser: argparse.ArgumentParser) -> None:
    """Every command takes --store after its name too (`rewind sessions --store URL`), the habit
    of kubectl, docker and git -C; given in both places, the one after the command wins."""
    for action in parser._subparsers._group_actions if parser._subparsers else []:
        for name, sub in getattr(action, "choices", {}).items():
            if name == "hash-password" or any("--store" in a.option_strings
                                              for a in sub._actions):
                continue
            sub.add_argument("--store", default=argparse.SUPPRESS,
                             help="store URL (as for rewind --store)")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # usage errors exit 2 with argparse's message
    return run(args)

