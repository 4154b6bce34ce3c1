-- Fleet script: move expiry deadlines of sessions that are still alive.
-- pairs session id, milliseconds its keys still live: move its expiry deadline
local ms = now_ms()
for i = 1, #ARGV, 2 do
  redis.call("ZADD", K_expiry_index(FB), "XX", int(ms + tonumber(ARGV[i + 1])), ARGV[i])
end
return 1
