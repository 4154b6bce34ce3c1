-- Fleet script: compare and set fleet documents of one namespace (and write their audit row) in
-- one atomic write; returns 0, writing nothing, when an expected value differs (a put expects
-- nothing). ARGV[1] events MAXLEN, [2] session events MAXLEN, [3] now, [4] ttl, [5] audit entry
-- JSON ([action, actor JSON, snapshot JSON, reason JSON, detail JSON, event data JSON]) or "" for
-- none, [6] namespace, [7] "1": the entry is a feed event only
-- (no audit row), [8] number of expected pairs E, then E key, expected pairs (expected: JSON
-- text, or "" for an absent key), then key, value pairs (value: JSON text, or "" to delete)
local H = K_fleet_docs(FB, ARGV[6])
local e = tonumber(ARGV[8])
local first = 9 + 2 * e
for i = 9, first - 1, 2 do
  local held = redis.call("HGET", H, ARGV[i])
  if held == false then held = "" end
  if held ~= ARGV[i + 1] then
    return 0
  end
end
for i = first, #ARGV, 2 do
  if ARGV[i + 1] == "" then
    redis.call("HDEL", H, ARGV[i])
  else
    redis.call("HSET", H, ARGV[i], ARGV[i + 1])
  end
end
if ARGV[5] ~= "" then
  local a = cjson.decode(ARGV[5])
  local C = {fb = FB, evmax = ARGV[1], sevmax = ARGV[2]}
  if ARGV[7] ~= "1" then
    fleet_audit(C, nil, "", ARGV[3], {a[1], a[2], a[3], a[4], a[5]})
  end
  fleet_event(C, nil, "", a[1], a[6], ARGV[3], tonumber(ARGV[4]))
end
return 1
