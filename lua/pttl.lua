-- Reads a lock's remaining TTL if it still belongs to the caller.
-- KEYS[1]: lock key; ARGV[1]: owner nonce
-- Returns the PTTL in milliseconds, or -3 when the key is gone or held by
-- another owner.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PTTL', KEYS[1])
end
return -3
