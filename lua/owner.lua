-- Shared prelude of the scripts that act on a lock only for its owner.
-- Whether the lock key holds a value of owner (its nonce followed by ':').
-- A missing key, another owner's value and a key of another type all say
-- no.
local function owned(lock_key, owner)
  local v = redis.pcall('GET', lock_key)
  return type(v) == 'string' and string.sub(v, 1, #owner) == owner
end
