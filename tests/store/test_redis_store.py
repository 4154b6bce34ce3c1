"""The Redis store beyond the conformance suite, on real servers: keys of odd ids on the cluster,
round trips, TTL, unreachable servers, TLS, ACL users, retries without double writes, the fleet
outbox on Redis Cluster, the doctor, and the fallback."""

from __future__ import annotations

import collections
import contextlib
import threading
import time

import pytest
import redis
from redis.crc import key_slot
from support.ids import NASTY_IDS
from support.redis_servers import RedisServer, cluster, fresh_prefix, require_redis, single_server

from engine import Engine, StoreUnavailable
from engine.errors import NothingToRollBack, StoreAuthError
from engine.store import SessionFilter
from engine.store.fallback import FallbackStore, open_redis
from engine.store.redis import keys
from engine.store.redis.store import RedisStore

pytestmark = pytest.mark.redis


# -- servers ------------------------------------------------------------------------------------
def _url(backend: str, **query) -> str:
    if backend == "redis":
        server = single_server()
        return server.url(prefix=fresh_prefix(), **query)
    return cluster().url(prefix=fresh_prefix(), **query)




@pytest.fixture(params=["redis", "redis-cluster"])
def backend(request):
    require_redis()
    return request.param


def test_lua_builds_the_same_key_names_as_python():
    server = single_server()
    store = RedisStore(server.url(prefix="lk"))
    sid = "{odd}:id*"
    base = keys.session_base(sid, "lk")
    script = keys.lua_prelude() + (
        'local b = KEYS[1] return {K_session_hash(b), K_kv_values(b, "var"), '
        'K_restorable(b, "step"), K_session_events(ARGV[1], ARGV[2])}'
    )
    got = store._r.eval(script, 1, base, keys.fleet_base("lk"), keys.encode(sid))
    assert got == [keys.session_hash(base), keys.kv_values(base, "var"),
                   keys.restorable(base, "step"),
                   keys.session_events(keys.fleet_base("lk"), keys.encode(sid))]
    store.close()


@pytest.mark.slow
def test_nasty_ids_keep_their_keys_in_their_own_slot_on_the_cluster():
    url = _url("redis-cluster")
    engine = Engine.open(url)
    prefix = url.rsplit("prefix=", 1)[1]
    for sid in NASTY_IDS:
        s = engine.session(sid, meta={"tenant": sid})
        snap = s.snapshot("start")
        s.append_message("user", sid)
        s.set_var("k", sid)
        with s.step("tool", {"id": sid}, side_effect=True, compensation=("undo", {"id": sid})):
            pass
        r = s.rollback(to=snap, actor="op", reason=sid, notice=False)
        assert r.abandoned_messages == 1 and len(r.compensations) == 1
        assert engine.sessions(tenant=sid)[0].id == sid
        assert [e.type for e in engine.events(session=sid)][-1] == "rollback"
    rc = engine.store._r
    every = list(rc.scan_iter(match=f"{prefix}:*", count=1000))
    session_keys = [k for k in every if "{~fleet}" not in k]
    by_tag = collections.defaultdict(set)
    for k in session_keys:
        by_tag[k[k.index("{") + 1:k.index("}")]].add(key_slot(k.encode()))
    assert set(by_tag) == {keys.encode(sid) for sid in NASTY_IDS}
    assert all(len(slots) == 1 for slots in by_tag.values())
    engine.close()


# -- round trips --------------------------------------------------------------------------------
HANDSHAKE = {b"CLIENT", b"HELLO", b"AUTH", b"SELECT", b"READONLY", b"PING"}


@contextlib.contextmanager
def count_requests():
    """Counts requests sent to Redis per thread, at the socket layer (a pipeline counts once;
    the handshake of a newly opened pooled connection does not count)."""
    counts: collections.Counter = collections.Counter()
    original = redis.connection.AbstractConnection.send_packed_command

    def counting(self, command, check_health=True):
        data = b"".join(command) if isinstance(command, list) else bytes(command)
        name = data.split(b"\r\n")[2].upper() if data.startswith(b"*") else b""
        if name not in HANDSHAKE:
            counts[threading.current_thread().name] += 1
        return original(self, command, check_health)

    redis.connection.AbstractConnection.send_packed_command = counting
    try:
        yield counts
    finally:
        redis.connection.AbstractConnection.send_packed_command = original


def test_a_guarded_step_is_two_round_trips(backend):
    engine = Engine.open(_url(backend), store_options={"health_check_interval": 0})
    s = engine.session("rt", meta={"tenant": "acme"})
    for i in range(3):  # warm up: scripts loaded, detector window built
        with s.step("search", {"q": i}) as call:
            call.ok("r")
    engine.store.flush()
    steps = 20
    main = threading.current_thread().name
    with count_requests() as counts:
        for i in range(steps):
            with s.step("search", {"q": i + 100}, side_effect=True,
                        compensation=("undo", {"q": i})) as call:
                call.ok({"hits": i})
        engine.store.flush()
    assert counts[main] <= 2 * steps + (1 if backend == "redis-cluster" else 0)
    assert counts[main] >= 2 * steps
    if backend == "redis":
        assert sum(counts.values()) == 2 * steps  # the fleet views changed in the same scripts
    else:  # the fleet outbox goes in batches, off the caller's path
        assert sum(n for t, n in counts.items() if t != main) <= steps
    assert len(s.steps()) == steps + 3 and engine.events(session="rt")[-1].type == "step"
    engine.close()


def test_server_side_count_of_scripts_per_step():
    server = single_server()
    engine = Engine.open(server.url(prefix=fresh_prefix()))
    s = engine.session("srv")
    with s.step("t", {}) as call:
        call.ok(1)
    client = server.client()
    client.config_resetstat()
    for i in range(10):
        with s.step("t", {"i": i}) as call:
            call.ok(i)
    stats = client.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] == 20
    assert "cmdstat_eval" not in stats and "cmdstat_multi" not in stats
    engine.close()


# -- retries never write twice ------------------------------------------------------------------
def test_a_retried_write_with_the_same_request_id_is_applied_once(backend, monkeypatch):
    store = RedisStore(_url(backend))
    store.ensure_session("s", None, 1.0)
    monkeypatch.setattr("engine.store.redis.store._rid", lambda: "fixed-request-id")
    assert store.append_messages("s", [{"role": "user", "content": "once"}], 2.0) == 0
    store.append_messages("s", [{"role": "user", "content": "once"}], 2.0)  # the "retry"
    assert store.live_messages("s") == [{"role": "user", "content": "once"}]
    monkeypatch.undo()
    store.append_messages("s", [{"role": "user", "content": "twice"}], 3.0)
    assert len(store.live_messages("s")) == 2
    store.close()


# -- TTL ----------------------------------------------------------------------------------------
def test_expired_sessions_leave_the_fleet_index(backend):
    store = RedisStore(_url(backend, ttl="1"))
    engine = Engine(store)
    engine.session("short", meta={"tenant": "t", "scenario": "s"}).append_message("user", "x")
    assert [i.id for i in engine.sessions()] == ["short"]
    r = store._r
    base = keys.session_base("short", store.prefix)
    assert 0 < r.ttl(keys.session_hash(base)) <= 1
    assert 0 < r.ttl(keys.live_messages(base)) <= 1
    deadline = time.monotonic() + 10
    while r.exists(keys.session_hash(base)) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.1)  # past the sweep interval
    assert engine.sessions() == [] and engine.sessions(tenant="t") == []
    assert store.count_sessions() == 0
    assert store.count_sessions(SessionFilter(status="healthy")) == 0
    assert not [k for k in r.scan_iter(match=f"{store.prefix}:*") if "{~fleet}" not in k]
    store.close()


def test_activity_refreshes_the_ttl_and_zero_keeps_forever(backend):
    store = RedisStore(_url(backend, ttl="30"))
    store.ensure_session("s", None, 1.0)
    base = keys.session_base("s", store.prefix)
    store._r.expire(keys.session_hash(base), 5)
    store.append_messages("s", [{"role": "user", "content": "x"}], 2.0)
    assert store._r.ttl(keys.session_hash(base)) > 5
    forever = RedisStore(store.url.replace("ttl=30", "ttl=0"))
    forever.append_messages("s", [{"role": "user", "content": "y"}], 3.0)
    assert store._r.ttl(keys.session_hash(base)) == -1
    assert store._r.ttl(keys.live_messages(base)) == -1
    store.close()
    forever.close()


def test_only_idle_healthy_sessions_without_evidence_expire(backend):
    store = RedisStore(_url(backend, ttl="2"))
    engine = Engine(store)
    healthy = engine.session("healthy", meta={"tenant": "t"})
    healthy.snapshot("start")
    with healthy.step("search", {"q": 1}) as call:
        call.ok("hits")
    rolled = engine.session("rolled", meta={"tenant": "t"})
    snap = rolled.snapshot("start")
    rolled.append_message("user", "soon on an abandoned branch")
    with rolled.step("pay", {}, side_effect=True, compensation=("pay.undo", {"id": 1})) as call:
        call.ok("paid")
    rolled.rollback(to=snap, actor="op", reason="loop", notice=True)
    with rolled.step("search", {"q": 2}) as call:  # healthy again
        call.ok("hits")
    engine.session("noticed").inject_notice(None, actor="op")
    engine.session("stopped").stop()
    engine.session("flagged")
    store.set_status("flagged", "looping", {"rule": "repeat"}, time.time())
    store.set_status("flagged", "healthy", None, time.time())
    engine.session("audited")
    store.add_audit("op", "inspect", "audited", None, "looked at it", {"why": "test"}, time.time())
    store.flush()
    kept = {"rolled", "noticed", "stopped", "flagged", "audited"}

    r = store._r
    deadline = time.monotonic() + 15
    base = keys.session_base("healthy", store.prefix)
    while r.exists(keys.session_hash(base)) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(3.2)  # past the TTL the others would have had, and past the sweep interval
    assert store.get_session("healthy") is None
    assert {i.id for i in engine.sessions()} == kept
    assert {i.id for i in engine.sessions(tenant="t")} == {"rolled"}
    assert store.count_sessions() == len(kept)
    for sid in kept:
        base = keys.session_base(sid, store.prefix)
        tag = base[base.index("{"):base.index("}") + 1]
        session_keys = [k for k in r.scan_iter(match=f"{store.prefix}:*") if tag in k]
        assert session_keys and all(r.ttl(k) == -1 for k in session_keys), sid
        assert r.ttl(keys.session_events(keys.fleet_base(store.prefix), keys.encode(sid))) == -1
    info = store.get_session("rolled")
    assert info.rollbacks == 1 and info.status == "healthy"
    [branch] = store.branches("rolled")
    abandoned = [m for m in store.all_messages("rolled") if m.branch == branch.id]
    assert [m.message["content"] for m in abandoned] == ["soon on an abandoned branch"]
    assert [s.branch for s in store.steps("rolled")] == [branch.id, None]
    assert [c.name for c in store.compensations(session="rolled")] == ["pay.undo"]
    assert store.get_session("flagged").loops == 1
    audit = store.audit()
    assert {e.session for e in audit} >= {"rolled", "noticed", "audited"}
    assert all(store.get_session(e.session) is not None for e in audit if e.session)
    assert [e.type for e in store.events(session="audited")][-1] == "inspect"
    store.close()


def test_a_refused_rollback_leaves_the_session_expiring_and_not_evidence(backend):
    store = RedisStore(_url(backend, ttl="30"))
    engine = Engine(store)
    s = engine.session("s")
    s.append_message("user", "hello")
    snap = s.snapshot("head")
    base = keys.session_base("s", store.prefix)
    before = store._r.hgetall(keys.session_hash(base))
    with pytest.raises(NothingToRollBack):
        s.rollback(to=snap, actor="op", reason="r")
    assert store._r.hgetall(keys.session_hash(base)) == before
    assert "keep" not in before and store._r.ttl(keys.session_hash(base)) > 0
    store.flush()
    assert store.audit(session="s") == [] and store.branches("s") == []
    store.close()


def test_a_session_purge_checks_evidence_and_idleness_again_in_its_script(backend):
    store = RedisStore(_url(backend))
    for sid in ("idle", "marked", "busy"):
        store.ensure_session(sid, None, 100.0)
    store.append_messages("busy", [{"role": "user", "content": "x"}], 500.0)
    store.set_status("marked", "stopped", None, 100.0)  # evidence, on the same old time
    # what purge_sessions asks of each session it read as a candidate
    assert store._write("delete", "marked", 600.0, ["200"], sync=True)[0] == "k"
    assert store._write("delete", "busy", 600.0, ["200"], sync=True)[0] == "y"
    assert store._write("delete", "idle", 600.0, ["200"], sync=True)[0] == "1"
    assert store.get_session("marked") and store.get_session("busy")
    assert store.get_session("idle") is None
    assert store.purge_sessions(200.0, 600.0) == {"sessions": 0, "evidence": 1}
    assert store.purge_sessions(1000.0, 1000.0) == {"sessions": 1, "evidence": 1}
    assert {i.id for i in store.list_sessions()} == {"marked"}
    base = keys.session_base("busy", store.prefix)
    tag = base[base.index("{") : base.index("}") + 1]
    assert not [k for k in store._r.scan_iter(match=f"{store.prefix}:*") if tag in k]
    [audit] = store.audit(action="retention")
    assert audit.detail == {"sessions": 1, "evidence": 1, "session_ids": ["busy"]}
    store.close()


def test_a_branch_purge_drops_its_index_entries_and_a_dry_run_keeps_them(backend):
    store = RedisStore(_url(backend))
    engine = Engine(store, clock=lambda: 100.0)
    s = engine.session("s")
    snap = s.snapshot()
    s.append_message("user", "x")
    s.rollback(to=snap, actor="op", reason="r", notice=False)
    index = keys.branch_index(keys.fleet_base(store.prefix))
    store.flush()
    assert store._r.zcard(index) == 1
    assert store.purge_branches(200.0, 200.0, dry_run=True)["branches"] == 1
    assert store._r.zcard(index) == 1 and len(store.branches("s")) == 1
    assert store.purge_branches(200.0, 200.0)["branches"] == 1
    assert store._r.zcard(index) == 0 and store.branches("s") == []
    store.close()


# -- unreachable servers, passwords, ACL users --------------------------------------------------
@pytest.mark.parametrize("scheme", ["redis", "rediss", "redis+cluster"])
def test_unreachable_server_names_host_and_port_never_the_password(scheme):
    from support.ports import free_port

    port = free_port()
    url = f"{scheme}://alice:s3cr3t-pw@127.0.0.1:{port}/0?retries=1&retry_cap=0.05"
    if scheme == "redis+cluster":
        url = url.replace("/0?", "?")
    with pytest.raises(StoreUnavailable) as info:
        Engine.open(url, store_options={"connect_timeout": 0.5})
    text = str(info.value)
    assert f"127.0.0.1:{port}" in text and "s3cr3t-pw" not in text
    assert "alice:***@" in text


def test_acl_user_and_password_in_the_url():
    server = single_server()
    admin = server.client()
    admin.acl_setuser("rewind-app", enabled=True, passwords=["+p@ss:w0rd"], keys=["*"],
                      channels=["*"], commands=["+@all"])
    try:
        url = f"redis://rewind-app:p%40ss%3Aw0rd@127.0.0.1:{server.port}/0?prefix={fresh_prefix()}"
        engine = Engine.open(url)
        engine.session("acl").append_message("user", "hi")
        assert engine.get_session("acl").state().messages[0]["content"] == "hi"
        assert "p%40ss" not in engine.store.url and "***" in engine.store.url
        engine.close()
        wrong = url.replace("p%40ss%3Aw0rd", "nope-wrong")
        with pytest.raises(StoreAuthError) as info:  # refused, not unreachable
            Engine.open(wrong, store_options={"retries": 0})
        assert f"127.0.0.1:{server.port}" in str(info.value) and "nope-wrong" not in str(info.value)
    finally:
        admin.acl_deluser("rewind-app")


@pytest.fixture(scope="module")
def password_server():
    require_redis()
    server = RedisServer().start()
    server.cli("CONFIG", "SET", "requirepass", "right-pw")  # after start: its PING needs none
    yield server
    server.remove()


@pytest.mark.parametrize("how", ["userinfo", "query", "missing", "query-with-fallback"])
def test_a_refused_password_is_an_auth_error_never_unreachable_and_never_a_fallback(
    password_server, how, tmp_path
):
    port = password_server.port
    base = f"redis://127.0.0.1:{port}/0"
    url = {
        "userinfo": f"redis://:wrong-pw@127.0.0.1:{port}/0",
        "query": f"{base}?password=wrong-pw",
        "missing": base,
        "query-with-fallback": f"{base}?password=wrong-pw&fallback=sqlite:///{tmp_path}/fb.db",
    }[how]
    with pytest.raises(StoreAuthError) as info:
        Engine.open(url, store_options={"retries": 1, "retry_cap": 0.05})
    assert not isinstance(info.value, StoreUnavailable)
    text = str(info.value)
    assert f"127.0.0.1:{port}" in text and "wrong-pw" not in text
    assert not (tmp_path / "fb.db").exists()  # the fallback store was never opened


def test_a_password_in_the_query_works_and_is_never_shown(password_server):
    url = f"redis://127.0.0.1:{password_server.port}/0?password=right-pw&prefix={fresh_prefix()}"
    engine = Engine.open(url)
    engine.session("q").append_message("user", "hi")
    assert engine.get_session("q").state().messages[0]["content"] == "hi"
    assert "right-pw" not in engine.store.url and "password=***" in engine.store.url
    engine.close()
    fallback = open_redis(url, fallback="sqlite:///:memory:")
    assert not fallback.degraded and "right-pw" not in fallback.url + fallback.primary_url
    fallback.close()

    from support.ports import free_port

    down = f"redis://127.0.0.1:{free_port()}/0?password=s3cr3t-q&retries=0"
    with pytest.raises(StoreUnavailable) as info:
        Engine.open(down, store_options={"connect_timeout": 0.5})
    assert "s3cr3t-q" not in str(info.value) and "password=***" in str(info.value)
    degraded = open_redis(down, fallback="sqlite:///:memory:")
    assert degraded.degraded and "s3cr3t-q" not in degraded.degraded_reason
    assert "s3cr3t-q" not in degraded.primary_url


@pytest.mark.parametrize("forbidden", ["scripts", "a command inside a script"])
def test_an_acl_that_forbids_what_the_store_runs_is_an_auth_error(forbidden):
    server = single_server()
    admin = server.client()
    commands = ["+ping", "+hgetall", "+client", "+select", "+hello"]
    if forbidden != "scripts":
        commands = ["+@all", "-hset"]
    admin.acl_setuser("limited", enabled=True, passwords=["+limited-pw"], keys=["*"],
                      channels=["*"], commands=commands)
    try:
        url = f"redis://limited:limited-pw@127.0.0.1:{server.port}/0?prefix={fresh_prefix()}"
        store = RedisStore(url)  # connects: PING is allowed
        with pytest.raises(StoreAuthError, match="credentials or ACL") as info:
            store.ensure_session("s", None, 1.0)
        assert "limited-pw" not in str(info.value)
        store.close()
    finally:
        admin.acl_deluser("limited")


def test_a_cluster_auth_failure_is_recognised_through_its_wrapper():
    from redis.exceptions import AuthenticationError, RedisClusterException

    from engine.store.redis.client import is_auth_failure

    try:
        try:
            raise AuthenticationError("invalid username-password pair or user is disabled.")
        except AuthenticationError as exc:
            raise RedisClusterException("Redis Cluster cannot be connected.") from exc
    except RedisClusterException as wrapped:
        assert is_auth_failure(wrapped)
    assert not is_auth_failure(RedisClusterException("Redis Cluster cannot be connected."))


def test_tls_with_a_rediss_url():
    require_redis()
    server = RedisServer(tls=True).start()
    try:
        url = server.url(prefix=fresh_prefix())
        assert url.startswith("rediss://")
        engine = Engine.open(url)
        s = engine.session("tls")
        snap = s.snapshot()
        s.append_message("user", "over TLS")
        s.rollback(to=snap, actor="op", reason="r", notice=False)
        assert engine.sessions()[0].rollbacks == 1
        engine.close()
        plain = f"redis://127.0.0.1:{server.port}/0"  # the server speaks TLS only
        with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{server.port}"):
            Engine.open(plain, store_options={"retries": 0, "timeout": 2})
    finally:
        server.remove()


def test_database_number_in_the_url_is_used():
    server = single_server()
    prefix = fresh_prefix()
    store = RedisStore(server.url(db=3, prefix=prefix))
    store.ensure_session("db3", None, 1.0)
    assert server.client(db=3).exists(keys.session_hash(keys.session_base("db3", prefix)))
    assert not server.client(db=0).exists(keys.session_hash(keys.session_base("db3", prefix)))
    store.close()


# -- fallback -----------------------------------------------------------------------------------
def test_fallback_runs_on_the_embedded_store_and_says_so(tmp_path):
    from support.ports import free_port

    port = free_port()
    fallback = f"sqlite:///{tmp_path}/fallback.db"
    url = f"redis://u:pw-secret@127.0.0.1:{port}/0?retries=0&fallback={fallback}"
    engine = Engine.open(url)
    store = engine.store
    assert isinstance(store, FallbackStore) and store.degraded
    assert engine.config.degraded == store.degraded_reason
    assert f"127.0.0.1:{port}" in store.degraded_reason and "pw-secret" not in store.degraded_reason
    assert store.url == fallback and not store.primary_reachable()
    s = engine.session("kept")
    snap = s.snapshot()
    s.append_message("user", "x")
    s.rollback(to=snap, actor="op", reason="r", notice=False)
    assert Engine.open(fallback).get_session("kept").info().rollbacks == 1


def test_fallback_is_not_used_when_redis_answers_and_later_failures_raise():
    server = RedisServer().start()
    try:
        store = open_redis(server.url(prefix=fresh_prefix(), retries="1", retry_cap="0.05"),
                           fallback="sqlite:///:memory:")
        assert isinstance(store, FallbackStore) and not store.degraded
        assert store.url.startswith("redis://")
        engine = Engine(store)
        s = engine.session("s")
        s.snapshot()
        server.stop(kill=True)
        with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{server.port}"):
            s.snapshot()  # never silently written elsewhere
        assert not store.degraded
    finally:
        server.remove()


def test_redis_store_refuses_a_fallback_it_would_ignore():
    server = single_server()
    with pytest.raises(ValueError, match="fallback"):
        RedisStore(server.url(fallback="sqlite:///:memory:"))


# -- fleet outbox (Redis Cluster) and doctor ----------------------------------------------------
def _orphan_write(store: RedisStore, sid: str, message: str) -> None:
    """A session write whose client died before it brought the fleet views up to date."""
    store._flusher.submit = lambda entries: None  # the "kill": nothing reaches the fleet keys
    try:
        store.append_messages(sid, [{"role": "user", "content": message}], time.time())
    finally:
        del store._flusher.submit


@pytest.mark.slow
def test_a_killed_clients_fleet_changes_are_finished_by_the_next_writer_or_the_doctor():
    url = _url("redis-cluster")
    dead = RedisStore(url)
    dead.ensure_session("orphan", {"tenant": "acme"}, 1.0)
    dead.flush()
    _orphan_write(dead, "orphan", "lost?")
    dead.set_status("orphan", "looping", {"rule": "x"}, 2.0)  # sync: applies the backlog too
    other = RedisStore(url)
    events = [e.type for e in other.events(session="orphan")]
    assert events == ["session", "message", "status"]
    assert other.count_sessions(SessionFilter(status="looping")) == 1

    _orphan_write(dead, "orphan", "again")
    assert [e.type for e in other.events(session="orphan")][-1] == "status"
    counts = other.rebuild_indexes()
    assert counts["outbox_entries"] >= 1 and counts["sessions"] == 1
    assert [e.type for e in other.events(session="orphan")][-1] == "message"
    dead.close()
    other.close()


def test_rebuild_indexes_restores_dropped_fleet_indexes(backend):
    store = RedisStore(_url(backend))
    engine = Engine(store)
    for i in range(5):
        s = engine.session(f"s{i}", meta={"tenant": f"t{i % 2}"})
        snap = s.snapshot()
        s.append_message("user", "x")
        if i % 2:
            s.rollback(to=snap, actor="op", reason="r", notice=False)
    store.flush()
    fb = keys.fleet_base(store.prefix)
    doomed = [k for k in store._r.scan_iter(match=f"{fb}ss*")] + [keys.branch_index(fb)]
    for k in doomed:
        store._r.delete(k)
    assert engine.sessions() == []
    counts = store.rebuild_indexes()
    assert counts["sessions"] == 5 and counts["branches"] == 2
    assert len(engine.sessions()) == 5 and len(engine.sessions(tenant="t1")) == 2
    assert store.count_sessions(SessionFilter(status="rolled_back")) == 2
    store._r.delete(keys.session_hash(keys.session_base("s0", store.prefix)))
    assert store.rebuild_indexes()["stale_removed"] == 1
    assert store.count_sessions() == 4
    assert engine.fleet.purge_abandoned(older_than_s=0)["branches"] == 2
    store.close()


def test_verify_session_finds_nothing_wrong_after_busy_use(backend):
    store = RedisStore(_url(backend))
    engine = Engine(store)
    s = engine.session("busy")
    snaps = []
    for i in range(30):
        s.append_message("user", f"m{i}")
        s.set_var("i", i)
        with s.step("t", {"i": i}) as call:
            call.ok(i)
        # roll back before taking the snapshot: right after it (i = 20) the head has nothing
        # after it to roll back
        if i % 7 == 6:
            s.rollback(to=s.suggested_target(), actor="op", reason="r", notice=True)
        if i % 5 == 0:
            snaps.append(s.snapshot(f"n{i}"))
    assert store.verify_session("busy") == []
    assert store.verify_session("missing") == ["session 'missing' does not exist"]
    store.close()


@pytest.mark.slow
def test_a_long_outbox_backlog_is_applied_in_order_before_a_rollback():
    url = _url("redis-cluster")
    store = RedisStore(url)
    engine = Engine(store)
    s = engine.session("backlog")
    snap = s.snapshot()
    with s.step("pay", {}, side_effect=True, compensation=("pay.undo", {"id": 7})) as call:
        call.ok("paid")
    store.flush()
    store._flusher.submit = lambda entries: None  # the fleet node "down" for 250 writes
    try:
        for i in range(250):
            s.append_message("user", f"m{i}")
    finally:
        del store._flusher.submit
    r = s.rollback(to=snap, actor="op", reason="r", notice=False)
    assert [(c.name, c.args) for c in r.compensations] == [("pay.undo", {"id": 7})]
    types = [e.type for e in engine.events(session="backlog", limit=10_000)]
    assert types.count("message") == 250 and types[-1] == "rollback"
    store.close()
