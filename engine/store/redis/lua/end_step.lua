-- Session script: record a step's outcome (late when a rollback cut its branch meanwhile).
-- ARGV[9] step number, [10] ticket epoch, [11] status, [12] outcome JSON, [13] verdict JSON or ""
local r = replay() if r then return r end
need()
local n, status, verdict = ARGV[9], ARGV[11], ARGV[13]
local late = S.epoch ~= ARGV[10]
local T = K_steps(B)
if redis.call("HEXISTS", T, n) == 1 then
  -- a late step belongs to the first branch cut after it began
  local first = late and redis.call("ZRANGEBYSCORE", K_branches_by_epoch(B), "(" .. ARGV[10],
                                    "+inf", "LIMIT", 0, 1)[1]
  if first and not redis.call("HGET", T, n .. "b") then
    redis.call("HSET", T, n .. "b", first)
    redis.call("LREM", K_live_steps(B), -1, n)
    local bi = K_branch_items(B)
    local items = redis.call("HGET", bi, first) or ""
    redis.call("HSET", bi, first, items == "" and ("t" .. n) or (items .. " t" .. n))
  end
  redis.call("HSET", T, n .. "e", "[" .. (late and "1" or "0") .. "," .. ARGV[12] .. "]")
  local comp = redis.call("HGET", T, n .. "c")
  if comp and string.sub(comp, 1, 1) == "r" then
    -- "k": a rollback of the live line will compensate it; a late side effect happened off
    -- the live line, so its compensation is queued now
    local mark = (not late and status == "ok") and "k" or "x"
    redis.call("HSET", T, n .. "c", mark .. string.sub(comp, 2))
    if late and status == "ok" then
      F.co[#F.co + 1] = {n, string.sub(comp, 2), first or "", S.inc}
    end
  end
end
if verdict ~= "" then keep() end
if late then
  set("updated", NOW)
elseif verdict ~= "" then
  set("status", "looping", "verdict", verdict, "loops", int(tonumber(S.loops) + 1), "updated", NOW)
elseif status == "ok" then
  if S.status ~= "stopped" then set("status", "healthy") end
  if S.loop == "1" then set("loop", "0") end  -- the loop episode ends
  set("updated", NOW)
else
  set("updated", NOW)
end
event("step", '{"late":' .. (late and "true" or "false") .. ',"looping":' ..
      (verdict ~= "" and "true" or "false") .. ',"n":' .. n .. ',"status":' ..
      cjson.encode(status) .. '}')
if verdict ~= "" and not late and S.loop ~= "1" then  -- a loop episode starts
  set("loop", "1")
  event("loop", '{"n":' .. n .. '}')
end
return done(late and "1" or "0")
