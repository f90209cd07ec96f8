-- pttl: reads a lock's remaining TTL if it still belongs to the caller,
-- writing nothing.
--
-- KEYS[1]  the lock key
-- ARGV[1]  the owner nonce followed by ':'
--
-- Replies:
--   {OWNED (1), pttl}   the lock is the caller's; pttl is its PTTL in
--                       milliseconds (-1: the key has no expiry)
--   {NOT_OWNER (0)}     the lock key is gone, another's or of another
--                       type
local OWNED, NOT_OWNER = 1, 0
--@include get owner

if owned(KEYS[1], ARGV[1]) then
  return {OWNED, redis.call('PTTL', KEYS[1])}
end
return {NOT_OWNER}
