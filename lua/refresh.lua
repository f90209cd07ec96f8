-- Extends a lock's TTL if it still belongs to the caller.
-- KEYS[1]: lock key; ARGV[1]: owner nonce followed by ':'
-- ARGV[2]: TTL in milliseconds
-- Returns 1 when extended, 0 when the key is gone or not the caller's.
if owned() then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
