-- Prologue of every session script (KEYS[1] session base, KEYS[2] fleet base on a single
-- Redis; ARGV[1..8] request id, now, ttl, sid, encoded sid, mode, MAXLENs): load the
-- session, replay a retried request, and `done`, which ends every write.
local B, FB = KEYS[1], KEYS[2]
local RID, NOW, TTL, SID, ENC, MODE = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6]
local EV_MAX, SEV_MAX = ARGV[7], ARGV[8]
local SK = K_session_hash(B)
local OUTBOX_BATCH = @OUTBOX_BATCH@
local S = nil
local F = {ev = {}, au = {}, co = {}, br = {}}

local function load()
  local flat = redis.call("HGETALL", SK)
  if #flat == 0 then return false end
  S = {}
  for i = 1, #flat, 2 do S[flat[i]] = flat[i + 1] end
  return true
end

local function need()
  if not load() then fail("UNKNOWN_SESSION") end
end

local function set(...)
  local args = {...}
  for i = 1, #args, 2 do S[args[i]] = args[i + 1] end
  redis.call("HSET", SK, ...)
end

local function event(kind, data) F.ev[#F.ev + 1] = {kind, data} end
local function audit(action, actor, snap, reason, detail)
  F.au[#F.au + 1] = {action, actor, snap, reason, detail}
end

local function add_to_list_field(field, value)
  for v in string.gmatch(S[field] or "", "[^,]+") do
    if v == value then return end
  end
  set(field, (S[field] or "") == "" and value or (S[field] .. "," .. value))
end

local function session_keys()
  local ks = {}
  for _, fn in ipairs(SESSION_KEY_FUNCTIONS) do ks[#ks + 1] = fn(B) end
  for kind in string.gmatch(S.kinds or "", "[^,]+") do ks[#ks + 1] = K_restorable(B, kind) end
  for ns in string.gmatch(S.nss or "", "[^,]+") do
    ks[#ks + 1] = K_kv_values(B, ns)
    ks[#ks + 1] = K_kv_versions(B, ns)
  end
  for ns in string.gmatch(S.dns or "", "[^,]+") do
    ks[#ks + 1] = K_doc_values(B, ns)
    ks[#ks + 1] = K_doc_keys(B, ns)
  end
  return ks
end

-- Retention (see engine.store.redis.store): the TTL applies only to a session without evidence.
-- `keep` marks a session as evidence, for good; `touch` (end of every write) then removes the
-- TTL of every key of the session, in the same script as the write that made it evidence.
local function keep()
  if S.keep ~= "1" then set("keep", "1") end
end

-- Expire every key of the session together, so no key outlives the others.
local function touch()
  if TTL > 0 and S.keep ~= "1" then
    for _, k in ipairs(session_keys()) do redis.call("EXPIRE", k, TTL) end
    if S.ttl ~= ARGV[3] then redis.call("HSET", SK, "ttl", ARGV[3]) S.ttl = ARGV[3] end
  elseif S.ttl and S.ttl ~= "0" then
    for _, k in ipairs(session_keys()) do redis.call("PERSIST", k) end
    redis.call("HSET", SK, "ttl", "0")
    S.ttl = "0"
  end
end

local function replay()
  if RID == "" then return nil end
  local cached = redis.call("HGET", K_requests(B), RID)
  if not cached then return nil end
  local nl = string.find(cached, "\n", 1, true)
  local reply = {string.sub(cached, nl + 1), string.sub(cached, 1, nl - 1)}
  if MODE ~= "i" then
    for _, e in ipairs(redis.call("LRANGE", K_fleet_outbox(B), 0, OUTBOX_BATCH - 1)) do
      reply[#reply + 1] = e
    end
  end
  return reply
end

local function remember(result, extra)
  if RID == "" then return end
  redis.call("HSET", K_requests(B), RID, extra .. "\n" .. result)
  local order = K_request_order(B)
  redis.call("RPUSH", order, RID)
  if redis.call("LLEN", order) > 32 then
    redis.call("HDEL", K_requests(B), redis.call("LPOP", order))
  end
end

local function index_entry()
  local entry = "st:" .. S.status
  if (S.ix or "") ~= "" then entry = entry .. "\n" .. S.ix end
  return entry
end

-- End of every session write: fleet views (inline, or via the outbox), request id, TTL.
-- `quiet`: a change whose only fleet effect is the activity time, which the caller's next
-- write (end_step after begin_step) supersedes; on Redis Cluster it makes no outbox entry.
-- An audit event or a queued compensation makes the session evidence (its targets stay).
local function done(result, quiet)
  if #F.au > 0 or #F.co > 0 then keep() end
  F.sid, F.enc, F.t, F.u, F.ix = SID, ENC, NOW, S.updated, index_entry()
  F.ttl = S.keep == "1" and 0 or TTL
  local reply
  if MODE == "i" then
    local C = {fb = FB, evmax = EV_MAX, sevmax = SEV_MAX, ms = now_ms()}
    reply = {result, table.concat(fleet_apply(C, F), ",")}
  else
    local fx = K_fleet_outbox(B)
    local inc, ack = string.match(MODE, "^c(.*):(%d+)$")
    if inc and inc == S.inc then
      ack = tonumber(ack)
      while true do
        local head = redis.call("LINDEX", fx, 0)
        if not head or tonumber(string.match(head, "^(%d+) ")) > ack then break end
        redis.call("LPOP", fx)
      end
    end
    reply = {result, ""}
    if not quiet then
      F.inc = S.inc
      F.q = redis.call("HINCRBY", SK, "fxq", 1)
      redis.call("RPUSH", fx, int(F.q) .. " " .. cjson.encode(F))
      -- oldest first and in order: an entry applied past a gap would hide the gap for good
      for _, e in ipairs(redis.call("LRANGE", fx, 0, OUTBOX_BATCH - 1)) do
        reply[#reply + 1] = e
      end
    end
  end
  remember(reply[1], reply[2])
  touch()
  return reply
end

local function summary()
  return cjson.encode(S)
end

-- Append chat messages (JSON texts) to the live line.
local function append(bodies)
  local seq, msgs = tonumber(S.seq), tonumber(S.msgs)
  local ml = K_live_messages(B)
  for _, body in ipairs(bodies) do
    seq = seq + 1
    redis.call("RPUSH", ml, "[" .. int(seq) .. "," .. int(msgs) .. "," .. NOW .. "," .. body .. "]")
    msgs = msgs + 1
  end
  set("seq", int(seq), "msgs", int(msgs), "updated", NOW)
end

-- Take a snapshot at sequence number `seq`; returns its id and its parent (JSON).
local function snapshot(seq, label_json, kind, keep_named, keep_step)
  local id = "snap-" .. int(seq)
  local next_step = tonumber(S.steps) + 1
  local parent = (S.head or "") ~= "" and ('"' .. S.head .. '"') or "null"
  redis.call("HSET", K_snapshots(B), int(seq), "[" .. S.msgs .. "," .. int(next_step) .. ',"' ..
             kind .. '",' .. parent .. "," .. label_json .. "," .. NOW .. "]")
  redis.call("RPUSH", K_live_snapshots(B), int(seq))
  add_to_list_field("kinds", kind)
  local z = K_restorable(B, kind)
  if kind == "step" then
    redis.call("ZADD", z, next_step, int(seq))
    redis.call("ZREMRANGEBYSCORE", z, "-inf", int(next_step - keep_step))
  else
    redis.call("ZADD", z, seq, int(seq))
    local extra = redis.call("ZCARD", z) - keep_named
    if extra > 0 then redis.call("ZPOPMIN", z, extra) end
  end
  set("head", id)
  return id, parent, next_step
end

local function snapshot_kind(rec)
  return string.match(rec, '^%[%d+,%d+,"([^"]*)"')
end

-- Set versioned key-values of namespace `ns`: `pairs` is {key, value JSON ("" deletes), …}.
local function kv_put(ns, pairs, event_data)
  local seq = int(tonumber(S.seq) + 1)
  local kw, values, versions = K_kv_writes(B), K_kv_values(B, ns), K_kv_versions(B, ns)
  local group = {ns}
  local i = 0
  for a = 1, #pairs, 2 do
    local key, value = pairs[a], pairs[a + 1]
    i = i + 1
    local field = seq .. ":" .. int(i)
    local prev = redis.call("HGET", versions, key) or ""
    redis.call("HSET", kw, field, prev .. "|" .. value)
    redis.call("HSET", versions, key, field)
    if value == "" then redis.call("HDEL", values, key)
    else redis.call("HSET", values, key, value) end
    group[#group + 1] = key
  end
  redis.call("HSET", kw, seq, cjson.encode(group))
  redis.call("RPUSH", K_live_kv_writes(B), seq)
  add_to_list_field("nss", ns)
  set("seq", seq, "updated", NOW)
  event(ns, event_data)
end

-- Set unversioned documents of namespace `ns`: `pairs` is {key, value JSON ("" deletes), …}.
local function doc_put(ns, pairs)
  local values, order = K_doc_values(B, ns), K_doc_keys(B, ns)
  for a = 1, #pairs, 2 do
    if pairs[a + 1] == "" then
      redis.call("HDEL", values, pairs[a])
      redis.call("ZREM", order, pairs[a])
    else
      redis.call("HSET", values, pairs[a], pairs[a + 1])
      redis.call("ZADD", order, 0, pairs[a])
    end
  end
  add_to_list_field("dns", ns)
  set("updated", NOW)
end

-- ARGV[from..to] as a list.
local function argv_slice(from, to)
  local out = {}
  for a = from, to do out[#out + 1] = ARGV[a] end
  return out
end
