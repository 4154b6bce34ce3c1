-- Fleet script: set fleet documents of one namespace, and write their audit row, in one atomic
-- write.
-- ARGV[1] events MAXLEN, [2] session events MAXLEN, [3] now, [4] ttl, [5] audit entry JSON
-- ([action, actor JSON, snapshot JSON, reason JSON, detail JSON, event data JSON]) or "" for
-- none, [6] namespace, then key, value pairs (value: JSON text, or "" to delete the key)
local H = K_fleet_docs(FB, ARGV[6])
for i = 7, #ARGV, 2 do
  if ARGV[i + 1] == "" then
    redis.call("HDEL", H, ARGV[i])
  else
    redis.call("HSET", H, ARGV[i], ARGV[i + 1])
  end
end
if ARGV[5] ~= "" then
  local a = cjson.decode(ARGV[5])
  local C = {fb = FB, evmax = ARGV[1], sevmax = ARGV[2]}
  fleet_audit(C, nil, "", ARGV[3], {a[1], a[2], a[3], a[4], a[5]})
  fleet_event(C, nil, "", a[1], a[6], ARGV[3], tonumber(ARGV[4]))
end
return 1
