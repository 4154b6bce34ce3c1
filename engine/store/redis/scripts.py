"""Lua scripts of the Redis store. One script per state-changing operation, so each operation
is atomic on a single Redis and on Redis Cluster (all keys of a session share one hash tag).

Key names come from `engine.store.redis.keys` (its `lua_prelude` defines ``K_<name>`` functions).
Records are JSON texts that Python builds; Lua only concatenates them with the numbers it
decides (seq, epoch, positions) and never re-encodes user data, so no float or string is altered
by Lua's number formatting.

Calling convention of the session scripts (`SESSION_*`):

- ``KEYS[1]`` the session base ``<prefix>:{<enc>}:``; ``KEYS[2]`` the fleet base on a single
  Redis (fleet views change in the same script), absent on Redis Cluster.
- ``ARGV[1..8]``: request id, now, ttl seconds, session id, encoded id, mode, events MAXLEN,
  session events MAXLEN. Mode ``i`` applies fleet changes inline; ``c<incarnation>:<acked>``
  (Cluster) appends them to the session's fleet outbox and returns the outbox backlog, of which
  the caller says it already applied everything up to ``<acked>``.
- ``ARGV[9..]``: the operation's arguments.
- Reply: ``{result, extra, outbox entries…}``; errors are ``REWIND <CODE> <detail>``.

A write whose reply was lost (connection reset after the script ran) is retried with the same
request id; the script then returns the remembered reply instead of writing twice.
"""

from __future__ import annotations

from engine.store.redis import keys

COMMON = r"""
if redis.replicate_commands then pcall(redis.replicate_commands) end

local function fail(code, detail)
  error({err = "REWIND " .. code .. " " .. (detail or "")})
end

local function hgetall(key)
  local flat = redis.call("HGETALL", key)
  local t = {}
  for i = 1, #flat, 2 do t[flat[i]] = flat[i + 1] end
  return t
end

local function int(x) return string.format("%d", x) end

local function now_ms()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- -- fleet views ---------------------------------------------------------------------------
-- C = {fb = fleet base, evmax = events MAXLEN, sevmax = session events MAXLEN, ms = server ms}

local function fleet_index(C, sid, entry, updated, ttl)
  local ix = K_index_entries(C.fb)
  local old = redis.call("HGET", ix, sid)
  if old and old ~= entry then
    for line in string.gmatch(old, "[^\n]+") do
      redis.call("ZREM", K_meta_index(C.fb, line), sid)
    end
  end
  redis.call("ZADD", K_session_index(C.fb), updated, sid)
  for line in string.gmatch(entry, "[^\n]+") do
    redis.call("ZADD", K_meta_index(C.fb, line), updated, sid)
  end
  if old ~= entry then redis.call("HSET", ix, sid, entry) end
  if ttl > 0 then
    redis.call("ZADD", K_expiry_index(C.fb), int(C.ms + ttl * 1000), sid)
  else
    redis.call("ZREM", K_expiry_index(C.fb), sid)
  end
end

local function fleet_forget(C, sid, enc, keep_events)
  local ix = K_index_entries(C.fb)
  local old = redis.call("HGET", ix, sid)
  if old then
    for line in string.gmatch(old, "[^\n]+") do
      redis.call("ZREM", K_meta_index(C.fb, line), sid)
    end
  end
  redis.call("HDEL", ix, sid)
  redis.call("ZREM", K_session_index(C.fb), sid)
  redis.call("ZREM", K_expiry_index(C.fb), sid)
  redis.call("HDEL", K_outbox_marks(C.fb), sid)
  if not keep_events then redis.call("DEL", K_session_events(C.fb, enc)) end
end

local function fleet_event(C, sid, enc, kind, data, at, ttl)
  local id = redis.call("INCR", K_event_counter(C.fb))
  local xid = int(id) .. "-0"
  redis.call("XADD", K_events(C.fb), "MAXLEN", "~", C.evmax, xid,
             "a", at, "s", sid or "", "t", kind, "d", data)
  if sid then
    local key = K_session_events(C.fb, enc)
    redis.call("XADD", key, "MAXLEN", "~", C.sevmax, xid, "a", at, "s", sid, "t", kind, "d", data)
    if ttl > 0 then redis.call("EXPIRE", key, ttl) end
  end
  return id
end

-- a = {action, actor json, snapshot json, reason json, detail json}
local function fleet_audit(C, sid, enc, at, a)
  local id = int(redis.call("INCR", K_audit_counter(C.fb)))
  local rec = '{"action":' .. cjson.encode(a[1]) .. ',"actor":' .. a[2] .. ',"at":' .. at ..
    ',"detail":' .. a[5] .. ',"id":' .. id .. ',"reason":' .. a[4] .. ',"session":' ..
    (sid and cjson.encode(sid) or "null") .. ',"snapshot":' .. a[3] .. '}'
  redis.call("HSET", K_audit_records(C.fb), id, rec)
  redis.call("ZADD", K_audit_all(C.fb), id, id)
  redis.call("ZADD", K_audit_by_action(C.fb, a[1]), id, id)
  if sid then redis.call("ZADD", K_audit_by_session(C.fb, enc), id, id) end
  redis.call("ZADD", K_audit_by_time(C.fb), at, id)
  return id
end

-- c = {step number, "<name json>\n<args json>", branch, incarnation}; queued once per
-- idempotency key "<sid>#<step>@<incarnation>" (a re-created session never reuses a key)
local function fleet_queue(C, sid, enc, at, c)
  local key = sid .. "#" .. c[1] .. "@" .. c[4]
  local keys = K_comp_keys(C.fb)
  local existing = redis.call("HGET", keys, key)
  if existing then return existing end
  local id = int(redis.call("INCR", K_comp_counter(C.fb)))
  local nl = string.find(c[2], "\n", 1, true)
  local name = cjson.decode(string.sub(c[2], 1, nl - 1))
  redis.call("HSET", K_compensation(C.fb, id), "id", id, "session", sid, "enc", enc, "step", c[1],
             "name", name, "args", string.sub(c[2], nl + 1), "key", key, "status", "pending",
             "attempts", "0", "branch", c[3], "created", at, "updated", at)
  redis.call("HSET", keys, key, id)
  redis.call("ZADD", K_comp_all(C.fb), id, id)
  redis.call("ZADD", K_comp_by_status(C.fb, "pending"), id, id)
  redis.call("ZADD", K_comp_by_session(C.fb, enc), id, id)
  redis.call("ZADD", K_comp_pending(C.fb, name), id, id)
  return id
end

-- F: one change of a session's fleet views (see `done` below). Returns the compensation ids.
local function fleet_apply(C, F)
  local dup = false
  if F.q then
    local marks = K_outbox_marks(C.fb)
    local mark = redis.call("HGET", marks, F.sid)
    if mark then
      local minc, mq = string.match(mark, "^(.*):(%d+)$")
      if minc > F.inc or (minc == F.inc and tonumber(mq) >= F.q) then dup = true end
    end
    if not dup then redis.call("HSET", marks, F.sid, F.inc .. ":" .. int(F.q)) end
  end
  if F.gone then
    fleet_forget(C, F.sid, F.enc, true)
    for _, b in ipairs(F.gone) do redis.call("ZREM", K_branch_index(C.fb), F.enc .. "/" .. b) end
  elseif not dup and F.ix then
    fleet_index(C, F.sid, F.ix, F.u, F.ttl)
  end
  if not dup then
    for _, e in ipairs(F.ev) do fleet_event(C, F.sid, F.enc, e[1], e[2], F.t, F.ttl) end
    for _, a in ipairs(F.au) do fleet_audit(C, F.sid, F.enc, F.t, a) end
    for _, b in ipairs(F.br) do
      redis.call("ZADD", K_branch_index(C.fb), b[2], F.enc .. "/" .. b[1])
    end
  end
  local ids = {}
  for _, c in ipairs(F.co) do ids[#ids + 1] = fleet_queue(C, F.sid, F.enc, F.t, c) end
  return ids
end
"""

SESSION_PROLOGUE = r"""
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

-- Expire every key of the session together, so no key outlives the others.
local function touch()
  if TTL > 0 then
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
local function done(result, quiet)
  F.sid, F.enc, F.t, F.u, F.ttl, F.ix = SID, ENC, NOW, S.updated, TTL, index_entry()
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
"""


def _session_key_functions() -> str:
    names = ", ".join(f"K_{fn.__name__}" for fn in keys.SESSION_KEYS)
    return f"local SESSION_KEY_FUNCTIONS = {{{names}}}\n"


ENSURE = r"""
-- ARGV[9] meta for a new session, [10] its index lines, [11] incarnation,
-- [12] "1" when the caller has meta to merge, [13] expected meta, [14] merged meta,
-- [15] merged index lines
local r = replay() if r then return r end
if not load() then
  S = {}
  set("id", SID, "meta", ARGV[9], "status", "healthy", "head", "", "epoch", "0", "seq", "0",
      "steps", "0", "msgs", "0", "loops", "0", "rollbacks", "0", "verdict", "",
      "created", NOW, "updated", NOW, "ix", ARGV[10], "inc", ARGV[11], "kinds", "", "nss", "",
      "dns", "", "fxq", "0")
  event("session", '{"meta":' .. ARGV[9] .. '}')
  return done(summary())
end
if ARGV[12] == "1" then
  if ARGV[13] == "" then return {"MERGE", summary()} end
  if S.meta ~= ARGV[13] then return {"MERGE", summary()} end
  set("meta", ARGV[14], "ix", ARGV[15])
end
return done(summary())
"""

APPEND = r"""
-- ARGV[9] roles JSON, [10..] message JSON texts
local r = replay() if r then return r end
need()
local pos = S.msgs
local bodies = {}
for i = 10, #ARGV do bodies[#bodies + 1] = ARGV[i] end
append(bodies)
event("message", '{"count":' .. int(#bodies) .. ',"pos":' .. pos .. ',"roles":' .. ARGV[9] .. '}')
return done(S.epoch)
"""

PUT = r"""
-- ARGV[9] namespace, [10] event data, [11..] key, value JSON ("" deletes) pairs
local r = replay() if r then return r end
need()
local ns = ARGV[9]
local seq = int(tonumber(S.seq) + 1)
local kw, values, versions = K_kv_writes(B), K_kv_values(B, ns), K_kv_versions(B, ns)
local group = {ns}
local i = 0
for a = 11, #ARGV, 2 do
  local key, value = ARGV[a], ARGV[a + 1]
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
event(ns, ARGV[10])
return done(S.epoch)
"""

SNAPSHOT = r"""
-- ARGV[9] label JSON, [10] kind, [11] keep named, [12] keep step snapshots
local r = replay() if r then return r end
need()
local seq = tonumber(S.seq) + 1
local id, parent, next_step = snapshot(seq, ARGV[9], ARGV[10], tonumber(ARGV[11]),
                                       tonumber(ARGV[12]))
set("seq", int(seq), "updated", NOW)
event("snapshot", '{"id":"' .. id .. '","kind":"' .. ARGV[10] .. '","label":' .. ARGV[9] .. '}')
return done('["' .. id .. '",' .. parent .. ',' .. S.msgs .. ',' .. int(next_step) .. ']')
"""

BEGIN_STEP = r"""
-- ARGV[9] "1" to take a write-ahead snapshot, [10] its label JSON, [11] keep named,
-- [12] keep step snapshots, [13] step record JSON, [14] compensation ("" none)
local r = replay() if r then return r end
need()
local seq = tonumber(S.seq)
local snap = "null"
if ARGV[9] == "1" then
  seq = seq + 1
  snap = '"' .. snapshot(seq, ARGV[10], "step", tonumber(ARGV[11]), tonumber(ARGV[12])) .. '"'
end
seq = seq + 1
local n = int(tonumber(S.steps) + 1)
local T = K_steps(B)
redis.call("HSET", T, n, "[" .. int(seq) .. "," .. S.epoch .. "," .. snap .. "," .. ARGV[13] .. "]")
redis.call("RPUSH", K_live_steps(B), n)
if ARGV[14] ~= "" then redis.call("HSET", T, n .. "c", ARGV[14]) end
set("seq", int(seq), "steps", n, "updated", NOW)
return done("[" .. n .. "," .. S.epoch .. "," .. snap .. "," .. int(seq) .. "]", true)
"""

END_STEP = r"""
-- ARGV[9] step number, [10] ticket epoch, [11] status, [12] outcome JSON, [13] verdict JSON or ""
local r = replay() if r then return r end
need()
local n, status, verdict = ARGV[9], ARGV[11], ARGV[13]
local late = S.epoch ~= ARGV[10]
local T = K_steps(B)
if redis.call("HEXISTS", T, n) == 1 then
  -- a late step belongs to the first branch cut after it began
  local first = late and redis.call("ZRANGEBYSCORE", K_branches_by_epoch(B), "(" .. ARGV[10],
                                    "+inf", "LIMIT", 0, 1)[1]
  if first and not redis.call("HGET", T, n .. "b") then
    redis.call("HSET", T, n .. "b", first)
    redis.call("LREM", K_live_steps(B), -1, n)
    local bi = K_branch_items(B)
    local items = redis.call("HGET", bi, first) or ""
    redis.call("HSET", bi, first, items == "" and ("t" .. n) or (items .. " t" .. n))
  end
  redis.call("HSET", T, n .. "e", "[" .. (late and "1" or "0") .. "," .. ARGV[12] .. "]")
  local comp = redis.call("HGET", T, n .. "c")
  if comp and string.sub(comp, 1, 1) == "r" then
    -- "k": a rollback of the live line will compensate it; a late side effect happened off
    -- the live line, so its compensation is queued now
    local mark = (not late and status == "ok") and "k" or "x"
    redis.call("HSET", T, n .. "c", mark .. string.sub(comp, 2))
    if late and status == "ok" then
      F.co[#F.co + 1] = {n, string.sub(comp, 2), first or "", S.inc}
    end
  end
end
if late then
  set("updated", NOW)
elseif verdict ~= "" then
  set("status", "looping", "verdict", verdict, "loops", int(tonumber(S.loops) + 1), "updated", NOW)
elseif status == "ok" then
  if S.status ~= "stopped" then set("status", "healthy") end
  set("updated", NOW)
else
  set("updated", NOW)
end
event("step", '{"late":' .. (late and "true" or "false") .. ',"looping":' ..
      (verdict ~= "" and "true" or "false") .. ',"n":' .. n .. ',"status":' ..
      cjson.encode(status) .. '}')
return done(late and "1" or "0")
"""

SET_STATUS = r"""
-- ARGV[9] status, [10] verdict JSON or ""
local r = replay() if r then return r end
need()
if ARGV[10] ~= "" then
  set("status", ARGV[9], "verdict", ARGV[10], "loops", int(tonumber(S.loops) + 1), "updated", NOW)
else
  set("status", ARGV[9], "updated", NOW)
end
event("status", '{"status":' .. cjson.encode(ARGV[9]) .. '}')
return done("")
"""

NOTICE = r"""
-- ARGV[9] message JSON, [10] actor JSON, [11] text JSON
local r = replay() if r then return r end
need()
append({ARGV[9]})
audit("notice", ARGV[10], "null", "null", '{"text":' .. ARGV[11] .. '}')
event("notice", '{"actor":' .. ARGV[10] .. '}')
return done(S.epoch)
"""

ROLLBACK = r"""
-- ARGV[9] target snapshot id, [10] actor JSON, [11] reason JSON, [12] notice message JSON or "",
-- [13] notice text JSON, [14] expected epoch or "", [15] "fork" for a fork (status and rollback
-- count unchanged, audited as a fork) else a rollback
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
local fork = ARGV[15] == "fork"
set("seq", int(seq), "epoch", epoch, "head", target, "msgs", smsgs,
    "status", fork and S.status or "rolled_back",
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
local target_json = cjson.encode(target)
local action = fork and "fork" or "rollback"
audit(action, ARGV[10], target_json, ARGV[11], detail)
event(action, '{"actor":' .. ARGV[10] .. ',"target":' .. target_json .. "," ..
      string.sub(detail, 2))
if ARGV[12] ~= "" then
  audit("notice", ARGV[10], target_json, ARGV[11], '{"text":' .. notice .. '}')
end
F.br[1] = {branch, NOW}
return done('{"branch":"' .. branch .. '",' .. counts .. ',"memories":' .. int(n_memories) ..
            ',"incarnation":' .. cjson.encode(S.inc) ..
            ',"compensations":[' .. table.concat(queued, ",") .. ']}')
"""

DOC_PUT = r"""
-- ARGV[9] namespace, [10..] key, value JSON ("" deletes) pairs; unversioned, no event
local r = replay() if r then return r end
need()
local ns = ARGV[9]
local values, order = K_doc_values(B, ns), K_doc_keys(B, ns)
for a = 10, #ARGV, 2 do
  if ARGV[a + 1] == "" then
    redis.call("HDEL", values, ARGV[a])
    redis.call("ZREM", order, ARGV[a])
  else
    redis.call("HSET", values, ARGV[a], ARGV[a + 1])
    redis.call("ZADD", order, 0, ARGV[a])
  end
end
add_to_list_field("dns", ns)
set("updated", NOW)
return done("")
"""

DELETE = r"""
-- deletes every key of the session; the fleet views forget it (the feed and audit stay)
if not load() then return {"0", ""} end
local gone = {}
for _, b in ipairs(redis.call("HKEYS", K_branches(B))) do gone[#gone + 1] = b end
local q = tonumber(S.fxq or "0") + 1
local inc = S.inc
local backlog = MODE ~= "i" and redis.call("LRANGE", K_fleet_outbox(B), 0, -1) or {}
for _, k in ipairs(session_keys()) do redis.call("DEL", k) end
F.sid, F.enc, F.t, F.ttl, F.gone = SID, ENC, NOW, TTL, gone
event("deleted", "{}")
if MODE == "i" then
  fleet_apply({fb = FB, evmax = EV_MAX, sevmax = SEV_MAX, ms = now_ms()}, F)
  return {"1", ""}
end
F.inc, F.q = inc, q
local reply = {"1", ""}
for _, e in ipairs(backlog) do reply[#reply + 1] = e end
reply[#reply + 1] = int(q) .. " " .. cjson.encode(F)
return reply
"""

PURGE = r"""
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
"""

# -- reads (one consistent round trip each) -----------------------------------------------------
READ_PROLOGUE = r"""
local B = KEYS[1]
"""

READ_MESSAGES = r"""
return {redis.call("LRANGE", K_live_messages(B), 0, -1),
        redis.call("HVALS", K_abandoned_messages(B))}
"""

READ_SNAPSHOTS = r"""
local s = hgetall(K_session_hash(B))
local restorable = {}
for kind in string.gmatch(s.kinds or "", "[^,]+") do
  for _, m in ipairs(redis.call("ZRANGE", K_restorable(B, kind), 0, -1)) do
    restorable[#restorable + 1] = m
  end
end
return {s.head or "", redis.call("HGETALL", K_snapshots(B)), redis.call("HGETALL", K_branches(B)),
        restorable}
"""

READ_RESTORABLE = r"""
-- ARGV[1] step number the snapshot must precede, or "+inf"
local before = ARGV[1]
local limit = before == "+inf" and math.huge or tonumber(before)
local best = -1
local z = redis.call("ZREVRANGEBYSCORE", K_restorable(B, "step"), before, "-inf", "LIMIT", 0, 1)
if z[1] then best = tonumber(z[1]) end
local P = K_snapshots(B)
for _, m in ipairs(redis.call("ZREVRANGE", K_restorable(B, "manual"), 0, -1)) do
  if tonumber(m) <= best then break end
  local next_step = tonumber(string.match(redis.call("HGET", P, m), "^%[%d+,(%d+),"))
  if next_step <= limit then best = tonumber(m) break end
end
if best < 0 then return false end
return "snap-" .. int(best)
"""

READ_STEPS = r"""
-- ARGV[1] "1" live steps only, ARGV[2] newest N or ""
local T = K_steps(B)
local last = ARGV[2] ~= "" and tonumber(ARGV[2]) or nil
local numbers = {}
if last == 0 then return {} end
if ARGV[1] == "1" then
  numbers = redis.call("LRANGE", K_live_steps(B), last and -last or 0, -1)
elseif last then
  local n = tonumber(redis.call("HGET", K_session_hash(B), "steps") or "0")
  local found = {}
  while n > 0 and #found < last do
    if redis.call("HEXISTS", T, int(n)) == 1 then found[#found + 1] = int(n) end
    n = n - 1
  end
  for i = #found, 1, -1 do numbers[#numbers + 1] = found[i] end
else
  return redis.call("HGETALL", T)
end
local out = {}
for _, n in ipairs(numbers) do
  local r = redis.call("HMGET", T, n, n .. "e", n .. "b", n .. "c")
  if r[1] then
    out[#out + 1] = n
    out[#out + 1] = r[1]
    if r[2] then out[#out + 1] = n .. "e" out[#out + 1] = r[2] end
    if r[3] then out[#out + 1] = n .. "b" out[#out + 1] = r[3] end
    if r[4] then out[#out + 1] = n .. "c" out[#out + 1] = r[4] end
  end
end
return out
"""

READ_DOCS = r"""
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
"""

READ_CHECK = r"""
-- every structure a consistency check needs, in one consistent read
local s = hgetall(K_session_hash(B))
return {cjson.encode(s), redis.call("LRANGE", K_live_messages(B), 0, -1),
        redis.call("LRANGE", K_live_steps(B), 0, -1),
        redis.call("LRANGE", K_live_snapshots(B), 0, -1),
        redis.call("HGETALL", K_snapshots(B)), redis.call("HKEYS", K_steps(B))}
"""

# -- fleet scripts (KEYS[1] = fleet base) -------------------------------------------------------
FLEET_PROLOGUE = r"""
local FB = KEYS[1]
"""

FLEET_APPLY = r"""
-- ARGV[1] events MAXLEN, [2] session events MAXLEN, [3..] outbox entries "<seq> <json>"
local C = {fb = FB, evmax = ARGV[1], sevmax = ARGV[2], ms = now_ms()}
local out = {}
for i = 3, #ARGV do
  local e = ARGV[i]
  local F = cjson.decode(string.sub(e, string.find(e, " ", 1, true) + 1))
  local ids = fleet_apply(C, F)
  out[#out + 1] = F.sid
  out[#out + 1] = F.inc .. ":" .. int(F.q)
  out[#out + 1] = table.concat(ids, ",")
end
return out
"""

FLEET_INDEX = r"""
-- ARGV[1] session id, [2] index entry, [3] updated_at, [4] seconds left to live (0: never)
local C = {fb = FB, ms = now_ms()}
fleet_index(C, ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]))
return 1
"""

FLEET_EXPIRED = r"""
-- ARGV[1] how many; sessions whose keys should have expired by the server's clock
return redis.call("ZRANGEBYSCORE", K_expiry_index(FB), "-inf", int(now_ms()), "LIMIT", 0,
                  tonumber(ARGV[1]))
"""

FLEET_FORGET = r"""
-- ARGV[1] "expired": forget sessions still past their expiry deadline; "missing": forget
-- sessions whose activity score is still the one the caller saw (or any, when "").
-- ARGV[2..]: triples session id, encoded id, score
local C = {fb = FB}
local ms = now_ms()
local removed = 0
for i = 2, #ARGV, 3 do
  local sid = ARGV[i]
  local go
  if ARGV[1] == "expired" then
    local deadline = redis.call("ZSCORE", K_expiry_index(FB), sid)
    go = deadline and tonumber(deadline) <= ms
  else
    local score = redis.call("ZSCORE", K_session_index(FB), sid)
    go = not score or ARGV[i + 2] == "" or tonumber(score) == tonumber(ARGV[i + 2])
  end
  if go then
    fleet_forget(C, sid, ARGV[i + 1])
    removed = removed + 1
  end
end
return removed
"""

FLEET_EXTEND = r"""
-- pairs session id, milliseconds its keys still live: move its expiry deadline
local ms = now_ms()
for i = 1, #ARGV, 2 do
  redis.call("ZADD", K_expiry_index(FB), "XX", int(ms + tonumber(ARGV[i + 1])), ARGV[i])
end
return 1
"""

FLEET_AUDIT = r"""
-- ARGV[1] events MAXLEN, [2] session events MAXLEN, [3] now, [4] session ("" none), [5] encoded,
-- [6] action, [7] actor JSON, [8] snapshot JSON, [9] reason JSON, [10] detail JSON,
-- [11] event data JSON, [12] ttl
local C = {fb = FB, evmax = ARGV[1], sevmax = ARGV[2]}
local sid = ARGV[4] ~= "" and ARGV[4] or nil
fleet_audit(C, sid, ARGV[5], ARGV[3], {ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10]})
fleet_event(C, sid, ARGV[5], ARGV[6], ARGV[11], ARGV[3], tonumber(ARGV[12]))
return 1
"""

FLEET_PURGED = r"""
-- ARGV[1] events MAXLEN, [2] session events MAXLEN, [3] now, [4] counts JSON,
-- [5] audit detail JSON, [6..] branch index members to drop
local C = {fb = FB, evmax = ARGV[1], sevmax = ARGV[2]}
for i = 6, #ARGV do redis.call("ZREM", K_branch_index(FB), ARGV[i]) end
fleet_audit(C, nil, nil, ARGV[3], {"retention", '"retention"', "null",
            '"abandoned branches past their time limit"', ARGV[5]})
fleet_event(C, nil, nil, "retention", ARGV[4], ARGV[3], 0)
return 1
"""

CLAIM = r"""
-- ARGV[1] owner, [2] lease end, [3] now, [4..] handler names
local best
for i = 4, #ARGV do
  local name = ARGV[i]
  local p = redis.call("ZRANGE", K_comp_pending(FB, name), 0, 0)[1]
  if p and (not best or tonumber(p) < best) then best = tonumber(p) end
  local expired = redis.call("ZRANGEBYSCORE", K_comp_running(FB, name), "-inf", "(" .. ARGV[3])
  for _, id in ipairs(expired) do
    if not best or tonumber(id) < best then best = tonumber(id) end
  end
end
if not best then return false end
local id = int(best)
local key = K_compensation(FB, id)
local c = hgetall(key)
redis.call("ZREM", K_comp_pending(FB, c.name), id)
redis.call("ZADD", K_comp_running(FB, c.name), ARGV[2], id)
redis.call("ZREM", K_comp_by_status(FB, c.status), id)
redis.call("ZADD", K_comp_by_status(FB, "running"), id, id)
redis.call("HSET", key, "status", "running", "owner", ARGV[1], "lease", ARGV[2],
           "attempts", int(tonumber(c.attempts) + 1), "updated", ARGV[3])
return redis.call("HGETALL", key)
"""

FINISH = r"""
-- ARGV[1] events MAXLEN, [2] session events MAXLEN, [3] id, [4] owner, [5] new status,
-- [6] error JSON ("null" none), [7] error text, [8] now, [9] ttl
local C = {fb = FB, evmax = ARGV[1], sevmax = ARGV[2]}
local id, status = ARGV[3], ARGV[5]
local key = K_compensation(FB, id)
local c = hgetall(key)
if c.status ~= "running" or c.owner ~= ARGV[4] then return 0 end
redis.call("HSET", key, "status", status, "updated", ARGV[8])
if ARGV[6] == "null" then redis.call("HDEL", key, "error", "lease")
else redis.call("HSET", key, "error", ARGV[7]) redis.call("HDEL", key, "lease") end
redis.call("ZREM", K_comp_running(FB, c.name), id)
redis.call("ZREM", K_comp_by_status(FB, "running"), id)
redis.call("ZADD", K_comp_by_status(FB, status), id, id)
if status == "pending" then redis.call("ZADD", K_comp_pending(FB, c.name), id, id) end
if status ~= "pending" then
  fleet_audit(C, c.session, c.enc, ARGV[8], {"compensation", cjson.encode(ARGV[4]), "null",
              ARGV[6], '{"id":' .. id .. ',"name":' .. cjson.encode(c.name) .. ',"status":' ..
              cjson.encode(status) .. ',"step":' .. c.step .. '}'})
end
fleet_event(C, c.session, c.enc, "compensation", '{"id":' .. id .. ',"name":' ..
            cjson.encode(c.name) .. ',"status":' .. cjson.encode(status) .. '}', ARGV[8],
            tonumber(ARGV[9]))
return 1
"""


def _compose(*parts: str) -> str:
    return keys.lua_prelude() + _session_key_functions() + COMMON + "".join(parts)


SESSION_SCRIPTS = {
    "ensure": ENSURE, "append": APPEND, "put": PUT, "snapshot": SNAPSHOT,
    "begin_step": BEGIN_STEP, "end_step": END_STEP, "set_status": SET_STATUS,
    "notice": NOTICE, "rollback": ROLLBACK, "purge": PURGE, "doc_put": DOC_PUT,
    "delete": DELETE,
}
READ_SCRIPTS = {
    "messages": READ_MESSAGES, "snapshots": READ_SNAPSHOTS, "restorable": READ_RESTORABLE,
    "steps": READ_STEPS, "check": READ_CHECK, "docs": READ_DOCS,
}
FLEET_SCRIPTS = {
    "apply": FLEET_APPLY, "index": FLEET_INDEX, "expired": FLEET_EXPIRED,
    "forget": FLEET_FORGET, "extend": FLEET_EXTEND, "audit": FLEET_AUDIT,
    "purged": FLEET_PURGED, "claim": CLAIM, "finish": FINISH,
}


OUTBOX_BATCH = 200
"""Outbox entries a session script returns at most, oldest first."""


def sources() -> dict[str, str]:
    """Full Lua source of every script, by name."""
    out = {}
    prologue = SESSION_PROLOGUE.replace("@OUTBOX_BATCH@", str(OUTBOX_BATCH))
    for name, body in SESSION_SCRIPTS.items():
        out[name] = _compose(prologue, body)
    for name, body in READ_SCRIPTS.items():
        out["read_" + name] = _compose(READ_PROLOGUE, body)
    for name, body in FLEET_SCRIPTS.items():
        out["fleet_" + name] = _compose(FLEET_PROLOGUE, body)
    return out
