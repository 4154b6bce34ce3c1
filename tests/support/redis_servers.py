"""Real Redis servers for the tests: one `redis-server` and a real 3-master Redis Cluster, each on
free loopback ports with its own temporary directory, started on first use and stopped when the
test process exits. They never touch a Redis already running on the machine (port 6379).

`REDIS_BACKENDS` plugs them into the conformance suite (see tests/conftest.py): each factory returns
the URL of a fresh, empty store (the server is flushed and each test gets its own key prefix, so
a late write of an earlier test cannot leak into the next one).
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from support.ports import free_port

REDIS_SERVER = shutil.which("redis-server")
REDIS_CLI = shutil.which("redis-cli")


def have_redis() -> bool:
    return REDIS_SERVER is not None and REDIS_CLI is not None


def require_redis() -> None:
    if not have_redis():
        pytest.skip("redis-server / redis-cli are not installed (scripts/install --test)")


class RedisServer:
    """One redis-server process. `persistent` turns on the append-only file with fsync on every
    write, so acknowledged writes survive a kill and restart."""

    def __init__(self, *, port: int | None = None, persistent: bool = False,
                 extra: tuple[str, ...] = (), cluster: bool = False, tls: bool = False):
        self.port = port or free_port(with_bus=cluster)
        self.dir = tempfile.mkdtemp(prefix="rewind-redis-")
        self.persistent = persistent
        self.extra = list(extra)
        self.tls = tls
        self.ca = os.path.join(self.dir, "ca.crt")
        if tls:
            self._make_certificates()
            self.extra += ["--port", "0", "--tls-port", str(self.port),
                           "--tls-cert-file", os.path.join(self.dir, "server.crt"),
                           "--tls-key-file", os.path.join(self.dir, "server.key"),
                           "--tls-ca-cert-file", self.ca, "--tls-auth-clients", "no"]
        if cluster:
            self.extra += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                           "--cluster-node-timeout", "3000"]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 15.0) -> RedisServer:
        args = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", self.dir, "--save", "", "--protected-mode", "no",
                "--logfile", "redis.log", "--daemonize", "no",
                "--appendonly", "yes" if self.persistent else "no",
                "--appendfsync", "always", *self.extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server on {self.port} exited; see {self.dir}/redis.log")
            try:
                if self.cli("PING").strip() == "PONG":
                    return self
            except subprocess.CalledProcessError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on {self.port} did not answer within {timeout}s")

    def _make_certificates(self) -> None:
        """A throwaway CA and a server certificate for 127.0.0.1 (needs openssl)."""
        if shutil.which("openssl") is None:
            pytest.skip("openssl is not installed")

        def run(*args: str) -> None:
            subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=self.dir)

        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.crt", "-days", "2", "-subj", "/CN=rewind-test-ca")
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
            "server.csr", "-subj", "/CN=127.0.0.1")
        with open(os.path.join(self.dir, "san.cnf"), "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\n")
        run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.crt", "-days", "2", "-extfile", "san.cnf")

    def cli(self, *args: str) -> str:
        tls = ["--tls", "--cacert", self.ca] if self.tls else []
        return subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port), *tls, *args],
                              check=True, capture_output=True, text=True, timeout=30).stdout

    def client(self, **kwargs):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True, **kwargs)

    def stop(self, kill: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        """Kill -9 and start again on the same port and directory (the AOF is replayed)."""
        self.stop(kill=True)
        self.start()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, db: int = 0, **query: str) -> str:
        if self.tls:
            query = {"ssl_ca_certs": self.ca, **query}
        q = "&".join(f"{k}={v}" for k, v in query.items())
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://127.0.0.1:{self.port}/{db}" + (f"?{q}" if q else "")


class RedisCluster:
    """A real Redis Cluster of `masters` redis-server processes, no replicas."""

    def __init__(self, masters: int = 3):
        self.nodes = [RedisServer(cluster=True) for _ in range(masters)]

    def start(self, timeout: float = 60.0) -> RedisCluster:
        for node in self.nodes:
            node.start()
        subprocess.run(
            [REDIS_CLI, "--cluster", "create",
             *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", "0", "--cluster-yes"],
            check=True, capture_output=True, text=True, timeout=timeout,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            infos = [n.cli("CLUSTER", "INFO") for n in self.nodes]
            if all("cluster_state:ok" in i and f"cluster_known_nodes:{len(self.nodes)}" in i
                   and "cluster_slots_assigned:16384" in i for i in infos):
                return self
            time.sleep(0.1)
        raise RuntimeError("the test Redis Cluster did not reach cluster_state:ok")

    def flushall(self) -> None:
        for node in self.nodes:
            node.cli("FLUSHALL")

    def stop(self) -> None:
        for node in self.nodes:
            node.remove()

    def url(self, **query: str) -> str:
        q = "&".join(f"{k}={v}" for k, v in query.items())
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}" + (f"?{q}" if q else "")


_started: dict[str, object] = {}


def single_server() -> RedisServer:
    """The test session's single redis-server (started on first use)."""
    require_redis()
    if "single" not in _started:
        _started["single"] = RedisServer().start()
        atexit.register(_started["single"].remove)
    return _started["single"]  # type: ignore[return-value]


def cluster() -> RedisCluster:
    """The test session's 3-master Redis Cluster (started on first use)."""
    require_redis()
    if "cluster" not in _started:
        c = RedisCluster(3)
        atexit.register(c.stop)
        _started["cluster"] = c.start()
    return _started["cluster"]  # type: ignore[return-value]


_prefixes = itertools.count(1)


def fresh_prefix() -> str:
    return f"t{os.getpid()}x{next(_prefixes)}"


def _redis(tmp_path, request) -> str:
    server = single_server()
    request.applymarker(pytest.mark.redis)
    server.cli("FLUSHALL")
    return server.url(prefix=fresh_prefix())


def _redis_cluster(tmp_path, request) -> str:
    c = cluster()
    request.applymarker(pytest.mark.redis)
    c.flushall()
    return c.url(prefix=fresh_prefix())


REDIS_BACKENDS = {"redis": _redis, "redis-cluster": _redis_cluster}
