-- Fleet script: the time after which the feed's "loop" events are complete (Store.loops). The
-- first call of a release that writes them sets it: the newest event's time (an older release
-- wrote the feed up to it), or -inf on a store without events.
local k = K_loops_from(FB)
local v = redis.call("GET", k)
if v then return v end
v = "-inf"
local last = redis.call("XREVRANGE", K_events(FB), "+", "-", "COUNT", 1)[1]
if last then
  local f = last[2]
  for i = 1, #f, 2 do
    if f[i] == "a" then v = f[i + 1] end
  end
end
redis.call("SET", k, v)
return v
