-- Session script: make a snapshot the head; what came after becomes an abandoned branch.
-- ARGV[9] target snapshot id, [10] actor JSON, [11] reason JSON, [12] notice message JSON or "",
-- [13] notice text JSON, [14] expected epoch or "", [15] "fork" for a fork (status and rollback
-- count unchanged, audited as a fork) else a rollback, [16] bulk rollback batch id or ""
local r = replay() if r then return r end
need()
if ARGV[14] ~= "" and S.epoch ~= ARGV[14] then fail("EPOCH_MOVED", S.epoch) end
local target = ARGV[9]
local P = K_snapshots(B)
local sseq = string.match(target, "^snap%-(%d+)$")
local rec = sseq and redis.call("HGET", P, sseq)
if not rec then fail("UNKNOWN_SNAPSHOT") end
local abandoned_in = redis.call("HGET", P, sseq .. "b")
if abandoned_in then fail("ABANDONED", abandoned_in) end
local smsgs, snext, kind = string.match(rec, '^%[(%d+),(%d+),"([^"]*)"')
if not redis.call("ZSCORE", K_restorable(B, kind), sseq) then fail("RETIRED") end
local fork = ARGV[15] == "fork"

-- a rollback must abandon something: a message, step, snapshot or key-value write (variable or
-- memory) on the live line after the target; else it is refused before any write
local function newer_than(list, bound)
  local last = redis.call("LINDEX", list, -1)
  return last and tonumber(last) >= bound
end
if not fork and tonumber(S.msgs) <= tonumber(smsgs)
    and not newer_than(K_live_steps(B), tonumber(snext))
    and not newer_than(K_live_snapshots(B), tonumber(sseq) + 1)
    and not newer_than(K_live_kv_writes(B), tonumber(sseq) + 1) then
  fail("NOTHING")
end

-- everything checked: from here on the script only writes
local seq = tonumber(S.seq) + 1
local branch = "branch-" .. int(seq)
local epoch = int(tonumber(S.epoch) + 1)
local items = {}
local cut = tonumber(sseq)

-- messages newer than the snapshot
local ml, ma = K_live_messages(B), K_abandoned_messages(B)
local n_messages = tonumber(S.msgs) - tonumber(smsgs)
for _ = 1, n_messages do
  local m = redis.call("RPOP", ml)
  local mseq = string.match(m, "^%[(%d+),")
  redis.call("HSET", ma, mseq, branch .. " " .. m)
  items[#items + 1] = "m" .. mseq
end

-- steps begun after it, newest first; ok side effects get their compensation queued
local T, tl = K_steps(B), K_live_steps(B)
local first_step = tonumber(snext)
local n_steps, comps = 0, {}
while true do
  local last = redis.call("LINDEX", tl, -1)
  if not last or tonumber(last) < first_step then break end
  redis.call("RPOP", tl)
  redis.call("HSET", T, last .. "b", branch)
  items[#items + 1] = "t" .. last
  n_steps = n_steps + 1
  local comp = redis.call("HGET", T, last .. "c")
  if comp and string.sub(comp, 1, 1) == "k" then comps[#comps + 1] = {last, string.sub(comp, 2)} end
end

-- snapshots taken after it
local pl = K_live_snapshots(B)
local n_snaps = 0
while true do
  local last = redis.call("LINDEX", pl, -1)
  if not last or tonumber(last) <= cut then break end
  redis.call("RPOP", pl)
  redis.call("HSET", P, last .. "b", branch)
  redis.call("ZREM", K_restorable(B, snapshot_kind(redis.call("HGET", P, last))), last)
  items[#items + 1] = "p" .. last
  n_snaps = n_snaps + 1
end

-- key-value writes after it, undone newest first
local kw, kl = K_kv_writes(B), K_live_kv_writes(B)
local touched = {}
while true do
  local last = redis.call("LINDEX", kl, -1)
  if not last or tonumber(last) <= cut then break end
  redis.call("RPOP", kl)
  local group = cjson.decode(redis.call("HGET", kw, last))
  local ns = group[1]
  local values, versions = K_kv_values(B, ns), K_kv_versions(B, ns)
  for i = 2, #group do
    local key = group[i]
    local w = redis.call("HGET", kw, last .. ":" .. int(i - 1))
    local prev = string.match(w, "^([^|]*)|")
    if prev == "" then
      redis.call("HDEL", values, key)
      redis.call("HDEL", versions, key)
    else
      local pw = redis.call("HGET", kw, prev)
      local value = string.sub(pw, string.find(pw, "|", 1, true) + 1)
      if value == "" then redis.call("HDEL", values, key)
  else redis.call("HSET", values, key, value) end
      redis.call("HSET", versions, key, prev)
    end
    touched[ns .. "\0" .. key] = {ns, key}
  end
  items[#items + 1] = "k" .. last
end
local n_memories = 0
for _, t in pairs(touched) do
  if t[1] == "mem" and redis.call("HEXISTS", K_kv_versions(B, "mem"), t[2]) == 0 then
    n_memories = n_memories + 1
  end
end

redis.call("HSET", K_branches(B), branch, "[" .. int(seq) .. "," .. epoch .. "," ..
           cjson.encode(target) .. "," .. ARGV[10] .. "," .. ARGV[11] .. "," .. NOW .. "]")
redis.call("HSET", K_branch_items(B), branch, table.concat(items, " "))
redis.call("ZADD", K_branches_by_epoch(B), epoch, branch)
-- a stopped session stays stopped: a rollback repairs it, it does not restart it
local status = (fork or S.status == "stopped") and S.status or "rolled_back"
if not fork and S.loop == "1" then set("loop", "0") end  -- a rollback ends a loop episode
set("seq", int(seq), "epoch", epoch, "head", target, "msgs", smsgs, "status", status,
    "rollbacks", fork and S.rollbacks or int(tonumber(S.rollbacks) + 1), "updated", NOW)

local notice = "null"
if ARGV[12] ~= "" then
  append({ARGV[12]})
  notice = ARGV[13]
end
local names, queued = {}, {}
for _, c in ipairs(comps) do
  local nl = string.find(c[2], "\n", 1, true)
  names[#names + 1] = string.sub(c[2], 1, nl - 1)
  queued[#queued + 1] = "[" .. c[1] .. "," .. string.sub(c[2], 1, nl - 1) .. "," ..
                        string.sub(c[2], nl + 1) .. "]"
  F.co[#F.co + 1] = {c[1], c[2], branch, S.inc}
end
local counts = '"epoch":' .. epoch .. ',"messages":' .. int(n_messages) .. ',"notice":' ..
               notice .. ',"snapshots":' .. int(n_snaps) .. ',"steps":' .. int(n_steps)
local detail = '{"branch":"' .. branch .. '","compensations":[' .. table.concat(names, ",") ..
               '],' .. counts .. '}'
if ARGV[16] ~= "" then
  detail = '{"batch":' .. cjson.encode(ARGV[16]) .. ',' .. string.sub(detail, 2)
end
local target_json = cjson.encode(target)
local action = fork and "fork" or "rollback"
audit(action, ARGV[10], target_json, ARGV[11], detail)
event(action, '{"actor":' .. ARGV[10] .. ',"target":' .. target_json .. "," ..
      string.sub(detail, 2))
if ARGV[12] ~= "" then
  local said = '{"text":' .. notice .. '}'
  if ARGV[16] ~= "" then
    said = '{"batch":' .. cjson.encode(ARGV[16]) .. ',"text":' .. notice .. '}'
  end
  audit("notice", ARGV[10], target_json, ARGV[11], said)
end
F.br[1] = {branch, NOW}
return done('{"branch":"' .. branch .. '",' .. counts .. ',"memories":' .. int(n_memories) ..
            ',"incarnation":' .. cjson.encode(S.inc) ..
            ',"compensations":[' .. table.concat(queued, ",") .. ']}')
