-- Fleet script: record what a purge (retention) removed.
-- ARGV[1] events MAXLEN, [2] session events MAXLEN, [3] now, [4] counts JSON,
-- [5] audit detail JSON, [6] reason JSON, [7..] branch index members to drop
local C = {fb = FB, evmax = ARGV[1], sevmax = ARGV[2]}
for i = 7, #ARGV do redis.call("ZREM", K_branch_index(FB), ARGV[i]) end
fleet_audit(C, nil, nil, ARGV[3], {"retention", '"retention"', "null", ARGV[6], ARGV[5]})
fleet_event(C, nil, nil, "retention", ARGV[4], ARGV[3], 0)
return 1
