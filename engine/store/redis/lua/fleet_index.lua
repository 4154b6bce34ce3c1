-- Fleet script: (re-)index one session (the doctor).
-- ARGV[1] session id, [2] index entry, [3] updated_at, [4] seconds left to live (0: never)
local C = {fb = FB, ms = now_ms()}
fleet_index(C, ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]))
return 1
