-- Read script: newest restorable snapshot before a step.
-- ARGV[1] step number the snapshot must precede, or "+inf"
local before = ARGV[1]
local limit = before == "+inf" and math.huge or tonumber(before)
local best = -1
local z = redis.call("ZREVRANGEBYSCORE", K_restorable(B, "step"), before, "-inf", "LIMIT", 0, 1)
if z[1] then best = tonumber(z[1]) end
local P = K_snapshots(B)
for _, m in ipairs(redis.call("ZREVRANGE", K_restorable(B, "manual"), 0, -1)) do
  if tonumber(m) <= best then break end
  local next_step = tonumber(string.match(redis.call("HGET", P, m), "^%[%d+,(%d+),"))
  if next_step <= limit then best = tonumber(m) break end
end
if best < 0 then return false end
return "snap-" .. int(best)
