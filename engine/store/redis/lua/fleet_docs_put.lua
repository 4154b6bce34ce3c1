-- Fleet script: set fleet documents of one namespace in one atomic write.
-- ARGV[1] namespace, then key, value pairs (value: JSON text, or "" to delete the key)
local H = K_fleet_docs(FB, ARGV[1])
for i = 2, #ARGV, 2 do
  if ARGV[i + 1] == "" then
    redis.call("HDEL", H, ARGV[i])
  else
    redis.call("HSET", H, ARGV[i], ARGV[i + 1])
  end
end
return 1
