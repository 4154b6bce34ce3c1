-- Session script: an operator's decision on a session waiting for on-call (release or stop),
-- with its note and audit row; refused before any write unless the session waits undecided.
-- ARGV[9] kind (released | stopped), [10] actor JSON, [11] reason JSON, [12] decision JSON,
-- [13] note message JSON or "", [14] audit action, [15] audit detail JSON, [16] event data
-- JSON, [17] roles JSON of the note
local r = replay() if r then return r end
need()
local v = (S.verdict or "") ~= "" and cjson.decode(S.verdict) or nil
if v and v.waiting == true and type(v.decision) == "table" then
  fail("DECIDED", tostring(v.decision.kind) .. " " .. tostring(v.decision.actor))
end
if S.status ~= "looping" or not v or v.waiting ~= true then fail("NOT_WAITING", S.status) end
-- the stored verdict is a JSON object: the decision is added as its last key, the rest kept
-- byte for byte (a decode and encode round trip would turn [] into {})
local decided = string.sub(S.verdict, 1, -2) .. ',"decision":' .. ARGV[12] .. "}"
if ARGV[13] ~= "" then
  local pos = S.msgs
  append({ARGV[13]})
  event("message", '{"count":1,"pos":' .. pos .. ',"roles":' .. ARGV[17] .. '}')
end
set("verdict", decided, "updated", NOW)
-- released: the operator judged the loop, the session runs again; stopped: it runs no more
local status = ARGV[9] == "stopped" and "stopped" or "healthy"
set("status", status)
event("status", '{"status":"' .. status .. '"}')
audit(ARGV[14], ARGV[10], "null", ARGV[11], ARGV[15])
event(ARGV[14], ARGV[16])
return done(decided)
