"""Loading a corpus converter of bench/corpora by its path (bench/ is not an installed package)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from support.paths import ROOT

CORPORA = ROOT / "bench" / "corpora"
"""The converters' folder: on ``sys.path`` once a converter is loaded, as when one runs as a
script, so that its ``import corpus_kit`` finds the shared module."""


def converter(name: str) -> ModuleType:
    """``bench/corpora/<name>.py``, loaded once per test session (as ``rewind_<name>``)."""
    module_name = f"rewind_{name}"
    if module_name not in sys.modules:
        if str(CORPORA) not in sys.path:
            sys.path.append(str(CORPORA))
        spec = importlib.util.spec_from_file_location(module_name, CORPORA / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]
