-- Read script: one snapshot by sequence number, with its branch and whether it is restorable.
-- ARGV[1] the snapshot's sequence number
local seq = ARGV[1]
local r = redis.call("HMGET", K_snapshots(B), seq, seq .. "b")
if not r[1] then return false end
local s = hgetall(K_session_hash(B))
local restorable = "0"
for kind in string.gmatch(s.kinds or "", "[^,]+") do
  if redis.call("ZSCORE", K_restorable(B, kind), seq) then restorable = "1" end
end
local branch = r[2] or ""
local branch_record = ""
if r[2] then branch_record = redis.call("HGET", K_branches(B), r[2]) or "" end
return {s.head or "", r[1], branch, branch_record, restorable}
