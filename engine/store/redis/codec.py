"""How the Redis store writes values as text and reads its texts back as engine records.

Pure functions, no I/O. The JSON text is canonical (sorted keys, no spaces, UTF-8 kept), because
meta index keys are built from it: the same value must always give the same key.
"""

from __future__ import annotations

import json
from typing import Any

from engine.records import (
    AuditEvent,
    BranchInfo,
    Compensation,
    Event,
    MessageRecord,
    SessionInfo,
    StepRecord,
)
from engine.store.redis import keys
from engine.types import FACETS, CompensationStatus, SessionStatus, StepStatus

META_INDEX_FIELDS = FACETS
"""Session meta fields the fleet indexes (the facets of `SessionFilter`)."""


def dumps(value: Any) -> str:
    """Canonical JSON text of `value`."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def num(value: float) -> str:
    """A float as JSON number text that reads back exactly."""
    return repr(float(value))


def index_lines(meta: dict[str, Any]) -> str:
    """The meta index suffixes of a session, one a line (the session hash keeps them)."""
    lines = []
    for name in META_INDEX_FIELDS:
        value = meta.get(name)
        if value is not None:
            lines.append(keys.meta_index_suffix(name, dumps(value)))
    return "\n".join(lines)


def comp_field(name: str, args_json: str) -> str:
    """The step's compensation as stored: handler name (JSON) and args (JSON), newline apart."""
    return json.dumps(name, ensure_ascii=False) + "\n" + args_json


def session_info(d: dict[str, str]) -> SessionInfo:
    """A session hash as a `SessionInfo`."""
    return SessionInfo(
        id=d["id"],
        meta=json.loads(d["meta"]),
        status=SessionStatus(d["status"]),
        head=d["head"] or None,
        epoch=int(d["epoch"]),
        created_at=float(d["created"]),
        updated_at=float(d["updated"]),
        steps=int(d["steps"]),
        messages=int(d["msgs"]),
        loops=int(d["loops"]),
        rollbacks=int(d["rollbacks"]),
        last_verdict=json.loads(d["verdict"]) if d["verdict"] else None,
    )


def compensation(d: dict[str, str]) -> Compensation:
    """A compensation hash as a `Compensation`."""
    return Compensation(
        id=int(d["id"]),
        session=d["session"],
        step=int(d["step"]),
        name=d["name"],
        args=json.loads(d["args"]),
        idempotency_key=d["key"],
        status=CompensationStatus(d["status"]),
        attempts=int(d["attempts"]),
        error=d.get("error"),
        created_at=float(d["created"]),
        updated_at=float(d["updated"]),
        branch=d.get("branch") or None,
        resolved_by=d.get("resolved_by"),
        resolved_reason=d.get("resolved_reason"),
    )


def branch_infos(flat: list[str]) -> dict[str, BranchInfo]:
    """Branch records (field, value, field, value…) by branch id."""
    out = {}
    for i in range(0, len(flat), 2):
        _seq, epoch, target, actor, reason, created = json.loads(flat[i + 1])
        out[flat[i]] = BranchInfo(
            id=flat[i],
            from_snapshot=target,
            actor=actor,
            reason=reason,
            created_at=created,
            epoch=epoch,
        )
    return out


def message(record: str, branch: str | None) -> MessageRecord:
    """A message record ``[seq,pos,created_at,message]``."""
    seq, pos, at, body = json.loads(record)
    return MessageRecord(seq=seq, pos=pos, message=body, branch=branch, created_at=at)


def steps(fields: dict[str, str]) -> list[StepRecord]:
    """The fields of a session's steps hash as step records, in step order."""
    out = []
    for n in sorted((f for f in fields if f.isdigit()), key=int):
        _seq, epoch, snap, begin = json.loads(fields[n])
        late, end = json.loads(fields[n + "e"]) if n + "e" in fields else (0, {})
        branch = fields.get(n + "b")
        comp = fields.get(n + "c")
        compensation = None
        if comp:
            name_json, _, args = comp[1:].partition("\n")
            compensation = (json.loads(name_json), json.loads(args))
        out.append(
            StepRecord(
                n=int(n),
                tool=begin.get("tool"),
                args=begin.get("args"),
                fingerprint=begin.get("fingerprint"),
                status=StepStatus(end.get("status", StepStatus.RUNNING)),
                error=end.get("error"),
                result_digest=end.get("result_digest"),
                result_preview=end.get("result_preview"),
                started_at=begin["started_at"],
                ended_at=end.get("ended_at"),
                side_effect=bool(begin.get("side_effect")),
                compensation=compensation,
                verdict=end.get("verdict"),
                on_live_line=branch is None,
                branch=branch,
                late=bool(late),
                snapshot=snap,
                text=begin.get("text"),
                epoch=epoch,
                budget=end.get("budget"),
            )
        )
    return out


def audit_event(text: str) -> AuditEvent:
    """An audit record."""
    d = json.loads(text)
    return AuditEvent(
        id=d["id"],
        at=d["at"],
        actor=d["actor"],
        action=d["action"],
        session=d["session"],
        snapshot=d["snapshot"],
        reason=d["reason"],
        detail=d["detail"],
    )


def event(xid: str, f: dict[str, str]) -> Event:
    """A feed stream entry."""
    return Event(
        id=int(xid.partition("-")[0]),
        at=float(f["a"]),
        session=f["s"] or None,
        type=f["t"],
        data=json.loads(f["d"]),
    )
