"""Free loopback ports for the servers the tests start (redis-server, cluster nodes, Streamlit)."""

from __future__ import annotations

import random
import socket


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(with_bus: bool = False) -> int:
    """A free loopback port, never 6379 (a Redis already running on the machine stays untouched).

    Args:
        with_bus: for a Redis Cluster node, whose bus port (the port + 10000) must be free too;
            such ports come from 20000–29999, plain ones from 30000–59999, so a node's bus port
            never takes a port handed out for something else.
    """
    for _ in range(500):
        port = random.randint(20000, 29999) if with_bus else random.randint(30000, 59999)
        if port != 6379 and _port_free(port) and (not with_bus or _port_free(port + 10000)):
            return port
    raise RuntimeError("no free loopback port found")
