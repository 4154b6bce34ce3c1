-- Fleet script: claim one pending compensation whose next attempt is due (or one whose lease
-- expired). A pending one that failed before carries its next attempt time as "lease"; the
-- oldest PENDING_SCAN pending ones of each handler are looked at, so a claim costs the same
-- however long the queue.
-- ARGV[1] owner, [2] lease end, [3] now, [4..] handler names
local PENDING_SCAN = 50
local now = tonumber(ARGV[3])
local best
for i = 4, #ARGV do
  local name = ARGV[i]
  for _, p in ipairs(redis.call("ZRANGE", K_comp_pending(FB, name), 0, PENDING_SCAN - 1)) do
    local due = redis.call("HGET", K_compensation(FB, p), "lease")
    if not due or tonumber(due) <= now then
      if not best or tonumber(p) < best then best = tonumber(p) end
      break
    end
  end
  local expired = redis.call("ZRANGEBYSCORE", K_comp_running(FB, name), "-inf", "(" .. ARGV[3])
  for _, id in ipairs(expired) do
    if not best or tonumber(id) < best then best = tonumber(id) end
  end
end
if not best then return false end
local id = int(best)
local key = K_compensation(FB, id)
local c = hgetall(key)
redis.call("ZREM", K_comp_pending(FB, c.name), id)
redis.call("ZADD", K_comp_running(FB, c.name), ARGV[2], id)
redis.call("ZREM", K_comp_by_status(FB, c.status), id)
redis.call("ZADD", K_comp_by_status(FB, "running"), id, id)
redis.call("HSET", key, "status", "running", "owner", ARGV[1], "lease", ARGV[2],
           "attempts", int(tonumber(c.attempts) + 1), "updated", ARGV[3])
return redis.call("HGETALL", key)
