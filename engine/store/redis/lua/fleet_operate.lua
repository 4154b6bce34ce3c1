-- Fleet script: an operator retries or resolves a compensation (Store.retry_compensation,
-- Store.resolve_compensation): the change, its audit event and its feed event in one step.
-- ARGV[1] events MAXLEN, [2] session events MAXLEN, [3] id, [4] action (retry | resolve),
-- [5] actor, [6] actor JSON, [7] reason, [8] reason JSON, [9] now
-- Reply: {1, hash after the change…}, or {0, hash as it is…} when refused (nothing written;
-- Python words the refusal, as every store does).
local C = {fb = FB, evmax = ARGV[1], sevmax = ARGV[2]}
local id, action, now = ARGV[3], ARGV[4], ARGV[9]
local key = K_compensation(FB, id)
local c = hgetall(key)
if not c.status then fail("UNKNOWN_COMPENSATION", id) end
local operable = c.status == "failed" or c.status == "pending" or c.status == "running"
local leased = c.status == "running" and c.lease and tonumber(c.lease) >= tonumber(now)
if not operable or leased then
  local flat = redis.call("HGETALL", key)
  table.insert(flat, 1, 0)
  return flat
end
local from = c.status
redis.call("ZREM", K_comp_by_status(FB, from), id)
redis.call("ZREM", K_comp_pending(FB, c.name), id)
redis.call("ZREM", K_comp_running(FB, c.name), id)
redis.call("HDEL", key, "owner", "lease")
local status
if action == "retry" then
  status = "pending"
  redis.call("HSET", key, "status", status, "attempts", "0", "updated", now)
  redis.call("ZADD", K_comp_pending(FB, c.name), id, id)
else
  status = "resolved"
  redis.call("HSET", key, "status", status, "resolved_by", ARGV[5], "resolved_reason", ARGV[7],
             "updated", now)
end
redis.call("ZADD", K_comp_by_status(FB, status), id, id)
local detail = '{"attempts":' .. c.attempts .. ',"from":' .. cjson.encode(from) .. ',"id":' ..
  id .. ',"name":' .. cjson.encode(c.name) .. ',"status":"' .. status .. '","step":' .. c.step ..
  '}'
local kind = "compensation." .. action
fleet_audit(C, c.session, c.enc, now, {kind, ARGV[6], "null", ARGV[8], detail})
-- ttl 0: a session with a compensation is evidence, its feed does not expire
fleet_event(C, c.session, c.enc, kind, '{"actor":' .. ARGV[6] .. ',' .. string.sub(detail, 2),
            now, 0)
local flat = redis.call("HGETALL", key)
table.insert(flat, 1, 1)
return flat
