-- Read script: the structures `verify_session` checks.
-- every structure a consistency check needs, in one consistent read
local s = hgetall(K_session_hash(B))
return {cjson.encode(s), redis.call("LRANGE", K_live_messages(B), 0, -1),
        redis.call("LRANGE", K_live_steps(B), 0, -1),
        redis.call("LRANGE", K_live_snapshots(B), 0, -1),
        redis.call("HGETALL", K_snapshots(B)), redis.call("HKEYS", K_steps(B))}
