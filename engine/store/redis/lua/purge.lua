-- Session script: delete abandoned branches (retention).
-- ARGV[9..] branch ids; deletes what they hold (retention; not activity: no TTL refresh)
local T, P, kw = K_steps(B), K_snapshots(B), K_kv_writes(B)
local ma, b, bi, bz = K_abandoned_messages(B), K_branches(B), K_branch_items(B),
                      K_branches_by_epoch(B)
local counts = {branches = 0, messages = 0, steps = 0, snapshots = 0, kv_writes = 0}
for a = 9, #ARGV do
  local branch = ARGV[a]
  if redis.call("HEXISTS", b, branch) == 1 then
    for item in string.gmatch(redis.call("HGET", bi, branch) or "", "%S+") do
      local kind, id = string.sub(item, 1, 1), string.sub(item, 2)
      if kind == "m" then
        counts.messages = counts.messages + redis.call("HDEL", ma, id)
      elseif kind == "t" then
        counts.steps = counts.steps + redis.call("HDEL", T, id)
        redis.call("HDEL", T, id .. "e", id .. "b", id .. "c")
      elseif kind == "p" then
        counts.snapshots = counts.snapshots + redis.call("HDEL", P, id)
        redis.call("HDEL", P, id .. "b")
      elseif kind == "k" then
        local group = redis.call("HGET", kw, id)
        if group then
          local n = #cjson.decode(group) - 1
          for i = 1, n do redis.call("HDEL", kw, id .. ":" .. int(i)) end
          redis.call("HDEL", kw, id)
          counts.kv_writes = counts.kv_writes + n
        end
      end
    end
    redis.call("HDEL", b, branch)
    redis.call("HDEL", bi, branch)
    redis.call("ZREM", bz, branch)
    counts.branches = counts.branches + 1
  end
end
return cjson.encode(counts)
