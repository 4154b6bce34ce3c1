-- Session script: delete abandoned branches (retention).
-- ARGV[9] "1" for a dry run (count, delete nothing), [10..] branch ids; deletes what they hold
-- (retention; not activity: no TTL refresh). Returns the counts and the ids of the branches
-- that went (or would go).
local dry = ARGV[9] == "1"
local T, P, kw = K_steps(B), K_snapshots(B), K_kv_writes(B)
local ma, b, bi, bz = K_abandoned_messages(B), K_branches(B), K_branch_items(B),
                      K_branches_by_epoch(B)
local counts = {branches = 0, messages = 0, steps = 0, snapshots = 0, kv_writes = 0}
local gone = {}
-- delete field `id` of hash `key` (count it, on a dry run), returns 1 if it existed
local function drop(key, id)
  if dry then return redis.call("HEXISTS", key, id) end
  return redis.call("HDEL", key, id)
end
for a = 10, #ARGV do
  local branch = ARGV[a]
  if redis.call("HEXISTS", b, branch) == 1 then
    for item in string.gmatch(redis.call("HGET", bi, branch) or "", "%S+") do
      local kind, id = string.sub(item, 1, 1), string.sub(item, 2)
      if kind == "m" then
        counts.messages = counts.messages + drop(ma, id)
      elseif kind == "t" then
        counts.steps = counts.steps + drop(T, id)
        if not dry then redis.call("HDEL", T, id .. "e", id .. "b", id .. "c") end
      elseif kind == "p" then
        counts.snapshots = counts.snapshots + drop(P, id)
        if not dry then redis.call("HDEL", P, id .. "b") end
      elseif kind == "k" then
        local group = redis.call("HGET", kw, id)
        if group then
          local n = #cjson.decode(group) - 1
          if not dry then
            for i = 1, n do redis.call("HDEL", kw, id .. ":" .. int(i)) end
            redis.call("HDEL", kw, id)
          end
          counts.kv_writes = counts.kv_writes + n
        end
      end
    end
    if not dry then
      redis.call("HDEL", b, branch)
      redis.call("HDEL", bi, branch)
      redis.call("ZREM", bz, branch)
    end
    counts.branches = counts.branches + 1
    gone[#gone + 1] = branch
  end
end
counts.gone = gone
return cjson.encode(counts)
