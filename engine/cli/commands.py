"""The `rewind` commands: one function per subcommand, each through the engine API (the parser
and the error handling are in `engine.cli`)."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from engine.cli.text import (
    _describe_age,
    _fmt_time,
    _fmt_utc,
    _table,
    _until_value,
    out,
    parse_age,
    scrub,
)
from engine.errors import (
    ConfigError,
    RewindError,
)
from engine.store import SessionCursor, redact
from engine.store.urls import absolute_url
from engine.types import Role

if TYPE_CHECKING:
    from engine.engine import Engine
    from engine.records import BranchInfo

from engine.cli.common import (
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_STORE,
    EXIT_USAGE,
    CLIError,
    _engine,
    _store_failure,
)


# -- commands ---------------------------------------------------------------------------------
def cmd_sessions(args) -> int:
    engine = _engine(args)
    since = time.time() - args.active * 60 if args.active else None
    try:
        after = SessionCursor.decode(args.after) if args.after else None
    except ValueError as exc:
        raise CLIError(str(exc), EXIT_USAGE) from None
    infos = engine.sessions(status=args.status, tenant=args.tenant, scenario=args.scenario,
                            prompt_version=args.prompt_version, updated_since=since,
                            limit=args.limit, after=after)
    now = time.time()
    costs = {i.id: i.loop_cost(now) if i.status == "looping" else None for i in infos}
    if args.json:
        print(json.dumps([{**i.__dict__, "loop_cost": c.__dict__ if (c := costs[i.id]) else None}
                          for i in infos], ensure_ascii=True, indent=1))
        return 0
    rows = [[i.id, _status_text(i),
             i.tenant or "-", i.scenario or "-", i.prompt_version or "-",
             str(i.steps), str(i.rollbacks), _fmt_time(i.updated_at),
             f"{c.steps:,} steps, {_duration(c.seconds)}" if (c := costs[i.id]) else "-",
             (i.last_verdict or {}).get("rule") or "-"]
            for i in infos]
    print(_table(rows, ["SESSION", "STATUS", "TENANT", "SCENARIO", "PROMPT", "STEPS",
                        "ROLLBACKS", "LAST ACTIVITY", "IN LOOP", "VERDICT"]))
    out(f"\n{len(infos)} session(s) in {redact(engine.store.url)}")
    if infos and len(infos) == args.limit:
        out(f"next page: --after {shlex.quote(SessionCursor.after(infos[-1]).encode())}")
    return 0


def _status_text(info) -> str:
    """A session's status for a table: a waiting session says since when."""
    if info.waiting_since is not None:
        return f"waiting for on-call since {_fmt_time(info.waiting_since)}"
    return info.status + (" (watch-only)" if info.meta.get("watch_only") else "")


def cmd_show(args) -> int:
    engine = _engine(args)
    s = engine.get_session(args.session)
    info = s.info()
    out(f"session {info.id}  status={info.status}  head={info.head}  epoch={info.epoch}")
    if info.waiting_since is not None:
        out(f"waiting for on-call since {_fmt_time(info.waiting_since)}: decide with rewind "
            f"rollback|release|stop {info.id} --actor A --reason R")
    if info.meta.get("watch_only"):
        out(WATCH_ONLY.format(sid=info.id, verb="rolled back or notified"))
    out(f"meta: {json.dumps(info.meta, ensure_ascii=False)}")
    if info.last_verdict:
        v = info.last_verdict
        out(f"verdict: {v.get('rule')}: {v.get('explanation')} "
            f"(evidence steps {v.get('evidence_steps')})")
        if v.get("policy"):
            out(f"policy: {v.get('policy')} ({v.get('policy_reason') or 'reason not recorded'})")
        cost = info.loop_cost(time.time())
        if cost is not None:
            out(f"loop: {_loop_cost_text(cost)}")
    out(f"suggested rollback target: {s.suggested_target() or '-'}\n")
    rows = [[n.id, n.parent or "-", n.label or "-", _fmt_time(n.created_at),
             "head" if n.is_head else ("live" if n.on_live_line else "abandoned"),
             "yes" if n.restorable else "no"]
            # tree[-0:] would be the whole tree: --last 0 asks for none
            for n in (s.tree()[-args.last:] if args.last else [])]
    print(_table(rows, ["SNAPSHOT", "PARENT", "LABEL", "TAKEN", "LINE", "RESTORABLE"]))
    return 0


def _loop_cost_text(cost) -> str:
    """A `LoopCost` in one line: since when and what it spent, from the loop's first step."""
    parts = [f"began at step {cost.start_step} ({_fmt_time(cost.started_at)})",
             ("running for " if cost.ongoing else "lasted ") + _duration(cost.seconds),
             f"{cost.steps:,} step(s)",
             f"flagged {cost.flags:,} time(s)"]
    if cost.tokens is not None:
        parts.append(f"{cost.tokens:,} context tokens")
    if cost.snapshots is not None:
        parts.append(f"{cost.snapshots:,} snapshot(s)")
    return ", ".join(parts)


def _duration(seconds: float) -> str:
    s = int(max(seconds, 0))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def _where_item(text: str) -> tuple[str, str]:
    from engine.recovery.bulk import WHERE_KEYS

    key, sep, value = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not value.strip() or key not in WHERE_KEYS:
        raise argparse.ArgumentTypeError(
            f"--where takes KEY=VALUE with KEY one of {', '.join(WHERE_KEYS)}, not {text!r}"
        )
    return key, value.strip()


def _where_filters(pairs: list[tuple[str, str]] | None) -> dict[str, str]:
    """The `--where KEY=VALUE` pairs as one filter; a key given twice with two values is a
    usage error (CLIError, exit 2), not the last one silently winning."""
    where: dict[str, str] = {}
    for key, value in pairs or []:
        if key in where and where[key] != value:
            raise CLIError(f"--where {key} is given twice ({where[key]!r}, {value!r})",
                           EXIT_USAGE)
        where[key] = value
    return where


def _detector_settings(pairs: list[tuple[str, str]] | None) -> dict[str, object]:
    """The `--set FIELD=VALUE` pairs parsed as `DetectorConfig` fields; a bad field or value is
    a usage error (CLIError, exit 2) that names it."""
    from engine.loops.replay import parse_setting

    try:
        return {name: parse_setting(name, text) for name, text in pairs or []}
    except ConfigError as exc:
        raise CLIError(str(exc), EXIT_USAGE) from exc


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
    where = _where_filters(args.where)
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
    _refuse_watch_only(info, "rolled back")
    # The epoch read here (or the one the operator saw, --expect-epoch) goes with the rollback:
    # if someone else rolls the session back in between, this one is refused, not repeated.
    expect = info.epoch if args.expect_epoch is None else args.expect_epoch
    try:
        preview = engine.fleet.preview_rollback(args.session, args.to)
    except RewindError:
        if not args.force:
            raise
        preview = None  # the forced rollback says what is wrong, in its own words
    if preview is not None and not args.force:
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
    for step in preview.uncompensated if preview is not None else []:
        why = ("was still running (its process died or lost the call): whether it took "
               "effect is unknown" if step.status == "running" else "registered no compensation")
        print(scrub(f"rewind: warning: step {step.n} ({step.tool}) has a side effect and no "
                    f"compensation will run: it {why}; check it by hand"), file=sys.stderr)
    if result.notice:
        out(f"  notice sent: {result.notice}")
    return 0


def cmd_quarantine(args) -> int:
    from engine import Actor
    from engine.fleet.quarantine import unused_tool_hint

    modes = sum([bool(args.list), args.lift is not None, args.tool is not None])
    if modes != 1:
        raise CLIError("give a TOOL to quarantine, --list, or --lift ID (one of them)",
                       EXIT_USAGE)
    engine = _engine(args)
    if args.list:
        now = engine.clock()
        rows = [[q.id, q.tool, ", ".join(f"{k}={v}" for k, v in sorted(q.scope.items())) or
                 "every session", q.actor, _fmt_utc(q.until),
                 "active" if q.active(now) else "expired", _cut(q.reason, 60)]
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
    until = "until lifted" if q.until is None else f"until {_fmt_utc(q.until)}"
    out(f"quarantined {q.tool} for {where} {until} (id {q.id}); agents see "
        "ToolQuarantined within a second (not watch-only agents: Rewind does not run them)")
    hint = unused_tool_hint(q.tool, engine.fleet.recent_tools())
    if hint:
        out(hint)
    return 0


def cmd_freeze(args) -> int:
    from engine import Actor

    if (args.start or args.end_at or args.lift) and not args.actor:
        raise CLIError("declaring or ending a freeze needs --actor (and --reason)", EXIT_USAGE)
    declaring = [flag for flag, value in (("--name", args.name), ("--on-loop", args.on_loop))
                 if value is not None]
    if declaring and not (args.start or args.end_at):
        # `rewind freeze --name X` showing the freeze in force would look like it had worked
        raise CLIError(f"{' and '.join(declaring)}: only when declaring a freeze; add --start "
                       "and --end (with --actor and --reason)", EXIT_USAGE)
    if args.start and args.lift:
        raise CLIError("give --start/--end to declare a freeze or --lift to end it, not both",
                       EXIT_USAGE)
    engine = _engine(args)
    if args.start or args.end_at:
        if not (args.start and args.end_at):
            raise CLIError("a freeze needs both --start and --end", EXIT_USAGE)
        window = engine.fleet.declare_freeze(args.start, args.end_at, name=args.name,
                                       on_loop=args.on_loop,
                                       actor=Actor(args.actor, Role.OPERATOR),
                                       reason=args.reason or "")
        out(f"freeze declared in the store: {window.name}, {window.start.isoformat()} to "
            f"{window.end.isoformat()}; loops: {window.on_loop or 'engine default'}. Every "
            "process on this store follows it within a second.")
        _freeze_policy_lines(engine, window)
        return EXIT_OK
    if args.lift:
        ended = engine.fleet.end_freeze(actor=Actor(args.actor, Role.OPERATOR),
                                        reason=args.reason or "")
        if ended is None:
            raise CLIError("no freeze is declared in this store", EXIT_NOT_FOUND)
        out(f"freeze ended: {ended.name}; processes fall back to their own configuration")
        return EXIT_OK
    window, source = engine.fleet.freeze_in_force()
    if window is None:
        out("no freeze declared in this store, none configured here")
        return EXIT_OK
    where = ("declared in the store: every process on it follows it" if source == "store" else
             "configured in this process only ($REWIND_FREEZE_*): agents on the store do not "
             "follow it; declare it with `rewind freeze --start … --end …`")
    state = "in force" if window.active(time.time()) else "not in force now"
    out(f"{window.name}: {window.start.isoformat()} to {window.end.isoformat()} ({state}); "
        f"loops: {window.on_loop or 'engine default'}; {where}")
    _freeze_policy_lines(engine, window)
    return EXIT_OK


def _freeze_policy_lines(engine, window) -> None:
    """What the freeze does to loops (under flag: flagged sessions wait for an operator) and
    which sessions it does not govern (opened with freeze_exempt=True), as the console's banner
    says."""
    from engine.freeze import policy_sentence

    if window.on_loop is None:
        out("the freeze sets no loop policy: each session keeps its own")
        return
    out(policy_sentence(window) + (" Decide with `rewind rollback|release|stop SESSION`."
                                   if window.on_loop == "flag" else ""))
    exempt = engine.fleet.exempt_sessions(window.start.timestamp())
    if not exempt:
        out("no session is exempt from it: its loop policy applies to every session")
        return
    shown = ", ".join(exempt[:10]) + (f" and {len(exempt) - 10} more" if len(exempt) > 10 else "")
    out(f"{len(exempt)} session{'s are' if len(exempt) != 1 else ' is'} exempt from it "
        f"(opened with freeze_exempt=True) and keep{'s' if len(exempt) == 1 else ''} "
        f"{'its' if len(exempt) == 1 else 'their'} own loop policy: {shown}")


def _set_item(text: str) -> tuple[str, str]:
    """``FIELD=VALUE`` of `--set` (checked against `DetectorConfig` when the command runs)."""
    field, sep, value = text.partition("=")
    if not sep or not field.strip():
        raise argparse.ArgumentTypeError(f"--set takes FIELD=VALUE, not {text!r}")
    return field.strip().replace("-", "_"), value.strip()


def cmd_replay(args) -> int:
    where = _where_filters(args.where)
    config = _detector_settings(args.set)
    engine = _engine(args)
    report = engine.replay(config, where=where or None)
    if args.json:
        print(json.dumps(report.as_dict(), ensure_ascii=True, indent=1))
        return EXIT_OK

    def flag(f) -> str:
        return "-" if f is None else f"step {f.step} ({f.rule})"

    moved = [r for r in report.sessions if r.change != "same"]
    rows = [[r.session, flag(r.before), flag(r.after), r.change.replace("_", " "),
             (r.label or "-").replace("_", "-")] for r in moved]
    print(_table(rows, ["SESSION", "NOW", "WITH --set", "CHANGE", "LABEL"]))
    s = report.summary

    def rate(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    out(f"\n{s.sessions} session(s) replayed, {len(moved)} changed: {s.newly_flagged} newly "
        f"flagged, {s.no_longer_flagged} no longer flagged, {s.earlier} earlier, {s.later} "
        f"later, {s.other_rule} by another rule at the same step. On {s.labelled} labelled: "
        f"precision {rate(s.precision_before)} -> "
        f"{rate(s.precision_after)}, recall {rate(s.recall_before)} -> "
        f"{rate(s.recall_after)}. Nothing was written.")
    return EXIT_OK


def cmd_detector(args) -> int:
    from engine import Actor

    changing = bool(args.set) or args.reset
    if changing and not (args.actor and args.reason):
        raise CLIError("changing the detector needs --actor and --reason (audited)", EXIT_USAGE)
    _detector_settings(args.set)  # a bad field or value: usage error, before the store
    engine = _engine(args)
    if changing:
        # stored as typed on the command line (text): every process parses it the same way
        declared = engine.fleet.declare_detector(
            {} if args.reset else dict(args.set), actor=Actor(args.actor, Role.OPERATOR),
            reason=args.reason)
        out("every process on this store follows "
            + (", ".join(f"{k}={v}" for k, v in declared.items()) or "its own configuration")
            + " within a second (new session handles)")
        return EXIT_OK
    declared = engine.fleet.detector_settings()
    out(", ".join(f"{k}={v}" for k, v in declared.items())
        or "no detector settings declared in this store: each process uses its own")
    settings, _ = engine.fleet.detector_in_force()
    from_file = {k: v for k, v in settings.items() if k not in declared}
    if from_file:
        out("this process also follows its configuration file ([rewind.detector]): "
            + ", ".join(f"{k}={v}" for k, v in from_file.items())
            + " (other processes follow theirs)")
    return EXIT_OK


def cmd_release(args) -> int:
    from engine import Actor

    engine = _engine(args)
    decision = engine.fleet.release(args.session, actor=Actor(args.actor, Role.OPERATOR),
                              reason=args.reason, note=args.note)
    out(f"released {args.session} (by {decision.actor}); its agent may continue"
        + (" and reads your note" if decision.note else ""))
    return EXIT_OK


def cmd_stop(args) -> int:
    from engine import Actor

    engine = _engine(args)
    decision = engine.fleet.stop(args.session, actor=Actor(args.actor, Role.OPERATOR),
                           reason=args.reason)
    out(f"stopped {args.session} (by {decision.actor}); it stays readable, its steps are "
        "refused")
    return EXIT_OK


def cmd_label(args) -> int:
    from engine import Actor

    engine = _engine(args)
    label = args.label.replace("-", "_")
    engine.label(args.session, label, actor=Actor(args.actor, Role.OPERATOR), reason=args.reason)
    out(f"labelled {args.session} {args.label}; replay measures the detector against it")
    return EXIT_OK


def _since(text: str) -> float:
    """`rewind alert --since`: an age (30m, 2h, 1d) or an ISO time (UTC unless it has an
    offset), as the unix time a first run starts at; ``now`` is the default."""
    import datetime as dt

    text = (text or "").strip()
    if text == "now":
        return time.time()
    try:
        return time.time() - parse_age(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--since takes an age (30m, 2h, 1d) or an ISO time (2026-12-01T08:00, UTC unless "
            f"it has an offset), not {text!r}") from None
    return (when if when.tzinfo else when.replace(tzinfo=dt.UTC)).timestamp()


def cmd_alert(args) -> int:
    import signal

    from engine.fleet.alerts import DEFAULT_RULES, AlertConfig, AlertWorker

    rules = tuple(args.rule) if args.rule else DEFAULT_RULES
    try:
        config = AlertConfig(rules=rules, console_url=args.console_url,
                             spike_threshold=args.spike_threshold,
                             spike_window_s=args.spike_window, timeout_s=args.timeout)
        engine = _engine(args)
        worker = AlertWorker(engine, args.webhook, config, name=args.name,
                             start="now" if args.since is None else args.since)
    except ValueError as exc:
        if isinstance(exc, RewindError):
            raise
        raise CLIError(str(exc), EXIT_USAGE) from exc
    def count(n: int, noun: str) -> str:
        return f"{n} {noun}" if n == 1 else f"{n} {noun}s"

    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    out(f"rewind alert: following {redact(engine.store.url)} for {', '.join(rules)}; "
        f"{count(len(worker.webhooks), 'webhook')}; Ctrl-C stops")
    server = None
    if args.metrics_port is not None:
        try:
            server, _thread = engine.fleet.serve_metrics(args.metrics_port)
        except (OSError, OverflowError) as exc:
            worker.close()
            why = getattr(exc, "strerror", None) or str(exc)
            raise CLIError(f"cannot serve metrics on 127.0.0.1:{args.metrics_port}: {why}",
                           EXIT_USAGE) from None
        out(f"rewind alert: metrics at http://127.0.0.1:{server.server_port}/metrics")
    try:
        cursor, resumed = worker.start_point()
        if resumed:
            note = ("; --since applies to a first run only (another --name starts afresh)"
                    if args.since is not None else "")
            out(f"rewind alert: resuming after event #{cursor}, where {args.name!r} stopped{note}")
        elif args.since is None:
            out(f"rewind alert: first run: starting at the newest event (#{cursor}); earlier "
                "events do not page (--since 1h would page the last hour)")
        else:
            out(f"rewind alert: first run: starting after event #{cursor}, the last one before "
                f"{_fmt_utc(args.since)}")
        if not args.once:
            worker.run(interval_s=args.interval)
            return EXIT_OK
        result = worker.run_once()
    finally:
        worker.close()
        if server is not None:
            server.shutdown()
            server.server_close()
    out(f"rewind alert: read {count(result['events'], 'event')}, queued "
        f"{count(result['queued'], 'alert')}, delivered {result['delivered']}")
    if worker.failures:
        failed = "; ".join(f"{label}: {why}" for label, why in worker.failures.items())
        raise CLIError(
            f"{len(worker.failures)} of {count(len(worker.webhooks), 'webhook')} failed "
            f"({failed}); {count(result['waiting'], 'alert')} wait in the outbox for the next "
            "run", EXIT_REFUSED)
    return EXIT_OK


def cmd_notice(args) -> int:
    from engine import Actor

    engine = _engine(args)
    _refuse_watch_only(engine.get_session(args.session).info(), "sent a notice")
    text = engine.get_session(args.session).inject_notice(
        args.text, actor=Actor(args.actor, Role.OPERATOR))
    out(f"notice appended to {args.session}: {text}")
    return 0


WATCH_ONLY = ("watch-only: session {sid} is of an agent Rewind watches through OpenTelemetry "
              "(rewind otlp) but does not run, so it cannot be {verb}; its loops are flagged, "
              "paged and labelled. Stop or fix the agent where it runs")


def _refuse_watch_only(info, verb: str) -> None:
    """The engine refuses too (`WatchOnly`); here before any preview is read."""
    if info.meta.get("watch_only"):
        raise CLIError(WATCH_ONLY.format(sid=info.id, verb=verb))


def cmd_audit(args) -> int:
    from engine.types import AUDIT_ACTIONS

    if args.action is not None and args.action not in AUDIT_ACTIONS:
        # An empty table would read as "nobody did that"; a typo must not say so.
        raise CLIError(f"unknown action {args.action!r}; the audit log records "
                       f"{', '.join(AUDIT_ACTIONS)}", EXIT_USAGE)
    engine = _engine(args)
    events = engine.audit(session=args.session, actor=args.actor, action=args.action,
                          limit=args.limit)
    if not events:
        _refuse_unknown_session(engine, args.session)
    rows = [[_fmt_time(e.at), e.actor, e.action, e.session or "-", e.snapshot or "-",
             _cut(_audit_what(e.detail), 80), _cut(e.reason or "", 60)] for e in events]
    print(_table(rows, ["TIME", "ACTOR", "ACTION", "SESSION", "SNAPSHOT", "WHAT", "REASON"]))
    return 0


def _refuse_unknown_session(engine: Engine, sid: str | None) -> None:
    """Raises CLIError (exit 4) when `--session` names no session: a mistyped id must not
    read as "nothing happened to it". Called only for an empty answer, so the rows of a
    session deleted since (its audit rows stay) are still shown."""
    if sid is not None and engine.session_info(sid) is None:
        raise CLIError(f"no session {sid!r} in {redact(engine.store.url)}", EXIT_NOT_FOUND)


def _cut(text: str, width: int) -> str:
    """`text` in at most `width` characters, an ellipsis saying when some was cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _audit_what(detail: dict) -> str:
    """What an audit row was about, in a few words: the notice text, the tool, the batch, the
    freeze."""
    from engine.recovery.notices import notice_gist

    parts = []
    if "text" in detail and detail.get("text") is not None:
        parts.append(notice_gist(detail["text"]))
    if detail.get("tool"):
        parts.append(f"tool {detail['tool']}")
    if detail.get("batch"):
        parts.append(f"batch {detail['batch']}")
    if detail.get("name") and "start" in detail:
        parts.append(f"freeze {detail['name']}")
    if detail.get("id") and not parts:
        parts.append(str(detail["id"]))
    return ", ".join(parts) or "-"


def _no_live_handler(name: str) -> str:
    from engine.recovery.saga import LIVE_S

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
        if not comps:
            _refuse_unknown_session(engine, args.session)
        live = engine.compensations.handlers()
        rows = [[str(c.id), c.session, str(c.step), c.name, c.status, str(c.attempts),
                 "-" if c.next_attempt_at is None else _fmt_utc(c.next_attempt_at),
                 "yes" if c.name in live else "no", _cut(c.error or "", 60)] for c in comps]
        print(_table(rows, ["ID", "SESSION", "STEP", "HANDLER", "STATUS", "ATTEMPTS",
                            "NEXT TRY", "LIVE", "ERROR"]))
        return 0
    if args.actor is None or args.reason is None:
        raise CLIError("retrying or resolving a compensation needs --actor and --reason (both "
                       "audited)", EXIT_USAGE)
    engine = _engine(args)
    who = Actor(args.actor, Role.OPERATOR)
    what = "compensation {c.id} ({c.name} for {c.session}, step {c.step})"
    if args.retry is not None:
        c = engine.compensations.retry(cid, actor=who, reason=args.reason)
        out(what.format(c=c) + " is pending again with its attempts reset; a process that "
            "registered the handler runs it on its next pass")
        if c.name not in engine.compensations.handlers():
            print(f"rewind: {scrub(_no_live_handler(c.name))}", file=sys.stderr)
    else:
        c = engine.compensations.resolve(cid, actor=who, reason=args.reason)
        out(what.format(c=c) + f" is marked resolved by {who.name}; no process will run it")
    return 0


def purge_candidates(engine: Engine, before: float) -> list[tuple[str, BranchInfo]]:
    """(session id, BranchInfo) of every abandoned branch created before `before`, read
    through the engine API (sessions page by page, then each session's branches)."""
    found = []
    after, page = None, 500
    while True:
        infos = engine.sessions(limit=page, after=after)
        for info in infos:
            for branch in engine.get_session(info.id).branches():
                if branch.created_at < before:
                    found.append((info.id, branch))
        if len(infos) < page:
            return found
        after = infos[-1]


def cmd_purge(args) -> int:
    if args.older_than is not None and args.days is not None:
        raise CLIError("give --older-than or --days, not both", EXIT_USAGE)
    age = args.older_than if args.older_than is not None else args.days
    if age is None:  # no default that deletes evidence: the operator names the age
        raise CLIError(
            "rewind purge deletes evidence: say how old it must be with --older-than AGE "
            "(for example --older-than 7d; see what would go with --dry-run); nothing was "
            "deleted", EXIT_USAGE)
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
    removed = engine.fleet.purge_abandoned(older_than_s=age)
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
    found = engine.fleet.purge_idle_sessions(age, dry_run=True)
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
    print(json.dumps(engine.fleet.purge_idle_sessions(age)))
    return 0


def cmd_doctor(args) -> int:
    try:
        engine = _engine(args)
        where = redact(engine.store.url)
        rebuilt = engine.fleet.doctor()
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
    if engine.config.degraded:
        out(f"warning: {engine.config.degraded}")
    stuck = engine.fleet.running_steps(args.stuck_after)
    if stuck:
        # A step that never ended: its process died or lost the call. The session's timeline
        # shows it running for ever; say where.
        out(f"warning: {len(stuck)} step(s) left running for more than "
            f"{_describe_age(args.stuck_after)} (their process died or lost the call):")
        for sid, step in stuck[:20]:
            out(f"  session {sid} step {step.n} ({step.tool or 'agent turn'}) running since "
                f"{_fmt_time(step.started_at)}")
    return 0


def cmd_hash_password(args) -> int:
    from dashboard.signin.passwords import hash_password

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
    import importlib.util

    missing = [name for name in ("streamlit", "plotly", "pandas")
               if importlib.util.find_spec(name) is None]
    if missing:
        # The console's stack is an extra: an engine-only install must say how to get it.
        raise CLIError(
            f"the console needs {', '.join(missing)}, which this install lacks: run pip "
            "install 'agent-rewind[console]' (./scripts/run installs it)")
    # serve.py runs app.py behind the console's response headers (no framing, metrics shut)
    # engine/cli/commands.py -> the checkout (or site-packages) holding engine/ and dashboard/
    app = Path(__file__).resolve().parents[2] / "dashboard" / "serve.py"
    env = dict(os.environ)
    env.pop("REWIND_CONSOLE_STORE", None)
    # Streamlit runs in the checkout's folder: a relative store URL (the default included) is
    # made absolute here, against the folder the user started from, so the console reads the
    # store `rewind sessions` reads from the same place. A store named on this command line
    # also wins over the console's own `[rewind] store` setting.
    from engine import resolve_url

    if args.store is not None and not args.store.strip():
        raise CLIError("the store URL is empty: give sqlite:///path, redis://host:port/db, "
                       "rediss://… or redis+cluster://host:port, or leave it out for "
                       "$REWIND_STORE (else sqlite:///.rewind/rewind.db)", EXIT_USAGE)
    url = absolute_url(resolve_url(args.store))
    if args.store or not _console_store_setting(app.parent.parent):
        _existing_store(url)  # the console never creates a store; refuse before it starts
    env["REWIND_STORE"] = url
    if args.store:
        env["REWIND_CONSOLE_STORE"] = url
    cmd = [sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(args.port),
           "--server.address", args.address, "--server.headless", "true",
           "--browser.gatherUsageStats", "false"]
    if args.allowed_host:
        # Replaces the loopback names of .streamlit/config.toml, so keep them for local use.
        for host in ["localhost", "127.0.0.1", "::1", *args.allowed_host]:
            cmd += ["--server.allowedHosts", host]
    return subprocess.call(cmd, env=env, cwd=str(app.parent.parent),
                           preexec_fn=_die_with_parent)


def _console_store_setting(checkout: Path) -> bool:
    """Whether the console's secrets.toml (in the folder Streamlit runs in, or the user's home)
    names a store; that setting then applies unless --store is given."""
    import tomllib

    for path in (checkout / ".streamlit" / "secrets.toml",
                 Path.home() / ".streamlit" / "secrets.toml"):
        try:
            with path.open("rb") as fh:
                if (tomllib.load(fh).get("rewind") or {}).get("store"):
                    return True
        except (OSError, tomllib.TOMLDecodeError, AttributeError):
            continue
    return False


def _existing_store(url: str) -> None:
    """Refuse a SQLite store that does not exist (StoreNotFound, exit 4, naming its absolute
    path) without creating it; other stores are checked when the process opens them."""
    from engine.store.sqlite.tx import path_from_url

    if not url.lower().startswith("sqlite:"):
        return
    path = path_from_url(url)
    if path and path != ":memory:" and not os.path.exists(path):
        raise CLIError(f"no Rewind store at {os.path.abspath(path)} (from {url}): the file does "
                       "not exist. Check --store or $REWIND_STORE, or run the command from the "
                       "folder that holds .rewind/ (agents create the store, the console never "
                       "does)", EXIT_NOT_FOUND)


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
    from engine.integrations.mcp import main as proxy_main

    command = list(args.upstream_command)
    if command[:1] == ["--"]:
        command = command[1:]
    return proxy_main(args.store, command, args.upstream or [], session=args.session,
                      http_port=args.http, config=args.config, host=args.address,
                      timeout=args.timeout or None, session_prefix=args.session_prefix,
                      token=args.token)


