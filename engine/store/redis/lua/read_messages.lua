-- Read script: live and abandoned messages, in one consistent read.
return {redis.call("LRANGE", K_live_messages(B), 0, -1),
        redis.call("HVALS", K_abandoned_messages(B))}
