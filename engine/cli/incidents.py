"""`rewind incidents` and `rewind incident ID [REMEDY]`: loops grouped by cause, and the
remedies for a whole group (previewed; ``--yes`` acts)."""

from __future__ import annotations

import json
from typing import Any

from engine.cli.common import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, CLIError, _engine
from engine.cli.text import _fmt_utc, _table, out
from engine.types import Role

VERBS = {"rollback": "roll back", "quarantine": "quarantine", "release": "release",
         "stop": "stop", "notice": "send the notice to", "close": "close"}


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{state} {n}" for state, n in counts.items()) or "-"


def _tool(inc: Any) -> str:
    from engine.fleet.incidents import NO_TOOL

    return inc.tool or NO_TOOL


def cmd_incidents(args: Any) -> int:
    engine = _engine(args)
    found = engine.incidents(status=args.status)
    if args.json:
        print(json.dumps({"incidents": [i.as_json() for i in found]}, ensure_ascii=False))
        return EXIT_OK
    if not found:
        out("no incidents" + (f" {args.status}" if args.status else ""))
        return EXIT_OK
    rows = [[i.id, i.status, _tool(i), _cut(i.signature or "(no error)", 60), i.rule,
             str(len(i.sessions)), _counts(i.counts), _fmt_utc(i.first_seen)] for i in found]
    print(_table(rows, ["ID", "STATUS", "TOOL", "SIGNATURE", "RULE", "SESSIONS", "BY STATE",
                        "FIRST SEEN"]))
    return EXIT_OK


def _show(inc: Any) -> None:
    out(f"incident {inc.id} ({inc.status}): {_tool(inc)} looping, rule {inc.rule}")
    out(f"  signature: {inc.signature or '(no error)'}")
    if inc.error:
        out(f"  e.g.:      {_cut(inc.error, 200)}")
    out(f"  first seen {_fmt_utc(inc.first_seen)}, last seen {_fmt_utc(inc.last_seen)}")
    out(f"  {len(inc.sessions)} sessions: {_counts(inc.counts)}; {inc.loops} loop verdicts, "
        f"{inc.steps} steps, {inc.tokens} tokens")
    for label, values in (("tenants", inc.tenants), ("prompt versions", inc.prompt_versions),
                          ("scenarios", inc.scenarios)):
        if values:
            out(f"  {label}: {', '.join(values)}")
    for a in inc.actions:
        out(f"  {_fmt_utc(a.get('at'))}: {a.get('actor')} took {a.get('action')} "
            f"({a.get('reason')})")
    if inc.status == "closed":
        out(f"  closed {_fmt_utc(inc.closed_at)} by {inc.closed_by}: {inc.close_reason}")


def cmd_incident(args: Any) -> int:
    from engine import Actor

    if args.action is None:
        engine = _engine(args)
        inc = engine.incident(args.id)
        _show(inc)
        from engine.fleet.incidents import state_of

        infos = {sid: engine.session_info(sid) for sid in inc.sessions}
        rows = [[sid, state_of(info),
                 (info.meta.get("tenant") or "-") if info else "-", _fmt_utc(inc.joined[sid])]
                for sid, info in infos.items()]
        if rows:
            print(_table(rows, ["SESSION", "STATE", "TENANT", "JOINED"]))
        return EXIT_OK
    if args.actor is None or args.reason is None:
        raise CLIError(f"{args.action} needs --actor and --reason (both audited)", EXIT_USAGE)
    engine = _engine(args)
    who = Actor(args.actor, Role.OPERATOR)
    verb = VERBS[args.action]
    if not args.yes:
        preview = engine.fleet.incident_action(args.id, args.action, actor=who, reason=args.reason,
                                         dry_run=True)
        inc = preview.incident
        if args.action == "quarantine":
            out(f"would quarantine {preview.tool} for every session (incident {inc.id}, "
                f"{len(inc.sessions)} sessions)")
        elif args.action == "close":
            out(f"would close incident {inc.id} ({len(inc.sessions)} sessions)")
        else:
            out(f"would {verb} {len(preview.sessions)} sessions of incident {inc.id}: "
                f"{', '.join(preview.sessions[:20])}"
                + (" …" if len(preview.sessions) > 20 else ""))
            for sid, why in list(preview.skipped.items())[:20]:
                out(f"  left alone: {sid} ({why})")
        out("nothing was changed; add --yes to do it")
        return EXIT_OK
    done = engine.fleet.incident_action(args.id, args.action, actor=who, reason=args.reason)
    failed = done.failed
    if args.action == "rollback":
        out(f"rolled back {len(done.results) - len(failed)} of {len(done.results)} sessions "
            f"of incident {done.incident.id}")
    elif args.action == "quarantine":
        q = done.quarantine
        out(f"quarantined {q.tool} for every session (id {q.id}); agents see ToolQuarantined "
            "within a second")
    elif args.action == "close":
        out(f"closed incident {done.incident.id}")
    else:
        out(f"{verb}: {len(done.results) - len(failed)} of {len(done.results)} sessions of "
            f"incident {done.incident.id}")
    for sid, why in failed.items():
        out(f"  refused: {sid}: {_cut(why, 100)}")
    return EXIT_REFUSED if failed else EXIT_OK
