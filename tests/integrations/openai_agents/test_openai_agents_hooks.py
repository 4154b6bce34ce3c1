"""The private parts of the Agents SDK that `ToolGuard` relies on exist in the installed SDK, with
the shapes the guard uses, and the installed SDK is inside the range pyproject.toml supports.

The guard sees the exception a function tool raised, even when the SDK turns it into a message for
the model, by wrapping the tool invoker's ``_invoke_tool_impl`` (private): when a release renames
or reshapes it, the guard would silently know failures only from ``error_when``. This test says so
first."""

from __future__ import annotations

import dataclasses
import inspect
import tomllib
from importlib.metadata import version
from pathlib import Path

from agents import FunctionTool, function_tool
from packaging.requirements import Requirement

from engine.integrations.openai_agents import session as guard_module

ROOT = Path(__file__).resolve().parents[3]


def pinned() -> Requirement:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    [spec] = [Requirement(r) for r in extras["openai-agents"]]
    return spec


def test_the_supported_range_is_bounded_and_holds_the_installed_sdk():
    spec = pinned()
    assert spec.name == "openai-agents"
    assert any(s.operator == "<" for s in spec.specifier), (
        "ToolGuard uses a private hook of the SDK: bound the range above")
    assert spec.specifier.contains(version("openai-agents")), (
        f"installed openai-agents {version('openai-agents')} is outside {spec.specifier}")


@function_tool
def echo(text: str) -> str:
    """Echo the text."""
    return text


def test_the_tool_invoker_has_the_private_hook_the_guard_wraps():
    assert isinstance(echo, FunctionTool) and dataclasses.is_dataclass(echo)
    assert "on_invoke_tool" in {f.name for f in dataclasses.fields(FunctionTool)}
    invoker = echo.on_invoke_tool
    impl = getattr(invoker, "_invoke_tool_impl", None)
    assert impl is not None and inspect.iscoroutinefunction(impl)
    assert list(inspect.signature(impl).parameters) == ["ctx", "input"]
    bind = getattr(invoker, "__agents_bind_function_tool__", None)
    assert callable(bind) and len(inspect.signature(bind).parameters) == 1


def test_the_guard_installs_its_capture_on_the_hook():
    invoker = echo.on_invoke_tool
    wrapped = guard_module._capturing(invoker)
    assert wrapped is not invoker  # with no hook the guard hands the invoker back unchanged
    assert wrapped._invoke_tool_impl is not invoker._invoke_tool_impl
    # the SDK's markers on the implementation (wrapped callable, argument preparation) survive
    for name in vars(invoker._invoke_tool_impl):
        assert hasattr(wrapped._invoke_tool_impl, name)
