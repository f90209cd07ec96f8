-- refresh: extends a lock's TTL if it still belongs to the caller, and
-- its token counter's idle expiry to at least as long.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the token counter
-- ARGV[1]  the owner nonce followed by ':'
-- ARGV[2]  the TTL in milliseconds
-- ARGV[3]  the idle expiry in milliseconds (0: none) of the counter
--
-- Replies:
--   HELD (1)       the lock is the caller's: extended
--   NOT_HELD (0)   the lock key is gone, another's or of another type:
--                  nothing is written
local HELD, NOT_HELD = 1, 0
--@include get owner idle

if owned(KEYS[1], ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  extend_idle(KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]))
  return HELD
end
return NOT_HELD
