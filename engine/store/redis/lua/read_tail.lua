-- Read script: what `live_tail` returns, in one consistent read.
-- ARGV[1] a versioned namespace, ARGV[2] how many of the newest live messages (0: none)
local s = redis.call("HMGET", K_session_hash(B), "epoch", "msgs")
if not s[1] then return false end
local last = tonumber(ARGV[2])
local tail = {}
if last > 0 then tail = redis.call("LRANGE", K_live_messages(B), -last, -1) end
return {s[1], s[2], redis.call("HGETALL", K_kv_values(B, ARGV[1])), tail}
