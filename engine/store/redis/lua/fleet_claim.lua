-- Fleet script: claim one pending compensation (or one whose lease expired).
-- ARGV[1] owner, [2] lease end, [3] now, [4..] handler names
local best
for i = 4, #ARGV do
  local name = ARGV[i]
  local p = redis.call("ZRANGE", K_comp_pending(FB, name), 0, 0)[1]
  if p and (not best or tonumber(p) < best) then best = tonumber(p) end
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
