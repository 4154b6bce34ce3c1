-- Session script: versioned key-value writes (variables, memories).
-- ARGV[9] namespace, [10] event data, [11..] key, value JSON ("" deletes) pairs
local r = replay() if r then return r end
need()
local ns = ARGV[9]
local seq = int(tonumber(S.seq) + 1)
local kw, values, versions = K_kv_writes(B), K_kv_values(B, ns), K_kv_versions(B, ns)
local group = {ns}
local i = 0
for a = 11, #ARGV, 2 do
  local key, value = ARGV[a], ARGV[a + 1]
  i = i + 1
  local field = seq .. ":" .. int(i)
  local prev = redis.call("HGET", versions, key) or ""
  redis.call("HSET", kw, field, prev .. "|" .. value)
  redis.call("HSET", versions, key, field)
  if value == "" then redis.call("HDEL", values, key)
  else redis.call("HSET", values, key, value) end
  group[#group + 1] = key
end
redis.call("HSET", kw, seq, cjson.encode(group))
redis.call("RPUSH", K_live_kv_writes(B), seq)
add_to_list_field("nss", ns)
set("seq", seq, "updated", NOW)
event(ns, ARGV[10])
return done(S.epoch)
