-- Fleet script: drop sessions from the fleet indexes.
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
