"""The house rules of DESIGN.md, checked on the source tree: the dependency graph of `engine/`
runs one way between modules (no import cycle, counting imports inside functions and under
TYPE_CHECKING) and between rooms (a room is a direct sub-package of `engine/` or a module
directly in it; imports inside functions count, `if TYPE_CHECKING:` ones may stay), the engine
never imports UI libraries, the console never reaches a store, no engine module grows past what
a reader can hold, the pure parts load without the stores, and no file cites a file that is not
in the repository."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 1200


def _modules(package: str) -> dict[str, Path]:
    base = ROOT / package
    return {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in base.rglob("*.py")}


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """Ids of every node under an ``if TYPE_CHECKING:`` block (annotations only, never run)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return found


def _imports(path: Path, *, type_checking: bool = True) -> set[str]:
    """Every module named by an import anywhere in the file (top level, functions, and, with
    `type_checking`, TYPE_CHECKING blocks), relative imports resolved."""
    names: set[str] = set()
    inside = path.is_relative_to(ROOT)
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1]) if inside else ""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped = set() if type_checking else _type_checking_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                module = ".".join([*parts, module]) if module else ".".join(parts)
            names.add(module)
            names.update(f"{module}.{a.name}" for a in node.names)
    return names


def _graph() -> dict[str, set[str]]:
    """Edges between engine modules; package __init__ files re-export and are left out, as
    importing `engine.x` only to reach `engine.x.y` is not a dependency on the package."""
    mods = _modules("engine")
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        if path.name == "__init__.py":
            continue
        for target in _imports(path):
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != mod and mods[target].name != "__init__.py":
                edges[mod].add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_engine_has_no_import_cycle():
    assert _cycles(_graph()) == []


def _room(module: str) -> str:
    """The room of an engine module: `engine.<first part>` (a sub-package or a module)."""
    return ".".join(module.split(".")[:2])


def _room_graph() -> dict[str, dict[str, set[str]]]:
    """room -> room it imports -> the modules whose imports make that arrow. Imports inside
    functions count (they run); `if TYPE_CHECKING:` imports do not (they never run). The
    package's own `engine/__init__.py` re-exports lazily and is no room."""
    mods = _modules("engine")
    edges: dict[str, dict[str, set[str]]] = {}
    for mod, path in mods.items():
        if mod == "engine.__init__":
            continue
        room = _room(mod)
        edges.setdefault(room, {})
        for target in _imports(path, type_checking=False):
            while target and target not in mods and target != "engine":
                target = target.rpartition(".")[0]
            if not target or target in ("engine", "engine.__init__"):
                continue
            other = _room(target)
            if other != room:
                edges[room].setdefault(other, set()).add(mod)
    return edges


def test_rooms_have_no_import_cycle():
    """Rooms import each other one way: a cycle means two rooms can no longer be understood,
    tested or replaced apart. The message names each arrow of the cycle and who makes it."""
    graph = _room_graph()
    cycles = _cycles({room: set(targets) for room, targets in graph.items()})
    described = [
        [f"{a} -> {b} ({', '.join(sorted(graph[a][b]))})"
         for a in cycle for b in cycle if b in graph.get(a, {})]
        for cycle in cycles
    ]
    assert described == []


def test_the_room_check_counts_function_imports_but_not_type_checking(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import engine.x\n"
        "def f():\n    from engine.y import z\n"
    )
    assert "engine.x" not in _imports(source, type_checking=False)
    assert {"engine.y", "engine.y.z"} <= _imports(source, type_checking=False)
    assert _room("engine.recovery.verbs") == "engine.recovery"
    assert _room("engine.freeze") == "engine.freeze"


def test_recovery_sits_below_the_session_handle_and_the_engine():
    """Rollback, notices and the loop policy are called by sessions and the engine, never the
    other way round; ids and the operator identity are rooms everything may import, so they
    import no room that acts."""
    graph = _room_graph()
    assert set(graph["engine.recovery"]) & {"engine.sessions", "engine.engine",
                                            "engine.fleet", "engine.integrations"} == set()
    for base in ("engine.ids", "engine.identity"):
        assert set(graph[base]) <= {"engine.errors", "engine.types", "engine.limits",
                                    "engine.loops"}, base


PURE_PARTS = ("engine.loops.detector", "engine.loops.fingerprint", "engine.loops.normalize",
              "engine.memory.decay", "engine.budget.builder")
HEAVY = ("engine.store", "engine.engine", "engine.runtime", "prometheus_client", "redis",
         "sqlite3", "engine.metrics")


@pytest.mark.parametrize("module", PURE_PARTS)
def test_pure_parts_load_without_stores_or_metrics(module):
    """A detector in a notebook, or in another product, must not pay for the stores, the Redis
    client or prometheus_client (nor register metrics) just to judge steps."""
    code = (f"import sys, {module}\n"
            f"print(sorted(m for m in sys.modules if m.startswith({HEAVY!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip()
    assert out == "[]", f"import {module} loaded {out}"


CONSOLE_STACK = ("streamlit", "plotly", "pandas", "pyarrow", "pydeck", "altair", "authlib")


def test_an_engine_and_a_guarded_step_load_no_console_metrics_or_redis(tmp_path):
    """An agent process that opens an engine per request pays for what a step needs: never the
    console's stack (an extra install), the Redis client on a SQLite URL, or prometheus_client
    before a metric is recorded."""
    code = (
        "import sys\n"
        "from engine import Engine\n"
        f"e = Engine.open({f'sqlite:///{tmp_path}/r.db'!r})\n"
        "s = e.session('s')\n"
        "with s.step('search', {'q': 1}) as call:\n"
        "    call.ok(1)\n"
        "e.close()\n"
        "heavy = (*" + repr(CONSOLE_STACK) + ", 'prometheus_client', 'redis')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
        "print(sorted(set(sys.modules) & set(" + repr(OPERATOR_ROOMS) + ")))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.splitlines()
    assert out[0] == "[]", f"an engine and a step loaded {out[0]}"
    assert out[1] == "[]", f"a step that never looped loaded the operator's rooms {out[1]}"


OPERATOR_ROOMS = ("engine.fleet.api", "engine.fleet.queries", "engine.fleet.incidents",
                  "engine.fleet.actions", "engine.loops.replay", "engine.recovery.bulk")
"""What the operator's verbs need (figures, replay, incidents, bulk rollback) and a healthy step
does not: imported by the methods that use them."""


def test_the_engine_package_still_exports_every_public_name_on_use():
    code = ("import engine\n"
            "missing = [n for n in engine.__all__ if getattr(engine, n, None) is None]\n"
            "print(missing)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip()
    assert out == "[]"


CITED = re.compile(r"(?<![\w./-])((?:engine|dashboard|tests|bench|scripts|examples|docs|ops)"
                   r"/[\w./-]*\w\.(?:py|md|toml|lua|yml|yaml|jsonl\.gz|jsonl|json|png|sh))(?![\w.])")

NOT_OURS = {
    "examples/NAME.py": "a placeholder in the README's command line",
    "tests/test_a.py": "pytest output quoted as an example of what the normalizer masks",
    "tests/test_b.py": "pytest output quoted as an example of what the normalizer masks",
    "tests/test_crop.py": "a file of the traced agent's own project, inside a recorded trace",
    "tests/unit/controller/test_is_stuck.py": "OpenHands' test suite, the peer suite's source",
    "bench/corpora/realruns.jsonl.gz": "where convert_realruns.py writes the corpus if asked",
}
"""Paths that are cited but are not files of this repository, and why."""


def _cited_files() -> dict[str, set[str]]:
    """file in the repository -> paths of project files it cites that do not exist."""
    sources = [*ROOT.glob("*.md"), *ROOT.glob("pyproject.toml")]
    for folder in ("engine", "dashboard", "tests", "bench", "scripts", "examples", "ops"):
        sources += [p for p in (ROOT / folder).rglob("*")
                    if p.suffix in (".py", ".md", ".toml", ".lua", ".sh", "") and p.is_file()]
    missing: dict[str, set[str]] = {}
    for path in sources:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError):
            continue
        for cited in CITED.findall(text):
            target = cited.rstrip(".")
            if "*" in target or target in NOT_OURS or (ROOT / target).exists():
                continue
            missing.setdefault(str(path.relative_to(ROOT)), set()).add(target)
    return missing


def test_code_and_notes_cite_only_files_that_exist():
    assert _cited_files() == {}


def test_the_cycle_check_sees_imports_inside_functions_and_type_checking(tmp_path):
    edges = {"a": {"b"}, "b": {"a"}, "c": set()}
    assert _cycles(edges) == [["a", "b"]]
    source = tmp_path / "m.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import engine.x\n"
        "def f():\n    from engine.y import z\n"
    )
    assert {"engine.x", "engine.y", "engine.y.z"} <= _imports(source)


def test_engine_never_imports_ui_libraries():
    offenders = {mod for mod, path in _modules("engine").items()
                 for name in _imports(path)
                 if name.split(".")[0] in set(CONSOLE_STACK)}
    assert offenders == set()


def test_console_reaches_stores_only_through_the_engine_api():
    offenders = {mod for mod, path in _modules("dashboard").items()
                 for name in _imports(path)
                 if name.split(".")[0] in {"sqlite3", "redis"} or name.startswith("engine.store")}
    assert offenders == set()


def test_no_engine_module_outgrows_a_reader():
    sizes = {mod: len(path.read_text(encoding="utf-8").splitlines())
             for mod, path in _modules("engine").items()}
    assert {m: n for m, n in sizes.items() if n > MAX_MODULE_LINES} == {}


def _bare_strings(body: list[ast.stmt], top: bool) -> list[int]:
    """Lines of string-literal statements Streamlit's magic would print (not the module
    docstring, not inside functions or classes)."""
    found = []
    for i, node in enumerate(body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str) and not (top and i == 0)):
            found.append(node.lineno)
        for field in ("body", "orelse", "finalbody", "handlers"):
            sub = getattr(node, field, None)
            if isinstance(sub, list):
                found += _bare_strings(sub, False)
    return found


def test_console_pages_hold_no_bare_strings_that_streamlit_would_print(tmp_path):
    """A string under an assignment reads like an attribute docstring, but in a page script
    Streamlit's magic writes it onto the page; pages use comments instead."""
    pages = [ROOT / "dashboard" / "app.py", *sorted((ROOT / "dashboard" / "screens").rglob("*.py"))]
    found = {str(p.relative_to(ROOT)): lines for p in pages
             if (lines := _bare_strings(ast.parse(p.read_text()).body, True))}
    assert found == {}
    sample = tmp_path / "page.py"
    sample.write_text('"""Page."""\nX = 1\n"""About X."""\nif X:\n    "shown too"\n')
    assert _bare_strings(ast.parse(sample.read_text()).body, True) == [3, 5]


def _layout_rows() -> list[str]:
    """The first cells of ARCHITECTURE.md's table of rooms."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = text[text.index("| room | what lives there |"):].split("\n\n", 1)[0]
    return [line.split("|")[1] for line in table.splitlines()[2:]]


def test_the_table_of_rooms_matches_the_tree():
    """Every path ARCHITECTURE.md's table of rooms names exists, and every room of `engine/` (a
    sub-package or a module) and every top-level folder of the project is named in it."""
    named = {p for row in _layout_rows() for p in re.findall(r"`([\w./]+)`", row)}
    missing = {p for p in named if not (ROOT / p.rstrip("/")).exists()}
    assert missing == set()
    rooms = {f"engine/{p.name}/" if p.is_dir() else f"engine/{p.name}"
             for p in (ROOT / "engine").iterdir()
             if not p.name.startswith(("_", ".")) and (p.is_dir() or p.suffix == ".py")}
    rooms.add("engine/__init__.py")
    folders = {f"{p.name}/" for p in ROOT.iterdir() if p.is_dir()
               and p.name in ("engine", "dashboard", "tests", "bench", "ops")}
    assert (rooms | (folders - {"engine/"})) - named == set()
