-- Fleet script: apply fleet outbox entries (Redis Cluster); applying twice is a no-op.
-- ARGV[1] events MAXLEN, [2] session events MAXLEN, [3..] outbox entries "<seq> <json>"
local C = {fb = FB, evmax = ARGV[1], sevmax = ARGV[2], ms = now_ms()}
local out = {}
for i = 3, #ARGV do
  local e = ARGV[i]
  local F = cjson.decode(string.sub(e, string.find(e, " ", 1, true) + 1))
  local ids = fleet_apply(C, F)
  out[#out + 1] = F.sid
  out[#out + 1] = F.inc .. ":" .. int(F.q)
  out[#out + 1] = table.concat(ids, ",")
end
return out
