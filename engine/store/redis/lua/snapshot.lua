-- Session script: take a snapshot of the live line.
-- ARGV[9] label JSON, [10] kind, [11] keep named, [12] keep step snapshots
local r = replay() if r then return r end
need()
local seq = tonumber(S.seq) + 1
local id, parent, next_step = snapshot(seq, ARGV[9], ARGV[10], tonumber(ARGV[11]),
                                       tonumber(ARGV[12]))
set("seq", int(seq), "updated", NOW)
event("snapshot", '{"id":"' .. id .. '","kind":"' .. ARGV[10] .. '","label":' .. ARGV[9] .. '}')
return done('["' .. id .. '",' .. parent .. ',' .. S.msgs .. ',' .. int(next_step) .. ']')
