"""One door to the store: integrations, the alert worker and the demo reach the store
only through the engine's public API, which checks size limits before the store is touched and
writes the parts of one change atomically (`Engine.documents.write_session`), on every backend."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engine import Engine, Limits, SizeLimitExceeded, UnknownSession, redact_url, resolve_url

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = [ROOT / "engine" / "integrations", ROOT / "engine" / "fleet" / "alerts.py",
           ROOT / "engine" / "demo"]
"""Code that embeds the engine as any outside program would."""
LEDGER_HELPERS = {"engine.store.sqlite.tx", "engine.store.sqlite.schema"}
"""What `engine/demo/ledger.py` may import: SQLite helpers for the ledger's own database (the
demo's outside world), which never touch the Rewind store (see the comment there)."""
BACK_DOORS = {"store", "runtime", "_runtime"}
"""Attributes that lead past the engine's API to the store."""


def _files() -> list[Path]:
    out: list[Path] = []
    for place in OUTSIDE:
        out += sorted(place.rglob("*.py")) if place.is_dir() else [place]
    return out


def back_doors(path: Path) -> list[str]:
    """Every import of `engine.store` (or a module under it) and every read of an attribute
    named ``store`` or ``runtime`` in the file, as ``line: what``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    allowed = LEDGER_HELPERS if path.name == "ledger.py" and path.parent.name == "demo" else set()
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        for name in names:
            if (name == "engine.store" or name.startswith("engine.store.")) and not any(
                    name == ok or name.startswith(ok + ".") for ok in allowed):
                found.append(f"{node.lineno}: import {name}")
        if isinstance(node, ast.Attribute) and node.attr in BACK_DOORS:
            found.append(f"{node.lineno}: .{node.attr}")
    return found


def test_integrations_alerts_and_the_demo_reach_the_store_only_through_the_engine():
    offenders = {str(p.relative_to(ROOT)): hits for p in _files() if (hits := back_doors(p))}
    assert offenders == {}


def test_the_back_door_check_sees_imports_and_attribute_reads(tmp_path):
    sample = tmp_path / "m.py"
    sample.write_text(
        "import engine.store\nfrom engine.store.urls import redact\nfrom engine import store\n"
        "def f(engine):\n    engine.store.doc_put()\n    return engine.runtime.limits\n"
        "from engine.engine import Engine\nx = Engine.url\n"
    )
    assert sorted(back_doors(sample)) == [
        "1: import engine.store", "2: import engine.store.urls",
        "2: import engine.store.urls.redact", "3: import engine.store", "5: .store", "6: .runtime",
    ]
    ledger = tmp_path / "demo" / "ledger.py"
    ledger.parent.mkdir()
    ledger.write_text("from engine.store.sqlite.tx import SQLiteDB\nfrom engine.store import X\n")
    assert sorted(back_doors(ledger)) == ["2: import engine.store", "2: import engine.store.X"]


# -- the engine calls, on every backend --------------------------------------------------------
def _everything(engine: Engine, sid: str) -> dict:
    info = engine.session_info(sid)
    if info is None:
        return {"session": None}
    s = engine.get_session(sid)
    return {"info": (info.messages, info.head, info.epoch), "messages": s.state().messages,
            "values": engine.documents.values(sid, "lg_head"), "tree": [n.id for n in s.tree()],
            "docs": engine.documents.scan(sid, "lg")}


def test_a_session_write_lands_whole_with_the_snapshot_stamped_in_its_document(engine):
    s = engine.session("s")
    s.append_message("user", "before")
    cursor = engine.events()[-1].id
    epoch, node = engine.documents.write_session(
        "s", messages=[{"role": "assistant", "content": "hi"}],
        values={"lg_head": {"root": "c1"}}, snapshot="checkpoint c1",
        documents={"lg": {"c/1": {"id": "c1", "snap": None}, "b/1": [1, "x"]}},
        stamp=("lg", "c/1"))
    assert epoch == 0 and node is not None and node.label == "checkpoint c1"
    assert node.messages == 2 and node.is_head and node.kind == "manual"
    assert engine.documents.scan("s", "lg") == {
        "b/1": [1, "x"], "c/1": {"id": "c1", "snap": node.id, "msgs": 2, "epoch": 0}}
    assert engine.documents.values("s", "lg_head") == {"root": "c1"}
    assert s.info().head == node.id
    # the feed tells the same story as the separate writes would
    assert [e.type for e in engine.events(since=cursor)] == ["message", "lg_head", "snapshot"]
    # the values are versioned: a rollback to an earlier snapshot takes them back
    engine.documents.write_session("s", values={"lg_head": {"root": "c2"}},
                                   snapshot="checkpoint c2")
    engine.rollback("s", to=node.id, actor="alice", reason="back", notice=False)
    assert engine.documents.values("s", "lg_head") == {"root": "c1"}


def test_messages_if_empty_adds_history_only_to_an_empty_live_line(engine):
    engine.session("empty")
    engine.documents.write_session("empty", messages=[{"role": "user", "content": "a"}],
                         messages_if_empty=True)
    engine.documents.write_session("empty", messages=[{"role": "user", "content": "b"}],
                         messages_if_empty=True)
    assert engine.get_session("empty").state().messages == [{"role": "user", "content": "a"}]


@pytest.mark.parametrize("part", ["document", "message", "values", "label"])
def test_a_session_write_with_any_part_over_its_limit_writes_nothing(engine, part):
    engine.session("s").append_message("user", "before")
    before, cursor = _everything(engine, "s"), engine.events()[-1].id
    small = Engine(engine.store, limits=Limits(document_bytes=100, message_bytes=100,
                                               variables_bytes=100, name_chars=20))
    big = "x" * 200
    write = {"messages": [{"role": "user", "content": "fine"}],
             "values": {"lg_head": {"root": "c1"}}, "snapshot": "fine",
             "documents": {"lg": {"c/1": {"id": "c1"}}}}
    if part == "document":
        write["documents"] = {"lg": {"c/1": {"id": "c1"}, "b/1": big}}
    elif part == "message":
        write["messages"] = [{"role": "user", "content": "fine"}, {"role": "user", "content": big}]
    elif part == "values":
        write["values"] = {"lg_head": {"root": big}}
    else:
        write["snapshot"] = big
    with pytest.raises(SizeLimitExceeded):
        small.documents.write_session("s", **write)
    assert _everything(engine, "s") == before
    assert engine.events(since=cursor) == []


def test_a_session_write_to_a_missing_session_creates_nothing(engine):
    with pytest.raises(UnknownSession):
        engine.documents.write_session("ghost", messages=[{"role": "user", "content": "x"}],
                             values={"lg_head": {"root": "c"}}, snapshot="s",
                             documents={"lg": {"k": {}}})
    assert engine.session_info("ghost") is None and engine.sessions() == []


def test_a_stamp_needs_a_snapshot_and_a_dict_document(engine):
    engine.session("s")
    with pytest.raises(ValueError, match="stamp"):
        engine.documents.write_session("s", documents={"lg": {"c/1": {}}}, stamp=("lg", "c/1"))
    with pytest.raises(ValueError, match="stamp"):
        engine.documents.write_session("s", snapshot="x", documents={"lg": {"c/1": [1]}},
                             stamp=("lg", "c/1"))
    with pytest.raises(ValueError, match="stamp"):  # the store refuses it as well
        engine.store.write_session("s", {"snapshot": "x", "documents": {"lg": {"c/1": [1]}},
                                         "stamp": ("lg", "c/1")}, 1.0, engine.config.retention)
    assert engine.get_session("s").tree() == [] and engine.documents.scan("s", "lg") == {}


def test_documents_and_fleet_documents_are_size_checked_before_the_store(engine):
    engine.session("s")
    small = Engine(engine.store, limits=Limits(document_bytes=50))
    small.documents.put("s", "lg", {"a": {"v": 1}, "gone": None})
    with pytest.raises(SizeLimitExceeded, match="document_bytes"):
        small.documents.put("s", "lg", {"b": {"v": 2}, "c": "x" * 100})
    assert engine.documents.scan("s", "lg") == {"a": {"v": 1}}
    assert engine.documents.get("s", "lg", ["a", "b"]) == {"a": {"v": 1}}
    small.documents.put_fleet("alerts", {"w": {"cursor": 1}})
    with pytest.raises(SizeLimitExceeded):
        small.documents.put_fleet("alerts", {"w": {"cursor": 2}, "x": "y" * 100})
    assert engine.documents.fleet("alerts") == {"w": {"cursor": 1}}
    small.documents.put_fleet("alerts", {"w": None})
    assert engine.documents.fleet("alerts") == {}


def test_a_document_without_a_json_form_is_refused_before_the_store(engine):
    engine.session("s")
    with pytest.raises(TypeError):
        engine.documents.put("s", "lg", {"a": {"v": 1}, "b": object()})
    with pytest.raises(ValueError, match="surrogate"):
        engine.documents.put("s", "lg", {"a": {"v": 1}, "b": {"t": "\ud800"}})
    assert engine.documents.scan("s", "lg") == {}


def test_the_engines_own_namespaces_are_not_writable_as_values(engine):
    s = engine.session("s")
    for ns in ("var", "mem"):
        with pytest.raises(ValueError, match="Session"):
            engine.documents.put_values("s", ns, {"k": 1})
    with pytest.raises(ValueError, match="identifier"):
        engine.documents.put("s", "not a namespace", {"k": 1})
    assert engine.documents.put_values("s", "lg_head", {"root": "c"}) == 0
    assert s.state().variables == {}


def test_a_failure_inside_the_sqlite_transaction_writes_nothing(tmp_path, open_engine,
                                                                monkeypatch):
    from engine.store.sqlite import writes as sqlite_store

    engine = open_engine(f"sqlite:///{tmp_path}/rewind.db")
    engine.session("s").append_message("user", "before")
    before, cursor = _everything(engine, "s"), engine.events()[-1].id
    put_rows = sqlite_store._put_rows

    def broken(conn, table, *args, **kwargs):  # after the messages, values and snapshot
        if table == "docs":
            raise RuntimeError("disk on fire")
        return put_rows(conn, table, *args, **kwargs)

    monkeypatch.setattr(sqlite_store, "_put_rows", broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        engine.documents.write_session("s", messages=[{"role": "user", "content": "x"}],
                             values={"lg_head": {"root": "c"}}, snapshot="c",
                             documents={"lg": {"c/1": {}}}, stamp=("lg", "c/1"))
    monkeypatch.undo()
    assert _everything(engine, "s") == before
    assert engine.events(since=cursor) == []


# -- urls -------------------------------------------------------------------------------------
def test_the_engine_names_its_store_without_the_password(monkeypatch):
    assert redact_url("redis://u:s3cret@h:6379/0") == "redis://u:***@h:6379/0"
    monkeypatch.setenv("REWIND_STORE", "sqlite:///from-env.db")
    assert resolve_url(None) == "sqlite:///from-env.db"
    assert resolve_url("sqlite:///given.db") == "sqlite:///given.db"
    monkeypatch.delenv("REWIND_STORE")
    assert resolve_url() == "sqlite:///.rewind/rewind.db"
    with Engine.open("sqlite:///:memory:") as engine:
        assert engine.url == "sqlite:///:memory:"
