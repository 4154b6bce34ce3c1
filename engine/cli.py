"""`rewind`: on-call work without the console. Every command goes through the engine API.

No command prints a traceback for something the user or the store did: each failure is one line
on stderr (store URLs with their passwords masked) and an exit code that says what happened; see
`EXIT_CODES`. Set REWIND_DEBUG=1 to get the traceback of an unexpected error.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING

from engine.cli_text import (  # noqa: F401 - parse_age, scrub: part of the CLI's API
    _cell,
    _days,
    _describe_age,
    _fmt_time,
    _fmt_utc,
    _non_negative,
    _nonblank,
    _session_id,
    _table,
    _until_value,
    out,
    parse_age,
    parse_until,
    scrub,
)
from engine.errors import (
    ConfigError,
    RewindError,
    StoreError,
    UnknownCompensation,
    UnknownQuarantine,
    UnknownSession,
    UnknownSnapshot,
)
from engine.store import redact
from engine.types import Role

if TYPE_CHECKING:
    from engine.engine import Engine
    from engine.records import BranchInfo

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_STORE, EXIT_NOT_FOUND, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
EXIT_CODES = {
    EXIT_OK: "ok",
    EXIT_REFUSED: "the operation was refused or failed (nothing to roll back, someone else "
    "rolled the session back first, a size limit, a viewer's role, purge not confirmed, a "
    "compensation that is done or leased, …)",
    EXIT_USAGE: "usage error: a missing or malformed argument or setting ($REWIND_FREEZE_*), an "
    "unknown store URL scheme",
    EXIT_STORE: "the store is unreachable, refuses the credentials, is read-only, or is broken "
    "(a corrupt database file, a newer schema)",
    EXIT_NOT_FOUND: "the session, snapshot, compensation or quarantine does not exist",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
}


class CLIError(Exception):
    """A failure the CLI reports in one line with its own exit code."""

    def __init__(self, message: str, code: int = EXIT_REFUSED):
        super().__init__(message)
        self.code = code


def _engine(args):
    """The engine on the store the command names. Every command here works on a fleet that
    exists, so a store that does not exist is refused (exit 4, naming the absolute path), never
    created empty: from the wrong folder, "0 looping" would be the worst possible answer. Which
    store was read goes to stderr, so piped output stays clean."""
    from engine import Engine, StoreNotFound

    try:
        engine = Engine.open(args.store, create=False)
    except StoreNotFound as exc:
        raise CLIError(str(exc), EXIT_NOT_FOUND) from exc
    except ValueError as exc:  # an unknown scheme or a malformed URL: the user's to fix
        if isinstance(exc, RewindError):
            raise
        raise CLIError(str(exc), EXIT_USAGE) from exc
    print(f"rewind: store {_store_name(engine.store.url)}", file=sys.stderr)
    return engine


def _store_name(url: str) -> str:
    """The store as people check it: a SQLite file by its absolute path, others by their URL
    with the password masked."""
    from engine.store.sqlite.tx import path_from_url

    if url.lower().startswith("sqlite:"):
        path = path_from_url(url)
        return path if path == ":memory:" else os.path.abspath(path)
    return redact(url)


# -- commands ---------------------------------------------------------------------------------
def cmd_sessions(args) -> int:
    engine = _engine(args)
    since = time.time() - args.active * 60 if args.active else None
    infos = engine.sessions(status=args.status, tenant=args.tenant, scenario=args.scenario,
                            prompt_version=args.prompt_version, updated_since=since,
                            limit=args.limit)
    if args.json:
        print(json.dumps([i.__dict__ for i in infos], ensure_ascii=True, indent=1))
        return 0
    rows = [[i.id, i.status, i.tenant or "-", i.scenario or "-", i.prompt_version or "-",
             str(i.steps), str(i.rollbacks), _fmt_time(i.updated_at),
             (i.last_verdict or {}).get("rule") or "-"] for i in infos]
    print(_table(rows, ["SESSION", "STATUS", "TENANT", "SCENARIO", "PROMPT", "STEPS",
                        "ROLLBACKS", "LAST ACTIVITY", "VERDICT"]))
    out(f"\n{len(infos)} session(s) in {redact(engine.store.url)}")
    return 0


def cmd_show(args) -> int:
    engine = _engine(args)
    s = engine.get_session(args.session)
    info = s.info()
    out(f"session {info.id}  status={info.status}  head={info.head}  epoch={info.epoch}")
    out(f"meta: {json.dumps(info.meta, ensure_ascii=False)}")
    if info.last_verdict:
        v = info.last_verdict
        out(f"verdict: {v.get('rule')}: {v.get('explanation')} "
            f"(evidence steps {v.get('evidence_steps')}, loop began at step "
            f"{v.get('loop_start_step')})")
        if v.get("policy"):
            out(f"policy: {v.get('policy')} ({v.get('policy_reason') or 'reason not recorded'})")
    out(f"suggested rollback target: {s.suggested_target() or '-'}\n")
    rows = [[n.id, n.parent or "-", n.label or "-", _fmt_time(n.created_at),
             "head" if n.is_head else ("live" if n.on_live_line else "abandoned"),
             "yes" if n.restorable else "no"] for n in s.tree()[-args.last:]]
    print(_table(rows, ["SNAPSHOT", "PARENT", "LABEL", "TAKEN", "LINE", "RESTORABLE"]))
    return 0


def _where_item(text: str) -> tuple[str, str]:
    from engine.recovery.bulk import WHERE_KEYS

    key, sep, value = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not value.strip() or key not in WHERE_KEYS:
        raise argparse.ArgumentTypeError(
            f"--where takes KEY=VALUE with KEY one of {', '.join(WHERE_KEYS)}, not {text!r}"
        )
    return key, value.strip()


def _confirm(args, question: str, what: str) -> None:
    """Ask `question` unless --yes; refuse without a terminal (CLIError, exit 1)."""
    if args.yes:
        return
    if not (sys.stdin and sys.stdin.isatty()):
        raise CLIError(f"refusing to {question[:-1]} without confirmation: stdin is not a "
                       f"terminal. Check the list with --dry-run, then pass --yes.")
    answer = input(scrub(question) + " [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise CLIError(f"{what} cancelled; nothing was changed")


def cmd_rollback_many(args) -> int:
    from engine import Actor

    if args.to is not None or args.expect_epoch is not None:
        raise CLIError("--to and --expect-epoch go with one session, not with --where "
                       "(each session goes to its own last healthy snapshot, with the epoch "
                       "read just before)", EXIT_USAGE)
    where: dict[str, str] = {}
    for key, value in args.where:
        if key in where and where[key] != value:
            raise CLIError(f"--where {key} is given twice ({where[key]!r}, {value!r})",
                           EXIT_USAGE)
        where[key] = value
    engine = _engine(args)
    who = Actor(args.actor, Role.OPERATOR)
    filters = " ".join(f"{k}={v}" for k, v in where.items())
    preview = engine.rollback_many(where, actor=who, reason=args.reason, dry_run=True)
    rows = []
    for item in preview:
        p = item.preview
        rows.append([item.session, p.target if p else "-",
                     str(len(p.messages)) if p else "-", str(len(p.steps)) if p else "-",
                     ", ".join(f"{name} (step {n})" for n, name, _ in p.compensations)
                     if p and p.compensations else "-",
                     "" if item.ok else (item.error or "")[:80]])
    if rows:
        print(_table(rows, ["SESSION", "TARGET", "MESSAGES", "STEPS", "COMPENSATIONS",
                            "PROBLEM"]))
    if not preview:
        out(f"no session matches {filters}; nothing to roll back")
        return 0
    if args.dry_run:
        out(f"\ndry run: {len(preview)} session(s) matching {filters} would be rolled back "
            "(MESSAGES and STEPS leave the live line); nothing was changed")
        return 0
    _confirm(args, f"roll back {len(preview)} session(s) matching {filters}?", "rollback")
    results = engine.rollback_many(where, actor=who, reason=args.reason,
                                   notice=not args.no_notice)
    rows = [[i.session, "rolled back" if i.ok else "refused",
             (f"to {i.rollback.target}, epoch {i.rollback.epoch}, branch {i.rollback.branch}"
              if i.rollback else (i.error or ""))[:100]] for i in results]
    if rows:
        print(_table(rows, ["SESSION", "RESULT", "DETAIL"]))
    failed = sum(1 for i in results if not i.ok)
    batch = results[0].batch if results else "-"
    out(f"\nbatch {batch}: {len(results) - failed} rolled back, {failed} refused")
    return EXIT_REFUSED if failed else EXIT_OK


def cmd_rollback(args) -> int:
    from engine import Actor

    if args.where:
        if args.session is not None:
            raise CLIError("give a session or --where filters, not both", EXIT_USAGE)
        return cmd_rollback_many(args)
    if args.session is None:
        raise CLIError("give the session to roll back, or --where KEY=VALUE filters",
                       EXIT_USAGE)
    if args.dry_run or args.yes:
        raise CLIError("--dry-run and --yes go with --where; for one session see "
                       "`rewind show`", EXIT_USAGE)
    engine = _engine(args)
    info = engine.get_session(args.session).info()
    # The epoch read here (or the one the operator saw, --expect-epoch) goes with the rollback:
    # if someone else rolls the session back in between, this one is refused, not repeated.
    expect = info.epoch if args.expect_epoch is None else args.expect_epoch
    if not args.force:
        preview = engine.preview_rollback(args.session, args.to)
        if not preview.messages and not preview.steps:
            raise CLIError(
                f"nothing to roll back: session {args.session!r} has no message or step after "
                f"snapshot {preview.target}, so a rollback would only add an empty branch and "
                "a notice. Pick an earlier snapshot with --to (see `rewind show`), or pass "
                "--force to roll back anyway."
            )
    # The engine refuses a session that was rolled back already (NothingToRollBack, exit 1,
    # saying why) unless --force: a second rollback would only take the first one's notice away.
    result = engine.rollback(args.session, to=args.to, actor=Actor(args.actor, Role.OPERATOR),
                             reason=args.reason, notice=not args.no_notice, expect_epoch=expect,
                             force=args.force)
    out(f"rolled {result.session} back to {result.target} (epoch {result.epoch}); "
        f"{result.abandoned_messages} message(s) and {result.abandoned_steps} step(s) kept "
        f"on abandoned branch {result.branch}")
    for comp in result.compensations:
        out(f"  compensation queued: {comp.name} for step {comp.step} ({comp.status})")
    if result.notice:
        out(f"  notice sent: {result.notice}")
    return 0


def cmd_quarantine(args) -> int:
    from engine import Actor

    modes = sum([bool(args.list), args.lift is not None, args.tool is not None])
    if modes != 1:
        raise CLIError("give a TOOL to quarantine, --list, or --lift ID (one of them)",
                       EXIT_USAGE)
    engine = _engine(args)
    if args.list:
        now = engine.clock()
        rows = [[q.id, q.tool, ", ".join(f"{k}={v}" for k, v in sorted(q.scope.items())) or
                 "every session", q.actor, _fmt_utc(q.until),
                 "active" if q.active(now) else "expired", q.reason[:60]]
                for q in engine.quarantines(include_expired=args.all)]
        print(_table(rows, ["ID", "TOOL", "SCOPE", "BY", "UNTIL", "STATE", "REASON"]))
        return 0
    if args.actor is None or args.reason is None:
        raise CLIError("quarantining or lifting needs --actor and --reason (both audited)",
                       EXIT_USAGE)
    who = Actor(args.actor, Role.OPERATOR)
    if args.lift is not None:
        q = engine.lift_quarantine(args.lift, actor=who, reason=args.reason)
        out(f"lifted quarantine {q.id} of {q.tool}")
        return 0
    scope = {k: v for k, v in (("tenant", args.tenant), ("scenario", args.scenario),
                                ("prompt_version", args.prompt_version)) if v}
    q = engine.quarantine(args.tool, actor=who, reason=args.reason, scope=scope or None,
                          until=_until_value(args.until))
    where = ", ".join(f"{k}={v}" for k, v in sorted(q.scope.items())) or "every session"
    out(f"quarantined {q.tool} for {where} {_fmt_utc(q.until)} (id {q.id}); agents see "
        "ToolQuarantined within a second")
    return 0


def cmd_alert(args) -> int:
    import signal

    from engine.alerts import RULES, AlertConfig, AlertWorker

    rules = tuple(args.rule) if args.rule else RULES
    try:
        config = AlertConfig(rules=rules, console_url=args.console_url,
                             spike_threshold=args.spike_threshold,
                             spike_window_s=args.spike_window)
        engine = _engine(args)
        worker = AlertWorker(engine, args.webhook, config, name=args.name)
    except ValueError as exc:
        if isinstance(exc, RewindError):
            raise
        raise CLIError(str(exc), EXIT_USAGE) from exc
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    out(f"rewind alert: following {redact(engine.store.url)} for {', '.join(rules)}; "
        f"{len(args.webhook)} webhook(s); Ctrl-C stops")
    try:
        worker.run(interval_s=args.interval, rounds=1 if args.once else None)
    finally:
        worker.close()
    return 0


def cmd_notice(args) -> int:
    from engine import Actor

    engine = _engine(args)
    text = engine.notice(args.session, args.text, actor=Actor(args.actor, Role.OPERATOR))
    out(f"notice appended to {args.session}: {text}")
    return 0


def cmd_audit(args) -> int:
    engine = _engine(args)
    events = engine.audit(session=args.session, actor=args.actor, action=args.action,
                          limit=args.limit)
    rows = [[_fmt_time(e.at), e.actor, e.action, e.session or "-", e.snapshot or "-",
             (e.reason or "")[:60]] for e in events]
    print(_table(rows, ["TIME", "ACTOR", "ACTION", "SESSION", "SNAPSHOT", "REASON"]))
    return 0


def _no_live_handler(name: str) -> str:
    from engine.saga import LIVE_S

    return (f"warning: no running process has registered {name} in the last "
            f"{LIVE_S / 60:g} minutes; retrying will not help until one does (start the agent "
            "runtime or worker that registers it)")


def cmd_compensations(args) -> int:
    from engine import Actor

    cid = args.retry if args.retry is not None else args.resolve
    if cid is None:
        if args.actor is not None or args.reason is not None:
            raise CLIError("--actor and --reason go with --retry ID or --resolve ID", EXIT_USAGE)
        engine = _engine(args)
        comps = engine.compensations(session=args.session, status=args.status, limit=args.limit)
        live = engine.compensation_handlers()
        rows = [[str(c.id), c.session, str(c.step), c.name, c.status, str(c.attempts),
                 "yes" if c.name in live else "no", (c.error or "")[:60]] for c in comps]
        print(_table(rows, ["ID", "SESSION", "STEP", "HANDLER", "STATUS", "ATTEMPTS", "LIVE",
                            "ERROR"]))
        return 0
    if args.actor is None or args.reason is None:
        raise CLIError("retrying or resolving a compensation needs --actor and --reason (both "
                       "audited)", EXIT_USAGE)
    engine = _engine(args)
    who = Actor(args.actor, Role.OPERATOR)
    what = "compensation {c.id} ({c.name} for {c.session}, step {c.step})"
    if args.retry is not None:
        c = engine.retry_compensation(cid, actor=who, reason=args.reason)
        out(what.format(c=c) + " is pending again with its attempts reset; a process that "
            "registered the handler runs it on its next pass")
        if c.name not in engine.compensation_handlers():
            print(f"rewind: {scrub(_no_live_handler(c.name))}", file=sys.stderr)
    else:
        c = engine.resolve_compensation(cid, actor=who, reason=args.reason)
        out(what.format(c=c) + f" is marked resolved by {who.name}; no process will run it")
    return 0


def purge_candidates(engine: Engine, before: float) -> list[tuple[str, BranchInfo]]:
    """(session id, BranchInfo) of every abandoned branch created before `before`, read
    through the engine API (sessions page by page, then each session's branches)."""
    found = []
    offset, page = 0, 500
    while True:
        infos = engine.sessions(limit=page, offset=offset)
        for info in infos:
            for branch in engine.get_session(info.id).branches():
                if branch.created_at < before:
                    found.append((info.id, branch))
        if len(infos) < page:
            return found
        offset += page


def cmd_purge(args) -> int:
    if args.older_than is not None and args.days is not None:
        raise CLIError("give --older-than or --days, not both", EXIT_USAGE)
    age = args.older_than if args.older_than is not None else args.days
    age = 7 * 86400.0 if age is None else age
    engine = _engine(args)
    if args.idle_sessions:
        return _purge_idle_sessions(engine, age, args)
    now = engine.clock()
    candidates = purge_candidates(engine, now - age)
    where = redact(engine.store.url)
    if args.dry_run:
        rows = [[sid, b.id, _fmt_time(b.created_at), b.actor, (b.reason or "")[:60]]
                for sid, b in candidates]
        if rows:
            print(_table(rows, ["SESSION", "BRANCH", "ABANDONED", "BY", "REASON"]))
        out(f"\ndry run: {len(candidates)} abandoned branch(es) older than "
            f"{_describe_age(age)} would be deleted from {where}; nothing was deleted")
        return 0
    if not candidates:
        out(f"no abandoned branch older than {_describe_age(age)} in {where}; nothing to delete")
        return 0
    sessions = len({sid for sid, _ in candidates})
    question = (f"delete {len(candidates)} abandoned branch(es) of {sessions} session(s), "
                f"older than {_describe_age(age)}, from {where}?")
    _confirm_purge(question, args)
    removed = engine.purge_abandoned(older_than_s=age)
    print(json.dumps(removed))
    return 0


def _confirm_purge(question: str, args) -> None:
    """Ask `question` unless --yes; refuse without a terminal to answer it."""
    if args.yes:
        return
    if not (sys.stdin and sys.stdin.isatty()):
        raise CLIError(f"refusing to {question[:-1]} without confirmation: stdin is not a "
                       "terminal. Check with --dry-run, then pass --yes.")
    answer = input(scrub(question) + " [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise CLIError("purge cancelled; nothing was deleted")


def _purge_idle_sessions(engine: Engine, age: float, args) -> int:
    where = redact(engine.store.url)
    found = engine.purge_idle_sessions(age, dry_run=True)
    kept = f"{found['evidence']} as old kept as evidence"
    if args.dry_run:
        out(f"dry run: {found['sessions']} idle session(s) older than {_describe_age(age)} "
            f"would be deleted from {where} ({kept}); nothing was deleted")
        return 0
    if not found["sessions"]:
        out(f"no idle session older than {_describe_age(age)} that is not evidence in {where} "
            f"({kept}); nothing to delete")
        return 0
    _confirm_purge(f"delete {found['sessions']} idle session(s) older than "
                   f"{_describe_age(age)} that are not evidence, from {where}?", args)
    print(json.dumps(engine.purge_idle_sessions(age)))
    return 0


def cmd_doctor(args) -> int:
    try:
        engine = _engine(args)
        where = redact(engine.store.url)
        rebuilt = engine.doctor()
    except CLIError:
        raise
    except Exception as exc:  # noqa: BLE001 - doctor's job is to say what is wrong
        problem = _store_failure(exc)
        if problem is None:
            raise
        raise CLIError(
            f"doctor: the store is not usable: {problem}. If the file is damaged, move it "
            "aside and restore a backup (a missing file is created empty on next use); if the "
            "store is unreachable, check the URL, the server and the credentials",
            EXIT_STORE,
        ) from exc
    out(f"{where}: ok" + (f"; rebuilt {json.dumps(rebuilt)}" if rebuilt else ""))
    if engine.degraded:
        out(f"warning: {engine.degraded}")
    return 0


def cmd_hash_password(args) -> int:
    from engine.auth import hash_password

    password = args.password
    if password is None:
        if sys.stdin.isatty():
            password = getpass.getpass("Password: ")
            if getpass.getpass("Again: ") != password:
                raise CLIError("the passwords differ", EXIT_USAGE)
        else:
            password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise CLIError("the password must not be empty", EXIT_USAGE)
    print(hash_password(password))
    return 0


def cmd_demo(args) -> int:
    from engine.demo import main as demo_main

    return demo_main(args)


def cmd_dashboard(args) -> int:
    # serve.py runs app.py behind the console's response headers (no framing, metrics shut)
    app = Path(__file__).resolve().parent.parent / "dashboard" / "serve.py"
    env = dict(os.environ)
    if args.store:
        env["REWIND_STORE"] = args.store
    cmd = [sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(args.port),
           "--server.address", args.address, "--server.headless", "true",
           "--browser.gatherUsageStats", "false"]
    if args.allowed_host:
        # Replaces the loopback names of .streamlit/config.toml, so keep them for local use.
        for host in ["localhost", "127.0.0.1", "::1", *args.allowed_host]:
            cmd += ["--server.allowedHosts", host]
    return subprocess.call(cmd, env=env, cwd=str(app.parent.parent),
                           preexec_fn=_die_with_parent)


def _die_with_parent() -> None:
    # Runs in the Streamlit child before exec: the kernel sends it SIGTERM when `rewind
    # dashboard` dies (a service manager's SIGTERM, a kill), so the server never keeps serving
    # as an orphan. Linux only (prctl PR_SET_PDEATHSIG); elsewhere the child is left as before.
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # no prctl on this system
        pass


def cmd_mcp_proxy(args) -> int:
    from engine.integrations.mcp_proxy import main as proxy_main

    command = list(args.upstream_command)
    if command[:1] == ["--"]:
        command = command[1:]
    return proxy_main(args.store, command, args.upstream or [], session=args.session,
                      http_port=args.http, config=args.config)


EPILOG = "exit codes:\n" + "\n".join(
    textwrap.fill(text, 78, initial_indent=f"  {code:<4}", subsequent_indent=" " * 6)
    for code, text in EXIT_CODES.items()
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rewind", description="Catch looping agent sessions and roll them back.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--store", default=None,
                        help="store URL (default: $REWIND_STORE, else sqlite:///.rewind/rewind.db)")
    sub = parser.add_subparsers(dest="command", required=True)
    actor = _nonblank("--actor")

    p = sub.add_parser("sessions", help="list sessions")
    p.add_argument("--status", choices=["healthy", "looping", "rolled_back", "stopped"])
    p.add_argument("--tenant")
    p.add_argument("--scenario")
    p.add_argument("--prompt-version")
    p.add_argument("--active", type=_non_negative("--active"), metavar="MINUTES",
                   help="only sessions active in the last MINUTES")
    p.add_argument("--limit", type=_non_negative("--limit", int), default=50)
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
        "alert", help="page webhooks on loops, rollbacks, failed compensations, loop spikes",
        epilog="Follows the event feed from a cursor kept in the store: a restart neither "
        "skips nor repeats an alert. Each alert is a JSON POST whose `text` a Slack-compatible "
        "incoming webhook shows. Rules: loop, rollback, compensation_failed, loop_spike (loops "
        "of one prompt version or tool reaching --spike-threshold within --spike-window).",
    )
    p.add_argument("--webhook", action="append", required=True, metavar="URL",
                   help="http(s) URL to POST alerts to (repeatable)")
    p.add_argument("--rule", action="append", metavar="NAME",
                   choices=["loop", "rollback", "compensation_failed", "loop_spike"],
                   help="enable only these rules (repeatable; default: all)")
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
    p.add_argument("--once", action="store_true", help="one round, then exit")
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
                   "s, m, h, d or w (default 7d)")
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

    p = sub.add_parser("mcp-proxy", help="guard the tools of MCP servers (an MCP server itself)",
                       usage="rewind mcp-proxy [--store URL] [--session ID] [--upstream URL] "
                             "[--config FILE] [--http PORT] [-- COMMAND [ARGS...]]")
    p.add_argument("--store", default=argparse.SUPPRESS, help="store URL (as for rewind)")
    p.add_argument("--session", help="Rewind session of the connection (default: mcp-<random>)")
    p.add_argument("--upstream", action="append", metavar="URL",
                   help="a streamable HTTP MCP server to front (repeatable)")
    p.add_argument("--config", metavar="FILE", help='servers to front: {"mcpServers": {…}}')
    p.add_argument("--http", type=int, metavar="PORT",
                   help="serve streamable HTTP on 127.0.0.1:PORT instead of stdio")
    p.add_argument("upstream_command", nargs=argparse.REMAINDER,
                   help="-- COMMAND [ARGS...]: a stdio MCP server to front")
    p.set_defaults(func=cmd_mcp_proxy)
    _store_after_the_command(parser)
    return parser


def _store_failure(exc: BaseException) -> str | None:
    """A one-line description when `exc` says the store itself failed, else None."""
    import sqlite3

    if isinstance(exc, StoreError):
        return str(exc)
    if isinstance(exc, sqlite3.Error):
        text = str(exc)
        if "readonly" in text or "read-only" in text:
            return (f"the store is read-only for this user ({text}); reading commands work, "
                    "this one writes. Run as the file's owner, or copy the database and point "
                    "--store at the copy")
        return f"the SQLite store failed: {text} (is the file damaged? `rewind doctor`)"
    from redis.exceptions import RedisError

    if isinstance(exc, RedisError):
        return f"the Redis store failed: {type(exc).__name__}: {exc}"
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return f"the store failed: {type(exc).__name__}: {exc}"
    return None


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
    except (UnknownSession, UnknownSnapshot, UnknownCompensation, UnknownQuarantine) as exc:
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


if __name__ == "__main__":
    sys.exit(main())
