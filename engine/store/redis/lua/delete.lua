-- Session script: delete a session.
-- ARGV[9] (retention) "" or a time: delete only a session without evidence last changed
-- before it ("k": kept as evidence, "y": changed since; nothing written then)
-- deletes every key of the session; the fleet views forget it (the feed and audit stay)
if not load() then return {"0", ""} end
if (ARGV[9] or "") ~= "" then
  if S.keep == "1" then return {"k", ""} end
  if tonumber(S.updated) >= tonumber(ARGV[9]) then return {"y", ""} end
end
local gone = {}
for _, b in ipairs(redis.call("HKEYS", K_branches(B))) do gone[#gone + 1] = b end
local q = tonumber(S.fxq or "0") + 1
local inc = S.inc
local backlog = MODE ~= "i" and redis.call("LRANGE", K_fleet_outbox(B), 0, -1) or {}
for _, k in ipairs(session_keys()) do redis.call("DEL", k) end
F.sid, F.enc, F.t, F.ttl, F.gone = SID, ENC, NOW, TTL, gone
event("deleted", "{}")
if MODE == "i" then
  fleet_apply({fb = FB, evmax = EV_MAX, sevmax = SEV_MAX, ms = now_ms()}, F)
  return {"1", ""}
end
F.inc, F.q = inc, q
local reply = {"1", ""}
for _, e in ipairs(backlog) do reply[#reply + 1] = e end
reply[#reply + 1] = int(q) .. " " .. cjson.encode(F)
return reply
