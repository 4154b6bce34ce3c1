"""The console's own reading of `.streamlit/secrets.toml`: at the moment of asking, failing closed.

Why not `st.secrets` alone: Streamlit parses the file once and reloads it from a file watcher,
and that watcher dies on a TOML syntax error, so after one bad edit later role changes were
never seen; and a file that failed to parse read as "no secrets", which is demo mode (operator
for anyone on localhost). Here every call looks at the files Streamlit is configured to read
(`secrets.files`), parses a file again only when its modification time or size changed, and a
file that exists but cannot be read or parsed raises `SecretsFileError` naming the file and
line: the console then serves nothing but that error.

Only `.toml` paths are read here. When none of them exists, `st.secrets` is asked instead (it
also covers Kubernetes-style secret directories and the secrets a test injects).
"""

from __future__ import annotations

import os
import re
import threading
import tomllib
from collections.abc import Sequence
from typing import Any

import streamlit as st

_LINE = re.compile(r"\(at line (\d+), column \d+\)")


class SecretsFileError(Exception):
    """A secrets file exists but cannot be read or parsed."""

    def __init__(self, path: str, problem: str, line: int | None = None):
        self.path = path
        self.line = line
        self.problem = problem
        where = f"{path}, line {line}" if line is not None else path
        super().__init__(
            f"{where}: {problem}. The console serves nothing until this file is fixed; "
            "changes to it apply without a restart.")


_cache: dict[str, tuple[tuple[int, int], dict[str, Any]]] = {}
_cache_lock = threading.Lock()


def configured_paths() -> list[str]:
    """The secrets files Streamlit is configured to read (`secrets.files`), in order."""
    paths = st.get_option("secrets.files") or []
    return [str(p) for p in paths]


def read_toml(path: str) -> dict[str, Any] | None:
    """The parsed file at `path`, or None when it does not exist. Parsed again only when its
    modification time or size changed since the last call.

    Raises:
        SecretsFileError: the file exists but cannot be read, is not UTF-8 or not valid TOML.
    """
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SecretsFileError(path, f"cannot be read ({exc.strerror or exc})") from exc
    stamp = (stat.st_mtime_ns, stat.st_size)
    with _cache_lock:
        cached = _cache.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise SecretsFileError(path, f"cannot be read ({exc.strerror or exc})") from exc
    try:
        parsed = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise SecretsFileError(path, "is not UTF-8 text", line) from exc
    except tomllib.TOMLDecodeError as exc:
        match = _LINE.search(str(exc))
        problem = _LINE.sub("", str(exc)).strip()
        raise SecretsFileError(path, f"is not valid TOML ({problem})",
                               int(match.group(1)) if match else None) from exc
    with _cache_lock:
        _cache[path] = (stamp, parsed)
    return parsed


def read_files(paths: Sequence[str]) -> dict[str, Any] | None:
    """The `.toml` files among `paths` merged as Streamlit merges them (later files win, key by
    key at the top level); None when none of them exists.

    Raises:
        SecretsFileError: one of them exists but cannot be read or parsed.
    """
    merged: dict[str, Any] = {}
    found = False
    for path in paths:
        if not path.endswith(".toml"):
            continue
        parsed = read_toml(path)
        if parsed is not None:
            found = True
            merged.update(parsed)
    return merged if found else None


def current_secrets(paths: Sequence[str] | None = None) -> dict[str, Any]:
    """The secrets as they are in the files now (`paths`, else those configured); `st.secrets`
    when no `.toml` file exists; {} when there are none at all.

    Raises:
        SecretsFileError: a secrets file exists but cannot be read or parsed.
    """
    paths = configured_paths() if paths is None else list(paths)
    from_files = read_files(paths)
    if from_files is not None:
        return from_files
    try:
        return st.secrets.to_dict()
    except Exception as exc:  # noqa: BLE001 - Streamlit's own error types vary by version
        present = [p for p in paths if os.path.exists(p)]
        if present:  # a secrets directory that is there but broken: fail closed
            raise SecretsFileError(present[0], f"cannot be read ({exc})") from exc
        return {}  # no secrets at all: nothing is configured
