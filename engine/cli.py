"""`rewind`: on-call work without the console. Every command goes through the engine API."""

from __future__ import annotations

import argparse
import datetime as _dt
import getpass
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from engine.errors import RewindError


def _fmt_time(ts: float | None) -> str:
    if ts is None:
        return "-"
    return _dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M:%S")


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    return "\n".join(out)


def _engine(args):
    from engine import Engine

    return Engine.open(args.store)


def cmd_sessions(args) -> int:
    engine = _engine(args)
    since = time.time() - args.active * 60 if args.active else None
    infos = engine.sessions(status=args.status, tenant=args.tenant, scenario=args.scenario,
                            prompt_version=args.prompt_version, updated_since=since,
                            limit=args.limit)
    if args.json:
        print(json.dumps([i.__dict__ for i in infos], ensure_ascii=False, indent=1))
        return 0
    rows = [[i.id, i.status, i.tenant or "-", i.scenario or "-", i.prompt_version or "-",
             str(i.steps), str(i.rollbacks), _fmt_time(i.updated_at),
             (i.last_verdict or {}).get("rule") or "-"] for i in infos]
    print(_table(rows, ["SESSION", "STATUS", "TENANT", "SCENARIO", "PROMPT", "STEPS",
                        "ROLLBACKS", "LAST ACTIVITY", "VERDICT"]))
    print(f"\n{len(infos)} session(s) in {engine.store.url}")
    return 0


def cmd_show(args) -> int:
    engine = _engine(args)
    s = engine.get_session(args.session)
    info = s.info()
    print(f"session {info.id}  status={info.status}  head={info.head}  epoch={info.epoch}")
    print(f"meta: {json.dumps(info.meta, ensure_ascii=False)}")
    if info.last_verdict:
        v = info.last_verdict
        print(f"verdict: {v.get('rule')}: {v.get('explanation')} "
              f"(evidence steps {v.get('evidence_steps')}, loop began at step "
              f"{v.get('loop_start_step')})")
    print(f"suggested rollback target: {s.suggested_target() or '-'}\n")
    rows = [[n.id, n.parent or "-", n.label or "-", _fmt_time(n.created_at),
             "head" if n.is_head else ("live" if n.on_live_line else "abandoned"),
             "yes" if n.restorable else "no"] for n in s.tree()[-args.last:]]
    print(_table(rows, ["SNAPSHOT", "PARENT", "LABEL", "TAKEN", "LINE", "RESTORABLE"]))
    return 0


def cmd_rollback(args) -> int:
    from engine import Actor

    engine = _engine(args)
    result = engine.rollback(args.session, to=args.to, actor=Actor(args.actor, "operator"),
                             reason=args.reason, notice=not args.no_notice)
    print(f"rolled {result.session} back to {result.target} (epoch {result.epoch}); "
          f"{result.abandoned_messages} message(s) and {result.abandoned_steps} step(s) kept "
          f"on abandoned branch {result.branch}")
    for comp in result.compensations:
        print(f"  compensation queued: {comp.name} for step {comp.step} ({comp.status})")
    if result.notice:
        print(f"  notice sent: {result.notice}")
    return 0


def cmd_notice(args) -> int:
    from engine import Actor

    engine = _engine(args)
    text = engine.notice(args.session, args.text, actor=Actor(args.actor, "operator"))
    print(f"notice appended to {args.session}: {text}")
    return 0


def cmd_audit(args) -> int:
    engine = _engine(args)
    events = engine.audit(session=args.session, actor=args.actor, action=args.action,
                          limit=args.limit)
    rows = [[_fmt_time(e.at), e.actor, e.action, e.session or "-", e.snapshot or "-",
             (e.reason or "")[:60]] for e in events]
    print(_table(rows, ["TIME", "ACTOR", "ACTION", "SESSION", "SNAPSHOT", "REASON"]))
    return 0


def cmd_compensations(args) -> int:
    engine = _engine(args)
    comps = engine.compensations(session=args.session, status=args.status, limit=args.limit)
    rows = [[str(c.id), c.session, str(c.step), c.name, c.status, str(c.attempts),
             (c.error or "")[:60]] for c in comps]
    print(_table(rows, ["ID", "SESSION", "STEP", "HANDLER", "STATUS", "ATTEMPTS", "ERROR"]))
    return 0


def cmd_purge(args) -> int:
    engine = _engine(args)
    removed = engine.purge_abandoned(older_than_s=args.days * 86400)
    print(json.dumps(removed))
    return 0


def cmd_doctor(args) -> int:
    engine = _engine(args)
    rebuilt = engine.doctor()
    print(f"{engine.store.url}: ok" + (f"; rebuilt {json.dumps(rebuilt)}" if rebuilt else ""))
    if engine.degraded:
        print(f"warning: {engine.degraded}")
    return 0


def cmd_hash_password(args) -> int:
    from engine.auth import hash_password

    password = args.password
    if password is None:
        if sys.stdin.isatty():
            password = getpass.getpass("Password: ")
            if getpass.getpass("Again: ") != password:
                print("the passwords differ", file=sys.stderr)
                return 2
        else:
            password = sys.stdin.readline().rstrip("\n")
    print(hash_password(password))
    return 0


def cmd_demo(args) -> int:
    from engine.demo import main as demo_main

    return demo_main(args)


def cmd_dashboard(args) -> int:
    app = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
    env = dict(os.environ)
    if args.store:
        env["REWIND_STORE"] = args.store
    cmd = [sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(args.port),
           "--server.address", args.address, "--server.headless", "true",
           "--browser.gatherUsageStats", "false"]
    return subprocess.call(cmd, env=env, cwd=str(app.parent.parent))


def cmd_mcp_proxy(args) -> int:
    from engine.integrations.mcp_proxy import main as proxy_main

    command = list(args.upstream_command)
    if command[:1] == ["--"]:
        command = command[1:]
    return proxy_main(args.store, command, args.upstream or [], session=args.session,
                      http_port=args.http, config=args.config)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rewind", description="Catch looping agent sessions and roll them back."
    )
    parser.add_argument("--store", default=None,
                        help="store URL (default: $REWIND_STORE, else sqlite:///.rewind/rewind.db)")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("sessions", help="list sessions")
    p.add_argument("--status", choices=["healthy", "looping", "rolled_back", "stopped"])
    p.add_argument("--tenant")
    p.add_argument("--scenario")
    p.add_argument("--prompt-version")
    p.add_argument("--active", type=float, metavar="MINUTES",
                   help="only sessions active in the last MINUTES")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sessions)

    p = sub.add_parser("show", help="a session's verdict and snapshot tree")
    p.add_argument("session")
    p.add_argument("--last", type=int, default=20, help="newest N snapshots")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("rollback", help="roll a session back (default: last healthy snapshot)")
    p.add_argument("session")
    p.add_argument("--to", metavar="SNAPSHOT")
    p.add_argument("--actor", required=True)
    p.add_argument("--reason", required=True)
    p.add_argument("--no-notice", action="store_true", help="do not notify the user")
    p.set_defaults(func=cmd_rollback)

    p = sub.add_parser("notice", help="send the user a recovery notice")
    p.add_argument("session")
    p.add_argument("text", nargs="?", help="custom text (default: template for the locale)")
    p.add_argument("--actor", required=True)
    p.set_defaults(func=cmd_notice)

    p = sub.add_parser("audit", help="operator and engine actions")
    p.add_argument("--session")
    p.add_argument("--actor")
    p.add_argument("--action")
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser("compensations", help="saga outbox")
    p.add_argument("--session")
    p.add_argument("--status", choices=["pending", "running", "done", "failed"])
    p.add_argument("--limit", type=int, default=50)
    p.set_defaults(func=cmd_compensations)

    p = sub.add_parser("purge", help="apply retention: delete old abandoned branches")
    p.add_argument("--days", type=float, default=7.0)
    p.set_defaults(func=cmd_purge)

    p = sub.add_parser("doctor", help="check the store and rebuild fleet indexes")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("hash-password", help="print a password hash for secrets.toml")
    p.add_argument("--password", help="(reads the terminal or stdin when omitted)")
    p.set_defaults(func=cmd_hash_password)

    p = sub.add_parser("demo", help="run the demo fleet against a store")
    try:
        from engine.demo import add_arguments
    except ImportError:
        add_arguments = None
    if add_arguments is not None:
        add_arguments(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("dashboard", help="start the console")
    p.add_argument("--port", type=int, default=8501)
    p.add_argument("--address", default="127.0.0.1")
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
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except RewindError as exc:
        print(f"rewind: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
