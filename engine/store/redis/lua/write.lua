-- Session script: several writes in one (Store.write_session): messages, versioned values, a
-- manual snapshot, documents, in that order, each as its own script would write it.
-- ARGV[9] "1": messages only when the live line has none; [10] roles JSON; [11] message count
-- n; n message JSON texts; then the value namespace count, per namespace: name, event data,
-- pair count p, p key/value texts; then snapshot label JSON ("" none), keep named, keep step;
-- then the document namespace count, per namespace: name, pair count p, p key/value texts;
-- then stamp namespace and key ("" none): that document's JSON text lacks its last brace's
-- ``snap``, ``msgs``, ``epoch``, which are added here. Last, the newest manual snapshot and the
-- epoch the session must be at ("" "": any), checked before anything is written.
local r = replay() if r then return r end
need()
local expect_epoch, expect_snap = ARGV[#ARGV], ARGV[#ARGV - 1]
local function newest_manual()  -- step snapshots taken since do not count
  local list, records = K_live_snapshots(B), K_snapshots(B)
  local at = redis.call("LLEN", list) - 1
  while at >= 0 do
    local seqs = redis.call("LRANGE", list, math.max(at - 15, 0), at)
    for i = #seqs, 1, -1 do
      local rec = redis.call("HGET", records, seqs[i])
      if rec and snapshot_kind(rec) == "manual" then return "snap-" .. seqs[i] end
    end
    at = at - 16
  end
  return ""
end
if expect_epoch ~= "" and (tonumber(S.epoch) ~= tonumber(expect_epoch)
                           or ((S.head or "") ~= expect_snap and newest_manual() ~= expect_snap)) then
  fail("MOVED", (S.head or "") .. " " .. S.epoch)
end
local a = 9
local function nxt() a = a + 1 return ARGV[a - 1] end
local only_if_empty, roles, count = nxt() == "1", nxt(), tonumber(nxt())
local bodies = argv_slice(a, a + count - 1)
a = a + count
if count > 0 and not (only_if_empty and tonumber(S.msgs) > 0) then
  local pos = S.msgs
  append(bodies)
  event("message", '{"count":' .. int(#bodies) .. ',"pos":' .. pos .. ',"roles":' .. roles .. '}')
end
for _ = 1, tonumber(nxt()) do
  local ns, data, n = nxt(), nxt(), tonumber(nxt())
  kv_put(ns, argv_slice(a, a + n - 1), data)
  a = a + n
end
local label, keep_named, keep_step = nxt(), tonumber(nxt()), tonumber(nxt())
local snap = "null"
local stamp = nil
if label ~= "" then
  local seq = tonumber(S.seq) + 1
  local id, parent, next_step = snapshot(seq, label, "manual", keep_named, keep_step)
  set("seq", int(seq), "updated", NOW)
  event("snapshot", '{"id":"' .. id .. '","kind":"manual","label":' .. label .. '}')
  snap = '["' .. id .. '",' .. parent .. ',' .. S.msgs .. ',' .. int(next_step) .. ']'
  stamp = '"epoch":' .. S.epoch .. ',"msgs":' .. S.msgs .. ',"snap":"' .. id .. '"'
end
local groups = {}
for _ = 1, tonumber(nxt()) do
  local ns, n = nxt(), tonumber(nxt())
  groups[#groups + 1] = {ns, argv_slice(a, a + n - 1)}
  a = a + n
end
local stamp_ns, stamp_key = nxt(), nxt()
for _, group in ipairs(groups) do
  local pairs_ = group[2]
  if stamp and group[1] == stamp_ns then
    for i = 1, #pairs_, 2 do
      if pairs_[i] == stamp_key then
        local text = pairs_[i + 1]
        local sep = text == "{}" and "" or ","
        pairs_[i + 1] = string.sub(text, 1, -2) .. sep .. stamp .. "}"
      end
    end
  end
  doc_put(group[1], pairs_)
end
return done('[' .. S.epoch .. ',' .. snap .. ']')
