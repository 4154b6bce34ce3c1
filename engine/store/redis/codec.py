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
from engine.store.fieldmap import Column, FieldMap
from engine.store.redis import keys
from engine.types import FACETS, CompensationStatus, SessionStatus, StepStatus, canonical_json

META_INDEX_FIELDS = FACETS
"""Session meta fields the fleet indexes (the facets of `SessionFilter`)."""


dumps = canonical_json
"""The form stored in every JSON field."""


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


def _or_none(value: str | None) -> str | None:
    return value or None  # an empty hash field stands for "none"


def _float_or_none(value: str | None) -> float | None:
    return float(value) if value else None


def _json_or_none(value: str | None) -> Any:
    return json.loads(value) if value else None


def _step_status(value: str | None) -> StepStatus:
    return StepStatus(value if value is not None else StepStatus.RUNNING)  # not ended yet


SESSION: FieldMap[SessionInfo] = FieldMap(
    SessionInfo,
    Column("id", "id"),
    Column("meta", "meta", json.loads),
    Column("status", "status", SessionStatus),
    Column("head", "head", _or_none),
    Column("epoch", "epoch", int),
    Column("created", "created_at", float),
    Column("updated", "updated_at", float),
    Column("steps", "steps", int),
    Column("msgs", "messages", int),
    Column("loops", "loops", int),
    Column("rollbacks", "rollbacks", int),
    Column("verdict", "last_verdict", _json_or_none),
)
"""A session hash as a `SessionInfo`."""

COMPENSATION: FieldMap[Compensation] = FieldMap(
    Compensation,
    Column("id", "id", int),
    Column("session", "session"),
    Column("step", "step", int),
    Column("name", "name"),
    Column("args", "args", json.loads),
    Column("key", "idempotency_key"),
    Column("status", "status", CompensationStatus),
    Column("attempts", "attempts", int),
    Column("error", "error", optional=True),
    Column("created", "created_at", float),
    Column("updated", "updated_at", float),
    Column("branch", "branch", _or_none, optional=True),
    Column("resolved_by", "resolved_by", optional=True),
    Column("resolved_reason", "resolved_reason", optional=True),
    Column("lease", "lease_until", _float_or_none, optional=True),
)
"""A compensation hash as a `Compensation`."""

AUDIT: FieldMap[AuditEvent] = FieldMap(
    AuditEvent,
    *(
        Column(name, name)
        for name in ("id", "at", "actor", "action", "session", "snapshot", "reason", "detail")
    ),
)
"""An audit record (a JSON object) as an `AuditEvent`."""

EVENT: FieldMap[Event] = FieldMap(
    Event,
    Column("a", "at", float),
    Column("s", "session", _or_none),
    Column("t", "type"),
    Column("d", "data", json.loads),
)
"""The fields of a feed stream entry as an `Event` (its id comes from the entry id)."""

BRANCH_RECORD = ("seq", "epoch", "target", "actor", "reason", "created")
"""What each position of a branch record (a JSON array the scripts write) holds."""

BRANCH: FieldMap[BranchInfo] = FieldMap(
    BranchInfo,
    Column("target", "from_snapshot"),
    Column("actor", "actor"),
    Column("reason", "reason"),
    Column("created", "created_at"),
    Column("epoch", "epoch"),
)
"""A branch record, named by `BRANCH_RECORD`, as a `BranchInfo` (its id is the hash field)."""

MESSAGE_RECORD = ("seq", "pos", "created_at", "message")
"""What each position of a message record (a JSON array) holds."""

MESSAGE: FieldMap[MessageRecord] = FieldMap(
    MessageRecord,
    *(Column(name, name) for name in MESSAGE_RECORD),
)
"""A message record, named by `MESSAGE_RECORD`, as a `MessageRecord` (but for its branch)."""

STEP_RECORD = ("seq", "epoch", "snapshot", "begin")
"""What each position of a step's begin record (a JSON array) holds."""

STEP_BEGIN: FieldMap[dict[str, Any]] = FieldMap(
    dict,
    Column("tool", "tool", optional=True),
    Column("args", "args", optional=True),
    Column("fingerprint", "fingerprint", optional=True),
    Column("started_at", "started_at"),
    Column("side_effect", "side_effect", bool, optional=True),
    Column("text", "text", optional=True),
    Column("task", "task", bool, optional=True),
    Column("turn", "turn", optional=True),
)
"""The `StepRecord` fields of a step's begin object."""

STEP_END: FieldMap[dict[str, Any]] = FieldMap(
    dict,
    Column("status", "status", _step_status, optional=True),
    Column("error", "error", optional=True),
    Column("result_digest", "result_digest", optional=True),
    Column("result_preview", "result_preview", optional=True),
    Column("ended_at", "ended_at", optional=True),
    Column("verdict", "verdict", optional=True),
    Column("budget", "budget", optional=True),
)
"""The `StepRecord` fields of a step's end object ({} while it runs)."""


def session_info(d: dict[str, str]) -> SessionInfo:
    """A session hash as a `SessionInfo`."""
    return SESSION.decode(d)


def compensation(d: dict[str, str]) -> Compensation:
    """A compensation hash as a `Compensation`."""
    return COMPENSATION.decode(d)


def branch_infos(flat: list[str]) -> dict[str, BranchInfo]:
    """Branch records (field, value, field, value…) by branch id."""
    out = {}
    for i in range(0, len(flat), 2):
        record = dict(zip(BRANCH_RECORD, json.loads(flat[i + 1]), strict=True))
        out[flat[i]] = BRANCH.decode(record, id=flat[i])
    return out


def message(record: str, branch: str | None) -> MessageRecord:
    """A message record ``[seq,pos,created_at,message]``."""
    return MESSAGE.decode(dict(zip(MESSAGE_RECORD, json.loads(record), strict=True)), branch=branch)


def steps(fields: dict[str, str]) -> list[StepRecord]:
    """The fields of a session's steps hash as step records, in step order."""
    out = []
    for n in sorted((f for f in fields if f.isdigit()), key=int):
        begin = dict(zip(STEP_RECORD, json.loads(fields[n]), strict=True))
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
                **STEP_BEGIN.decode(begin["begin"]),
                **STEP_END.decode(end),
                compensation=compensation,
                on_live_line=branch is None,
                branch=branch,
                late=bool(late),
                snapshot=begin["snapshot"],
                epoch=begin["epoch"],
            )
        )
    return out


def audit_event(text: str) -> AuditEvent:
    """An audit record."""
    return AUDIT.decode(json.loads(text))


def event(xid: str, f: dict[str, str]) -> Event:
    """A feed stream entry."""
    return EVENT.decode(f, id=int(xid.partition("-")[0]))
