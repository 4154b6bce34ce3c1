-- Read script: every snapshot with its branch and whether it is restorable.
local s = hgetall(K_session_hash(B))
local restorable = {}
for kind in string.gmatch(s.kinds or "", "[^,]+") do
  for _, m in ipairs(redis.call("ZRANGE", K_restorable(B, kind), 0, -1)) do
    restorable[#restorable + 1] = m
  end
end
return {s.head or "", redis.call("HGETALL", K_snapshots(B)), redis.call("HGETALL", K_branches(B)),
        restorable}
