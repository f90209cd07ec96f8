-- Reads a lock's remaining TTL if it still belongs to the caller.
-- KEYS[1]: lock key; ARGV[1]: owner nonce followed by ':'
-- Returns the PTTL in milliseconds, or NOT_OWNER (-3) when the key is gone
-- or not the caller's.
local NOT_OWNER = -3
if owned(KEYS[1], ARGV[1]) then
  return redis.call('PTTL', KEYS[1])
end
return NOT_OWNER
