-- Shared prelude of the scripts that act on a lock only for its owner.
-- KEYS[1]: lock key; ARGV[1]: owner nonce followed by ':'
-- Whether the lock key holds a value of this owner. A missing key, another
-- owner's value and a key of another type all say no.
local function owned()
  local v = redis.pcall('GET', KEYS[1])
  return type(v) == 'string' and string.sub(v, 1, #ARGV[1]) == ARGV[1]
end
