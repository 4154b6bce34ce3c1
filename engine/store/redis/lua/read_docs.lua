-- Read script: documents by key, by key prefix, or both.
-- ARGV[1] namespace, ARGV[2] "keys" then keys, "scan" then a key prefix, or "both" then a key
-- prefix and keys (the documents under the prefix and those keys, in one read)
local values = K_doc_values(B, ARGV[1])
local wanted = {}
local first = 3
if ARGV[2] == "scan" or ARGV[2] == "both" then
  wanted = redis.call("ZRANGEBYLEX", K_doc_keys(B, ARGV[1]), "[" .. ARGV[3],
                      "(" .. ARGV[3] .. "\255")
  first = 4
end
if ARGV[2] ~= "scan" then
  for i = first, #ARGV do wanted[#wanted + 1] = ARGV[i] end
end
local out = {}
for start = 1, #wanted, 1000 do
  local chunk = {}
  for i = start, math.min(start + 999, #wanted) do chunk[#chunk + 1] = wanted[i] end
  local got = redis.call("HMGET", values, unpack(chunk))
  for i, k in ipairs(chunk) do
    if got[i] then out[#out + 1] = k out[#out + 1] = got[i] end
  end
end
return out
