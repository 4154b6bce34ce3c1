-- Session script: set or delete unversioned documents.
-- ARGV[9] namespace, [10..] key, value JSON ("" deletes) pairs; unversioned, no event
local r = replay() if r then return r end
need()
local ns = ARGV[9]
local values, order = K_doc_values(B, ns), K_doc_keys(B, ns)
for a = 10, #ARGV, 2 do
  if ARGV[a + 1] == "" then
    redis.call("HDEL", values, ARGV[a])
    redis.call("ZREM", order, ARGV[a])
  else
    redis.call("HSET", values, ARGV[a], ARGV[a + 1])
    redis.call("ZADD", order, 0, ARGV[a])
  end
end
add_to_list_field("dns", ns)
set("updated", NOW)
return done("")
