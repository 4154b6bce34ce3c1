"""The fleet listing pages by cursor (keyset), not by OFFSET: on SQLite each page is one index
range starting at the cursor, and `rewind sessions` prints the cursor of the next page."""

from __future__ import annotations

import re
import sqlite3

from engine import Engine
from engine.cli.parser import main


def _seed(url: str, count: int) -> None:
    now = [1000.0]
    with Engine.open(url, clock=lambda: now[0]) as engine:
        for i in range(count):
            now[0] += 1.0
            engine.session(f"s-{i:03d}", meta={"tenant": "acme"})


def test_a_page_after_a_cursor_is_one_index_range(tmp_path):
    path = tmp_path / "fleet.db"
    _seed(f"sqlite:///{path}", 30)
    statements: list[str] = []
    engine = Engine.open(f"sqlite:///{path}")
    engine.store._db.conn.set_trace_callback(statements.append)  # type: ignore[attr-defined]
    page = engine.sessions(limit=10)
    statements.clear()
    assert [i.id for i in engine.sessions(limit=10, after=page[-1])][:1] == ["s-019"]
    (sql,) = [s for s in statements if s.startswith("SELECT")]
    conn = sqlite3.connect(path)
    plan = [row[3] for row in conn.execute("EXPLAIN QUERY PLAN " + sql)]
    conn.close()
    assert plan == ["SEARCH sessions USING INDEX sessions_page ((updated_at,id)<(?,?))"]
    assert "OFFSET 0" in sql  # nothing skipped: the range starts at the cursor


def test_rewind_sessions_pages_with_the_printed_cursor(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/fleet.db"
    _seed(url, 7)
    seen: list[str] = []
    args = ["--store", url, "sessions", "--limit", "3"]
    for _ in range(5):
        assert main(args) == 0
        text = capsys.readouterr().out
        seen += re.findall(r"^(s-\d+)\s", text, flags=re.M)
        cursor = re.search(r"next page: --after (\S+)", text)
        if cursor is None:
            break
        args = ["--store", url, "sessions", "--limit", "3", "--after", cursor.group(1).strip("'")]
    assert seen == [f"s-{i:03d}" for i in range(6, -1, -1)]


def test_a_bad_cursor_is_a_usage_error(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/fleet.db"
    _seed(url, 1)
    assert main(["--store", url, "sessions", "--after", "yesterday"]) != 0
    assert "cursor" in capsys.readouterr().err
