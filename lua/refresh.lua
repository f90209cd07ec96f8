-- Extends a lock's TTL if it still belongs to the caller, and its token
-- counter's idle expiry to at least as long.
-- KEYS[1]: lock key; KEYS[2]: token counter key
-- ARGV[1]: owner nonce followed by ':'
-- ARGV[2]: TTL in milliseconds
-- ARGV[3]: the idle expiry in milliseconds (0: none) of the counter
-- Returns HELD (1) when extended, NOT_HELD (0) when the key is gone or
-- not the caller's.
local HELD, NOT_HELD = 1, 0
if owned(KEYS[1], ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  extend_idle(KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]))
  return HELD
end
return NOT_HELD
