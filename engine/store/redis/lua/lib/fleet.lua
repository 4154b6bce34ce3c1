-- Prologue of every fleet script: KEYS[1] is the fleet base.
local FB = KEYS[1]
