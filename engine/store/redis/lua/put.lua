-- Session script: versioned key-value writes (variables, memories).
-- ARGV[9] namespace, [10] event data, [11..] key, value JSON ("" deletes) pairs
local r = replay() if r then return r end
need()
kv_put(ARGV[9], argv_slice(11, #ARGV), ARGV[10])
return done(S.epoch)
