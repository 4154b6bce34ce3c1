-- Prologue of every read script: KEYS[1] is the session base.
local B = KEYS[1]
