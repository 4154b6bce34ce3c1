-- Session script: start a guarded step, after a write-ahead snapshot when asked.
-- ARGV[9] "1" to take a write-ahead snapshot, [10] its label JSON, [11] keep named,
-- [12] keep step snapshots, [13] step record JSON, [14] compensation ("" none)
local r = replay() if r then return r end
need()
local seq = tonumber(S.seq)
local snap = "null"
if ARGV[9] == "1" then
  seq = seq + 1
  snap = '"' .. snapshot(seq, ARGV[10], "step", tonumber(ARGV[11]), tonumber(ARGV[12])) .. '"'
end
seq = seq + 1
local n = int(tonumber(S.steps) + 1)
local T = K_steps(B)
redis.call("HSET", T, n, "[" .. int(seq) .. "," .. S.epoch .. "," .. snap .. "," .. ARGV[13] .. "]")
redis.call("RPUSH", K_live_steps(B), n)
if ARGV[14] ~= "" then redis.call("HSET", T, n .. "c", ARGV[14]) end
set("seq", int(seq), "steps", n, "updated", NOW)
return done("[" .. n .. "," .. S.epoch .. "," .. snap .. "," .. int(seq) .. "]", true)
