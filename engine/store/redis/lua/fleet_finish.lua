-- Fleet script: finish a claimed compensation.
-- ARGV[1] events MAXLEN, [2] session events MAXLEN, [3] id, [4] owner, [5] new status,
-- [6] error JSON ("null" none), [7] error text, [8] now, [9] ttl, [10] pending again: not
-- claimed before this time ("" at once)
local C = {fb = FB, evmax = ARGV[1], sevmax = ARGV[2]}
local id, status = ARGV[3], ARGV[5]
local key = K_compensation(FB, id)
local c = hgetall(key)
if c.status ~= "running" or c.owner ~= ARGV[4] then return 0 end
redis.call("HSET", key, "status", status, "updated", ARGV[8])
if ARGV[6] == "null" then redis.call("HDEL", key, "error", "lease")
else redis.call("HSET", key, "error", ARGV[7]) redis.call("HDEL", key, "lease") end
redis.call("ZREM", K_comp_running(FB, c.name), id)
redis.call("ZREM", K_comp_by_status(FB, "running"), id)
redis.call("ZADD", K_comp_by_status(FB, status), id, id)
if status == "pending" then
  redis.call("ZADD", K_comp_pending(FB, c.name), id, id)
  if ARGV[10] ~= "" then redis.call("HSET", key, "lease", ARGV[10]) end
end
if status ~= "pending" then
  fleet_audit(C, c.session, c.enc, ARGV[8], {"compensation", cjson.encode(ARGV[4]), "null",
              ARGV[6], '{"id":' .. id .. ',"name":' .. cjson.encode(c.name) .. ',"status":' ..
              cjson.encode(status) .. ',"step":' .. c.step .. '}'})
end
fleet_event(C, c.session, c.enc, "compensation", '{"id":' .. id .. ',"name":' ..
            cjson.encode(c.name) .. ',"status":' .. cjson.encode(status) .. '}', ARGV[8],
            tonumber(ARGV[9]))
return 1
