-- Session script: an audit event about an existing session (and its feed event); the session
-- becomes evidence (`done`). Returns "0" without writing when the session does not exist.
-- ARGV[9] action, [10] actor JSON, [11] snapshot JSON, [12] reason JSON, [13] detail JSON,
-- [14] event data JSON
local r = replay() if r then return r end
if not load() then return {"0", ""} end
audit(ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13])
event(ARGV[9], ARGV[14])
return done("1")
