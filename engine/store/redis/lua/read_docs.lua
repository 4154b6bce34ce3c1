-- Read script: documents by key or by key prefix.
-- ARGV[1] namespace, ARGV[2] "keys" then keys, or "scan" then a key prefix
local values = K_doc_values(B, ARGV[1])
local wanted = {}
if ARGV[2] == "scan" then
  wanted = redis.call("ZRANGEBYLEX", K_doc_keys(B, ARGV[1]), "[" .. ARGV[3],
                      "(" .. ARGV[3] .. "\255")
else
  for i = 3, #ARGV do wanted[#wanted + 1] = ARGV[i] end
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
