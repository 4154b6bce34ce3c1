-- Read script: step records (live only, or the newest N).
-- ARGV[1] "1" live steps only, ARGV[2] newest N or ""
local T = K_steps(B)
local last = ARGV[2] ~= "" and tonumber(ARGV[2]) or nil
local numbers = {}
if last == 0 then return {} end
if ARGV[1] == "1" then
  numbers = redis.call("LRANGE", K_live_steps(B), last and -last or 0, -1)
elseif last then
  local n = tonumber(redis.call("HGET", K_session_hash(B), "steps") or "0")
  local found = {}
  while n > 0 and #found < last do
    if redis.call("HEXISTS", T, int(n)) == 1 then found[#found + 1] = int(n) end
    n = n - 1
  end
  for i = #found, 1, -1 do numbers[#numbers + 1] = found[i] end
else
  return redis.call("HGETALL", T)
end
local out = {}
for _, n in ipairs(numbers) do
  local r = redis.call("HMGET", T, n, n .. "e", n .. "b", n .. "c")
  if r[1] then
    out[#out + 1] = n
    out[#out + 1] = r[1]
    if r[2] then out[#out + 1] = n .. "e" out[#out + 1] = r[2] end
    if r[3] then out[#out + 1] = n .. "b" out[#out + 1] = r[3] end
    if r[4] then out[#out + 1] = n .. "c" out[#out + 1] = r[4] end
  end
end
return out
