-- Extends a lock's TTL if it still belongs to the caller.
-- KEYS[1]: lock key; ARGV[1]: owner nonce, ARGV[2]: TTL in milliseconds
-- Returns 1 when extended, 0 when the key is gone or held by another owner.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
