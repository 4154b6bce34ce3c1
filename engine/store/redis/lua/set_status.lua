-- Session script: set the status (and a loop verdict).
-- ARGV[9] status, [10] verdict JSON or ""
local r = replay() if r then return r end
need()
if ARGV[10] ~= "" then
  set("status", ARGV[9], "verdict", ARGV[10], "loops", int(tonumber(S.loops) + 1), "updated", NOW)
else
  set("status", ARGV[9], "updated", NOW)
end
if ARGV[10] ~= "" or ARGV[9] ~= "healthy" then keep() end
event("status", '{"status":' .. cjson.encode(ARGV[9]) .. '}')
return done("")
