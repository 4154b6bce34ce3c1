"""Shared fixtures. `store_url` runs a test once per store backend (the conformance suite).

Backends register in BACKENDS: name -> factory(tmp_path) returning a store URL. Redis backends
start real servers on free loopback ports (see tests/redis_servers.py) and register themselves
when redis-server is installed.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from engine import Engine  # noqa: E402


def _sqlite_memory(tmp_path, request):
    return "sqlite:///:memory:"


def _sqlite_file(tmp_path, request):
    return f"sqlite:///{tmp_path}/rewind.db"


BACKENDS = {"sqlite-memory": _sqlite_memory, "sqlite-file": _sqlite_file}

try:  # Redis backends, when their module is present
    from redis_servers import REDIS_BACKENDS  # type: ignore

    BACKENDS.update(REDIS_BACKENDS)
except ImportError:
    pass


@pytest.fixture(params=[
    pytest.param(name, marks=pytest.mark.redis) if name.startswith("redis") else name
    for name in sorted(BACKENDS)
])
def store_url(request, tmp_path):
    """A fresh, empty store URL for each backend."""
    return BACKENDS[request.param](tmp_path, request)


@pytest.fixture
def engine(store_url):
    eng = Engine.open(store_url)
    yield eng
    eng.close()


@pytest.fixture
def sqlite_url(tmp_path):
    return f"sqlite:///{tmp_path}/rewind.db"
