-- Helpers every script gets (after the K_<name> key functions generated from keys.py):
-- errors, hash reads, server time, and the fleet views (indexes, feed, audit, outbox of
-- compensations) that fleet_apply changes.
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
    if ttl > 0 then redis.call("EXPIRE", key, ttl) else redis.call("PERSIST", key) end
  end
  if kind == "loop" then  -- episode starts, by time (Store.loops), as many as the feed keeps
    local lp = K_loops(C.fb)
    redis.call("ZADD", lp, at, string.format("%016d", id) .. " " .. data .. "\n" .. sid)
    redis.call("ZREMRANGEBYRANK", lp, 0, -(tonumber(C.evmax) + 2))
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
