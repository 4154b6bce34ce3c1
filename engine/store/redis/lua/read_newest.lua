-- Read script: the newest ARGV[3] snapshots on the live line of kind ARGV[1] whose label starts
-- with ARGV[2], newest first, walking back from the newest: {id, label, id, label, ...}.
local list, records = K_live_snapshots(B), K_snapshots(B)
local kind, prefix, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
local found = {}
local at = redis.call("LLEN", list) - 1
while at >= 0 do
  local seqs = redis.call("LRANGE", list, math.max(at - 63, 0), at)
  for i = #seqs, 1, -1 do
    local rec = redis.call("HGET", records, seqs[i])
    if rec and string.match(rec, '^%[%d+,%d+,"([^"]*)"') == kind then
      local label = cjson.decode(rec)[5]
      if type(label) == "string" and string.sub(label, 1, #prefix) == prefix then
        found[#found + 1] = "snap-" .. seqs[i]
        found[#found + 1] = label
        if #found >= 2 * limit then return found end
      end
    end
  end
  at = at - 64
end
return found
