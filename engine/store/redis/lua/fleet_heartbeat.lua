-- Fleet script: a worker's heartbeat (Store.heartbeat_worker): forget workers not seen since
-- the expiry time, then record (or, with no handlers, forget) this one.
-- ARGV[1] worker id, [2] now, [3] expire before, [4] handlers JSON ("" forgets the worker)
local H, Z = K_workers(FB), K_workers_seen(FB)
local gone = redis.call("ZRANGEBYSCORE", Z, "-inf", "(" .. ARGV[3])
for _, w in ipairs(gone) do redis.call("HDEL", H, w) end
if #gone > 0 then redis.call("ZREMRANGEBYSCORE", Z, "-inf", "(" .. ARGV[3]) end
if ARGV[4] == "" then
  redis.call("HDEL", H, ARGV[1])
  redis.call("ZREM", Z, ARGV[1])
else
  redis.call("HSET", H, ARGV[1], ARGV[4])
  redis.call("ZADD", Z, ARGV[2], ARGV[1])
end
return 1
