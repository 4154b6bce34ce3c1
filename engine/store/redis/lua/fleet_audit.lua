-- Fleet script: an audit event (and its feed event) without a session write.
-- ARGV[1] events MAXLEN, [2] session events MAXLEN, [3] now, [4] session ("" none), [5] encoded,
-- [6] action, [7] actor JSON, [8] snapshot JSON, [9] reason JSON, [10] detail JSON,
-- [11] event data JSON, [12] ttl
local C = {fb = FB, evmax = ARGV[1], sevmax = ARGV[2]}
local sid = ARGV[4] ~= "" and ARGV[4] or nil
fleet_audit(C, sid, ARGV[5], ARGV[3], {ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]})
fleet_event(C, sid, ARGV[5], ARGV[6], ARGV[11], ARGV[3], tonumber(ARGV[12]))
return 1
