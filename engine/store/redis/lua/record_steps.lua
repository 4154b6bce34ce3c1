-- Session script: record steps that already ended (no write-ahead snapshot), in order, as
-- begin_step then end_step would; none can be late. Nothing is written (reply "null") when the
-- session's step count or epoch is no longer what the caller numbered the steps from.
-- ARGV[9] expected step count, [10] expected epoch, [11] documents' namespace ("" none), [12] m,
-- then m key, value JSON ("" deletes) pairs of documents set in the same write, then five per
-- step: step record JSON, compensation field ("" none; its mark already final), outcome JSON,
-- status, verdict JSON or ""
local r = replay() if r then return r end
need()
if tonumber(S.steps) ~= tonumber(ARGV[9]) or tonumber(S.epoch) ~= tonumber(ARGV[10]) then
  return {"null", ""}
end
local after_docs = 13 + 2 * tonumber(ARGV[12])
if ARGV[11] ~= "" then doc_put(ARGV[11], argv_slice(13, after_docs - 1)) end
local T, L = K_steps(B), K_live_steps(B)
local seq, n = tonumber(S.seq), tonumber(S.steps)
local first = int(n + 1)
local status, verdict, loops = S.status, nil, tonumber(S.loops)
local open = S.loop == "1"  -- inside a loop episode
for i = after_docs, #ARGV, 5 do
  seq, n = seq + 1, n + 1
  local sn = int(n)
  redis.call("HSET", T, sn, "[" .. int(seq) .. "," .. S.epoch .. ",null," .. ARGV[i] .. "]",
             sn .. "e", "[0," .. ARGV[i + 2] .. "]")
  redis.call("RPUSH", L, sn)
  if ARGV[i + 1] ~= "" then redis.call("HSET", T, sn .. "c", ARGV[i + 1]) end
  local looping = ARGV[i + 4] ~= ""
  if looping then
    status, verdict, loops = "looping", ARGV[i + 4], loops + 1
  elseif ARGV[i + 3] == "ok" and status ~= "stopped" then
    status = "healthy"
  end
  event("step", '{"late":false,"looping":' .. (looping and "true" or "false") .. ',"n":' .. sn
        .. ',"status":' .. cjson.encode(ARGV[i + 3]) .. '}')
  if looping and not open then  -- as end_step: a loop episode starts
    event("loop", '{"n":' .. sn .. '}')
  end
  if looping then open = true elseif ARGV[i + 3] == "ok" then open = false end
end
if open ~= (S.loop == "1") then set("loop", open and "1" or "0") end
if verdict then
  keep()
  set("verdict", verdict, "loops", int(loops))
end
set("seq", int(seq), "steps", int(n), "status", status, "updated", NOW)
return done(first)
