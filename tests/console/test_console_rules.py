"""The console's house rules, checked on the source tree: no module in `dashboard/` grows past what
a reader can hold, the console reaches the engine through its public names only (`from engine
import <a name in engine.__all__>`, never a submodule, so moving code inside the engine cannot
break the console), and no handler catches AttributeError (it hides typos and bugs as "not
there"; the console checks what it expects instead).

Each checker is also run on a hand-made file that breaks its rule, so none can pass by seeing
nothing."""

from __future__ import annotations

import ast
from pathlib import Path

from support.paths import ROOT

DASHBOARD = ROOT / "dashboard"
MAX_MODULE_LINES = 900


def _sources(base: Path) -> list[Path]:
    return sorted(base.rglob("*.py"))


def _engine_public_names() -> set[str]:
    """`engine.__all__` as the source spells it (read, not imported)."""
    tree = ast.parse((ROOT / "engine" / "__init__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if (isinstance(node, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)):
            return set(ast.literal_eval(node.value))
    raise AssertionError("engine/__init__.py has no __all__")


def too_long(path: Path, limit: int = MAX_MODULE_LINES) -> int | None:
    """The file's line count when it is over `limit`, else None."""
    lines = len(path.read_text(encoding="utf-8").splitlines())
    return lines if lines > limit else None


def private_engine_imports(path: Path, public: set[str]) -> list[str]:
    """Imports in `path` that reach past the engine's public names: `import engine.x`,
    `from engine.x import y`, and `from engine import z` where z is not in `public` (a
    submodule such as `engine.freeze`, or a name the engine does not export), with line numbers.
    Imports inside functions and TYPE_CHECKING blocks count too."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names
                      if a.name.startswith("engine.")]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.startswith("engine."):
                found.append((node.lineno, f"from {node.module} import …"))
            elif node.module == "engine":
                found += [(node.lineno, f"from engine import {a.name}") for a in node.names
                          if a.name not in public]
    return [f"{line}: {text}" for line, text in sorted(found)]


def _names_attribute_error(node: ast.expr | None) -> bool:
    if isinstance(node, ast.Tuple):
        return any(_names_attribute_error(e) for e in node.elts)
    if isinstance(node, ast.Name):
        return node.id == "AttributeError"
    if isinstance(node, ast.Attribute):  # builtins.AttributeError
        return node.attr == "AttributeError"
    return False


def attribute_error_handlers(path: Path) -> list[int]:
    """Lines of `except` clauses in `path` that catch AttributeError, alone or in a tuple."""
    return sorted(node.lineno for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                  if isinstance(node, ast.ExceptHandler) and _names_attribute_error(node.type))


# -- the rules, on the console ----------------------------------------------------------------
def test_console_finds_its_modules():
    names = {p.relative_to(DASHBOARD).as_posix() for p in _sources(DASHBOARD)}
    assert {"app.py", "data.py", "charts.py", "views/__init__.py", "screens/fleet.py"} <= names


def test_no_console_module_outgrows_a_reader():
    sizes = {str(p.relative_to(ROOT)): n for p in _sources(DASHBOARD) if (n := too_long(p))}
    assert sizes == {}


def test_console_uses_only_the_engines_public_names():
    public = _engine_public_names()
    offenders = {str(p.relative_to(ROOT)): found for p in _sources(DASHBOARD)
                 if (found := private_engine_imports(p, public))}
    assert offenders == {}


def test_console_catches_no_attribute_error():
    offenders = {str(p.relative_to(ROOT)): lines for p in _sources(DASHBOARD)
                 if (lines := attribute_error_handlers(p))}
    assert offenders == {}


# -- the checkers fail where they should --------------------------------------------------------
def test_the_length_check_flags_a_long_module(tmp_path):
    short, long = tmp_path / "short.py", tmp_path / "long.py"
    short.write_text("x = 1\n" * MAX_MODULE_LINES)
    long.write_text("x = 1\n" * (MAX_MODULE_LINES + 1))
    assert too_long(short) is None
    assert too_long(long) == MAX_MODULE_LINES + 1


def test_the_import_check_flags_engine_submodules_and_unexported_names(tmp_path):
    public = _engine_public_names()
    assert {"Engine", "SessionStatus"} <= public and "freeze" not in public
    source = tmp_path / "page.py"
    source.write_text(
        "import engine\n"
        "from engine import Engine, SessionStatus\n"
        "from engine.records import Event\n"
        "import engine.recovery.saga as saga\n"
        "from engine import freeze\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from engine.types import Role\n"
        "def f():\n"
        "    from engine.recovery.notices import NOTICE_FLAG\n"
        "from enginex import y\n"
    )
    assert private_engine_imports(source, public) == [
        "3: from engine.records import …",
        "4: import engine.recovery.saga",
        "5: from engine import freeze",
        "8: from engine.types import …",
        "10: from engine.recovery.notices import …",
    ]


def test_the_handler_check_flags_attribute_error_alone_and_in_a_tuple(tmp_path):
    source = tmp_path / "page.py"
    source.write_text(
        "import builtins\n"
        "try:\n    pass\nexcept AttributeError:\n    pass\n"
        "try:\n    pass\nexcept (ImportError, AttributeError) as exc:\n    pass\n"
        "try:\n    pass\nexcept builtins.AttributeError:\n    pass\n"
        "try:\n    pass\nexcept (KeyError, ValueError):\n    pass\n"
        "try:\n    pass\nexcept:\n    pass\n"
    )
    assert attribute_error_handlers(source) == [4, 8, 12]
