-- Session script: set or delete unversioned documents.
-- ARGV[9] namespace, [10..] key, value JSON ("" deletes) pairs; unversioned, no event
local r = replay() if r then return r end
need()
doc_put(ARGV[9], argv_slice(10, #ARGV))
return done("")
