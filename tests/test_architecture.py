"""The house rules of DESIGN.md, checked on the source tree: the dependency graph of `engine/`
runs one way (no import cycle, counting imports inside functions and under TYPE_CHECKING), the
engine never imports UI libraries, the console never reaches a store, and no engine module grows
past what a reader can hold."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_MODULE_LINES = 900


def _modules(package: str) -> dict[str, Path]:
    base = ROOT / package
    return {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in base.rglob("*.py")}


def _imports(path: Path) -> set[str]:
    """Every module named by an import anywhere in the file (top level, functions,
    TYPE_CHECKING blocks), relative imports resolved."""
    names: set[str] = set()
    inside = path.is_relative_to(ROOT)
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1]) if inside else ""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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
                 if name.split(".")[0] in {"streamlit", "plotly"}}
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
    pages = [ROOT / "dashboard" / "app.py", *sorted((ROOT / "dashboard" / "screens").glob("*.py"))]
    found = {str(p.relative_to(ROOT)): lines for p in pages
             if (lines := _bare_strings(ast.parse(p.read_text()).body, True))}
    assert found == {}
    sample = tmp_path / "page.py"
    sample.write_text('"""Page."""\nX = 1\n"""About X."""\nif X:\n    "shown too"\n')
    assert _bare_strings(ast.parse(sample.read_text()).body, True) == [3, 5]
