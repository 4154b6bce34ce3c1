"""Faults on the Redis store: agent processes killed with SIGKILL at random points of their steps
and rollbacks, and the Redis server itself killed and restarted mid-run. Afterwards every session
is consistent and every step the store acknowledged is there."""

from __future__ import annotations

import pytest
from support.agents import check_after_kills, kill_rounds, operator_rolls_back_while_the_agent_steps
from support.redis_servers import RedisServer, cluster, fresh_prefix, require_redis

from engine import Engine
from engine.store.redis import keys

pytestmark = [pytest.mark.slow, pytest.mark.redis]


def _check(engine: Engine, acked: dict[str, set[int]]) -> None:
    check_after_kills(engine, acked)
    for sid in acked:
        assert engine.store.verify_session(sid) == []


def test_kills_and_a_server_restart_lose_nothing_acknowledged():
    require_redis()
    server = RedisServer(persistent=True).start()  # appendonly yes, appendfsync always
    try:
        url = server.url(prefix=fresh_prefix(), retries="12", retry_cap="0.5")

        def restart(round_no: int) -> bool:
            if round_no in (3, 8):
                server.restart()  # kill -9 and start again: only the AOF survives
                return True
            return False

        survivors: list[bool] = []
        acked = kill_rounds(url, rounds=12, seed=7, restart=restart, survivors=survivors)
        assert any(survivors), "agents should ride out a server restart on their retries"
        server.restart()
        engine = Engine.open(url)
        _check(engine, acked)
        engine.close()
    finally:
        server.remove()


def test_kills_on_the_cluster_leave_consistent_sessions_and_fleet_views():
    require_redis()
    url = cluster().url(prefix=fresh_prefix())
    acked = kill_rounds(url, rounds=8, seed=11)
    engine = Engine.open(url)
    store = engine.store
    store.rebuild_indexes()  # what `rewind doctor` does: finish what killed clients left
    _check(engine, acked)
    store.flush()
    by_status = {s: {i.id for i in engine.sessions(status=s)} for s in
                 ("healthy", "looping", "rolled_back", "stopped")}
    for sid in acked:
        info = engine.get_session(sid).info()
        assert sid in by_status[info.status]
        # every fleet change the killed clients left in the session's outbox was applied
        base = keys.session_base(sid, store.prefix)
        backlog = store._r.lrange(keys.fleet_outbox(base), 0, -1)
        mark = store._r.hget(keys.outbox_marks(keys.fleet_base(store.prefix)), sid)
        newest = max((int(e.split(" ", 1)[0]) for e in backlog), default=0)
        assert int(mark.rpartition(":")[2]) >= newest
    engine.close()


@pytest.mark.parametrize("backend", ["redis", "redis-cluster"])
def test_operator_rolls_back_while_the_agent_steps_on_redis(backend, tmp_path, request):
    from support.redis_servers import REDIS_BACKENDS

    operator_rolls_back_while_the_agent_steps(REDIS_BACKENDS[backend](tmp_path, request))
