-- Session script: append chat messages to the live line.
-- ARGV[9] roles JSON, [10..] message JSON texts
local r = replay() if r then return r end
need()
local pos = S.msgs
local bodies = {}
for i = 10, #ARGV do bodies[#bodies + 1] = ARGV[i] end
append(bodies)
event("message", '{"count":' .. int(#bodies) .. ',"pos":' .. pos .. ',"roles":' .. ARGV[9] .. '}')
return done(S.epoch)
