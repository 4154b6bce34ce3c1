-- Session script: create the session, or merge meta into it.
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
