-- Session script: append a recovery notice and audit it.
-- ARGV[9] message JSON, [10] actor JSON, [11] text JSON
local r = replay() if r then return r end
need()
append({ARGV[9]})
audit("notice", ARGV[10], "null", "null", '{"text":' .. ARGV[11] .. '}')
event("notice", '{"actor":' .. ARGV[10] .. '}')
return done(S.epoch)
